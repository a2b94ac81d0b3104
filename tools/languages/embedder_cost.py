"""The cost of an embedder, as docs/languages.md's table gives it: `rag ingest` of a folder into a new home
(chunks/s, as the command reports it), then questions embedded one at a time (p50 / p95 ms), for each embedder
folder named. Run it with the Python whose kernels are to be measured (the project's, or an AVX2 view's:
tools/avx2_view), alone on the machine:

    .venv/bin/python tools/languages/embedder_cost.py models/all-minilm-l6-v2-int8 \
        models/embeddinggemma-300m-int8 [--docs tests/data/debian-docs/docs] [--rounds 2]

Rounds alternate the embedders (A B A B …) so that a slow minute of the machine falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def ingest_rate(embedder: Path, docs: Path) -> tuple[float, int, float]:
    """chunks/s, chunks and seconds of `rag ingest DOCS` into a new home with ``embedder`` (as it reports them)."""
    with tempfile.TemporaryDirectory(prefix="embedder-cost-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
        env.update(RAG_HOME=home, RAG_EMBEDDER_DIR=str(embedder.resolve()))
        done = subprocess.run([sys.executable, "-m", "app.cli", "ingest", str(docs.resolve()), "--json"], cwd=ROOT,
                              env=env, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    return float(report["chunks_per_s"]), int(report["chunks_written"]), float(report["seconds"])


def query_latency(embedder: Path, questions: list[str]) -> tuple[float, float]:
    """p50 / p95 ms of embedding each question alone (after one warm-up)."""
    import numpy as np

    from rag.embedder import Embedder

    model = Embedder(embedder)
    model.embed_query("warm up")
    times = []
    for question in questions:
        started = time.perf_counter()
        model.embed_query(question)
        times.append((time.perf_counter() - started) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 95))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("embedders", nargs="+", type=Path)
    parser.add_argument("--docs", type=Path, default=ROOT / "tests/data/debian-docs/docs")
    parser.add_argument("--questions", type=Path, default=ROOT / "tests/data/debian-docs/questions.jsonl")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    questions = [json.loads(line)["question"] for line in args.questions.read_text(encoding="utf-8").splitlines()
                 if line.strip()][:args.count]
    for round_ in range(1, args.rounds + 1):
        for embedder in args.embedders:
            rate, chunks, seconds = ingest_rate(embedder, args.docs)
            p50, p95 = query_latency(embedder, questions)
            print(json.dumps({"round": round_, "embedder": embedder.name, "ingest_chunks_per_s": round(rate, 1),
                              "chunks": chunks, "ingest_s": round(seconds, 1), "query_ms_p50": round(p50, 1),
                              "query_ms_p95": round(p95, 1), "questions": len(questions)}), flush=True)


if __name__ == "__main__":
    main()
