"""Ingest runs, the index store and the ingest/documents/index CLI, end to end.

Real files, the real embedder, real FAISS + SQLite; the CLI runs as a subprocess.
Not tested here: the "memory stays flat on huge corpora" property of the streaming
ingest (no honest way to measure it in a fast test).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ingest.chunking import chunk_document
from ingest.loaders import load_document
from ingest.pipeline import SYMLINK_OUTSIDE, delete_document, ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from rag.core.records import document_id, normalise_path
from rag.store.embedded import DB_NAME, EmbeddedReader, EmbeddedWriter
from rag.core.errors import (BadRequestError, DocumentNotFoundError, EmbedderMismatchError, IndexLockedError,
                        IndexNotFoundError)
from helpers import cli_env
from rag.core.settings import PROJECT_ROOT

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
SQUAD_DOCS = SHARED_DATA / "squad2-dev" / "docs"
PDF_DIR = SHARED_DATA / "pdfs"
RAG = [sys.executable, "-m", "app.cli"]
PDF_COUNT = 31
ENCRYPTED_PDF = "libreoffice-writer-password.pdf"
# Scanned / image-only PDFs: pages but no text layer.
IMAGE_ONLY_PDFS = {
    "cmyk-image.pdf", "grayscale-image.pdf", "imagemagick-ASCII85Decode.pdf",
    "imagemagick-CCITTFaxDecode.pdf", "imagemagick-lzw.pdf",
}
# pypdf cannot read this file's page tree ("Invalid object in /Pages"); a better parser may add it.
MAYBE_BROKEN_PDFS = {"unreadablemetadata.pdf"}
NON_PDF_FILES = {"LICENSE", "files.json"}

CANARY_MD = """# Canary notes

The zebrafinch orchestra rehearses on Tuesdays in the old lighthouse.
Its conductor collects porcelain teapots from every harbour town.
"""


# --------------------------------------------------------------------------- helpers
def squad_copy(dest: Path, *names: str) -> Path:
    """Copy some SQuAD markdown documents into ``dest`` (created) and return it."""
    if not SQUAD_DOCS.is_dir():
        pytest.skip(f"SQuAD docs not found at {SQUAD_DOCS}")
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(SQUAD_DOCS / name, dest / name)
    return dest


def by_name(summary) -> dict:
    return {Path(o.path).name: o for o in summary.outcomes}


def db_rows(root: Path, sql: str, args: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(str(root / DB_NAME))
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def sqlite_chunk_ids(root: Path, doc_id: str | None = None) -> set[int]:
    if doc_id is None:
        return {r[0] for r in db_rows(root, "SELECT id FROM chunks")}
    return {r[0] for r in db_rows(root, "SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))}


def faiss_ids(root: Path) -> set[int]:
    """Vector ids in the FAISS file of the committed generation."""
    import faiss

    generation = int(db_rows(root, "SELECT value FROM meta WHERE key = 'generation'")[0][0])
    index = faiss.read_index(str(root / f"vectors-{generation}.faiss"))
    ids = faiss.vector_to_array(index.id_map).tolist()
    assert len(ids) == index.ntotal
    return set(ids)


def assert_consistent(root: Path) -> None:
    """SQLite chunks, FTS rows and FAISS vectors describe the same chunks; per-doc counts add up."""
    assert db_rows(root, "PRAGMA integrity_check") == [("ok",)]
    chunk_ids = sqlite_chunk_ids(root)
    assert faiss_ids(root) == chunk_ids
    assert {r[0] for r in db_rows(root, "SELECT rowid FROM chunks_fts")} == chunk_ids
    per_doc = dict(db_rows(root, "SELECT doc_id, COUNT(*) FROM chunks GROUP BY doc_id"))
    for doc_id, chunks in db_rows(root, "SELECT id, chunks FROM documents"):
        assert per_doc.get(doc_id, 0) == chunks, doc_id
    assert set(per_doc) <= {r[0] for r in db_rows(root, "SELECT id FROM documents")}


def doc_ids_of(reader: IndexReader, hits: list[tuple[int, float]]) -> set[str]:
    chunks = reader.chunks(i for i, _ in hits)
    assert set(chunks) == {i for i, _ in hits}, "a search hit has no chunk row (stale vector or FTS row)"
    return {c.doc_id for c in chunks.values()}


@pytest.fixture()
def rag(settings):
    """Run the `rag` CLI in a subprocess: rag(home, *args) -> CompletedProcess."""

    def run(home: Path, *args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*RAG, "--home", str(home), *args], capture_output=True, text=True,
                              env={**cli_env(settings, COLUMNS="200", PYTHONIOENCODING="utf-8"), **(env or {})}, cwd=PROJECT_ROOT, timeout=timeout)

    return run


def one_line(text: str) -> str:
    """rich wraps long messages; compare on collapsed whitespace."""
    return " ".join(text.split())


# --------------------------------------------------------------------------- the whole PDF corpus
@pytest.fixture(scope="module")
def pdf_index(embedder, tmp_path_factory):
    if not PDF_DIR.is_dir():
        pytest.skip(f"PDF corpus not found at {PDF_DIR}")
    root = tmp_path_factory.mktemp("pdfs") / "indexes" / "t1"
    summary = ingest_paths([PDF_DIR], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    return root, summary


def test_pdf_corpus_ingest_reports_every_file(pdf_index):
    root, summary = pdf_index
    expected = {e["path"]: e for e in json.loads((PDF_DIR / "files.json").read_text(encoding="utf-8"))["data"]}
    assert len(expected) == PDF_COUNT
    outcomes = by_name(summary)
    assert set(outcomes) == set(expected) | NON_PDF_FILES
    assert len(summary.outcomes) == PDF_COUNT + len(NON_PDF_FILES)

    password = outcomes[ENCRYPTED_PDF]
    assert password.status == "failed" and password.reason_type == "encrypted_document"
    assert "password" in password.reason.lower()
    for name in IMAGE_ONLY_PDFS:
        assert outcomes[name].status == "failed", name
        assert outcomes[name].reason_type == "no_text", name
        assert "no extractable text" in outcomes[name].reason, name
    for name in NON_PDF_FILES:
        assert outcomes[name].status == "skipped", name
        assert outcomes[name].reason_type == "unsupported_file_type", name
        assert outcomes[name].document_id is None
    for name in MAYBE_BROKEN_PDFS:
        if outcomes[name].status == "failed":
            assert outcomes[name].reason_type == "broken_document" and outcomes[name].reason
    must_add = set(expected) - {ENCRYPTED_PDF} - IMAGE_ONLY_PDFS - MAYBE_BROKEN_PDFS
    assert {n for n in must_add if outcomes[n].status != "added"} == set()
    added = {n: o for n, o in outcomes.items() if o.status == "added"}
    assert must_add <= set(added) <= must_add | MAYBE_BROKEN_PDFS
    assert all(o.reason is None for o in added.values())

    reader = EmbeddedReader(root)
    try:
        docs = {Path(d.path).name: d for d in reader.documents()}
        assert set(docs) == set(added)
        for name, outcome in added.items():
            doc = docs[name]
            assert doc.id == outcome.document_id == document_id(PDF_DIR / name)
            assert doc.kind == "pdf"
            assert doc.pages == expected[name]["pages"], name
            assert doc.chunks == outcome.chunks > 0, name
            assert doc.bytes == (PDF_DIR / name).stat().st_size
        info = reader.info()
        assert info.documents == len(added)
        assert info.chunks == summary.chunks_written == sum(d.chunks for d in docs.values())
        assert info.generation == summary.generation == 1
        assert summary.pages == sum(expected[n]["pages"] for n in added)
        assert not summary.ok  # readable-type files failed
        # failed/skipped files leave nothing behind
        failed_ids = {document_id(PDF_DIR / n) for n, o in outcomes.items() if o.status != "added"}
        assert not failed_ids & {d.id for d in docs.values()}
        geo = docs["GeoTopo-komprimiert.pdf"]
        assert doc_ids_of(reader, reader.lexical_search("Topologische Räume", 5)) == {geo.id}
    finally:
        reader.close()
    assert_consistent(root)


def test_pdf_reingest_is_idempotent(pdf_index, embedder):
    root, first = pdf_index
    reader = EmbeddedReader(root)
    before_docs = reader.documents()
    before = reader.info()
    reader.close()
    vectors = root / f"vectors-{before.generation}.faiss"
    vectors_mtime = vectors.stat().st_mtime_ns

    second = ingest_paths([PDF_DIR], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    first_by, second_by = by_name(first), by_name(second)
    assert set(first_by) == set(second_by)
    for name, old in first_by.items():
        new = second_by[name]
        if old.status == "added":
            assert new.status == "unchanged", name
            assert new.chunks == old.chunks and new.document_id == old.document_id
        else:  # a file that could not be read still cannot, and says the same
            assert (new.status, new.reason_type, new.reason) == (old.status, old.reason_type, old.reason), name
    assert second.count("added") == second.count("updated") == 0
    assert second.chunks_written == 0
    assert second.generation == first.generation == before.generation

    reader = EmbeddedReader(root)
    try:
        assert reader.documents() == before_docs  # same rows, same ingested_at: nothing rewritten
        after = reader.info()
        assert (after.generation, after.documents, after.chunks) == (before.generation, before.documents,
                                                                    before.chunks)
    finally:
        reader.close()
    assert vectors.stat().st_mtime_ns == vectors_mtime
    assert not (root / f"vectors-{before.generation + 1}.faiss").exists()
    assert_consistent(root)


def test_cli_ingest_exit_code_follows_failures(tmp_path, rag):
    if not PDF_DIR.is_dir():
        pytest.skip(f"PDF corpus not found at {PDF_DIR}")
    home = tmp_path / "home"
    bad = tmp_path / "bad"
    good = tmp_path / "good"
    for folder, names in ((bad, [ENCRYPTED_PDF, "minimal-document.pdf", "LICENSE"]),
                          (good, ["002-trivial-libre-office-writer.pdf", "LICENSE"])):
        folder.mkdir()
        for name in names:
            shutil.copy2(PDF_DIR / name, folder / name)

    proc = rag(home, "ingest", str(bad), "--index", "t1", "--json")
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["added"], report["failed"], report["skipped"]) == (1, 1, 1)
    files = {Path(f["path"]).name: f for f in report["files"]}
    assert files[ENCRYPTED_PDF]["status"] == "failed" and "password" in files[ENCRYPTED_PDF]["reason"]
    assert files["LICENSE"]["reason_type"] == "unsupported_file_type"
    assert files["minimal-document.pdf"]["status"] == "added" and report["pages"] == 1
    assert "Traceback" not in proc.stderr

    # Unsupported file types alone do not make a run fail.
    proc = rag(home, "ingest", str(good), "--index", "t1", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["added"], report["skipped"], report["failed"]) == (1, 1, 0)

    # Human-readable summary names the failed file and its reason.
    proc = rag(home, "ingest", str(bad), "--index", "t1")
    assert proc.returncode == 2
    text = one_line(proc.stdout)
    assert ENCRYPTED_PDF in text and "password" in text
    root = home / "indexes" / "t1"
    assert {Path(p).name for (p,) in db_rows(root, "SELECT path FROM documents")} == {
        "minimal-document.pdf", "002-trivial-libre-office-writer.pdf"}
    assert_consistent(root)


# --------------------------------------------------------------------------- updates and deletes
def test_changed_file_is_updated_and_old_chunks_are_gone(tmp_path, embedder, embedder_tokenizer):
    src = squad_copy(tmp_path / "docs", "victoria_australia.md", "sky_united_kingdom.md")
    root = tmp_path / "indexes" / "t1"
    target = src / "victoria_australia.md"
    original = target.read_text(encoding="utf-8")
    target.write_text(original + "\n\nThe zorbulon parade marches through Ballarat every spring.\n",
                      encoding="utf-8")
    first = ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    assert [o.status for o in first.outcomes] == ["added", "added"]
    doc_id = document_id(target)
    other_id = document_id(src / "sky_united_kingdom.md")
    old_chunk_ids = sqlite_chunk_ids(root, doc_id)
    other_chunk_ids = sqlite_chunk_ids(root, other_id)
    old_count = len(old_chunk_ids)

    reader = EmbeddedReader(root)  # opened before the update: must follow it
    old_sha = reader.find_document(doc_id).sha256
    assert doc_ids_of(reader, reader.lexical_search("zorbulon", 5)) == {doc_id}

    paragraphs = original.split("\n\n")
    new_text = "\n\n".join(paragraphs[: len(paragraphs) // 3]) + (
        "\n\nThe quokkaflux lantern festival lights up Geelong each winter.\n")
    target.write_text(new_text, encoding="utf-8")
    second = ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    outcomes = by_name(second)
    assert outcomes["victoria_australia.md"].status == "updated"
    assert outcomes["sky_united_kingdom.md"].status == "unchanged"
    assert second.generation == first.generation + 1

    expected_chunks = len(chunk_document(load_document(target), embedder_tokenizer, 200, 30))
    assert 0 < expected_chunks < old_count
    assert outcomes["victoria_australia.md"].chunks == second.chunks_written == expected_chunks
    try:
        assert reader.lexical_search("zorbulon", 5) == []
        assert doc_ids_of(reader, reader.lexical_search("quokkaflux", 5)) == {doc_id}
        record = reader.find_document(str(target))
        assert record is not None and record.chunks == expected_chunks
        assert record.sha256 != old_sha and record.bytes == len(new_text.encode("utf-8"))
        # dense search only ever returns live chunks, and finds the new text
        (new_chunk_id, _), = reader.lexical_search("quokkaflux", 5)
        new_chunk = reader.chunks([new_chunk_id])[new_chunk_id]
        hits = reader.dense_search(embedder.embed_query(new_chunk.text), 50)
        assert hits[0][0] == new_chunk_id
        assert not {i for i, _ in hits} & old_chunk_ids
        info = reader.info()
        assert info.generation == second.generation
        assert info.chunks == expected_chunks + len(other_chunk_ids)
    finally:
        reader.close()
    assert not sqlite_chunk_ids(root, doc_id) & old_chunk_ids
    assert len(sqlite_chunk_ids(root, doc_id)) == expected_chunks
    assert sqlite_chunk_ids(root, other_id) == other_chunk_ids  # untouched neighbour keeps its rows
    assert len(faiss_ids(root)) == len(sqlite_chunk_ids(root))
    assert_consistent(root)


def test_delete_by_id_path_and_cli(tmp_path, embedder, rag):
    home = tmp_path / "home"
    root = home / "indexes" / "default"
    src = squad_copy(tmp_path / "docs", "victoria_australia.md", "sky_united_kingdom.md")
    (src / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    summary = ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    assert summary.count("added") == 3
    ids = {name: document_id(src / name) for name in ("victoria_australia.md", "sky_united_kingdom.md",
                                                        "canary.md")}
    reader = EmbeddedReader(root)
    try:
        generation = reader.info().generation

        # by id
        victoria_chunks = sqlite_chunk_ids(root, ids["victoria_australia.md"])
        record = delete_document(EmbeddedIndex(root), ids["victoria_australia.md"])
        assert record.id == ids["victoria_australia.md"] and record.chunks == len(victoria_chunks)
        assert reader.find_document(ids["victoria_australia.md"]) is None
        assert reader.lexical_search("Melbourne", 10) == []
        hits = reader.dense_search(embedder.embed_query("Melbourne Cricket Ground stadium"), 100)
        assert hits and ids["victoria_australia.md"] not in doc_ids_of(reader, hits)
        assert not faiss_ids(root) & victoria_chunks
        assert reader.info().generation == generation + 1
        assert_consistent(root)

        # by path (absolute, as given on the command line)
        record = delete_document(EmbeddedIndex(root), str(src / "sky_united_kingdom.md"))
        assert record.id == ids["sky_united_kingdom.md"]
        assert record.path == normalise_path(src / "sky_united_kingdom.md")
        assert {d.id for d in reader.documents()} == {ids["canary.md"]}
        assert reader.lexical_search("BSkyB", 10) == []
        assert_consistent(root)

        # unknown id: clear error, nothing committed
        generation = reader.info().generation
        with pytest.raises(DocumentNotFoundError, match="no document 'deadbeefdeadbeef'"):
            delete_document(EmbeddedIndex(root), "deadbeefdeadbeef")
        assert reader.info().generation == generation
        with pytest.raises(IndexNotFoundError, match="does not exist"):
            delete_document(EmbeddedIndex(home / "indexes" / "missing"), ids["canary.md"])

        # CLI: unknown id -> exit 2 with a message, then a real delete
        proc = rag(home, "documents", "delete", "deadbeefdeadbeef")
        assert proc.returncode == 2
        assert "no document 'deadbeefdeadbeef'" in one_line(proc.stderr) and "Traceback" not in proc.stderr
        proc = rag(home, "documents", "delete", ids["canary.md"])
        assert proc.returncode == 0, proc.stderr
        assert f"deleted {ids['canary.md']}" in one_line(proc.stderr)
        assert reader.documents() == []
        assert reader.lexical_search("zebrafinch orchestra", 5) == []
        assert reader.dense_search(embedder.embed_query("zebrafinch orchestra"), 5) == []
        info = reader.info()
        assert (info.documents, info.chunks, info.generation) == (0, 0, generation + 1)
        proc = rag(home, "documents", "delete", ids["canary.md"], "--index", "missing")
        assert proc.returncode == 2 and "does not exist" in one_line(proc.stderr)
    finally:
        reader.close()
    assert_consistent(root)

    # the emptied index still takes documents
    again = ingest_paths([src / "canary.md"], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    assert [o.status for o in again.outcomes] == ["added"]
    assert_consistent(root)


# --------------------------------------------------------------------------- embedder identity
def test_embedder_mismatch_is_refused(tmp_path, embedder, settings, rag):
    home = tmp_path / "home"
    root = home / "indexes" / "default"
    src = tmp_path / "docs"
    src.mkdir()
    (src / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    identity, dimension = embedder.config.identity, embedder.dimension

    with pytest.raises(EmbedderMismatchError, match="was built with embedder"):
        EmbeddedWriter(root, "someone/other-model@384", 384)
    with pytest.raises(EmbedderMismatchError):
        EmbeddedWriter(root, identity, dimension * 2)  # same name, other dimension
    # a refused writer released the write lock
    writer = EmbeddedWriter(root, identity, dimension, lock_timeout_s=0.5)
    writer.rollback()

    reader = EmbeddedReader(root)
    try:
        reader.check_embedder(identity)
        with pytest.raises(EmbedderMismatchError, match="someone/other-model@384"):
            reader.check_embedder("someone/other-model@384")
    finally:
        reader.close()

    # A real, different embedder (same weights, another name) is refused by ingest and the CLI alike.
    other = tmp_path / "other-embedder"
    other.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        try:
            (other / name).symlink_to(settings.embedder_path / name)
        except OSError:  # no symlinks (Windows without privileges)
            shutil.copy2(settings.embedder_path / name, other / name)
    config = json.loads((settings.embedder_path / "embedder.json").read_text(encoding="utf-8"))
    config["name"] = "renamed/all-MiniLM-L6-v2"
    (other / "embedder.json").write_text(json.dumps(config), encoding="utf-8")
    from rag.embedder import Embedder

    renamed = Embedder(other, settings.threads, settings.embed_batch_size)
    (src / "more.md").write_text("# More\n\nA second note about lighthouses.\n", encoding="utf-8")
    with pytest.raises(EmbedderMismatchError):
        ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(renamed))
    proc = rag(home, "ingest", str(src), env={"RAG_EMBEDDER_DIR": str(other)})
    assert proc.returncode != 0
    assert "was built with embedder" in one_line(proc.stderr) and "Traceback" not in proc.stderr
    # nothing of the refused runs got in
    assert [r[0] for r in db_rows(root, "SELECT path FROM documents")] == [normalise_path(src / "canary.md")]
    assert_consistent(root)


# --------------------------------------------------------------------------- crash safety
CRASH_SCRIPT = """
import sys
from pathlib import Path
import ingest.pipeline as pipeline
from ingest.parameters import IngestParameters
from rag.embedder import Embedder
from rag.store.embedded import EmbeddedIndex

# Flush (embed + write to SQLite/FAISS) every few chunks, so the kill lands after uncommitted writes.
pipeline.EMBED_BUFFER_CHUNKS = 16
embedder = Embedder(Path(sys.argv[1]))

def progress(event):
    print(f"progress {event.files_done} {event.chunks_done}", flush=True)

pipeline.ingest_paths([Path(p) for p in sys.argv[3:]], EmbeddedIndex(Path(sys.argv[2])),
                      IngestParameters.defaults(embedder),
                      progress=progress)
print("finished", flush=True)
"""


def test_killed_ingest_leaves_last_commit_intact(tmp_path, embedder, settings):
    geo = PDF_DIR / "GeoTopo-komprimiert.pdf"
    if not geo.is_file():
        pytest.skip(f"{geo} not found")
    root = tmp_path / "indexes" / "t1"
    canary_dir = tmp_path / "canary"
    canary_dir.mkdir()
    (canary_dir / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    committed = ingest_paths([canary_dir], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    reader = EmbeddedReader(root)
    committed_docs = reader.documents()
    reader.close()
    assert len(committed_docs) == 1 and committed.generation == 1
    order = ["sky_united_kingdom.md", "victoria_australia.md", "southern_california.md", "normans.md",
             "computational_complexity_theory.md"]
    corpus = squad_copy(tmp_path / "squad", *order)

    # ~600 chunks in all (GeoTopo alone ~440): far more than the seconds before the kill can embed.
    proc = subprocess.Popen([sys.executable, "-c", CRASH_SCRIPT, str(settings.embedder_path), str(root),
                             *(str(corpus / name) for name in order), str(geo)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=PROJECT_ROOT)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    started = time.monotonic()
    files_done = 0
    try:
        # Kill once it has been working >= 2 s and is past two files (so two flushes happened).
        while files_done < 2 or time.monotonic() - started < 2.0:
            assert time.monotonic() - started < 90, "ingest subprocess made no progress"
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                assert proc.poll() is None, "ingest subprocess died on its own"
                continue
            assert line.strip() != "finished", "ingest finished before it could be killed"
            if line.startswith("progress"):
                files_done = int(line.split()[1])
        assert proc.poll() is None, "ingest subprocess ended before the kill"
    finally:
        if os.name == "nt":
            proc.terminate()
        else:
            proc.kill()  # SIGKILL: no cleanup, no rollback
        proc.wait(timeout=30)
    assert proc.returncode != 0
    drained = []
    while not lines.empty():
        drained.append(lines.get())
    assert "finished\n" not in drained

    reader = EmbeddedReader(root)
    try:
        assert reader.documents() == committed_docs
        info = reader.info()
        assert (info.generation, info.documents, info.chunks) == (1, 1, committed.chunks_written)
        hits = reader.dense_search(embedder.embed_query("zebrafinch orchestra in the lighthouse"), 5)
        assert doc_ids_of(reader, hits) == {committed_docs[0].id}
        assert doc_ids_of(reader, reader.lexical_search("zebrafinch", 5)) == {committed_docs[0].id}
        # words of the killed run's documents are nowhere
        assert reader.lexical_search("BSkyB Melbourne Normandy", 5) == []
    finally:
        reader.close()
    assert_consistent(root)

    # What a crash between writing the next vectors file and the SQLite commit leaves behind: an
    # orphaned newer file (here unreadable junk) and a temp file. Readers ignore them; the next run replaces them.
    (root / "vectors-2.faiss").write_bytes(b"orphan from a killed run")
    (root / "vectors-2.faiss.tmp").write_bytes(b"half-written")
    reader = EmbeddedReader(root)
    try:
        assert reader.dense_search(embedder.embed_query("zebrafinch orchestra"), 5)
    finally:
        reader.close()

    # A fresh run afterwards works and commits the next generation.
    again = ingest_paths([corpus / "sky_united_kingdom.md", canary_dir], EmbeddedIndex(root),
                         IngestParameters.defaults(embedder))
    assert {n: o.status for n, o in by_name(again).items()} == {
        "sky_united_kingdom.md": "added", "canary.md": "unchanged"} and again.ok
    assert again.generation == 2
    reader = EmbeddedReader(root)
    try:
        assert len(reader.documents()) == 2
        assert doc_ids_of(reader, reader.lexical_search("BSkyB", 5)) == {document_id(corpus / order[0])}
    finally:
        reader.close()
    assert_consistent(root)
    assert not list(root.glob("*.tmp"))


# --------------------------------------------------------------------------- concurrency
def test_second_writer_fails_fast_and_cleanly(tmp_path, embedder, rag):
    home = tmp_path / "home"
    root = home / "indexes" / "default"
    src = squad_copy(tmp_path / "docs", "sky_united_kingdom.md")
    (tmp_path / "canary").mkdir()
    (tmp_path / "canary" / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    first = ingest_paths([tmp_path / "canary"], EmbeddedIndex(root), IngestParameters.defaults(embedder))

    reader = EmbeddedReader(root)
    writer = EmbeddedWriter(root, embedder.config.identity, embedder.dimension)
    try:
        # The held writer has uncommitted work; readers keep seeing the last commit meanwhile.
        writer.delete_document(document_id(tmp_path / "canary" / "canary.md"))
        assert len(reader.documents()) == 1
        assert reader.lexical_search("zebrafinch", 5)

        with pytest.raises(IndexLockedError, match="another process"):
            ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder), lock_timeout_s=0.2)

        started = time.monotonic()
        proc = rag(home, "ingest", str(src))
        elapsed = time.monotonic() - started
        assert proc.returncode != 0
        message = one_line(proc.stderr)
        assert "being written by another process" in message and "Traceback" not in proc.stderr
        assert elapsed < 30, f"second writer took {elapsed:.1f} s to give up"
    finally:
        writer.rollback()

    try:
        assert [d.id for d in reader.documents()] == [document_id(tmp_path / "canary" / "canary.md")]
        assert reader.info().generation == first.generation
        assert reader.lexical_search("zebrafinch", 5)
        assert_consistent(root)
        proc = rag(home, "ingest", str(src), "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["added"] == 1
        assert len(reader.documents()) == 2
        assert reader.lexical_search("BSkyB", 5)
    finally:
        reader.close()
    assert_consistent(root)


def test_reader_follows_new_commits(tmp_path, embedder):
    root = tmp_path / "indexes" / "t1"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    src = squad_copy(tmp_path / "b", "sky_united_kingdom.md")
    first = ingest_paths([tmp_path / "a"], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    reader = EmbeddedReader(root)
    try:
        query = embedder.embed_query("Which company runs the Sky satellite television service in the UK?")
        assert doc_ids_of(reader, reader.dense_search(query, 5)) == {document_id(tmp_path / "a" / "canary.md")}
        assert reader.refresh() is False  # nothing new yet

        second = ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
        assert second.generation == first.generation + 1
        # the same reader object, not re-created, searches the new generation
        hits = reader.dense_search(query, 3)
        sky_id = document_id(src / "sky_united_kingdom.md")
        assert doc_ids_of(reader, hits[:1]) == {sky_id}
        assert reader.refresh() is False  # dense_search already loaded it
        assert reader.info().generation == second.generation
        assert len(reader.dense_search(query, 1000)) == reader.info().chunks

        delete_document(EmbeddedIndex(root), sky_id)
        assert doc_ids_of(reader, reader.dense_search(query, 1000)) == {document_id(tmp_path / "a" / "canary.md")}
    finally:
        reader.close()
    # the superseded generation's vectors are pruned, keeping one back for readers mid-load
    assert sorted(p.name for p in root.glob("vectors-*")) == ["vectors-2.faiss", "vectors-3.faiss"]


# --------------------------------------------------------------------------- CLI inspection
def test_cli_index_info_and_documents_list(tmp_path, rag, embedder):
    home = tmp_path / "home"
    src = squad_copy(tmp_path / "docs", "sky_united_kingdom.md")
    (src / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    proc = rag(home, "ingest", str(src), "--index", "books", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["added"] == 2 and summary["index"] == "books"

    proc = rag(home, "index", "info", "--index", "books", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    root = home / "indexes" / "books"
    assert info["name"] == "books" and Path(info["path"]) == root
    assert info["documents"] == 2
    assert info["chunks"] == summary["chunks_written"] == len(sqlite_chunk_ids(root)) == len(faiss_ids(root))
    assert info["generation"] == summary["generation"] == 1
    assert info["embedder"] == embedder.config.identity and info["dimension"] == embedder.dimension
    assert info["size_bytes"] >= (root / DB_NAME).stat().st_size + (root / "vectors-1.faiss").stat().st_size

    proc = rag(home, "documents", "list", "--index", "books", "--json")
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert {d["id"] for d in docs} == {f["document_id"] for f in summary["files"]}
    assert {Path(d["path"]).name: d["chunks"] for d in docs} == {
        Path(f["path"]).name: f["chunks"] for f in summary["files"]}
    assert sum(d["chunks"] for d in docs) == info["chunks"]
    assert all(d["kind"] == "md" and d["pages"] is None for d in docs)

    proc = rag(home, "documents", "list", "--index", "books")  # table form
    assert proc.returncode == 0 and "2 documents" in proc.stdout

    for args in (["index", "info"], ["documents", "list"]):
        proc = rag(home, *args, "--index", "nope", "--json")
        assert proc.returncode == 2, args
        assert "does not exist" in one_line(proc.stderr) and "Traceback" not in proc.stderr


@pytest.fixture()
def home_beside_index(tmp_path, embedder):
    """A home with indexes/default, plus a real index at home/x, right outside indexes/."""
    home = tmp_path / "home"
    src = tmp_path / "docs"
    src.mkdir()
    (src / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    ingest_paths([src], EmbeddedIndex(home / "x"), IngestParameters.defaults(embedder))
    ingest_paths([src], EmbeddedIndex(home / "indexes" / "default"), IngestParameters.defaults(embedder))
    return home, src


def _invalid_name_problems(rag, home: Path, commands: list[list[str]]) -> list[str]:
    problems = []
    for args in commands:
        for bad in ("../x", "", ".hidden"):
            proc = rag(home, *args, "--index", bad)
            assert "Traceback" not in proc.stderr
            if proc.returncode != 2 or "invalid index name" not in one_line(proc.stderr):
                problems.append(f"rag {' '.join(args[:2])} --index {bad!r}: exit {proc.returncode}, "
                                f"{one_line(proc.stderr)[:110]!r}")
    return problems


def test_cli_ingest_rejects_invalid_index_names(home_beside_index, rag):
    home, src = home_beside_index
    assert _invalid_name_problems(rag, home, [["ingest", str(src / "canary.md")]]) == []
    assert [p.name for p in (home / "indexes").iterdir()] == ["default"]
    assert not (home / ".hidden").exists()


def test_cli_read_and_delete_commands_reject_invalid_index_names(home_beside_index, rag):
    home, src = home_beside_index
    problems = _invalid_name_problems(rag, home, [
        ["index", "info"], ["documents", "list"], ["documents", "delete", document_id(src / "canary.md")]])
    # "../x" must never reach home/x (outside indexes/)
    if db_rows(home / "x", "SELECT COUNT(*) FROM documents") != [(1,)]:
        problems.append("`rag documents delete --index ../x` deleted a document from home/x, outside indexes/")
    assert problems == [], "\n".join(problems)


# --------------------------------------------------------------------------- selection
def test_glob_selects_files_by_name(tmp_path, rag, embedder):
    home = tmp_path / "home"
    src = squad_copy(tmp_path / "docs", "sky_united_kingdom.md")
    (src / "sub").mkdir()
    (src / "sub" / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    (src / "notes.txt").write_text("Plain text notes about the harbour ferry timetable.\n", encoding="utf-8")
    (src / "page.html").write_text("<html><body><h1>Page</h1><p>Lighthouse keepers.</p></body></html>",
                                   encoding="utf-8")
    (src / "LICENSE").write_text("Permission is hereby granted.\n", encoding="utf-8")
    (src / ".hidden.md").write_text("# Hidden\n\nNever ingested.\n", encoding="utf-8")

    proc = rag(home, "ingest", str(src), "--glob", "*.md", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert sorted(Path(f["path"]).name for f in report["files"]) == ["canary.md", "sky_united_kingdom.md"]
    assert report["added"] == 2 and report["skipped"] == report["failed"] == 0
    root = home / "indexes" / "default"
    assert sorted(Path(p).suffix for (p,) in db_rows(root, "SELECT path FROM documents")) == [".md", ".md"]

    # the glob filters folder contents only; a file named outright is always taken
    summary = ingest_paths([src, src / "notes.txt"], EmbeddedIndex(root), IngestParameters.defaults(embedder),
                           glob="*.md")
    assert {Path(o.path).name: o.status for o in summary.outcomes} == {
        "canary.md": "unchanged", "sky_united_kingdom.md": "unchanged", "notes.txt": "added"}
    # without a glob everything visible is considered
    summary = ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    assert {Path(o.path).name: o.status for o in summary.outcomes} == {
        "canary.md": "unchanged", "sky_united_kingdom.md": "unchanged", "notes.txt": "unchanged",
        "page.html": "added", "LICENSE": "skipped"}
    assert_consistent(root)


def test_nothing_to_ingest_is_an_error_and_creates_no_index(tmp_path, rag, embedder):
    home = tmp_path / "home"
    src = squad_copy(tmp_path / "docs", "sky_united_kingdom.md")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".hidden.md").write_text(CANARY_MD, encoding="utf-8")
    for args, message in (([str(src), "--glob", "*.pdf"], f"no files match '*.pdf' in {src}"),
                          ([str(tmp_path / "empty")], f"nothing to ingest in {tmp_path / 'empty'}")):
        proc = rag(home, "ingest", *args, env={"COLUMNS": "40"})
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: nothing to ingest") and message in lines[0], lines
        assert proc.stdout == ""
    assert not (home / "indexes").exists()
    with pytest.raises(BadRequestError, match="no files match"):
        ingest_paths([src], EmbeddedIndex(tmp_path / "indexes" / "t1"), IngestParameters.defaults(embedder),
                     glob="*.pdf")
    assert not (tmp_path / "indexes").exists()


@pytest.mark.parametrize("flags, message", [
    (["--chunk-tokens", "0"], "chunk_tokens must be positive, not 0"),
    (["--overlap", "-1"], "chunk_overlap must not be negative, not -1"),
    (["--chunk-tokens", "20"], "chunk_overlap (30) must be smaller than chunk_tokens (20)"),
])
def test_cli_bad_chunk_flags_say_why(tmp_path, rag, flags, message):
    home = tmp_path / "home"
    src = squad_copy(tmp_path / "docs", "sky_united_kingdom.md")
    proc = rag(home, "ingest", str(src), *flags)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"error: {message}"]
    assert not (home / "indexes").exists()


def _symlink(link: Path, target: Path) -> None:
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except (OSError, NotImplementedError) as exc:  # e.g. Windows without the symlink privilege
        pytest.skip(f"cannot create symlinks here: {exc}")


def test_folder_ingest_does_not_follow_symlinks_out_of_the_folder(tmp_path, rag, embedder):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("The vault code of the zorblat bank is 4711.\n", encoding="utf-8")
    (outside / "more.md").write_text("# More\n\nThe quokkaflux ledger lives here.\n", encoding="utf-8")
    src = tmp_path / "docs"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    _symlink(src / "link.txt", outside / "secret.txt")
    _symlink(src / "linked-dir", outside)
    _symlink(src / "inner.md", src / "sub" / "canary.md")  # inside the folder: the same document, once
    _symlink(src / "inner-dir", src / "sub")
    root = tmp_path / "indexes" / "t1"

    summary = ingest_paths([src], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    outcomes = by_name(summary)
    assert set(outcomes) == {"canary.md", "link.txt", "linked-dir"}, outcomes
    assert outcomes["canary.md"].status == "added"
    for name, target in (("link.txt", outside / "secret.txt"), ("linked-dir", outside)):
        assert outcomes[name].status == "skipped" and outcomes[name].reason_type == SYMLINK_OUTSIDE
        assert str(target.resolve()) in outcomes[name].reason and "outside" in outcomes[name].reason
    assert summary.ok  # a symlink left out by policy is not a failed file
    reader = EmbeddedReader(root)
    try:
        assert [Path(d.path).name for d in reader.documents()] == ["canary.md"]
        assert reader.lexical_search("zorblat vault quokkaflux", 5) == []
    finally:
        reader.close()

    # The CLI shows the skipped links with their reason; a symlink named outright is still ingested.
    home = tmp_path / "home"
    proc = rag(home, "ingest", str(src), str(src / "link.txt"), "--json")
    assert proc.returncode == 0, proc.stderr
    files = {Path(f["path"]).name: f for f in json.loads(proc.stdout)["files"]}
    assert files["link.txt"]["status"] == "added" and files["linked-dir"]["status"] == "skipped"
    proc = rag(home, "ingest", str(src))
    assert proc.returncode == 0, proc.stderr
    assert "linked-dir" in proc.stdout and "not followed" in one_line(proc.stdout)


MARKUP_TITLE = "Notes [/bold] on :rocket: and [red]x"


def test_cli_prints_document_text_literally(tmp_path, rag):
    home = tmp_path / "home"
    src = tmp_path / "docs"
    (src / "[bold]").mkdir(parents=True)
    (src / "notes.md").write_text(f"# {MARKUP_TITLE}\n\nThe zorblat rocket launches on Tuesdays.\n",
                                  encoding="utf-8")
    (src / "[bold]" / "x.txt").write_bytes(b"\xff\xfegarbage")  # binary: fails, reported with its path
    proc = rag(home, "ingest", str(src))
    assert proc.returncode == 2, proc.stderr
    assert str(src / "[bold]" / "x.txt") in proc.stdout
    assert "not a text file (binary content)" in proc.stdout

    proc = rag(home, "documents", "list")
    assert proc.returncode == 0, proc.stderr
    assert MARKUP_TITLE in proc.stdout and "\N{ROCKET}" not in proc.stdout
    assert "Traceback" not in proc.stderr

    doc_id = document_id(src / "notes.md")
    proc = rag(home, "documents", "delete", str(src / "notes.md"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"deleted {doc_id} ({normalise_path(src / 'notes.md')}, 1 chunk)"


def test_cli_ids_and_headers_are_never_cut(tmp_path, rag):
    home = tmp_path / "home"
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / "nested"
    src = squad_copy(deep, "sky_united_kingdom.md", "victoria_australia.md")
    (src / "canary.md").write_text(CANARY_MD, encoding="utf-8")
    narrow = {"COLUMNS": "80"}
    proc = rag(home, "ingest", str(src), env=narrow)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    for label in ("added", "updated", "unchanged", "skipped", "failed", "chunks written", "chunks/s"):
        assert f"│ {label} " in proc.stdout, label

    ids = [d["id"] for d in json.loads(rag(home, "documents", "list", "--json").stdout)]
    assert len(ids) == 3
    for columns in ("80", "60"):
        proc = rag(home, "documents", "list", env={"COLUMNS": columns})
        assert proc.returncode == 0, proc.stderr
        assert all(doc_id in proc.stdout for doc_id in ids), (columns, proc.stdout)
        assert max(len(line) for line in proc.stdout.splitlines()) <= int(columns)

    # An error stays on one line, however narrow the (non-terminal) console.
    missing = "0123456789abcdef" * 4
    proc = rag(home, "documents", "delete", missing, env={"COLUMNS": "40"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: no document '{missing}' in index 'default'"]
