"""Embeddings of an encoder engine (:meth:`ember.Engine.embed`): the request body it sends to ``engine_embed`` and
the vectors it reads back (docs/embeddings.md has the fields and the models)."""

from __future__ import annotations

import base64
import json
import sys
from array import array
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

#: What :meth:`ember.Engine.embed` embeds: a text, texts, one input's token ids, or several inputs' token ids
#: (OpenAI's four forms of ``input``). Token ids are taken as given: no ``[CLS]`` or ``[SEP]`` is added to them.
EmbeddingInput = Union[str, Sequence[str], Sequence[int], Sequence[Sequence[int]]]


@dataclass(frozen=True)
class EmbeddingUsage:
    """The tokens a call embedded (the response's ``usage``)."""

    #: Every input's tokens, ``[CLS]`` and ``[SEP]`` included.
    prompt_tokens: int
    #: The same as ``prompt_tokens``: embeddings generate nothing.
    total_tokens: int
    #: Each input's tokens, in input order (a rerank input is the query and one document, in document order): the
    #: body's ``usage.prompt_tokens_per_input``. Summing to ``prompt_tokens``.
    prompt_tokens_per_input: Tuple[int, ...] = ()

    @staticmethod
    def of(usage: dict) -> "EmbeddingUsage":
        """The usage of a response body's ``usage`` object."""
        return EmbeddingUsage(usage["prompt_tokens"], usage["total_tokens"],
                              tuple(usage.get("prompt_tokens_per_input", ())))


@dataclass(frozen=True)
class Embeddings:
    """The result of :meth:`ember.Engine.embed`: one vector per input, in the inputs' order.

    Each vector is an ``array('f')`` of its own: 4 bytes a number (the float32 ember computed, bit for bit),
    indexable and iterable as a list is, and a buffer (``memoryview(v)``, ``numpy.frombuffer(v, numpy.float32)``
    without a copy). The result is itself a sequence of its vectors: ``len(result)``, ``result[i]``,
    ``for vector in result``.
    """

    #: One ``array('f')`` per input, ``vectors[i]`` for ``input[i]``.
    vectors: List[array[float]]
    #: The model's name (the engine's ``served_model_name``, else the file's name without ``.gguf``).
    model: str
    #: The tokens embedded.
    usage: EmbeddingUsage

    @property
    def dimensions(self) -> int:
        """The vectors' width: the model's, or the ``dimensions`` asked for."""
        return len(self.vectors[0]) if self.vectors else 0

    def __len__(self) -> int:
        return len(self.vectors)

    def __getitem__(self, index: int) -> array[float]:
        return self.vectors[index]

    def __iter__(self) -> Iterator[array[float]]:
        return iter(self.vectors)


def request_body(input: EmbeddingInput, *, dimensions: Optional[int], pooling: Optional[str], normalize: bool,
                 priority: Optional[int], encoding_format: Optional[str]) -> Dict[str, Any]:
    """The ``POST /v1/embeddings`` body of :meth:`ember.Engine.embed`'s arguments. Types are checked here
    (sequences become lists); values, by ember, which names the field it refuses."""
    body: Dict[str, Any] = {"input": _input(input), "normalize": normalize}
    # base64 unless asked otherwise: the same float32 values in 4 bytes each, where JSON spends about 11
    # characters, and decoded by array.frombytes instead of one Python float per number.
    body["encoding_format"] = "base64" if encoding_format is None else encoding_format
    for name, value in (("dimensions", dimensions), ("pooling", pooling), ("priority", priority)):
        if value is not None:
            body[name] = value
    return body


def _input(value: EmbeddingInput) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise TypeError(f"embed: input is a str, or a sequence of str, of token ids, or of sequences of token ids, "
                        f"not {type(value).__name__}")
    items: List[Any] = []
    for index, item in enumerate(value):
        if isinstance(item, (str, int)):
            items.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, (bytes, bytearray)):
            items.append(list(item))
        else:
            raise TypeError(f"embed: input[{index}] is a str, a token id or a sequence of token ids, "
                            f"not {type(item).__name__}")
    return items


def from_response(text: str) -> Embeddings:
    """The :class:`Embeddings` of an ``engine_embed`` response body, in either ``encoding_format``."""
    body = json.loads(text)
    data = sorted(body["data"], key=lambda item: item["index"])
    return Embeddings([_vector(item["embedding"]) for item in data], body["model"], EmbeddingUsage.of(body["usage"]))


def _vector(embedding: Union[str, List[float]]) -> array[float]:
    if not isinstance(embedding, str):
        return array("f", embedding)
    vector = array("f")
    vector.frombytes(base64.b64decode(embedding))  # little-endian float32, as OpenAI's
    if sys.byteorder == "big":
        vector.byteswap()
    return vector


__all__ = ["EmbeddingInput", "EmbeddingUsage", "Embeddings"]
