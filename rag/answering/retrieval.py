"""Hybrid retrieval: dense (FAISS) + lexical (BM25 via FTS5), fused by reciprocal rank, then reranked."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rag.embedder import Embedder
from rag.core.records import ChunkRecord
from rag.store import IndexReader
from rag.core import observe
from rag.core.access import visible
from rag.core.errors import DocumentNotFoundError
from rag.reranker import KeepOrder, Reranker
from rag.answering.answerability import holds_token, unretrieved_tokens

RRF_K = 60  # the usual constant from Cormack et al.; rank differences matter, scores don't
CANDIDATES_PER_SIDE = 4  # each side proposes k * this many before fusion


@dataclass(frozen=True)
class Hit:
    chunk: ChunkRecord
    score: float  # fused score (higher is better)
    dense_score: float | None  # cosine similarity, if the dense side found it
    lexical_score: float | None  # BM25, if the lexical side found it
    relevance: float = 0.0  # the fused score as a share of the best possible: 1 = first in every ranking

    @property
    def found_by(self) -> str:
        """Which side of the search found it, in words: "meaning and keywords", "meaning", "keywords"."""
        sides = [name for name, score in (("meaning", self.dense_score), ("keywords", self.lexical_score))
                 if score is not None]
        return " and ".join(sides)


@dataclass(frozen=True)
class Retrieval:
    hits: list[Hit]
    best_dense: float  # highest cosine among dense candidates (evidence strength)
    embed_ms: float
    search_ms: float
    query_vector: np.ndarray  # reused to score sentences during compression
    query: str  # what was searched: the question, or a follow-up folded into the earlier questions
    index: str = ""  # the index searched (no hits at all: it holds no documents)
    dense_ms: float = 0.0  # of search_ms: the vector searches
    lexical_ms: float = 0.0  # of search_ms: the keyword searches


# Chunks read per token by ``chunks_holding``: the keyword search ranks by the token's words, the one holding it
# as written is among the first.
TOKEN_SEARCH = 20


def rrf_fuse(rankings: Sequence[Sequence[int]], k: int, rrf_k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of several ranked id lists; returns the top ``k`` (id, score)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (rrf_k + rank + 1)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))[:k]


def relevance_scale(rankings: int, rrf_k: int = RRF_K) -> float:
    """The fused score of a chunk ranked first in each of ``rankings`` lists: relevance = score / this, so
    it is in rank order (the fused score is), between 0 and 1, and means the same for every query."""
    return max(rankings, 1) / (rrf_k + 1)


class Retriever:
    def __init__(self, reader: IndexReader, embedder: Embedder, reranker: Reranker = KeepOrder()) -> None:
        reader.check_embedder(embedder.config.identity)
        self.reader = reader
        self.embedder = embedder
        self.reranker = reranker

    def retrieve(self, question: str, k: int = 5, doc_ids: Sequence[str] | None = None,
                 mode: str = "hybrid", history: Sequence[str] = (),
                 groups: frozenset[str] | None = None) -> Retrieval:
        """The top ``k`` chunks for ``question``. With ``history`` (the conversation's earlier questions) a
        follow-up such as "and when did he die?" is searched both alone and folded into the last
        questions, and the rankings are fused: the folded query finds what the pronoun refers to, the
        question alone keeps a change of topic from being pulled back to the old one. ``groups``: the
        asker's document groups (None: every document); documents outside them are filtered inside both
        searches, before ranking and ``k``, exactly like a ``doc_ids`` filter."""
        start = time.perf_counter()
        doc_ids = self.resolve_documents(doc_ids, groups) if doc_ids else None
        visible = self.reader.visible_documents(groups)
        if visible is not None:
            allowed = set(visible)
            doc_ids = [d for d in doc_ids if d in allowed] if doc_ids is not None else visible
            if not doc_ids:  # nothing this reader may see: no search at all (an empty filter is no filter)
                return Retrieval([], 0.0, 0.0, 0.0, self.embedder.embed_query(question), question, self.reader.name)
        queries = [question]
        if history:
            queries.append(" ".join([*history, question]))
        vectors = self.embed_queries(queries)
        embedded = time.perf_counter()
        wanted = self.reranker.candidates(k)  # the fused hits the reranker orders; the first k are kept
        pool = max(wanted * CANDIDATES_PER_SIDE, 20)
        dense_lists = [self.reader.dense_search(v, pool, doc_ids) if mode != "lexical" else [] for v in vectors]
        searched_dense = time.perf_counter()
        # A principal with groups gets BM25 over what it may see: never statistics that count hidden chunks.
        lexical_lists = [self.reader.lexical_search(q, pool, doc_ids, searched_stats=groups is not None)
                         if mode != "dense" else [] for q in queries]
        searched_lexical = time.perf_counter()
        fused = rrf_fuse([[i for i, _ in ranked] for ranked in dense_lists + lexical_lists], wanted)
        records = self.reader.chunks(i for i, _ in fused)
        dense_scores: dict[int, float] = {}
        lexical_scores: dict[int, float] = {}
        for ranked, scores in [(r, dense_scores) for r in dense_lists] + [(r, lexical_scores) for r in lexical_lists]:
            for i, score in ranked:
                scores[i] = max(score, scores.get(i, score))
        best_possible = relevance_scale(len([r for r in dense_lists + lexical_lists if r]))
        hits = [Hit(records[i], score, dense_scores.get(i), lexical_scores.get(i), min(1.0, score / best_possible))
                for i, score in fused if i in records]  # a concurrent delete may have removed a chunk
        hits = [hits[i] for i in self.reranker.rerank(queries[-1], [h.chunk for h in hits])][:k]
        # A file name, identifier or option the question names that no hit holds: the chunk holding it takes the
        # last place ("If I don't pass --manifest-checksums, which checksum algorithm does pg_basebackup use?" found
        # five passages of pg_basebackup's page, none the option's own).
        missing = unretrieved_tokens(question, " ".join(f"{h.chunk.title} {h.chunk.text}" for h in hits))
        pinned = [c for c in self.chunks_holding(missing, doc_ids) if all(c.id != h.chunk.id for h in hits)][:k]
        if pinned:
            last = hits[-1] if hits else None
            hits = [*hits[:k - len(pinned)], *(Hit(c, last.score if last else 0.0, None, None,
                                                   last.relevance if last else 0.0) for c in pinned)]
        done = time.perf_counter()
        best = max((s for ranked in dense_lists for _, s in ranked), default=0.0)
        return Retrieval(hits, best, (embedded - start) * 1000, (done - embedded) * 1000, vectors[-1], queries[-1],
                         self.reader.name, (searched_dense - embedded) * 1000,
                         (searched_lexical - searched_dense) * 1000)

    def embed_queries(self, queries: list[str]) -> np.ndarray:
        with observe.embeddings_span(self.embedder.config.name, len(queries)) as span:
            vectors = self.embedder.embed_queries(queries)
            span.set_attribute(observe.DIMENSIONS, int(vectors.shape[1]) if vectors.ndim == 2 else 0)
            return vectors

    def absent_words(self, words: Sequence[str], groups: frozenset[str] | None = None) -> list[str]:
        """The ``words`` no chunk the asker may see holds (one keyword search each, over the visible documents
        only: what a word's absence says must not depend on documents the asker cannot see)."""
        visible = self.reader.visible_documents(groups)
        if visible is not None and not visible:
            return list(words)
        return [w for w in words if not self.reader.lexical_search(w, 1, visible)]

    def chunks_holding(self, tokens: Sequence[str], doc_ids: Sequence[str] | None) -> list[ChunkRecord]:
        """For each of ``tokens``, the chunk the keyword search ranks first among those holding it as written
        (``holds_token``), within ``doc_ids`` (None: all); a token none holds has none."""
        found: dict[int, ChunkRecord] = {}
        for token in tokens:
            ranked = [i for i, _ in self.reader.lexical_search(token, TOKEN_SEARCH, doc_ids)]
            chunks = self.reader.chunks(ranked)
            holding = next((chunks[i] for i in ranked if i in chunks and holds_token(chunks[i].text, token)), None)
            if holding is not None:
                found.setdefault(holding.id, holding)
        return list(found.values())

    def resolve_documents(self, ids_or_paths: Sequence[str], groups: frozenset[str] | None = None) -> list[str]:
        """Document ids for a filter given as ids or paths; an unknown one is an error, not an empty search
        (one outside the asker's ``groups`` is unknown to them, with the same message)."""
        resolved: list[str] = []
        for item in ids_or_paths:
            record = self.reader.find_document(item)
            if record is None or not visible(record.groups, groups):
                raise DocumentNotFoundError(f"no document {item!r} in index {self.reader.name!r}")
            resolved.append(record.id)
        return resolved
