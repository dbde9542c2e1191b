"""Reranking with a reranker engine (:meth:`ember.Engine.rerank`): the request body it sends to ``engine_rerank``
and the scores it reads back (docs/embeddings.md, "Reranking", has the fields and the models)."""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Union

from .embeddings import EmbeddingUsage

#: A document to rank: its text, or an object with a ``"text"`` string (Jina's and Cohere's form), sent as given.
RerankDocument = Union[str, Mapping[str, Any]]


class RankedDocument(NamedTuple):
    """One document's place in :attr:`Reranking.results`."""

    #: The document's position in the ``documents`` given.
    index: int
    #: The classification head's raw score (a logit: higher is more relevant): the float32 ember computed, exactly
    #: (``Reranking.scores[index]``).
    score: float
    #: The document's text when ``return_documents`` was asked, else None.
    document: Optional[str] = None


@dataclass(frozen=True)
class Reranking:
    """The result of :meth:`ember.Engine.rerank`.

    ``results`` are the documents most relevant first (the ``top_n`` best, or all of them); ``scores`` holds every
    document's score in the documents' order, whatever ``top_n`` says. The result is itself the sequence of its
    results: ``for index, score, document in engine.rerank(...)``, ``result[0]`` (the best).
    """

    #: Most relevant first; equal scores keep the documents' order (the engine's order, as it answers it).
    results: List[RankedDocument]
    #: ``scores[i]`` is ``documents[i]``'s score: an ``array('f')`` of every document, the float32 ember computed.
    scores: array[float]
    #: The model's name (the engine's ``served_model_name``, else the file's name without ``.gguf``).
    model: str
    #: The tokens scored: every ``[CLS] query [SEP] document [SEP]`` pair's.
    usage: EmbeddingUsage

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> RankedDocument:
        return self.results[index]

    def __iter__(self) -> Iterator[RankedDocument]:
        return iter(self.results)


def request_body(query: str, documents: Sequence[RerankDocument], *, top_n: Optional[int],
                 return_documents: bool, priority: Optional[int]) -> Dict[str, Any]:
    """The ``POST /v1/rerank`` body of :meth:`ember.Engine.rerank`'s arguments. Types are checked here; values,
    by ember, which names the field it refuses.

    A valid ``top_n`` is left out: the engine scores every document whatever ``top_n`` says (it only trims the
    answer), so asking for all of them costs nothing and gives :attr:`Reranking.scores` every document's score;
    :func:`from_response` trims the results. Anything else is sent, for ember to refuse by name."""
    if not isinstance(query, str):
        raise TypeError(f"rerank: query is a str, not {type(query).__name__}")
    body: Dict[str, Any] = {"query": query, "documents": _documents(documents), "return_documents": return_documents}
    if top_n is not None and not _positive_int(top_n):
        body["top_n"] = top_n
    if priority is not None:
        body["priority"] = priority
    return body


def _positive_int(value: Any) -> bool:
    # bool is an int to Python, not to JSON: True is sent, for ember to refuse.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _documents(value: Sequence[RerankDocument]) -> List[RerankDocument]:
    # A str is a sequence too: one text passed as documents would rank its characters.
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise TypeError(f"rerank: documents is a sequence of str (or of {{\"text\": str}} objects), "
                        f"not {type(value).__name__}")
    items: List[RerankDocument] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            items.append(item)
        elif isinstance(item, Mapping):
            items.append(dict(item))
        else:
            raise TypeError(f"rerank: documents[{index}] is a str or a {{\"text\": str}} object, "
                            f"not {type(item).__name__}")
    return items


def from_response(text: str, top_n: Optional[int] = None) -> Reranking:
    """The :class:`Reranking` of an ``engine_rerank`` response body that ranks every document (one asked without
    ``top_n``), its results then cut to ``top_n`` when given."""
    body = json.loads(text)
    items = body["results"]
    scores = array("f", bytes(4 * len(items)))
    for item in items:
        # Each number is its float32's shortest text, which rounds back to that float32; read as a Python float
        # it is another number (the text -0.6133867 for the float32 -0.6133866906166077).
        scores[item["index"]] = item["relevance_score"]
    # Each result's score is read back from the array: the float32 itself, as scores[index] gives it.
    results = [RankedDocument(item["index"], scores[item["index"]], (item.get("document") or {}).get("text"))
               for item in items]
    kept = results if top_n is None or not _positive_int(top_n) else results[:top_n]
    return Reranking(kept, scores, body["model"], EmbeddingUsage.of(body["usage"]))


__all__ = ["RankedDocument", "RerankDocument", "Reranking"]
