"""The C API's enumerations (include/ember.h), as Python enums.

The numbers are ABI: ember never renumbers or reuses them. tests/c_struct_fields.rs holds every enum here to the
header, member by member, so a value added in Rust and forgotten here fails the Rust tests.
"""

from __future__ import annotations

from enum import IntEnum


class Status(IntEnum):
    """An ``EmberStatus``: what a C function returned. Failures are raised as :class:`ember.Error` subclasses."""

    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_UTF8 = 2
    INVALID_HANDLE = 3
    INVALID_CONFIG = 4
    MODEL_LOAD_FAILED = 5
    ENGINE_START_FAILED = 6
    INVALID_REQUEST = 7
    TIMEOUT = 8
    NOT_FINISHED = 9
    STREAM_DONE = 10
    BUFFER_TOO_SMALL = 11
    CHOICE_OUT_OF_RANGE = 12
    TOO_MANY_HANDLES = 13
    PANIC = 14
    FORKED = 15
    OVERLOADED = 16
    LOAD_CANCELLED = 17


class EventKind(IntEnum):
    """What an :class:`ember.Event` reports (``EmberEventKind``)."""

    #: New text of choice ``choice``.
    DELTA = 1
    #: Choice ``choice`` ended, for ``finish_reason``.
    FINISHED = 2
    #: The engine failed the request. Iteration raises :class:`ember.RequestFailed` instead of yielding it.
    ERROR = 3
    #: A streaming chunk body (``chat.completion.chunk`` or ``text_completion`` JSON): requests submitted with
    #: ``chunks=True``.
    CHUNK = 4
    #: The end of a chunk stream. Iteration ends instead of yielding it.
    STREAM_DONE = 5
    #: How far a prompt has been computed (``event.progress``): only for a request with ``"return_progress": true``,
    #: before the prompt's first token.
    PROMPT_PROGRESS = 6


class FinishReason(IntEnum):
    """Why a choice ended (``EmberFinishReason``)."""

    NONE = 0
    #: An end-of-generation token, a stop token id or a stop string (OpenAI's "stop").
    STOP = 1
    #: ``max_tokens`` reached, or the context is full (OpenAI's "length").
    LENGTH = 2
    #: Cancelled by :meth:`ember.Request.cancel`, by closing the request, or by closing the engine.
    CANCELLED = 3
    #: The engine could not continue the request.
    ERROR = 4
    #: The request's ``deadline_ms`` passed; its output so far stands.
    DEADLINE = 5


class LogLevel(IntEnum):
    """The severity of one of the engine's log lines (``EmberLogLevel``); lower is more severe."""

    ERROR = 1
    WARN = 2
    INFO = 3
    DEBUG = 4


class CpuKernels(IntEnum):
    """The CPU kernel path an engine runs (``EmberStats.cpu_kernels``): every path computes the same bits."""

    SCALAR = 1
    AVX2 = 2
    AVX512 = 3
    AMX = 4


class API(IntEnum):
    """The API a request body is written for (``engine_submit_api``'s ``EMBER_API_*``): each is read into the
    engine's one request and answered in its own shape (docs/c_api.md, "Other APIs")."""

    #: OpenAI Chat Completions or Completions, by which of ``messages`` and ``prompt`` the body has.
    OPENAI = 0
    #: OpenAI's ``POST /v1/chat/completions``.
    CHAT_COMPLETIONS = 1
    #: OpenAI's ``POST /v1/completions``.
    COMPLETIONS = 2
    #: OpenAI's ``POST /v1/responses``; chunks are its stream events.
    RESPONSES = 3
    #: Anthropic's ``POST /v1/messages``; chunks are its stream events.
    ANTHROPIC_MESSAGES = 4
    #: Ollama's ``POST /api/chat``; chunks are its NDJSON objects.
    OLLAMA_CHAT = 5
    #: Ollama's ``POST /api/generate``; chunks are its NDJSON objects.
    OLLAMA_GENERATE = 6
    #: llama-server's ``POST /completion``; chunks are its stream objects.
    LLAMA_COMPLETION = 7


#: ``delivery`` of ``engine_submit_api``: the events stay with the request, for ``engine_poll`` (the binding
#: delivers every request through the engine's waiting point instead, so it never passes this one).
DELIVERY_POLL = 0
#: ``delivery`` of ``engine_submit_with_user_data``: the events ``engine_poll`` gives.
DELIVERY_EVENTS = 1
#: ``delivery`` of ``engine_submit_with_user_data``: the chunk bodies ``engine_next_chunk_json`` gives.
DELIVERY_CHUNKS = 2
