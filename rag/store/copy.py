"""Copy an index from one store to another (``rag index migrate``): documents keep their ids, vectors are
copied, not re-embedded — unless a ``ReEmbedder`` is given (``rag index restore --re-embed``: a backup made
with another embedder gets vectors of the configured one)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rag.core.records import Chunk
from rag.store import StoredIndex

EMBED_BATCH_CHUNKS = 256


@dataclass(frozen=True)
class ReEmbedder:
    """The embedder a copy gives the documents new vectors with."""

    identity: str
    dimension: int
    embed: Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class CopyReport:
    documents: int
    chunks: int
    generation: int


def copy_index(source: StoredIndex, target: StoredIndex, progress: Callable[[int, int], None] | None = None,
               lock_timeout_s: float = 5.0, reembed: ReEmbedder | None = None) -> CopyReport:
    """Put every document of ``source`` into ``target`` (replacing a document with the same id there), and
    its followed folders. The target keeps the source's embedder identity, or with ``reembed`` gets that
    embedder's (each chunk embedded again); a target built with another embedder is refused."""
    reader = source.reader()
    try:
        info = reader.info()
        documents = reader.documents()
        chunks = 0
        identity, dimension = (info.embedder, info.dimension) if reembed is None else (reembed.identity,
                                                                                        reembed.dimension)
        with target.writer(identity, dimension, lock_timeout_s) as writer:
            for done, record in enumerate(documents, 1):
                stored, vectors = reader.document_chunks(record.id)
                if reembed is not None:
                    texts = [c.text for c in stored]
                    vectors = np.concatenate([reembed.embed(texts[i:i + EMBED_BATCH_CHUNKS])
                                              for i in range(0, len(texts), EMBED_BATCH_CHUNKS)] or
                                             [np.zeros((0, dimension), dtype=np.float32)])
                writer.put_document(record, [Chunk(c.text, c.page, c.section, c.start, c.end, c.ordinal)
                                             for c in stored], vectors)
                chunks += len(stored)
                if progress is not None:
                    progress(done, len(documents))
            for data in reader.sources():
                writer.put_source(json.loads(data)["id"], data)
            generation = writer.commit()
    finally:
        reader.close()
    return CopyReport(len(documents), chunks, generation)
