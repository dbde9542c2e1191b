"""Reranking with a reranker engine (a synthetic bge-small with a cross-encoder's classification head, llama.cpp's
real BERT vocabulary): results most relevant first and the scores in the documents' order, both the engine's
float32; top_n, return_documents, documents as {"text"} objects; the raw call; refusals naming their field; an
embedding model's and a generating model's refusals; many threads at once getting the scores of one call."""

from __future__ import annotations

import json
from array import array
from concurrent.futures import ThreadPoolExecutor
from typing import List

import pytest

import ember
from conftest import RERANK_MODEL

QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital and largest city of France.", "Berlin is the capital of Germany.",
             "The quick brown fox jumps over the lazy dog.", "France is a country in Western Europe.", "x",
             "Capital letters start sentences.", "The Eiffel Tower stands in Paris, on the Seine.",
             "A longer sentence, with punctuation; and a number: 42."]


def f32(value: float) -> float:
    """value rounded to float32, as an array('f') holds it."""
    return array("f", [value])[0]


def test_results_most_relevant_first_and_scores_in_document_order(reranker: ember.Engine) -> None:
    result = reranker.rerank(QUERY, DOCUMENTS)
    assert result.model == "rerank-test"
    assert isinstance(result.scores, array) and result.scores.typecode == "f"
    assert len(result.scores) == len(result) == len(DOCUMENTS)
    assert sorted(r.index for r in result) == list(range(len(DOCUMENTS)))
    ranked = [r.score for r in result]
    assert ranked == sorted(ranked, reverse=True)
    for index, score, document in result:
        assert result.scores[index] == score == f32(score)  # the engine's float32, as it is
        assert document is None
    assert len(set(result.scores)) > 1  # the pairs do score differently
    # [CLS] query [SEP] document [SEP]: the query's 9 tokens and 2 more at least, per document.
    assert result.usage.prompt_tokens == result.usage.total_tokens >= 11 * len(DOCUMENTS)
    assert result[0] == max(result, key=lambda r: r.score)


def test_a_documents_score_is_the_same_alone(reranker: ember.Engine) -> None:
    together = reranker.rerank(QUERY, DOCUMENTS)
    for index in (0, 2, len(DOCUMENTS) - 1):
        alone = reranker.rerank(QUERY, [DOCUMENTS[index]])
        assert list(alone.scores) == [together.scores[index]]
        assert alone.results == [ember.RankedDocument(0, together.scores[index])]


def test_top_n_keeps_the_best_results_and_every_score(reranker: ember.Engine) -> None:
    full = reranker.rerank(QUERY, DOCUMENTS)
    best = reranker.rerank(QUERY, DOCUMENTS, top_n=3)
    assert best.results == full.results[:3]
    assert best.scores == full.scores and best.usage == full.usage
    assert reranker.rerank(QUERY, DOCUMENTS, top_n=100).results == full.results


def test_return_documents_and_text_objects(reranker: ember.Engine) -> None:
    result = reranker.rerank(QUERY, DOCUMENTS, top_n=2, return_documents=True)
    for index, _score, document in result:
        assert document == DOCUMENTS[index]
    objects = reranker.rerank(QUERY, [{"text": d} for d in DOCUMENTS], return_documents=True)
    assert objects.scores == reranker.rerank(QUERY, DOCUMENTS).scores
    assert [r.document for r in objects] == [DOCUMENTS[r.index] for r in objects]


def test_rerank_json_is_the_raw_call(reranker: ember.Engine) -> None:
    body = json.loads(reranker.rerank_json(json.dumps({"query": QUERY, "documents": DOCUMENTS, "top_n": 2,
                                                       "return_documents": True, "model": "any"})))
    assert body["object"] == "list" and body["model"] == "rerank-test"
    expected = reranker.rerank(QUERY, DOCUMENTS, top_n=2, return_documents=True)
    # A JSON number is its float32's shortest text: rounded to float32, it is the binding's score.
    assert [(r["index"], f32(r["relevance_score"]), r["document"]["text"]) for r in body["results"]] == \
        [tuple(r) for r in expected]
    assert body["usage"] == {"prompt_tokens": expected.usage.prompt_tokens,
                             "total_tokens": expected.usage.total_tokens,
                             "prompt_tokens_per_input": list(expected.usage.prompt_tokens_per_input)}
    assert sum(expected.usage.prompt_tokens_per_input) == expected.usage.prompt_tokens


def test_a_refused_field_is_named(reranker: ember.Engine) -> None:
    long = "word " * 600
    cases = [
        (lambda: reranker.rerank(QUERY, []), "documents"),
        (lambda: reranker.rerank(QUERY, ["a"], top_n=0), "top_n"),
        (lambda: reranker.rerank(QUERY, ["a"], top_n=True), "top_n"),  # a bool is no count
        (lambda: reranker.rerank(QUERY, ["a"], return_documents="yes"), "return_documents"),  # type: ignore
        (lambda: reranker.rerank(QUERY, [{"title": "no text"}]), "documents"),
        # The engine's sentence names documents[1]'s pair "input[1]" (protocol/rerank.rs renames only the
        # error's param, which the C call does not carry): either name passes, for when it says documents[1].
        (lambda: reranker.rerank(QUERY, ["a", long]), ("documents[1]", "input[1]")),
        (lambda: reranker.rerank(QUERY, ["x"] * 2049), "documents"),
        (lambda: reranker.rerank_json('{"query": "q", "documents": ["a"], "rank_fields": []}'), "rank_fields"),
        (lambda: reranker.rerank_json('{"documents": ["a"]}'), "query"),
    ]
    for call, fields in cases:
        with pytest.raises(ember.InvalidRequest) as refused:
            call()
        error = refused.value
        assert error.op == "engine_rerank" and error.status == ember.Status.INVALID_REQUEST
        # A sentence that starts with the field.
        names = fields if isinstance(fields, tuple) else (fields,)
        assert error.message.startswith(tuple(f"{n}{end}" for n in names for end in ": ")), error.message
        assert str(error) == f"engine_rerank: {error.message}"
        assert error.body is None
    with pytest.raises(ember.InvalidRequest, match="not JSON"):
        reranker.rerank_json('{"query": ')
    with pytest.raises(TypeError, match="query"):
        reranker.rerank(b"bytes", DOCUMENTS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="documents"):
        reranker.rerank(QUERY, "one text, not a list")
    with pytest.raises(TypeError, match=r"documents\[1\]"):
        reranker.rerank(QUERY, ["x", 1.5])  # type: ignore[list-item]
    # The engine serves on after each refusal.
    assert len(reranker.rerank(QUERY, ["still here"])) == 1


def test_other_models_refuse_to_rerank(engine: ember.Engine, encoder: ember.Engine,
                                       reranker: ember.Engine) -> None:
    # An embedding model has no classification head to score pairs with.
    with pytest.raises(ember.InvalidRequest) as refused:
        encoder.rerank(QUERY, DOCUMENTS)
    assert refused.value.op == "engine_rerank" and "rank" in refused.value.message
    with pytest.raises(ember.InvalidRequest, match="generates text"):
        engine.rerank(QUERY, DOCUMENTS)
    with pytest.raises(ember.InvalidRequest, match="generates text"):
        engine.rerank_json('{"query": "q", "documents": ["a"]}')
    # And a reranker gives vectors only when asked for a pooling of its encoder.
    with pytest.raises(ember.InvalidRequest, match="reranker"):
        reranker.embed("a")
    assert len(reranker.embed("a", pooling="cls")[0]) == 384


def test_many_threads_get_the_scores_of_one_call(reranker: ember.Engine) -> None:
    expected = reranker.rerank(QUERY, DOCUMENTS)

    def one(index: int) -> List[float]:
        if index % 3 == 0:
            return list(reranker.rerank(QUERY, DOCUMENTS).scores)  # all of them in one call
        return list(reranker.rerank(QUERY, [DOCUMENTS[index % len(DOCUMENTS)]]).scores)  # one of them

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(one, range(48)))
    for index, scores in enumerate(results):
        if index % 3 == 0:
            assert scores == list(expected.scores), index
        else:
            assert scores == [expected.scores[index % len(DOCUMENTS)]], index


def test_a_closed_reranker_refuses() -> None:
    reranker = ember.Engine({"model": RERANK_MODEL, "threads": 1})
    assert len(reranker.rerank("q", ["a"])) == 1
    reranker.close()
    with pytest.raises(ember.InvalidHandle):
        reranker.rerank("q", ["a"])
    with pytest.raises(ember.InvalidHandle):
        reranker.rerank_json('{"query": "q", "documents": ["a"]}')
