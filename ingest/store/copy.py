"""Copy an index from one store to another (``rag index migrate``): documents keep their ids, vectors are
copied, not re-embedded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ingest.records import Chunk
from ingest.store import StoredIndex


@dataclass(frozen=True)
class CopyReport:
    documents: int
    chunks: int
    generation: int


def copy_index(source: StoredIndex, target: StoredIndex, progress: Callable[[int, int], None] | None = None,
               lock_timeout_s: float = 5.0) -> CopyReport:
    """Put every document of ``source`` into ``target`` (replacing a document with the same id there).
    The target keeps the source's embedder identity; a target built with another embedder is refused."""
    reader = source.reader()
    try:
        info = reader.info()
        documents = reader.documents()
        chunks = 0
        with target.writer(info.embedder, info.dimension, lock_timeout_s) as writer:
            for done, record in enumerate(documents, 1):
                stored, vectors = reader.document_chunks(record.id)
                writer.put_document(record, [Chunk(c.text, c.page, c.section, c.start, c.end, c.ordinal)
                                             for c in stored], vectors)
                chunks += len(stored)
                if progress is not None:
                    progress(done, len(documents))
            generation = writer.commit()
    finally:
        reader.close()
    return CopyReport(len(documents), chunks, generation)
