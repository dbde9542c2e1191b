"""Embeddings from an encoder engine (a synthetic bge-small: 384 wide, llama.cpp's real BERT vocabulary): the four
input forms, dimensions, normalization, both encodings, refusals naming their field, a generating engine's
refusal, and many threads at once getting the vectors of one call, bit for bit."""

from __future__ import annotations

import json
import math
from array import array
from concurrent.futures import ThreadPoolExecutor
from typing import List

import pytest

import ember
from conftest import EMBED_MODEL

TEXTS = ["The quick brown fox jumps over the lazy dog.", "hello world", "Embeddings for retrieval.", "x",
         "A longer sentence, with punctuation; and a number: 42."]
#: "hello world" in bert-base-uncased's vocabulary, which bge-small's is: [CLS] hello world [SEP].
HELLO_WORLD_IDS = [101, 7592, 2088, 102]


def norm(vector: "array[float]") -> float:
    return math.sqrt(sum(x * x for x in vector))


def test_a_list_of_strings(encoder: ember.Engine) -> None:
    result = encoder.embed(TEXTS)
    assert len(result) == len(TEXTS) and result.dimensions == 384 and result.model == "bge-test"
    for vector in result:
        assert isinstance(vector, array) and vector.typecode == "f" and len(vector) == 384
        assert abs(norm(vector) - 1.0) < 1e-5
    assert len({tuple(vector) for vector in result}) == len(TEXTS)
    # [CLS] and [SEP] around each input, so at least 3 tokens each.
    assert result.usage.prompt_tokens == result.usage.total_tokens >= 3 * len(TEXTS)
    # One string is one input; its vector is the same alone as in a batch.
    alone = encoder.embed(TEXTS[1])
    assert len(alone) == 1 and alone[0] == result[1]
    assert alone.usage == ember.EmbeddingUsage(len(HELLO_WORLD_IDS), len(HELLO_WORLD_IDS), (len(HELLO_WORLD_IDS),))


def test_token_ids(encoder: ember.Engine) -> None:
    text = encoder.embed("hello world")[0]
    one = encoder.embed(HELLO_WORLD_IDS)
    assert len(one) == 1 and one[0] == text and one.usage.prompt_tokens == 4
    several = encoder.embed([HELLO_WORLD_IDS, (7592, 2088)])  # any sequence of ids; taken as given
    assert len(several) == 2 and several[0] == text and several[1] != text
    assert several.usage.prompt_tokens == 6


def test_dimensions_keep_the_first_numbers_then_normalize(encoder: ember.Engine) -> None:
    full = encoder.embed(TEXTS, normalize=False)
    short = encoder.embed(TEXTS, dimensions=64)
    assert short.dimensions == 64
    for raw, vector in zip(full, short):
        assert len(vector) == 64 and abs(norm(vector) - 1.0) < 1e-5
        head = raw[:64]
        scale = norm(head)
        assert all(abs(x / scale - y) < 1e-6 for x, y in zip(head, vector))


def test_normalize_false_gives_the_pooled_vector(encoder: ember.Engine) -> None:
    unit = encoder.embed(TEXTS)
    raw = encoder.embed(TEXTS, normalize=False)
    for u, r in zip(unit, raw):
        assert r != u and abs(norm(r) - 1.0) > 1e-3
        scale = norm(r)
        assert all(abs(x / scale - y) < 1e-6 for x, y in zip(r, u))
    # Another pooling is another vector.
    assert encoder.embed(TEXTS[0], pooling="mean")[0] != encoder.embed(TEXTS[0], pooling="cls")[0]


def test_both_encodings_give_the_same_floats(encoder: ember.Engine) -> None:
    base64 = encoder.embed(TEXTS, encoding_format="base64")
    floats = encoder.embed(TEXTS, encoding_format="float")
    assert base64.vectors == floats.vectors == encoder.embed(TEXTS).vectors
    assert base64.vectors[0].tobytes() == floats.vectors[0].tobytes()


def test_embed_json_is_the_raw_call(encoder: ember.Engine) -> None:
    body = json.loads(encoder.embed_json(json.dumps({"input": TEXTS[:2], "dimensions": 8})))
    assert body["object"] == "list" and body["model"] == "bge-test"
    assert [item["index"] for item in body["data"]] == [0, 1]
    expected = encoder.embed(TEXTS[:2], dimensions=8)
    assert [array("f", item["embedding"]) for item in body["data"]] == expected.vectors
    assert body["usage"] == {"prompt_tokens": expected.usage.prompt_tokens,
                             "total_tokens": expected.usage.total_tokens,
                             "prompt_tokens_per_input": list(expected.usage.prompt_tokens_per_input)}
    assert sum(expected.usage.prompt_tokens_per_input) == expected.usage.prompt_tokens


def test_a_refused_field_is_named(encoder: ember.Engine) -> None:
    cases = [
        (lambda: encoder.embed("x", dimensions=0), "dimensions"),
        (lambda: encoder.embed("x", dimensions=385), "dimensions"),
        (lambda: encoder.embed("x", pooling="max"), "pooling"),  # type: ignore[arg-type]
        (lambda: encoder.embed("x", encoding_format="hex"), "encoding_format"),  # type: ignore[arg-type]
        (lambda: encoder.embed([]), "input"),
        (lambda: encoder.embed([[101, 10**6, 102]]), "input[0]"),
        (lambda: encoder.embed_json('{"input": "x", "no_such_field": 1}'), "no_such_field"),
    ]
    for call, field in cases:
        with pytest.raises(ember.InvalidRequest) as refused:
            call()
        error = refused.value
        assert error.op == "engine_embed" and error.status == ember.Status.INVALID_REQUEST
        # A sentence that starts with the field, once prefixed with the function.
        assert error.message.startswith(f"{field}:"), error.message
        assert str(error) == f"engine_embed: {error.message}"
        assert error.body is None
    with pytest.raises(ember.InvalidRequest, match="not JSON"):
        encoder.embed_json('{"input": ')
    with pytest.raises(TypeError, match="input"):
        encoder.embed(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"input\[1\]"):
        encoder.embed(["x", 1.5])  # type: ignore[arg-type]
    # The engine serves on after each refusal.
    assert len(encoder.embed("still here")) == 1


def test_a_generating_engine_refuses_embeddings(engine: ember.Engine, encoder: ember.Engine) -> None:
    with pytest.raises(ember.InvalidRequest) as refused:
        engine.embed(TEXTS)
    assert "generates text" in refused.value.message and "encoder" in refused.value.message
    with pytest.raises(ember.InvalidRequest, match="generates text"):
        engine.embed_json('{"input": "x"}')
    # And the other way round: an encoder engine generates nothing.
    with pytest.raises(ember.InvalidRequest, match="embedding model"):
        encoder.submit({"prompt": "Hi", "max_tokens": 1})


def test_many_threads_get_the_vectors_of_one_call(encoder: ember.Engine) -> None:
    expected = encoder.embed(TEXTS)

    def one(index: int) -> List["array[float]"]:
        if index % 3 == 0:
            return encoder.embed(TEXTS).vectors  # all of them in one call
        return encoder.embed(TEXTS[index % len(TEXTS)]).vectors  # one of them

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(one, range(64)))
    for index, vectors in enumerate(results):
        if index % 3 == 0:
            assert vectors == expected.vectors, index
        else:
            assert vectors == [expected[index % len(TEXTS)]], index


def test_a_closed_encoder_refuses() -> None:
    encoder = ember.Engine({"model": EMBED_MODEL, "threads": 1})
    assert len(encoder.embed("x")) == 1
    encoder.close()
    with pytest.raises(ember.InvalidHandle):
        encoder.embed("x")
    with pytest.raises(ember.InvalidHandle):
        encoder.embed_json('{"input": "x"}')
