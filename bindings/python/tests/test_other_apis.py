"""Bodies of other APIs (``engine_submit_api``: Responses, Anthropic Messages, Ollama, llama-server), answered in
their own shapes by the engine's one request, and ``engine_token_bytes``."""

from __future__ import annotations

from typing import Any, Dict

import pytest

import ember
from conftest import chat

MESSAGES = [{"role": "user", "content": "Name a colour."}]


def greedy_chat_text(engine: ember.Engine) -> str:
    with engine.submit(chat("Name a colour.", 8, ignore_eos=True)) as request:
        return request.response()["choices"][0]["message"]["content"]


def answer(engine: ember.Engine, api: ember.API, body: Dict[str, Any]) -> Dict[str, Any]:
    with engine.submit_api(api, body) as request:
        return request.response()


def test_each_api_answers_the_same_chat_in_its_own_shape(engine: ember.Engine) -> None:
    text = greedy_chat_text(engine)
    responses = answer(engine, ember.API.RESPONSES, {"input": MESSAGES, "max_output_tokens": 8, "temperature": 0})
    assert responses["object"] == "response" and responses["usage"]["output_tokens"] == 8
    assert responses["output"][0]["content"][0]["text"] == text
    messages = answer(engine, ember.API.ANTHROPIC_MESSAGES,
                      {"model": "m", "messages": MESSAGES, "max_tokens": 8, "temperature": 0})
    assert messages["type"] == "message" and messages["stop_reason"] == "max_tokens"
    assert messages["content"] == [{"type": "text", "text": text}]
    ollama = answer(engine, ember.API.OLLAMA_CHAT, {"model": "m", "messages": MESSAGES, "stream": False,
                                                    "options": {"num_predict": 8, "temperature": 0}})
    assert ollama["done"] is True and ollama["message"] == {"role": "assistant", "content": text}
    forced = answer(engine, ember.API.CHAT_COMPLETIONS, chat("Name a colour.", 8, ignore_eos=True))
    assert forced["choices"][0]["message"]["content"] == text


def test_prompt_apis_answer_as_completions(engine: ember.Engine) -> None:
    with engine.submit({"prompt": "Once upon a", "max_tokens": 6, "temperature": 0}) as request:
        text = request.response()["choices"][0]["text"]
    llama = answer(engine, ember.API.LLAMA_COMPLETION, {"prompt": "Once upon a", "n_predict": 6, "temperature": 0})
    assert llama["content"] == text and llama["stop"] is True
    generate = answer(engine, ember.API.OLLAMA_GENERATE, {"model": "m", "prompt": "Once upon a", "stream": False,
                                                          "options": {"num_predict": 6, "temperature": 0}})
    assert generate["done"] is True and generate["eval_count"] == 6 and generate["response"]


def test_chunks_are_the_apis_stream_events(engine: ember.Engine) -> None:
    body = {"model": "m", "messages": MESSAGES, "max_tokens": 4, "temperature": 0, "stream": True}
    with engine.submit_api(ember.API.ANTHROPIC_MESSAGES, body, chunks=True) as request:
        chunks = [event.json() for event in request]
        whole = request.response()
    types = [chunk["type"] for chunk in chunks]
    assert types[0] == "message_start" and types[-1] == "message_stop" and "content_block_delta" in types
    text = "".join(c["delta"]["text"] for c in chunks if c["type"] == "content_block_delta")
    assert text == whole["content"][0]["text"]
    # DELTA events are plain text whatever the API.
    with engine.submit_api(ember.API.ANTHROPIC_MESSAGES, body) as request:
        assert request.text() == text


def test_a_refusal_names_the_field_as_the_api_does(engine: ember.Engine) -> None:
    with pytest.raises(ember.InvalidRequest) as refused:
        engine.submit_api(ember.API.RESPONSES, {"input": MESSAGES, "max_output_tokens": -1})
    assert refused.value.body["error"]["param"] == "max_output_tokens" and refused.value.op == "engine_submit_api"
    with pytest.raises(ember.InvalidArgument, match="api"):
        engine.submit_api(99, {"input": MESSAGES})  # type: ignore[arg-type]
    with pytest.raises(ember.InvalidArgument):
        engine.submit_api(2**32, {"input": MESSAGES})  # type: ignore[arg-type]


def test_token_bytes_add_up_to_the_text(engine: ember.Engine) -> None:
    # Characters a byte-level BPE splits inside their UTF-8 bytes, beside common ones.
    text = "naïve café ✓ 漢字 \U0001F732"
    pieces = [engine.token_bytes(token) for token in engine.tokenize(text, add_special=False)]
    assert b"".join(pieces) == text.encode()
    assert any(not valid_utf8(piece) for piece in pieces), "a piece that is part of a character"
    eos = engine.model_info()["special_tokens"]["eos"]
    assert engine.token_bytes(eos["id"]) == eos["text"].encode()  # a control token gives its text
    with pytest.raises(ember.InvalidArgument):
        engine.token_bytes(1 << 30)
    with pytest.raises(ember.InvalidArgument):
        engine.token_bytes(-1)


def valid_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
