"""Retrieval latency of the embedded store and the PostgreSQL store, at the dev corpus and at a synthetic size.

    python tools/scaleout/bench_store.py --store-url postgresql://... [--chunks 100000] [--queries 300] [--groups]

--groups: the synthetic documents get access groups g00..g99 in turn, and the search is timed as readers who
see 1%, 10% and 100% of them (the filter is applied inside the search, like a document filter).

Dev corpus: the squad2-dev documents ingested into both stores (real chunks, real vectors). Synthetic: chunks
made by shuffling dev sentences (5-8 random sentences each); each chunk's vector is the normalised mean of its
sentences' embeddings (the sentences are embedded once), inserted through each store's writer, so nothing is
re-embedded per chunk. Latency is the retriever's search time (dense + lexical + fusion + chunk fetch), the
question's embedding excluded. Not part of the product.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ingest.pipeline import ingest_paths  # noqa: E402
from ingest.parameters import IngestParameters  # noqa: E402
from rag.core.records import Chunk, DocumentRecord  # noqa: E402
from rag.store.embedded import EmbeddedStore  # noqa: E402
from rag.store.postgres import PostgresStore  # noqa: E402
from rag.answering.retrieval import Retriever  # noqa: E402
from app.bench.stats import percentile  # noqa: E402
from rag.core.settings import load_settings  # noqa: E402
from rag.core.text import split_sentences  # noqa: E402
from app.runtime import load_embedder  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "squad2-dev"


def latency(store, name: str, embedder, questions: list[str], groups: frozenset[str] | None = None) -> dict:
    reader = store.index(name).reader()
    retriever = Retriever(reader, embedder)
    for q in questions[:10]:
        retriever.retrieve(q, 5, groups=groups)  # warm-up: caches, pool, HNSW pages
    timed = []
    for q in questions:  # the whole retrieval less the question's embedding (the group filter included)
        started = time.perf_counter()
        retrieval = retriever.retrieve(q, 5, groups=groups)
        timed.append((time.perf_counter() - started) * 1000 - retrieval.embed_ms)
    search = timed
    info = reader.info()
    reader.close()
    return {"chunks": info.chunks, "queries": len(search), "search_ms_p50": round(percentile(search, 50), 2),
            "search_ms_p95": round(percentile(search, 95), 2)}


def synthetic(store, name: str, embedder, n: int, seed: int = 0, grouped: bool = False) -> float:
    sentences = [s for doc in sorted((DATA / "docs").glob("*.md"))
                 for s in split_sentences(doc.read_text(encoding="utf-8")) if len(s) > 30]
    vectors = embedder.embed(sentences)
    rng = random.Random(seed)
    per_doc = 200
    started = time.perf_counter()
    with store.index(name).writer(embedder.config.identity, embedder.dimension, 60) as writer:
        for d in range(0, n, per_doc):
            chunks, rows = [], []
            for ordinal in range(min(per_doc, n - d)):
                picked = rng.sample(range(len(sentences)), rng.randint(5, 8))
                text = " ".join(sentences[i] for i in picked)
                chunks.append(Chunk(text, None, None, 0, len(text), ordinal))
                mean = vectors[picked].mean(axis=0)
                rows.append(mean / np.linalg.norm(mean))
            doc_id = f"synthetic{d // per_doc:07d}"
            record = DocumentRecord(doc_id, f"/synthetic/{doc_id}.md", doc_id, "md", "0" * 64, None, 0, len(chunks),
                                    datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    f"g{(d // per_doc) % 100:02d}" if grouped else "")
            writer.put_document(record, chunks, np.asarray(rows, dtype=np.float32))
        writer.commit()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--skip-dev", action="store_true")
    parser.add_argument("--groups", action="store_true", help="time group-filtered searches (1%%, 10%%, 100%%)")
    parser.add_argument("--only", choices=("embedded", "postgresql"), help="one store only")
    args = parser.parse_args()
    settings = load_settings(environ={})
    embedder = load_embedder(settings)
    rows = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions = [r["question"] for r in rows if not r.get("unanswerable")][:args.queries]
    results: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        stores = {"embedded": EmbeddedStore(Path(scratch)), "postgresql": PostgresStore(args.store_url, 2)}
        for label, store in stores.items():
            if args.only and label != args.only:
                continue
            if isinstance(store, PostgresStore):
                store.drop("bench-dev")
                store.drop("bench-synthetic")
            if not args.skip_dev:
                ingest_paths([DATA / "docs"], store.index("bench-dev"), IngestParameters.defaults(embedder))
                results[f"{label} dev"] = latency(store, "bench-dev", embedder, questions)
                print(label, "dev", results[f"{label} dev"], flush=True)
            if args.chunks:
                seconds = synthetic(store, "bench-synthetic", embedder, args.chunks, grouped=args.groups)
                results[f"{label} synthetic"] = {**latency(store, "bench-synthetic", embedder, questions),
                                                 "insert_s": round(seconds, 1)}
                print(label, "synthetic", results[f"{label} synthetic"], flush=True)
                for share in ((1, 10, 100) if args.groups else ()):
                    groups = frozenset(f"g{i:02d}" for i in range(share))
                    key = f"{label} synthetic, reader sees {share}%"
                    results[key] = latency(store, "bench-synthetic", embedder, questions, groups)
                    print(key, results[key], flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
