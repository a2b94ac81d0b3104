"""The store's behaviour, one set of tests for both backends: the embedded FAISS + SQLite store and
PostgreSQL + pgvector (a real server, started for the session). Then what only a database server allows:
concurrent ingest processes into one index, a killed ingest, and copying an index between the two."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from app.services.documents import Documents
from ingest.pipeline import delete_document, ingest_paths
from ingest.parameters import IngestParameters
from rag.core.records import Chunk, DocumentRecord, document_id
from rag.store.copy import copy_index
from rag.store.embedded import DB_NAME, EmbeddedStore
from rag.answering.retrieval import Retriever
from rag.core.access import EVERY_DOCUMENT, Principal, stored_groups, visible
from rag.core.errors import DocumentNotFoundError, EmbedderMismatchError, IndexNotFoundError
from rag.core.settings import PROJECT_ROOT
from tests.conftest import SQUAD_DOCS
from tests.helpers import cli_env

BACKENDS = ("embedded", "postgresql")


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path: Path):
    if request.param == "embedded":
        yield EmbeddedStore(tmp_path / "indexes")
        return
    from rag.store.postgres import PostgresStore

    store = PostgresStore(request.getfixturevalue("postgres_url"), pool_size=2)
    yield store
    store.close()


def fresh_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def paragraphs() -> list[tuple[str, str]]:
    """(title, paragraph) of the SQuAD dev documents, in a fixed order."""
    out = []
    for doc in sorted(SQUAD_DOCS.glob("*.md")):
        title = doc.stem.replace("_", " ").title()
        out += [(title, p.strip()) for p in doc.read_text(encoding="utf-8").split("\n\n")
                if len(p.strip()) > 200 and not p.startswith("#")]
    return out


def corpus(folder: Path, start: int, count: int) -> list[Path]:
    paras = paragraphs()
    return [write(folder, f"p{i:03d}.md", f"# {paras[i][0]} {i}\n\n{paras[i][1]}\n") for i in range(start, start + count)]


def consistent(index) -> tuple[int, int]:
    """(documents, chunks) after checking every document is whole: its chunks are all there, once each."""
    reader = index.reader()
    try:
        info = reader.info()
        total = 0
        for record in reader.documents():
            chunks, vectors = reader.document_chunks(record.id)
            assert len(chunks) == record.chunks == len(vectors), record.path
            assert [c.ordinal for c in chunks] == list(range(record.chunks)), record.path
            total += len(chunks)
        assert total == info.chunks
        return info.documents, info.chunks
    finally:
        reader.close()


# ---------------------------------------------------------------------- one behaviour, both backends
def test_add_search_update_delete(store, embedder, tmp_path: Path) -> None:
    index = store.index(fresh_name())
    assert not index.exists()
    docs = tmp_path / "docs"
    normans = write(docs, "normans.md", "# Normans\n\nRollo was the leader of the Vikings who settled in Normandy. "
                                         "He swore fealty to King Charles III of West Francia in 911.\n")
    write(docs, "victoria.md", "# Victoria\n\nMelbourne is the capital of the Australian state of Victoria. "
                               "The state's economy is driven by services and manufacturing.\n")
    summary = ingest_paths([docs], index, IngestParameters.defaults(embedder))
    assert [o.status for o in summary.outcomes] == ["added", "added"]
    assert index.exists() and index.name in store.names()
    reader = index.reader()
    info = reader.info()
    assert (info.documents, info.chunks, info.dimension) == (2, 2, embedder.dimension)
    assert info.embedder == embedder.config.identity

    retriever = Retriever(reader, embedder)
    hits = retriever.retrieve("Who swore fealty to Charles III?", 2).hits
    assert hits[0].chunk.title == "Normans" and hits[0].chunk.doc_id == document_id(normans)
    assert hits[0].dense_score > 0.3 and hits[0].lexical_score > 0
    lexical = reader.lexical_search("capital of Victoria", 5)
    assert lexical and all(score > 0 for _, score in lexical)
    assert reader.chunks([lexical[0][0]])[lexical[0][0]].title == "Victoria"
    assert reader.lexical_search("the of and", 5) == []  # only stop words: no query

    # unchanged, then updated: the old chunk goes, the reader sees the new one without reopening
    assert [o.status for o in ingest_paths([docs], index,
                                           IngestParameters.defaults(embedder)).outcomes] == ["unchanged", "unchanged"]
    write(docs, "normans.md", "# Normans\n\nRollo, a Viking chieftain, founded the duchy of Normandy.\n\n" + "More. " * 300)
    summary = ingest_paths([normans], index, IngestParameters.defaults(embedder))
    assert summary.outcomes[0].status == "updated" and summary.outcomes[0].chunks > 1
    assert reader.find_document(str(normans)).chunks == summary.outcomes[0].chunks
    assert "swore fealty" not in " ".join(h.chunk.text for h in retriever.retrieve("fealty Charles III", 5).hits)
    assert consistent(index) == (2, 1 + summary.outcomes[0].chunks)

    # delete: gone from metadata and from both searches
    record = delete_document(index, str(normans))
    assert record.id == document_id(normans)
    assert reader.find_document(record.id) is None
    assert all(h.chunk.doc_id != record.id for h in retriever.retrieve("Rollo Viking Normandy", 5).hits)
    assert consistent(index) == (1, 1)
    reader.close()


def test_text_that_cannot_name_a_file_stands_for_no_document(store, embedder, tmp_path: Path) -> None:
    """NUL bytes and unpaired surrogates are not found, on both stores (never a database or encoding error)."""
    index = store.index(fresh_name())
    [path] = corpus(tmp_path / "docs", 0, 1)
    ingest_paths([path], index, IngestParameters.defaults(embedder))
    reader = index.reader()
    try:
        for text in ("\x00", "a\x00b", "\ud800", "x\udcff.txt", "../" * 50, "%00", " "):
            assert reader.find_document(text) is None, text
            with pytest.raises(DocumentNotFoundError):
                delete_document(index, text)
        [record] = reader.documents()
        assert reader.find_document(record.id) == record == reader.find_document(record.path)
        assert consistent(index) == (1, record.chunks)
    finally:
        reader.close()


def test_document_filters(store, embedder, tmp_path: Path) -> None:
    index = store.index(fresh_name())
    files = corpus(tmp_path / "docs", 0, 6)
    ingest_paths(files, index, IngestParameters.defaults(embedder))
    reader = index.reader()
    retriever = Retriever(reader, embedder)
    wanted = [document_id(files[4]), document_id(files[5])]
    unfiltered = retriever.retrieve(paragraphs()[0][1][:200], 5).hits
    assert unfiltered[0].chunk.doc_id == document_id(files[0])
    query = embedder.embed_query(paragraphs()[0][1][:200])
    dense = reader.dense_search(query, 10, wanted)
    assert dense and {reader.chunks([i])[i].doc_id for i, _ in dense} <= set(wanted)
    assert len(dense) == sum(reader.find_document(d).chunks for d in wanted)  # every allowed chunk, none else
    lexical = reader.lexical_search(paragraphs()[0][1][:200], 10, wanted)
    assert {reader.chunks([i])[i].doc_id for i, _ in lexical} <= set(wanted)
    hits = retriever.retrieve(paragraphs()[0][1][:200], 5, [str(files[4])]).hits  # a path works too
    assert hits and {h.chunk.doc_id for h in hits} == {wanted[0]}
    reader.close()


def test_embedder_guard(store, embedder, tmp_path: Path) -> None:
    index = store.index(fresh_name())
    ingest_paths(corpus(tmp_path / "docs", 0, 1), index, IngestParameters.defaults(embedder))
    with pytest.raises(EmbedderMismatchError):
        index.writer("another-embedder@384", 384)
    with pytest.raises(EmbedderMismatchError):
        index.writer(embedder.config.identity, 768)
    reader = index.reader()
    with pytest.raises(EmbedderMismatchError):
        reader.check_embedder("another-embedder@384")
    reader.check_embedder(embedder.config.identity)
    reader.close()


def test_failed_writes_leave_nothing_half_written(store, embedder, tmp_path: Path) -> None:
    index = store.index(fresh_name())
    files = corpus(tmp_path / "docs", 0, 2)
    ingest_paths(files, index, IngestParameters.defaults(embedder))
    before = consistent(index)
    record = DocumentRecord("broken0000000000", str(tmp_path / "broken.md"), "Broken", "md", "0" * 64, None, 10, 2,
                            "2026-01-01T00:00:00+00:00")
    chunks = [Chunk("one", None, None, 0, 3, 0), Chunk("two", None, None, 4, 7, 1)]
    with pytest.raises(ValueError):
        with index.writer(embedder.config.identity, embedder.dimension) as writer:
            writer.put_document(record, chunks, np.zeros((1, embedder.dimension), np.float32))  # one vector short
    with pytest.raises(RuntimeError):
        with index.writer(embedder.config.identity, embedder.dimension) as writer:
            writer.put_document(dataclasses.replace(record, chunks=1), chunks[:1],
                                np.ones((1, embedder.dimension), np.float32) / 20)
            raise RuntimeError("the run dies before commit")
    # Embedded: the run is one transaction, nothing of it stays. PostgreSQL: each document commits on its own,
    # so the document put before the failure stays, whole. Either way no document is half there.
    documents, chunks_now = consistent(index)
    assert (documents, chunks_now) in (before, (before[0] + 1, before[1] + 1))


def test_copy_between_backends(embedder, postgres_url: str, tmp_path: Path) -> None:
    from rag.store.postgres import PostgresStore

    embedded, pg = EmbeddedStore(tmp_path / "indexes"), PostgresStore(postgres_url, pool_size=2)
    name = fresh_name()
    files = corpus(tmp_path / "docs", 0, 5)
    ingest_paths(files, embedded.index(name), IngestParameters.defaults(embedder))
    report = copy_index(embedded.index(name), pg.index(name))
    assert report.documents == 5 and consistent(pg.index(name)) == consistent(embedded.index(name))
    back = EmbeddedStore(tmp_path / "back")
    copy_index(pg.index(name), back.index(name))
    query = embedder.embed_query(paragraphs()[3][1][:150])
    results = []
    for store in (embedded, pg, back):
        reader = store.index(name).reader()
        assert sorted(d.id for d in reader.documents()) == sorted(document_id(f) for f in files)
        found = reader.dense_search(query, 5)
        records = reader.chunks(i for i, _ in found)
        results.append([(records[i].doc_id, records[i].ordinal, round(score, 4)) for i, score in found])
        reader.close()
    assert results[0] == results[1] == results[2]  # same ids, same vectors (copied, not re-embedded)
    pg.close()


def test_migrate_command(settings, postgres_url: str, tmp_path: Path, embedder) -> None:
    home, home_back = tmp_path / "home", tmp_path / "home-back"
    name = fresh_name()
    ingest_paths(corpus(tmp_path / "docs", 10, 3), EmbeddedStore(home / "indexes").index(name),
                 IngestParameters.defaults(embedder))

    def run(where: Path, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(where), "index", "migrate", *args],
                              cwd=PROJECT_ROOT, env=cli_env(settings), capture_output=True, text=True, timeout=120)

    done = run(home, "--to", postgres_url, "--from", name)
    assert done.returncode == 0, done.stderr
    assert "copied 3 documents" in done.stderr
    back = run(home_back, "--from", postgres_url, "--to", name)  # and back, into another home
    assert back.returncode == 0, back.stderr
    assert consistent(EmbeddedStore(home_back / "indexes").index(name)) == consistent(
        EmbeddedStore(home / "indexes").index(name))
    refused = run(home, "--to", name, "--from", name)
    assert refused.returncode == 2 and "postgresql://" in refused.stderr


# ---------------------------------------------------------------------- PostgreSQL: several writers at once
def ingest_process(settings, postgres_url: str, folder: Path, index: str, *extra: str) -> subprocess.Popen:
    env = cli_env(settings, RAG_STORE_URL=postgres_url)
    return subprocess.Popen([sys.executable, "-m", "app.cli", "ingest", str(folder), "--index", index, "--json",
                             *extra], cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_concurrent_ingests_into_one_postgres_index(settings, postgres_url: str, tmp_path: Path) -> None:
    from rag.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, pool_size=2)
    name = fresh_name()
    a, b = tmp_path / "a", tmp_path / "b"
    corpus(a, 0, 8)
    corpus(b, 8, 8)
    procs = [ingest_process(settings, postgres_url, folder, name) for folder in (a, b)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    written = [json.loads(out)["chunks_written"] for out, _ in outputs]
    assert consistent(store.index(name)) == (16, sum(written))

    # The same files from two processes at once: one document each, no duplicate chunks.
    same = fresh_name()
    procs = [ingest_process(settings, postgres_url, a, same) for _ in range(2)]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert consistent(store.index(same)) == (8, written[0])
    store.close()


def test_killed_ingest_leaves_whole_documents(settings, postgres_url: str, tmp_path: Path) -> None:
    from rag.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, pool_size=2)
    name = fresh_name()
    folder = tmp_path / "docs"
    files = corpus(folder, 0, 40)
    # Small chunks: several embedding batches, so the process dies with documents written and others not.
    args = ("--chunk-tokens", "24", "--overlap", "0")
    proc = ingest_process(settings, postgres_url, folder, name, *args)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if store.index(name).exists() and store.index(name).reader().info().documents > 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the ingest finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # A COMMIT the client sent just before it died still completes on the server: count once that settled.
    documents, _ = consistent(store.index(name))
    for _ in range(20):
        time.sleep(0.25)
        settled, _ = consistent(store.index(name))
        if settled == documents:
            break
        documents = settled
    assert 0 < documents < len(files)
    rerun = ingest_process(settings, postgres_url, folder, name, *args)
    out, err = rerun.communicate(timeout=180)
    assert rerun.returncode == 0, err
    summary = json.loads(out)
    assert summary["unchanged"] == documents and summary["added"] == len(files) - documents
    assert consistent(store.index(name))[0] == len(files)
    store.close()


def test_mail_attachments_are_documents_of_their_own(store, embedder, tmp_path: Path) -> None:
    from format_fixtures import make_eml

    index = store.index(fresh_name())
    note = b"The volcanic ash layer at 40 metres dates from the Holocene.\n"
    mail = make_eml(tmp_path / "site7.eml", ("ash-note.txt", note, "text/plain"))
    summary = ingest_paths([mail], index, IngestParameters.defaults(embedder))
    assert summary.ok
    reader = index.reader()
    try:
        titles = sorted(d.title for d in reader.documents())
        assert len(titles) == 2 and any(t.startswith("attachment ash-note.txt") for t in titles), titles
        make_eml(mail)  # the mail without its attachment: the attachment's document goes
        ingest_paths([mail], index, IngestParameters.defaults(embedder))
        assert [d.title for d in reader.documents()] == ["Borehole samples from Site 7"]
        delete_document(index, str(mail))
        assert reader.documents() == []
    finally:
        reader.close()


def test_large_index_lexical_search_ranks_the_rare_words(store, embedder, tmp_path: Path, monkeypatch) -> None:
    """Past the row budget (lowered here to 30 chunks) a query keeps its rare words: the chunk that holds
    them comes first although every chunk holds the common ones."""
    import rag.store.embedded
    import rag.store.postgres

    for module in (rag.store.embedded, rag.store.postgres):
        monkeypatch.setattr(module, "LEXICAL_ROW_BUDGET", 30)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(60):
        rare = " The harbour master keeps a zeppelin mooring mast." if i == 41 else ""
        (folder / f"town{i:02d}.txt").write_text(
            f"Town {i} has a market square and a church near the river.{rare} The market opens every week.",
            encoding="utf-8")
    index = store.index(fresh_name())
    ingest_paths([folder], index, IngestParameters.defaults(embedder))
    reader = index.reader()
    hits = reader.lexical_search("Which town has a zeppelin mooring mast near the market square?", 5)
    top = reader.chunks([hits[0][0]])[hits[0][0]]
    assert top.path.endswith("town41.txt") and len(hits) >= 1
    # Only common words (each in all 60 chunks, over the budget): the lexical side stands aside.
    assert reader.lexical_search("market church river week", 5) == []
    reader.close()


SECRET = "The vault combination for the Quillon project is 7-4-1-9, known only to the finance team.\n"
PUBLIC = "The Quillon project cafeteria opens at eight and serves porridge on Mondays.\n"


def test_document_groups_filter_inside_the_search(store, embedder, tmp_path: Path) -> None:
    """A finance document is found only by readers in finance (or unrestricted), on both stores; the filter
    works inside the search, so the public document still fills the results for everyone else."""
    index = store.index(fresh_name())
    secret = write(tmp_path / "finance", "vault.md", "# Vault\n\n" + SECRET)
    public = write(tmp_path / "public", "cafeteria.md", "# Cafeteria\n\n" + PUBLIC)
    ingest_paths([secret], index, IngestParameters.defaults(embedder), groups=["finance"])
    ingest_paths([public], index, IngestParameters.defaults(embedder))
    reader = index.reader()
    retriever = Retriever(reader, embedder)
    try:
        query = "What is the vault combination for the Quillon project?"
        assert retriever.retrieve(query, 5).hits[0].chunk.doc_id == document_id(secret)  # unrestricted
        assert retriever.retrieve(query, 5, groups=frozenset({"finance"})).hits[0].chunk.doc_id == document_id(secret)
        for groups in (frozenset(), frozenset({"hr"})):
            hits = retriever.retrieve(query, 5, groups=groups).hits
            assert [h.chunk.doc_id for h in hits] == [document_id(public)]
            assert all("7-4-1-9" not in h.chunk.text for h in hits)
            with pytest.raises(DocumentNotFoundError):  # naming it is no way in: the same "no document"
                retriever.retrieve(query, 5, [str(secret)], groups=groups)
            with_history = retriever.retrieve("and its combination?", 5, history=["Tell me about the vault"],
                                              groups=groups)
            assert document_id(secret) not in {h.chunk.doc_id for h in with_history.hits}
        assert reader.visible_documents(frozenset()) == [document_id(public)]
        assert reader.visible_documents(frozenset({"finance"})) is None  # sees all: no filter at all
        assert reader.find_document(str(secret)).groups == frozenset({"finance"})

        # Re-ingesting without --groups keeps them; --groups '' makes the document public.
        write(tmp_path / "finance", "vault.md", "# Vault\n\n" + SECRET + "\nUpdated.\n")
        ingest_paths([secret], index, IngestParameters.defaults(embedder))
        assert reader.find_document(str(secret)).access_groups == "finance"
        ingest_paths([secret], index, IngestParameters.defaults(embedder), groups=[])
        assert reader.find_document(str(secret)).access_groups == ""
        assert reader.visible_documents(frozenset()) is None
    finally:
        reader.close()


# Every stored form of a document's groups against every kind of reader: public ("" ), one group, two, a name with
# every character a group may have; readers unrestricted (None, "*"), public-only, in one, both, or another group.
DOCUMENT_GROUPS = ("", "finance", "hr", "finance,hr", "a.b@c-d_e", "legal")
READER_GROUPS: tuple[frozenset[str] | None, ...] = (
    None, frozenset(), frozenset({"finance"}), frozenset({"hr"}), frozenset({"finance", "hr"}),
    frozenset({"a.b@c-d_e"}), frozenset({"legal", "finance"}), frozenset({"nobody"}), frozenset({"*"}))


def test_each_store_sees_what_the_one_visibility_rule_says(store, embedder, tmp_path: Path) -> None:
    """The documents x readers matrix through ``rag.core.access.visible`` and through each store's
    ``visible_documents`` (and retrieval's and the API's checks, which ask the rule too): identical answers."""
    index = store.index(fresh_name())
    records = [DocumentRecord(f"doc{i:013d}", str(tmp_path / f"d{i}.md"), f"D{i}", "md", "0" * 64, None, 10, 1,
                              "2026-01-01T00:00:00+00:00", stored) for i, stored in enumerate(DOCUMENT_GROUPS)]
    with index.writer(embedder.config.identity, embedder.dimension) as writer:
        for record in records:
            writer.put_document(record, [Chunk("text", None, None, 0, 4, 0)],
                                np.ones((1, embedder.dimension), np.float32) / embedder.dimension ** 0.5)
        writer.commit()
    reader = index.reader()
    try:
        retriever = Retriever(reader, embedder)
        for groups in READER_GROUPS:
            expected = [r.id for r in records if visible(stored_groups(r.access_groups), groups)]
            seen = reader.visible_documents(groups)
            assert (sorted(seen) if seen is not None else [r.id for r in records]) == expected, groups
            assert seen is None or len(seen) < len(records), "None when the reader sees every document"
            principal = Principal("p", (), groups if groups is not None else EVERY_DOCUMENT)
            assert [r.id for r in reader.documents() if principal.sees(r.groups)] == expected, groups
            for record in records:
                if record.id in expected:
                    assert retriever.resolve_documents([record.id], groups) == [record.id]
                else:
                    with pytest.raises(DocumentNotFoundError):
                        retriever.resolve_documents([record.id], groups)
    finally:
        reader.close()


def test_the_sqlite_backends_import_nothing_of_postgresql() -> None:
    """The key, conversation and audit stores' SQLite path (and the embedded index store) load no PostgreSQL
    module: what they share with their PostgreSQL twins lives in rag.store.shared."""
    code = ("import sys, rag.store.keys, rag.store.conversations, rag.store.audit_files, rag.store.embedded; "
            "print(sorted(m for m in sys.modules if 'postgres' in m or m.split('.')[0] in ('psycopg', 'pgvector')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_index_from_before_document_groups_reads_as_public_and_migrates(embedder, tmp_path: Path) -> None:
    import sqlite3

    from rag.store.embedded import DB_NAME

    store = EmbeddedStore(tmp_path / "indexes")
    index = store.index("old")
    public = write(tmp_path / "docs", "cafeteria.md", "# Cafeteria\n\n" + PUBLIC)
    ingest_paths([public], index, IngestParameters.defaults(embedder))
    with sqlite3.connect(tmp_path / "indexes" / "old" / DB_NAME) as conn:  # as last wave's code made it
        conn.execute("ALTER TABLE documents DROP COLUMN access_groups")
    reader = index.reader()
    try:
        assert reader.visible_documents(frozenset()) is None
        assert [d.access_groups for d in reader.documents()] == [""]
        secret = write(tmp_path / "docs", "vault.md", "# Vault\n\n" + SECRET)
        ingest_paths([secret], index, IngestParameters.defaults(embedder),
                     groups=["finance"])  # the writer adds the column
        assert reader.visible_documents(frozenset()) == [document_id(public)]
    finally:
        reader.close()


def test_an_index_its_first_writer_has_not_yet_given_tables_is_no_index(tmp_path: Path) -> None:
    """A writer making a new embedded index creates ``store.sqlite`` and then its tables; a reader in between (a
    fuzzing run's restricted editor following its async upload's job into a new index) got sqlite3's "no such
    table: documents" as a 500. Such a file is not an index yet: not found, and its document list is empty."""
    store = EmbeddedStore(tmp_path / "indexes")
    folder = tmp_path / "indexes" / "new"
    folder.mkdir(parents=True)
    sqlite3.connect(folder / DB_NAME).close()  # the file a writer's first connection makes, no tables yet
    index = store.index("new")
    assert index.exists()
    with pytest.raises(IndexNotFoundError):
        index.reader()
    assert Documents.all_documents(index) == []
