"""Hybrid retrieval: dense (FAISS) + lexical (BM25 via FTS5), fused by reciprocal rank."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ingest.embedder import Embedder
from ingest.records import ChunkRecord
from ingest.store import IndexReader
from rag.core.errors import DocumentNotFoundError

RRF_K = 60  # the usual constant from Cormack et al.; rank differences matter, scores don't
CANDIDATES_PER_SIDE = 4  # each side proposes k * this many before fusion


@dataclass(frozen=True)
class Hit:
    chunk: ChunkRecord
    score: float  # fused score (higher is better)
    dense_score: float | None  # cosine similarity, if the dense side found it
    lexical_score: float | None  # BM25, if the lexical side found it


@dataclass(frozen=True)
class Retrieval:
    hits: list[Hit]
    best_dense: float  # highest cosine among dense candidates (evidence strength)
    embed_ms: float
    search_ms: float
    query_vector: np.ndarray  # reused to score sentences during compression


def rrf_fuse(rankings: Sequence[Sequence[int]], k: int, rrf_k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of several ranked id lists; returns the top ``k`` (id, score)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (rrf_k + rank + 1)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:k]


class Retriever:
    def __init__(self, reader: IndexReader, embedder: Embedder) -> None:
        reader.check_embedder(embedder.config.identity)
        self.reader = reader
        self.embedder = embedder

    def retrieve(self, question: str, k: int = 5, doc_ids: Sequence[str] | None = None,
                 mode: str = "hybrid") -> Retrieval:
        start = time.perf_counter()
        doc_ids = self.resolve_documents(doc_ids) if doc_ids else None
        query = self.embedder.embed_query(question)
        embedded = time.perf_counter()
        pool = max(k * CANDIDATES_PER_SIDE, 20)
        dense = self.reader.dense_search(query, pool, doc_ids) if mode != "lexical" else []
        lexical = self.reader.lexical_search(question, pool, doc_ids) if mode != "dense" else []
        fused = rrf_fuse([[i for i, _ in dense], [i for i, _ in lexical]], k)
        records = self.reader.chunks(i for i, _ in fused)
        dense_scores, lexical_scores = dict(dense), dict(lexical)
        hits = [Hit(records[i], score, dense_scores.get(i), lexical_scores.get(i))
                for i, score in fused if i in records]  # a concurrent delete may have removed a chunk
        done = time.perf_counter()
        best = max((s for _, s in dense), default=0.0)
        return Retrieval(hits, best, (embedded - start) * 1000, (done - embedded) * 1000, query)

    def resolve_documents(self, ids_or_paths: Sequence[str]) -> list[str]:
        """Document ids for a filter given as ids or paths; an unknown one is an error, not an empty search."""
        resolved: list[str] = []
        for item in ids_or_paths:
            record = self.reader.find_document(item)
            if record is None:
                raise DocumentNotFoundError(f"no document {item!r} in index {self.reader.name!r}")
            resolved.append(record.id)
        return resolved
