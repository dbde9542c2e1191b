"""ember's failures as exceptions: one class per ``EmberStatus``, all under :class:`Error`."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Optional, Type

from ._constants import Status


class Error(Exception):
    """A failed ember call: ``op`` (the C function), ``status`` and ``message``, a sentence; ``str(error)`` is
    ``"op: message"``.

    When :meth:`ember.Engine.submit` (or :meth:`~ember.Engine.chat`, :meth:`~ember.Engine.submit_api`,
    :meth:`~ember.Engine.apply_chat_template`) refuses a body (:class:`InvalidRequest`, :class:`Overloaded`), ember
    answers with an OpenAI error body: ``body`` holds it parsed (``{"error": {"message", "type", "param",
    "code"}}``), ready to return from an HTTP server, and ``message`` is its ``error.message``. Otherwise ``body``
    is ``None``; :meth:`ember.Engine.embed`'s refusals start with the field at fault (``"dimensions: ..."``).
    """

    #: The status this class stands for (``None`` for :class:`Error` itself and :class:`RequestFailed`).
    status_code: Optional[Status] = None

    def __init__(self, op: str, status: Optional[Status], message: str) -> None:
        self.body: Optional[Dict[str, Any]] = _openai_error_body(message)
        if self.body is not None:
            message = _sentence(self.body["error"]) or message
        super().__init__(f"{op}: {message}" if message else op)
        self.op = op
        self.status = status
        self.message = message


def _openai_error_body(message: str) -> Optional[Dict[str, Any]]:
    if not message.startswith("{"):
        return None
    try:
        body = json.loads(message)
    except ValueError:
        return None
    return body if isinstance(body, dict) and isinstance(body.get("error"), dict) else None


def _sentence(error: Dict[str, Any]) -> str:
    """An OpenAI error's message, naming its ``param`` when the message does not already."""
    message = error.get("message")
    if not isinstance(message, str):
        return ""
    param = error.get("param")
    if isinstance(param, str) and param and param not in message:
        return f"{message} (field {param})"
    return message


class RequestFailed(Error):
    """The engine failed a request mid-way (its ``ERROR`` event); ``message`` is ember's. The request's
    response body still says why (:meth:`ember.Request.response`)."""

    def __init__(self, message: str) -> None:
        super().__init__("request", None, message)


class InvalidArgument(Error):
    """An argument out of its documented range (the binding checks types itself)."""

    status_code = Status.INVALID_ARGUMENT


class InvalidUtf8(Error):
    """A string that is not valid UTF-8 (a Python ``str`` with lone surrogates)."""

    status_code = Status.INVALID_UTF8


class InvalidHandle(Error):
    """The engine or request was closed (or belongs to another engine)."""

    status_code = Status.INVALID_HANDLE


class InvalidConfig(Error):
    """The engine configuration is malformed, has an unknown key, or has conflicting or out-of-range values."""

    status_code = Status.INVALID_CONFIG


class ModelLoadFailed(Error):
    """The model file could not be found or loaded."""

    status_code = Status.MODEL_LOAD_FAILED


class EngineStartFailed(Error):
    """The backend or the engine thread could not be started."""

    status_code = Status.ENGINE_START_FAILED


class InvalidRequest(Error):
    """The request body was refused; ``body`` is the OpenAI error body naming the field at fault."""

    status_code = Status.INVALID_REQUEST


class Timeout(Error):
    """Nothing happened before the timeout."""

    status_code = Status.TIMEOUT


class NotFinished(Error):
    """The request is still running, so it has no final response yet."""

    status_code = Status.NOT_FINISHED


class StreamDone(Error):
    """The stream has ended (the binding ends iteration instead; raised only by direct C calls)."""

    status_code = Status.STREAM_DONE


class BufferTooSmall(Error):
    """A buffer was too short (the binding sizes its buffers itself)."""

    status_code = Status.BUFFER_TOO_SMALL


class ChoiceOutOfRange(Error):
    """A choice index at or beyond the request's number of choices (``n``)."""

    status_code = Status.CHOICE_OUT_OF_RANGE


class TooManyHandles(Error):
    """The process holds the most live handles ember can issue."""

    status_code = Status.TOO_MANY_HANDLES


class Panic(Error):
    """A bug inside ember, caught at the C boundary; the process is unharmed. Please report the message."""

    status_code = Status.PANIC


class Forked(Error):
    """The engine was created by the parent of this forked process; create engines after ``fork``."""

    status_code = Status.FORKED


class Overloaded(Error):
    """``max_waiting_requests`` requests already wait to start: nothing was queued; retry later (an HTTP server
    answers 503 with ``Retry-After``). ``body`` is the OpenAI error body, code ``"overloaded"``."""

    status_code = Status.OVERLOADED


class LoadCancelled(Error):
    """The load progress callback returned false: no engine was created."""

    status_code = Status.LOAD_CANCELLED


_BY_STATUS: Dict[int, Type[Error]] = {
    cls.status_code: cls for cls in Error.__subclasses__() if cls.status_code is not None
}


def error_class(status: int) -> Type[Error]:
    """The exception class of a status (:class:`Error` for a status this binding does not know)."""
    return _BY_STATUS.get(status, Error)


#: The C function's name that ember puts before a message that is a sentence (``"engine_embed: dimensions: ..."``).
_FUNCTION_PREFIX = re.compile(r"engine_[a-z_]+: ")


def from_status(op: str, status: int, message: str) -> Error:
    """The exception for a failed call of ``op``; its message without ember's prefix, which names the C function
    (the exception's text begins with ``op`` already)."""
    try:
        known: Optional[Status] = Status(status)
    except ValueError:
        known = None
    prefix = _FUNCTION_PREFIX.match(message)
    return error_class(status)(op, known, message[prefix.end():] if prefix else message)
