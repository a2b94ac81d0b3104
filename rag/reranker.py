"""Reranking: a step after fusion that may put the retrieved chunks in another order before the answer flow reads
them (a cross-encoder, a rule), behind one small interface.

Retrieval asks the reranker how many fused candidates it wants to see (``candidates``), hands it the query and
those chunks, and keeps the first ``k`` of the order it returns. The reranker is chosen by the ``reranker``
setting, by name, in ``RERANKERS``; the composition root (``app.runtime``) builds it once. The default,
``none``, keeps the fused order and costs nothing.

To add one: a class with ``candidates`` and ``rerank`` below, and its name in ``RERANKERS``; then
``reranker = "NAME"`` in rag.toml (or ``RAG_RERANKER=NAME``).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping, Protocol, Sequence

from rag.core.errors import ConfigError
from rag.core.records import ChunkRecord
from rag.core.settings import Settings


class Reranker(Protocol):
    def candidates(self, k: int) -> int:
        """How many fused hits to rerank when ``k`` are asked for (at least ``k``)."""
        ...

    def rerank(self, query: str, chunks: Sequence[ChunkRecord]) -> list[int]:
        """The positions of ``chunks`` (best fused first) in their new order, best first; retrieval keeps the
        first ``k``. A position left out drops that chunk."""
        ...


class KeepOrder:
    """The fused order, unchanged (the ``none`` reranker)."""

    def candidates(self, k: int) -> int:
        return k

    def rerank(self, query: str, chunks: Sequence[ChunkRecord]) -> list[int]:
        return list(range(len(chunks)))


# The rerankers by setting name: each built from the settings (a model's folder, its threads).
RERANKERS: Mapping[str, Callable[[Settings], Reranker]] = MappingProxyType({
    "none": lambda settings: KeepOrder(),
})


def load_reranker(settings: Settings) -> Reranker:
    """The reranker the ``reranker`` setting names."""
    build = RERANKERS.get(settings.reranker)
    if build is None:
        raise ConfigError(f"reranker must be one of {', '.join(RERANKERS)}, not {settings.reranker!r}")
    return build(settings)
