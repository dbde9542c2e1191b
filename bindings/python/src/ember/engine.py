"""An engine: a model in memory and the thread that serves the requests submitted to it."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import weakref
from ctypes import c_size_t, c_uint32, c_void_p
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Union, overload

from ._constants import API, DELIVERY_CHUNKS, DELIVERY_EVENTS, Status
from ._pump import Pump
from ._lib import ProgressCallback, check, lib, take_string
from ._load_bar import LoadBar, model_label, wanted
from ._log import LogTarget, forget, logging_to
from ._structs import Stats, StatsStruct, from_struct, new_struct
from .embeddings import EmbeddingInput, Embeddings, from_response, request_body
from .errors import InvalidArgument, InvalidHandle
from .request import Request
from .rerank import RerankDocument, Reranking
from .rerank import from_response as reranking_from_response
from .rerank import request_body as rerank_body

#: A request body or configuration: a dict (sent as JSON) or JSON text.
Json = Union[Mapping[str, Any], str, bytes]

#: How long closing an engine waits for its cancelled requests' last events before it ends their iteration
#: itself: a cancelled request ends at the engine's next step.
_CLOSE_DRAIN_SECONDS = 60.0


def _json_default(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _encode(op: str, value: Json) -> bytes:
    """The JSON text ember reads. A ``str`` that is not valid UTF-8 (lone surrogates) is passed on as such, so
    that ember refuses it with :class:`ember.InvalidUtf8` rather than Python with an encoding error."""
    if isinstance(value, Mapping):
        data = json.dumps(value, ensure_ascii=False, default=_json_default).encode("utf-8", "surrogatepass")
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes):
        data = value
    else:
        raise TypeError(f"{op}: expected a dict or JSON text, not {type(value).__name__}")
    if b"\0" in data:
        raise InvalidArgument(op, Status.INVALID_ARGUMENT, "the JSON text contains a NUL byte")
    return data


class _Handle:
    """The engine's C handle and event delivery, apart from :class:`Engine` so that the finalizer that closes a
    forgotten engine holds no reference to it."""

    def __init__(self, handle: int, log_key: Optional[int]) -> None:
        self.handle: Optional[int] = handle
        self.pump = Pump(handle)
        self.lock = threading.Lock()
        self.log_key = log_key

    def close(self) -> None:
        with self.lock:
            handle, self.handle = self.handle, None
        if handle is None:
            return
        # Readers see their requests end (FinishReason.CANCELLED) before the engine goes: engine_free cancels
        # too, but its last events could no longer be taken.
        self.pump.close(_CLOSE_DRAIN_SECONDS)
        lib.engine_free(handle)
        forget(self.log_key)  # engine_free joined every thread that could log


#: What ``progress`` may be: a callable of the fraction loaded, or whether to draw a bar on stderr.
Progress = Union[Callable[[float], Optional[bool]], bool, None]


class Engine:
    """An ember engine (``engine_new``): loads the model and starts serving.

    The configuration is the JSON object of ``engine_new`` (docs/c_api.md lists its keys): as keywords
    (``Engine(model="models/SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)``), as a dict or JSON text in
    ``config``, or a dict and keywords together (the keywords win). ``model`` is a GGUF file or a Hugging Face hub
    name (``"org/repo:Q4_K_M"``, ``"hf://org/repo/file.gguf"``), downloaded into the hub cache when missing
    (docs/models.md). With none, every key takes its default (the model from ``EMBER_MODEL``, else the default
    model from the hub cache, else ``models/SmolLM2-135M-Instruct.Q4_1.gguf``). On an encoder model (``bert``,
    ``nomic-bert``) the engine serves :meth:`embed` only, and on a reranker :meth:`rerank`.

    ``progress``: ``None`` (the default) draws a progress bar on stderr while the model loads when stderr is a
    terminal, ``True`` always, ``False`` never. A callable is called instead with the fraction loaded (0 to 1) on
    this thread while the model loads; returning ``False`` cancels the load (:class:`ember.LoadCancelled`), and an
    exception it raises stops the load and is raised here. ``log``, when given, receives the engine's log lines: a
    ``logging.Logger`` (ember's levels mapped to logging's), or a callable of (:class:`ember.LogLevel`, message),
    called on ember's threads, possibly several at once; it must not call ember.

    Use it as a context manager, or call :meth:`close`; a forgotten engine is closed when collected (its
    requests keep it alive while they are in use). Every method may be called from any thread.
    """

    def __init__(self, config: Optional[Json] = None, *, progress: Progress = None,
                 log: Optional[LogTarget] = None, **keys: Any) -> None:
        if keys:
            if isinstance(config, (str, bytes)):
                raise TypeError("ember.Engine: give the configuration as a dict or as keywords, not JSON text "
                                "and keywords")
            config = {**(config or {}), **keys}
        data = None if config is None else _encode("engine_new", config)
        bar = None
        if progress is None or isinstance(progress, bool):
            bar = LoadBar(model_label(config)) if wanted(progress) else None
            progress = bar
        out = c_void_p()
        with logging_to(log) as log_key:
            try:
                self._start(data, progress, out)
            except BaseException:
                forget(log_key)
                raise
            finally:
                if bar is not None:
                    bar.close()
        self._core = _Handle(out.value, log_key)
        self._pump = self._core.pump
        self._finalizer = weakref.finalize(self, self._core.close)

    @staticmethod
    def _start(data: Optional[bytes], progress: Optional[Callable[[float], Optional[bool]]], out: c_void_p) -> None:
        if progress is None:
            check("engine_new", lib.engine_new(data, ctypes.byref(out)))
            return
        raised: List[BaseException] = []

        def report(_userdata: Any, fraction: float) -> bool:
            try:
                return progress(fraction) is not False
            except BaseException as error:  # noqa: B902: re-raised below, after the C call returns
                raised.append(error)
                return False

        status = lib.engine_new_with_progress(data, ProgressCallback(report), None, ctypes.byref(out))
        if raised:
            raise raised[0]
        check("engine_new_with_progress", status)

    # --- requests -------------------------------------------------------------------------------------------

    def submit(self, body: Json, *, chunks: bool = False) -> Request:
        """Submits an OpenAI Chat Completions body (with ``messages``) or Completions body (with ``prompt``) and
        returns at once. Iterating the request gives its events; with ``chunks=True``, its streaming chunk
        bodies instead (``Event.kind`` ``CHUNK``), what a ``"stream": true`` client expects.

        Raises :class:`ember.InvalidRequest` (``.body`` is the OpenAI error naming the field at fault),
        :class:`ember.Overloaded` (nothing was queued: retry later), :class:`ember.InvalidHandle` (closed)."""
        handle = self._live("engine_submit")
        data = _encode("engine_submit", body)
        return self._submit("engine_submit", chunks, lambda key, delivery, out: lib.engine_submit_with_user_data(
            handle, data, key, delivery, out))

    def submit_api(self, api: API, body: Json, *, chunks: bool = False) -> Request:
        """Submits a body of another API (``engine_submit_api``): an OpenAI Responses, Anthropic Messages,
        Ollama chat or generate, or llama-server completion body (:class:`ember.API`), read into the engine's one
        request. The request is then read as one from :meth:`submit`, but :meth:`Request.response` is that API's
        response body, and with ``chunks=True`` the events carry that API's stream chunks, one JSON object each
        (docs/c_api.md, "Other APIs", says how each API frames them on the wire). ``DELTA`` events are plain text
        whatever the API.

        Raises as :meth:`submit`; a refusal's ``.body`` is an OpenAI error body whose ``param`` names the field as
        the API names it. An ``api`` ember does not know is :class:`ember.InvalidArgument`."""
        handle = self._live("engine_submit_api")
        data = _encode("engine_submit_api", body)
        number = int(api)
        if not 0 <= number < 2**32:
            raise InvalidArgument("engine_submit_api", Status.INVALID_ARGUMENT, f"api {number} is not an API")
        return self._submit("engine_submit_api", chunks, lambda key, delivery, out: lib.engine_submit_api(
            handle, number, data, key, delivery, out))

    def _submit(self, op: str, chunks: bool, call: Callable[[int, int, Any], int]) -> Request:
        """Registers a request's inbox, submits with ``call(user_data, delivery, &out)`` and wraps the handle."""
        key, inbox = self._pump.register()
        out = c_void_p()
        status = call(key, DELIVERY_CHUNKS if chunks else DELIVERY_EVENTS, ctypes.byref(out))
        if status != Status.OK:
            self._pump.unregister(key)
            check(op, status)
        inbox.handle = out.value
        return Request(self, out.value, key, inbox, chunks)

    # --- one call per answer (llama-cpp-python's create_chat_completion) ------------------------------------

    @overload
    def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: Literal[False] = False,
             **params: Any) -> Dict[str, Any]: ...

    @overload
    def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: Literal[True],
             **params: Any) -> Iterator[Dict[str, Any]]: ...

    def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: bool = False,
             **params: Any) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """Answers a chat: ``messages`` and any Chat Completions fields (``max_tokens=64``, ``temperature=0``,
        ``tools=[...]``, ...; docs/protocol.md) make the body. Returns the ``chat.completion`` response as a dict
        (``answer["choices"][0]["message"]["content"]``), once generated. With ``stream=True`` it returns at once
        an iterator of the ``chat.completion.chunk`` dicts, as an OpenAI client streams them; leaving it early
        cancels the request (closing it, or dropping it, as a ``for`` loop over the call does on ``break``).

        Raises at once what :meth:`submit` raises, before any chunk; :class:`ember.RequestFailed` if the engine
        fails the request mid-way while streaming."""
        self._live("engine_submit")  # closed: raised before the arguments are looked at, as every method does
        return self._answer({"messages": list(messages), **params}, stream)

    @overload
    def complete(self, prompt: Union[str, Sequence[int]], *, stream: Literal[False] = False,
                 **params: Any) -> Dict[str, Any]: ...

    @overload
    def complete(self, prompt: Union[str, Sequence[int]], *, stream: Literal[True],
                 **params: Any) -> Iterator[Dict[str, Any]]: ...

    def complete(self, prompt: Union[str, Sequence[int]], *, stream: bool = False,
                 **params: Any) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        """:meth:`chat` for a Completions body: ``prompt`` (a text or token ids) and any Completions fields;
        returns the ``text_completion`` response (``answer["choices"][0]["text"]``), or its chunks when
        streamed."""
        self._live("engine_submit")
        prompt_value: Any = prompt if isinstance(prompt, str) else list(prompt)
        return self._answer({"prompt": prompt_value, **params}, stream)

    def _answer(self, body: Dict[str, Any], stream: bool) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
        if stream:
            body["stream"] = True
            return _chunks(self.submit(body, chunks=True))
        with self.submit(body) as request:
            return request.response()

    # --- embeddings (an encoder model) ----------------------------------------------------------------------

    def embed(self, input: EmbeddingInput, *, dimensions: Optional[int] = None,
              pooling: Optional[Literal["mean", "cls", "last"]] = None, normalize: bool = True,
              priority: Optional[int] = None,
              encoding_format: Optional[Literal["float", "base64"]] = None) -> Embeddings:
        """Embeds ``input``: a text, a sequence of texts, one input's token ids, or a sequence of inputs' token ids
        (taken as given: no ``[CLS]``/``[SEP]`` added), and waits for the vectors (in C, without the GIL). The
        engine's model must be an encoder (``bert``, ``nomic-bert``; docs/embeddings.md). Many threads may call at
        once: their inputs share forward passes, and a vector does not depend on what it was batched with.

        ``dimensions``: keep the first N numbers of each vector (then normalize); ``pooling``: instead of the
        file's; ``normalize``: unit length (the default) or the pooled vector as the model computes it;
        ``priority``: higher is served first. ``encoding_format`` is only how the numbers travel: the vectors are
        the same float32 either way; by default ``"base64"``, the smaller and faster to decode.

        Raises :class:`ember.InvalidRequest` (its message names the field at fault, or says the engine's model
        generates text), :class:`ember.Overloaded` (``max_waiting_requests`` wait already: retry later),
        :class:`ember.InvalidHandle` (closed), and ``TypeError`` for an ``input`` of another type."""
        handle = self._live("engine_embed")
        body = request_body(input, dimensions=dimensions, pooling=pooling, normalize=normalize, priority=priority,
                            encoding_format=encoding_format)
        return from_response(self._embed(handle, _encode("engine_embed", body)))

    def embed_json(self, request_json: str) -> str:
        """``engine_embed`` as it is: the JSON text of a ``POST /v1/embeddings`` body in (every field of
        docs/embeddings.md, unknown ones refused by name), the response body's JSON text out, what an HTTP server
        returns. Raises as :meth:`embed` does."""
        handle = self._live("engine_embed")
        return self._embed(handle, _encode("engine_embed", request_json))

    @staticmethod
    def _embed(handle: int, data: bytes) -> str:
        return take_string("engine_embed", lambda out: lib.engine_embed(handle, data, out))

    # --- reranking (a reranker: an encoder with a classification head) ---------------------------------------

    def rerank(self, query: str, documents: Sequence[RerankDocument], *, top_n: Optional[int] = None,
               return_documents: bool = False, priority: Optional[int] = None) -> Reranking:
        """Scores each document's relevance to ``query`` (``engine_rerank``) and returns a :class:`Reranking`:
        ``results`` most relevant first, ``scores`` every document's score in the documents' order (an
        ``array('f')``). The engine's model must be a reranker (a ``bert`` file with a classification head;
        docs/embeddings.md). Many threads may call at once: their pairs share forward passes.

        ``documents``: texts, or ``{"text": ...}`` objects, 1 to 2,048; ``top_n``: keep the N best in
        ``results`` (``scores`` keeps every document); ``return_documents``: each result carries its document's
        text; ``priority``: a lower value first (as chat requests').

        Raises :class:`ember.InvalidRequest` (the message, a sentence, names the field at fault; or the model is
        not a reranker), :class:`ember.Overloaded` (``max_waiting_requests`` calls wait already),
        :class:`ember.InvalidHandle` (closed), ``TypeError`` for a wrong Python type, before anything is sent."""
        handle = self._live("engine_rerank")
        body = rerank_body(query, documents, top_n=top_n, return_documents=return_documents, priority=priority)
        return reranking_from_response(self._rerank(handle, _encode("engine_rerank", body)), top_n)

    def rerank_json(self, request_json: str) -> str:
        """``engine_rerank`` as it is: the JSON text of a ``POST /v1/rerank`` body in (every field of
        docs/embeddings.md, ``top_n`` included; unknown ones refused by name), the response body's JSON text out,
        what an HTTP server returns. Raises as :meth:`rerank` does."""
        handle = self._live("engine_rerank")
        return self._rerank(handle, _encode("engine_rerank", request_json))

    @staticmethod
    def _rerank(handle: int, data: bytes) -> str:
        return take_string("engine_rerank", lambda out: lib.engine_rerank(handle, data, out))

    # --- the model's tokenizer and template -----------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> List[int]:
        """The token ids the engine computes for ``text``. ``parse_special``: control tokens' texts
        (``<|im_start|>``) become those tokens, as in every prompt; ``add_special``: a BOS token first when the
        model asks for one. A submitted prompt's ids are ``tokenize(text)``."""
        handle = self._live("engine_tokenize")
        data = text.encode("utf-8", "surrogatepass")
        count = c_size_t()
        capacity = len(data) + 2  # a token covers at least one byte, but BOS and control tokens
        while True:
            buffer = (c_uint32 * capacity)()
            status = lib.engine_tokenize(handle, data, len(data), add_special, parse_special, buffer, capacity,
                                         ctypes.byref(count))
            if status != Status.BUFFER_TOO_SMALL:
                check("engine_tokenize", status)
                return buffer[: count.value]
            capacity = count.value

    def detokenize(self, ids: Sequence[int], *, include_special: bool = False) -> str:
        """The text of token ids (invalid UTF-8 replaced by U+FFFD); control tokens write their text only with
        ``include_special``."""
        handle = self._live("engine_detokenize")
        for index, token in enumerate(ids):
            if not 0 <= token < 2**32:
                raise InvalidArgument("engine_detokenize", Status.INVALID_ARGUMENT,
                                      f"ids[{index}] = {token} is not a token id")
        array = (c_uint32 * len(ids))(*ids)
        return take_string("engine_detokenize",
                           lambda out: lib.engine_detokenize(handle, array, len(ids), include_special, out))

    def token_bytes(self, id: int) -> bytes:
        """The bytes of token ``id``'s text exactly as the tokenizer has them (``engine_token_bytes``): a
        byte-level token may be part of a UTF-8 character, which :meth:`detokenize` would replace with U+FFFD. A
        control token gives its text. An id outside the vocabulary is :class:`ember.InvalidArgument`."""
        handle = self._live("engine_token_bytes")
        if not 0 <= id < 2**32:
            raise InvalidArgument("engine_token_bytes", Status.INVALID_ARGUMENT, f"{id} is not a token id")
        count = c_size_t()
        capacity = 32  # most tokens are a few bytes: one call
        while True:
            buffer = (ctypes.c_uint8 * capacity)()
            status = lib.engine_token_bytes(handle, id, buffer, capacity, ctypes.byref(count))
            if status != Status.BUFFER_TOO_SMALL:
                check("engine_token_bytes", status)
                return ctypes.string_at(buffer, count.value)
            capacity = count.value

    def apply_chat_template(self, body: Json) -> Dict[str, Any]:
        """The prompt a Chat Completions body would have: ``{"prompt": text, "prompt_token_ids": [...]}``."""
        handle = self._live("engine_apply_chat_template")
        data = _encode("engine_apply_chat_template", body)
        return json.loads(take_string("engine_apply_chat_template",
                                      lambda out: lib.engine_apply_chat_template(handle, data, out)))

    # --- the engine -----------------------------------------------------------------------------------------

    def model_info(self) -> Dict[str, Any]:
        """The model the engine serves: name, architecture, sizes, special tokens, chat template, backend."""
        handle = self._live("engine_model_info_json")
        return json.loads(take_string("engine_model_info_json", lambda out: lib.engine_model_info_json(handle, out)))

    def metrics_text(self) -> str:
        """The engine's metrics in the Prometheus text format (version 0.0.4), ready to serve."""
        handle = self._live("engine_metrics_text")
        return take_string("engine_metrics_text", lambda out: lib.engine_metrics_text(handle, out))

    def stats(self) -> Stats:
        """The engine's counters as of its last step."""
        out = new_struct(StatsStruct)
        check("engine_get_stats", lib.engine_get_stats(self._live("engine_get_stats"), ctypes.byref(out)))
        return from_struct(Stats, out)

    def close(self) -> None:
        """Cancels the running requests (their iteration ends with ``FinishReason.CANCELLED``), stops the engine
        and frees the model. Idempotent. Requests stay readable (metrics, response) until closed themselves."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._core.handle is None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _live(self, op: str) -> int:
        handle = self._core.handle
        if handle is None:
            raise InvalidHandle(op, Status.INVALID_HANDLE, "the engine was closed")
        return handle


def _chunks(request: Request) -> Iterator[Dict[str, Any]]:
    """A streamed answer's chunk dicts; the request is closed (cancelled, if it still runs) when the iteration
    ends or is abandoned."""
    with request:
        for event in request:
            yield event.json()


__all__ = ["Engine", "Json", "Progress"]
