"""``rag bench scale``: how build time, disk, memory, retrieval and answers grow with the corpus.

The corpus grows in one embedded index, size by size (each size is the whole index at that point):

* the evaluation documents (squad2-dev) are ingested for real first, so the dev questions' recall@5 is
  measured at every size against the same gold passages;
* synthetic chunks fill it up to each size: 5-8 sentences of one of those documents, drawn at random (so a
  chunk keeps to one topic, as a real one does). The sentences that answer a measured question (those of
  its own paragraph holding its answer) are left out of the mix, so a synthetic chunk is an on-topic
  distractor and never a right answer that recall would count as wrong. A synthetic chunk's vector
  is the normalised mean of its sentences' embeddings (each sentence is embedded once; the bench reports
  the cosine of that mean to the real embedding of a sample of chunk texts). Build time is therefore for
  pre-embedded vectors: SQLite rows + FTS5 + FAISS adds, and the commit (which picks exact or IVF search).

Each size is measured by a fresh process (``probe``) so its resident memory is that of a reader holding
the index (plus the embedder and, for the answer timings, the generator): dense, lexical and fused search
latency, recall@5, then ``ask`` time to first token and total.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import psutil

from app.bench.evaluate import answerable, contains_answer, holds_gold, load_questions
from app.bench.stats import summarise
from app.runtime import Models, answer_service, load_embedder
from ingest.parameters import IngestParameters
from ingest.pipeline import ingest_paths
from rag.answering.service import AnswerRequest, options_from
from rag.core.access import RequestContext
from rag.core.errors import BadRequestError
from rag.core.records import Chunk, DocumentRecord
from rag.core.settings import load_settings
from rag.core.text import split_sentences
from rag.store.embedded import EmbeddedStore, disk_bytes, exhaustive_dense_search

INDEX = "scale"
SYNTHETIC_DOC_CHUNKS = 200  # chunks per synthetic document (one put_document call each)
SENTENCES_PER_CHUNK = (5, 8)
VECTOR_CHECK_SAMPLE = 64  # synthetic chunks embedded for real to check the mean-vector approximation


def answer_sentences(questions: list[dict]) -> tuple[set[str], list[list[str]]]:
    """What no synthetic chunk may hold: the sentences of each question's own paragraph that contain its
    answer (when the set names the paragraph, as SQuAD's does), else any sentence with an answer."""
    exact: set[str] = set()
    anywhere: list[list[str]] = []
    for q in questions:
        if q.get("unanswerable") or not q.get("answers"):
            continue
        if q.get("paragraph_text"):
            exact |= {s.strip() for s in split_sentences(q["paragraph_text"]) if contains_answer(s, q["answers"])}
        else:
            anywhere.append(q["answers"])
    return exact, anywhere


def answer_free_sentences(docs: Path, questions: list[dict]) -> tuple[list[str], list[range]]:
    """Sentences of the documents in ``docs`` that hold no answer of the ``questions`` (``answer_sentences``),
    and the range of them each document holds."""
    exact, anywhere = answer_sentences(questions)
    sentences: list[str] = []
    documents: list[range] = []
    for path in sorted(docs.glob("*.md")):
        start = len(sentences)
        sentences += [s.strip() for s in split_sentences(path.read_text(encoding="utf-8"))
                      if len(s.strip()) > 30 and s.strip() not in exact
                      and not any(contains_answer(s, a) for a in anywhere)]
        if len(sentences) - start >= SENTENCES_PER_CHUNK[1]:
            documents.append(range(start, len(sentences)))
        else:
            del sentences[start:]
    return sentences, documents


def synthetic_rows(rng: random.Random, sentences: list[str], documents: list[range], vectors: np.ndarray,
                   count: int) -> tuple[list[str], np.ndarray]:
    """``count`` chunk texts, each of sentences from one document, and their (mean, normalised) vectors."""
    texts, rows = [], np.zeros((count, vectors.shape[1]), dtype=np.float32)
    weights = [len(d) for d in documents]
    for i in range(count):
        document = rng.choices(documents, weights)[0]
        picked = rng.sample(document, rng.randint(*SENTENCES_PER_CHUNK))
        texts.append(" ".join(sentences[j] for j in picked))
        mean = vectors[picked].mean(axis=0)
        rows[i] = mean / np.linalg.norm(mean)
    return texts, rows


def grow(index: Any, embedder: Any, rng: random.Random, sentences: list[str], documents: list[range],
         vectors: np.ndarray, start_doc: int, count: int, progress: Callable[[str], None],
         embed: bool = False) -> int:
    """Add ``count`` synthetic chunks in one writer run and commit; returns the next document number.
    ``embed``: embed each chunk's text (a real ingest rate) instead of using the mean of its sentences' vectors."""
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    doc = start_doc
    with index.writer(embedder.config.identity, embedder.dimension, 60.0) as writer:
        added = 0
        while added < count:
            n = min(SYNTHETIC_DOC_CHUNKS, count - added)
            texts, rows = synthetic_rows(rng, sentences, documents, vectors, n)
            if embed:
                rows = embedder.embed(texts)
            chunks = [Chunk(text, None, None, 0, len(text), ordinal) for ordinal, text in enumerate(texts)]
            doc_id = f"synthetic-{doc:08d}"
            writer.put_document(DocumentRecord(doc_id, f"/synthetic/{doc_id}.txt", doc_id, "txt", "0" * 64, None,
                                               sum(len(t) for t in texts), n, stamp), chunks, rows)
            added += n
            doc += 1
            if doc % 250 == 0:
                progress(f"adding synthetic chunks: {added:,}/{count:,}")
        progress(f"committing ({count:,} new chunks; the commit builds the vector index)")
        writer.commit()
    return doc


def index_disk_bytes(root: Path) -> int:
    """SQLite (with its WAL) and the current vectors file; the previous generation's file is not counted."""
    return disk_bytes(root)


def bench_scale(settings: Any, sizes: list[int], questions_file: Path, docs: Path, queries: int, asks: int,
                seed: int, workdir: Path | None = None, embed: bool = False,
                progress: Callable[[str], None] = lambda message: None,
                warn: Callable[[str], None] = lambda message: None) -> dict:
    questions = load_questions(questions_file)
    if not answerable(questions):
        raise BadRequestError(f"{questions_file} holds no answerable questions")
    if not any(docs.glob("*.md")):
        raise BadRequestError(f"{docs} holds no .md documents")
    sizes = sorted(set(sizes))
    measured = random.Random(seed).sample(answerable(questions), min(queries, len(answerable(questions))))
    progress("loading the embedder")
    embedder = load_embedder(settings)
    with tempfile.TemporaryDirectory(prefix="rag-bench-scale-") as scratch:
        root = workdir or Path(scratch)
        store = EmbeddedStore(root)
        index = store.index(INDEX)
        if index.exists():
            raise BadRequestError(f"{root / INDEX} exists already: give an empty --workdir")
        progress(f"ingesting {docs} (real embedding)")
        summary = ingest_paths([docs], index, IngestParameters.from_settings(settings, embedder))
        real_chunks = summary.chunks_written
        if sizes[0] < real_chunks:
            raise BadRequestError(f"the smallest size must hold the {real_chunks} chunks of {docs}")
        progress("embedding the sentence pool")
        sentences, documents = answer_free_sentences(docs, measured)
        if not documents:
            raise BadRequestError(f"the documents in {docs} hold too few sentences without an answer")
        vectors = embedder.embed(sentences)
        rng = random.Random(seed)
        check_texts, check_rows = synthetic_rows(random.Random(seed + 1), sentences, documents, vectors,
                                                 VECTOR_CHECK_SAMPLE)
        cosine = float(np.mean(np.sum(embedder.embed(check_texts) * check_rows, axis=1)))
        rows, doc, total = [], 0, real_chunks
        for size in sizes:
            started = time.perf_counter()
            doc = grow(index, embedder, rng, sentences, documents, vectors, doc, size - total,
                       lambda message, size=size: progress(f"{size:,} chunks: {message}"), embed)
            build_s = time.perf_counter() - started
            added, total = size - total, size
            progress(f"{size:,} chunks: measuring in a fresh process")
            probe_result = run_probe(settings, root, measured, asks, seed)
            reader = index.reader()
            info = reader.info()
            reader.close()
            rows.append({"chunks": info.chunks, "documents": info.documents, "added": added,
                         "build_s": round(build_s, 2),
                         "build_chunks_per_s": round(added / build_s, 1) if added and build_s > 0 else None,
                         "disk_mb": round(index_disk_bytes(root / INDEX) / 1e6, 1),
                         "vector_index": info.vector_index, **probe_result})
    return {"benchmark": "scale", "results": rows,
            "corpus": {"real_documents": summary.count("added"), "real_chunks": real_chunks,
                       "real_ingest_chunks_per_s": round(summary.chunks_per_s, 1),
                       "sentence_pool": len(sentences), "questions": len(measured),
                       "synthetic_vector_cosine_to_real_embedding": round(cosine, 4),
                       "build": "synthetic chunks embedded one by one (a real ingest rate)" if embed else
                       "pre-embedded vectors (synthetic chunks are not embedded one by one)"}}


def run_probe(settings: Any, root: Path, questions: list[dict], asks: int, seed: int) -> dict:
    """Measure the index in ``root`` from a new Python process (see ``probe``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as handle:
        json.dump({"root": str(root), "questions": questions, "asks": asks, "seed": seed,
                   "settings": {"home": str(settings.home), "threads": settings.threads,
                                "generator_dir": str(settings.generator_path),
                                "embedder_dir": str(settings.embedder_path)}}, handle)
        spec = handle.name
    try:
        done = subprocess.run([sys.executable, "-m", "app.bench.scale", spec], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=False)
    finally:
        Path(spec).unlink(missing_ok=True)
    if done.returncode != 0:
        raise RuntimeError(f"the scale probe failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def resident_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def probe(spec: dict) -> dict:
    """In a fresh process: load the models, open the index, time searches and answers, note memory."""
    settings = load_settings(overrides={**spec["settings"], "index": INDEX}, environ={})
    questions = spec["questions"]
    models = Models.load(settings)
    models.warm_up(settings.answer_examples)
    base_mb = resident_mb()
    service = answer_service(settings, models, store=EmbeddedStore(Path(spec["root"])))
    retriever = service.retriever()
    retriever.retrieve("warm-up: load the vectors", 5)
    latency: dict[str, list[float]] = {"hybrid": [], "dense": [], "lexical": []}
    found = {mode: 0 for mode in latency}
    for q in questions:
        for mode in latency:
            retrieval = retriever.retrieve(q["question"], 5, mode=mode)
            latency[mode].append(retrieval.search_ms)
            found[mode] += any(holds_gold(h.chunk.path, h.chunk.text, q) for h in retrieval.hits)
    index_mb = resident_mb() - base_mb
    exact_found = exhaustive_dense_recall(Path(spec["root"]) / INDEX, models.embedder, questions)
    options = options_from(settings)
    ttft, total = [], []
    for q in random.Random(spec["seed"]).sample(questions, min(spec["asks"], len(questions))):
        metrics = service.ask(AnswerRequest(question=q["question"], options=options,
                                               context=RequestContext.local())).metrics
        ttft.append(metrics.ttft_ms)
        total.append(metrics.total_ms)
    service.close()
    n = max(1, len(questions))
    row: dict[str, Any] = {}
    for mode, name in (("dense", "dense"), ("lexical", "lexical"), ("hybrid", "fused")):
        stats = summarise(latency[mode], (50, 95), digits=2)
        row[f"{name}_ms_p50"], row[f"{name}_ms_p95"] = stats["p50"], stats["p95"]
    row.update({"recall@5": round(found["hybrid"] / n, 4), "recall@5_dense": round(found["dense"] / n, 4),
                "recall@5_lexical": round(found["lexical"] / n, 4),
                "recall@5_dense_exhaustive": None if exact_found is None else round(exact_found / n, 4),
                "index_rss_mb": round(index_mb, 1), "process_rss_mb": round(resident_mb(), 1),
                "ask_ttft_ms_p50": summarise(ttft, (50,), digits=1)["p50"],
                "ask_total_ms_p50": summarise(total, (50,), digits=1)["p50"], "asks": len(total)})
    return row


def exhaustive_dense_recall(root: Path, embedder: Any, questions: list[dict]) -> int | None:
    """On an IVF index: questions whose gold chunk is in the dense top 5 when every cell is probed (what
    the approximation costs, apart from what the corpus's growth costs). None on an exact index."""
    ids = exhaustive_dense_search(root, embedder.embed_queries([q["question"] for q in questions]), 5)
    if ids is None:
        return None
    reader = EmbeddedStore(root.parent).index(root.name).reader()
    found = 0
    for q, row in zip(questions, ids):
        chunks = reader.chunks(int(i) for i in row if i >= 0).values()
        found += any(holds_gold(c.path, c.text, q) for c in chunks)
    reader.close()
    return found


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))))
