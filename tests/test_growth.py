"""Growth: the embedded store's vector index by size (exact, then IVF) and ``rag bench scale`` end to end.

The IVF switch happens at 50,000 vectors in the product; these tests lower the threshold (a module
constant) so that a few thousand real vectors cross it, and use the real FAISS and SQLite throughout.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

import rag.store.embedded as embedded
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.core.records import Chunk, DocumentRecord
from rag.store.embedded import EmbeddedStore, ivf_cells, vector_index_plan
from helpers import cli_env
from rag.core.settings import PROJECT_ROOT

DEV = PROJECT_ROOT.parent / "shared" / "data" / "squad2-dev"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plan_picks_exact_then_ivf_and_keeps_ivf_until_its_size_calls_for_another() -> None:
    limit = embedded.ANN_MIN_VECTORS
    assert vector_index_plan(limit - 1, None) is None
    assert vector_index_plan(limit, None) == ivf_cells(limit)
    cells = ivf_cells(1_000_000)
    assert cells & (cells - 1) == 0 and 1024 <= cells <= 4096  # a power of two near 2 sqrt(n)
    assert vector_index_plan(1_200_000, cells) == cells  # a little growth: no retraining
    assert vector_index_plan(8_000_000, cells) > cells  # 8x the vectors: more cells
    assert vector_index_plan(limit // 2 - 1, ivf_cells(limit)) is None  # shrunk well below: exact again
    assert vector_index_plan(limit // 2 + 1, ivf_cells(limit)) is not None  # hysteresis: still IVF
    assert vector_index_plan(int(limit * 0.9), ivf_cells(limit)) == ivf_cells(limit)  # a little shrinking: kept


def _put(writer, doc_id: str, vectors: np.ndarray) -> None:
    chunks = [Chunk(f"chunk {i} of {doc_id}", None, None, 0, 10, i) for i in range(len(vectors))]
    record = DocumentRecord(doc_id, f"/growth/{doc_id}.txt", doc_id, "txt", "0" * 64, None, 0, len(chunks),
                            datetime.now(timezone.utc).isoformat(timespec="seconds"))
    writer.put_document(record, chunks, vectors)


def test_commit_switches_to_ivf_past_the_threshold_and_back(embedder, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(embedded, "ANN_MIN_VECTORS", 3000)
    sentences = [f"Sentence number {i} is about {topic} and its {i % 7} neighbours."
                 for i, topic in enumerate(["rivers", "castles", "engines", "music", "volcanoes", "trade"] * 120)]
    base = embedder.embed(sentences)
    rng = np.random.default_rng(0)
    index = EmbeddedStore(tmp_path).index("growth")
    docs: dict[str, np.ndarray] = {}
    with index.writer(embedder.config.identity, embedder.dimension) as writer:
        for d in range(4):  # 4 x 600 = 2400 vectors: still exact
            noisy = base[rng.integers(0, len(base), 600)] + rng.normal(0, 0.05, (600, base.shape[1]))
            docs[f"doc{d}"] = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
            _put(writer, f"doc{d}", docs[f"doc{d}"])
        writer.commit()
    reader = index.reader()
    assert reader.info().vector_index.startswith("flat")
    with index.writer(embedder.config.identity, embedder.dimension) as writer:
        for d in range(4, 6):  # 3600 vectors: the commit trains IVF
            noisy = base[rng.integers(0, len(base), 600)] + rng.normal(0, 0.05, (600, base.shape[1]))
            docs[f"doc{d}"] = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
            _put(writer, f"doc{d}", docs[f"doc{d}"])
        generation = writer.commit()
    info = reader.info()
    assert info.generation == generation and info.chunks == 3600
    assert info.vector_index.startswith("ivf: 256 cells, nprobe 32"), info.vector_index
    chunk_ids = {doc: [c.id for c in reader.document_chunks(doc)[0]] for doc in docs}
    # A stored vector finds itself first (8-bit codes: the score is ~1, not exactly 1).
    for doc in ("doc1", "doc5"):
        target = docs[doc][123]
        top_id, top_score = reader.dense_search(target, 5)[0]
        assert top_id == chunk_ids[doc][123] and top_score > 0.98
        # Filtered: only that document's chunks, scored exactly.
        filtered = reader.dense_search(target, 5, [doc])
        assert filtered[0][0] == chunk_ids[doc][123] and {i for i, _ in filtered} <= set(chunk_ids[doc])
    # Vectors come back (decoded) for copying an index: close to what went in.
    _, decoded = reader.document_chunks("doc2")
    assert float(np.min(np.sum(decoded * docs["doc2"], axis=1))) > 0.99
    # A failed run changes nothing: the IVF generation stays.
    with pytest.raises(RuntimeError):
        with index.writer(embedder.config.identity, embedder.dimension) as writer:
            writer.delete_document("doc0")
            raise RuntimeError("crash before commit")
    assert reader.info().generation == generation and reader.dense_search(docs["doc0"][5], 1)[0][0] == \
        chunk_ids["doc0"][5]
    # Deleting below half the threshold goes back to exact search.
    with index.existing_writer() as writer:
        for doc in ("doc0", "doc1", "doc2", "doc3"):
            writer.delete_document(doc)
        writer.commit()
    info = reader.info()
    assert info.chunks == 1200 and info.vector_index.startswith("flat")
    top_id, top_score = reader.dense_search(docs["doc4"][7], 1)[0]
    assert top_id == chunk_ids["doc4"][7] and top_score == pytest.approx(1.0, abs=1e-2)
    reader.close()


def test_dev_recall_holds_on_ivf(embedder, tmp_path: Path, monkeypatch) -> None:
    """The real dev documents on an IVF index (threshold lowered below their chunk count) find the gold
    passage for the dev questions as often as exact search does, within two questions in a hundred."""
    from rag.answering.retrieval import Retriever
    from app.bench.evaluate import answerable, contains_answer, load_questions

    questions = answerable(load_questions(DEV / "questions.jsonl"))[::7][:100]
    found = {}
    monkeypatch.setattr(embedded, "MIN_NPROBE", 4)  # 155 chunks -> 32 cells, 4 probed (the product's 1/8)
    for kind, threshold in (("flat", 10**9), ("ivf", 100)):
        monkeypatch.setattr(embedded, "ANN_MIN_VECTORS", threshold)
        index = EmbeddedStore(tmp_path / kind).index("dev")
        ingest_paths([DEV / "docs"], index, IngestParameters.defaults(embedder))
        reader = index.reader()
        assert reader.info().vector_index.startswith("flat" if kind == "flat" else "ivf: 32 cells, nprobe 4")
        retriever = Retriever(reader, embedder)
        found[kind] = sum(any(contains_answer(h.chunk.text, q["answers"]) for h in
                              retriever.retrieve(q["question"], 5, mode="dense").hits) for q in questions)
        reader.close()
    assert found["flat"] >= 85 and found["ivf"] >= found["flat"] - 2, found


def test_bench_scale_end_to_end(settings, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "bench", "scale", "--sizes", "1200,400", "--questions",
         str(DEV / "questions.jsonl"), "--docs", str(DEV / "docs"), "--queries", "12", "--asks", "1",
         "--json", str(out / "scale.json"), "--csv", str(out / "scale.csv"), "--plot", str(out / "scale.png")],
        capture_output=True, text=True, env=cli_env(settings), timeout=600, cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "scale.json").read_text(encoding="utf-8"))
    rows = result["results"]
    assert [r["chunks"] for r in rows] == [400, 1200]  # sizes sorted; each size is the whole index
    corpus = result["corpus"]
    assert corpus["real_chunks"] > 100 and corpus["real_ingest_chunks_per_s"] > 0
    assert 0.5 < corpus["synthetic_vector_cosine_to_real_embedding"] <= 1.0
    for row in rows:
        assert row["vector_index"].startswith("flat")
        assert 0 < row["dense_ms_p50"] <= row["dense_ms_p95"] and 0 < row["fused_ms_p50"] <= row["fused_ms_p95"]
        assert 0.5 <= row["recall@5"] <= 1.0 and row["asks"] == 1 and row["ask_total_ms_p50"] > 0
        assert row["disk_mb"] > 0 and row["process_rss_mb"] > row["index_rss_mb"]
    assert rows[1]["disk_mb"] > rows[0]["disk_mb"] and rows[1]["added"] == 800
    with (out / "scale.csv").open(newline="", encoding="utf-8") as handle:
        assert [int(r["chunks"]) for r in csv.DictReader(handle)] == [400, 1200]
    assert (out / "scale.png").read_bytes()[:8] == PNG_MAGIC
    assert "scale · latency in ms" in done.stdout


def test_bench_scale_rejects_a_size_below_the_real_corpus(settings, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "bench", "scale", "--sizes", "10", "--questions",
         str(DEV / "questions.jsonl"), "--docs", str(DEV / "docs"), "--queries", "2", "--asks", "0"],
        capture_output=True, text=True, env=cli_env(settings), timeout=300, cwd=PROJECT_ROOT)
    assert done.returncode != 0 and "smallest size must hold" in done.stdout + done.stderr


def test_choose_words_takes_the_rarest_words_within_the_budget() -> None:
    """The rule alone, over a table of how many chunks hold each word (the stores count with FTS5 / GIN)."""
    from rag.store.lexical import choose_words

    holds = {"castle": 40, "norman": 900, "year": 9000, "city": 4500}
    counted = []

    def count(words, cap):
        counted.append(cap)
        return {w: min(holds.get(w, 0), cap) if cap else holds.get(w, 0) for w in words}

    assert choose_words(["castle", "norman", "year", "zz"], count, 1000) == \
        (["castle", "norman"], {"castle": 40, "norman": 900})
    assert set(counted) == {1001}  # never counted past the budget
    assert choose_words(["norman", "castle", "norman"], count, 100) == (["castle"], {"castle": 40})
    assert choose_words(["norman", "castle"], count, 500) == (["castle"], {"castle": 40})
    # Every word over the budget: nothing (the dense side answers alone).
    assert choose_words(["year", "city"], count, 1000) == ([], {})
    assert choose_words(["zz"], count, 1000) == ([], {})
