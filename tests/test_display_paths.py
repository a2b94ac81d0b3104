"""A document's path, twice (issue 27, finding 11): its identity (what replace, delete, sync and folder groups
compare) and the path as the user or the file system spelled it (what sources, document lists, citations, the
CLI and the web app show).

Windows' rules are pure functions of the platform's facts (``rag.core.paths.PathRules``), tested here with a
model of a Windows machine: a network drive mapped as ``Z:``, a share that may be offline, a junction. Real
ingests on Linux show the two spellings apart through a symlinked folder (the identity resolves it, the display
keeps it) and through case-insensitive rules imposed on this machine, on the embedded store and on PostgreSQL."""

from __future__ import annotations

import dataclasses
import ntpath
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

import rag.core.paths as paths
from ingest.pipeline import delete_document, ingest_paths
from ingest.parameters import IngestParameters
from rag.core.records import display_path, document_id, normalise_path
from ingest.sources import add_source, find_source, index_sources, respelled, sync_source
from rag.store.embedded import DB_NAME, EmbeddedStore
from rag.core.errors import DocumentNotFoundError
from rag.core.paths import PathRules, path_display, path_identity
from rag.core.settings import PROJECT_ROOT
from tests.helpers import cli_env
from test_store_backends import fresh_name, store  # noqa: F401 (the both-stores fixture)

SHARE = "\\\\fileserver\\Projects"
WOMBAT = "# Wombats\n\nWombats are short-legged marsupials that dig burrows in south-eastern Australia.\n"
QUOKKA = "# Quokkas\n\nQuokkas are small wallabies that live on Rottnest Island near Perth.\n"


# ------------------------------------------------------------------------------ Windows' rules, as pure functions
def windows_realpath(drives: dict[str, str], online: bool = True, junctions: dict[str, str] | None = None,
                     extended: bool = False) -> Callable[[str], str]:
    """``os.path.realpath`` as on Windows: a path it can open comes back final (a mapped drive as its UNC path,
    junctions followed, sometimes with the ``\\\\?\\`` prefix on long paths); one it cannot open (the share
    offline, or not there yet) comes back as given."""

    def realpath(path: str) -> str:
        if not online:
            return path
        drive, rest = ntpath.splitdrive(path)
        if drive.upper() in drives:
            path = drives[drive.upper()] + rest
        for link, target in (junctions or {}).items():
            if path.lower() == link.lower() or path.lower().startswith(link.lower() + "\\"):
                path = target + path[len(link):]
        if extended and path.startswith("\\\\"):
            return "\\\\?\\UNC\\" + path[2:]
        return path

    return realpath


def windows(drives: dict[str, str] | None = None, **machine) -> PathRules:
    drives = drives if drives is not None else {"Z:": SHARE}
    return PathRules(windows=True, case_insensitive=True, realpath=windows_realpath(drives, **machine),
                     mapped_drive=drives.get)


def resolve_only(path: str, rules: PathRules) -> str:
    """The identity as it was before: ``normcase(Path.resolve())``, i.e. whatever resolving gives."""
    return ntpath.normcase(rules.realpath(ntpath.abspath(path)))


SPELLINGS = ("Z:\\Reports\\2024\\Budget.docx", "z:/reports/2024/BUDGET.DOCX", SHARE + "\\Reports\\2024\\Budget.docx",
             "\\\\FILESERVER\\projects\\reports\\2024\\budget.docx", "Z:\\Reports\\Old\\..\\2024\\.\\Budget.docx")
IDENTITY = "\\\\fileserver\\projects\\reports\\2024\\budget.docx"


@pytest.mark.parametrize("machine", [{}, {"online": False}, {"extended": True}], ids=["online", "offline", "long"])
def test_a_mapped_drive_and_its_unc_path_are_one_identity(machine: dict):
    rules = windows(**machine)
    assert {path_identity(p, rules) for p in SPELLINGS} == {IDENTITY}


def test_resolving_alone_gave_a_document_two_identities():
    """What the identity was before: right while the share could be opened, two documents when it could not."""
    online, offline, long = windows(), windows(online=False), windows(extended=True)
    assert resolve_only(SPELLINGS[0], online) == IDENTITY == path_identity(SPELLINGS[0], online)  # ids unchanged
    assert resolve_only(SPELLINGS[0], offline) != resolve_only(SPELLINGS[2], offline)
    assert resolve_only(SPELLINGS[2], long) != IDENTITY


def test_a_junction_to_the_share_leads_to_the_same_identity():
    rules = windows(junctions={"C:\\Links\\Reports": SHARE + "\\Reports"})
    assert path_identity("c:\\links\\reports\\2024\\Budget.docx", rules) == IDENTITY


def test_the_extended_length_prefix_is_no_part_of_the_identity():
    rules = windows(drives={})
    assert path_identity("\\\\?\\C:\\Data\\Report.txt", rules) == path_identity("C:/data/report.TXT", rules) \
        == "c:\\data\\report.txt"


def test_a_drive_not_mapped_in_this_session_keeps_its_letter():
    """A service often does not see the user's drive mappings: its ``Z:`` is nothing, so nothing maps it (a
    source is listed by its identity, the UNC path, so a sync still reaches the share)."""
    rules = windows(drives={})
    assert path_identity(SPELLINGS[0], rules) == "z:\\reports\\2024\\budget.docx"
    assert path_identity(SPELLINGS[2], rules) == IDENTITY


def test_the_display_keeps_the_spelling_of_the_user_and_the_file_system():
    rules = windows()
    assert path_display("Z:\\Reports\\2024\\Budget.docx", rules) == "Z:\\Reports\\2024\\Budget.docx"
    assert path_display("Z:/Reports/Old/../2024/./Budget.docx", rules) == "Z:\\Reports\\2024\\Budget.docx"
    assert path_display(SHARE + "\\Reports\\Budget.docx", rules) == SHARE + "\\Reports\\Budget.docx"
    assert path_identity("Z:/Reports/2024/Budget.docx", rules) != path_display("Z:/Reports/2024/Budget.docx", rules)


def test_a_source_listed_by_its_identity_shows_files_as_the_user_spelled_the_folder():
    shown = respelled(Path("\\\\fileserver\\projects\\reports"), "Z:\\Reports")
    assert shown(Path("\\\\fileserver\\projects\\reports\\2024\\Budget.docx")) == "Z:\\Reports\\2024\\Budget.docx"
    assert shown(Path("\\\\fileserver\\projects\\reports")) == "Z:\\Reports"
    elsewhere = "\\\\fileserver\\projects\\reports-old\\x.docx"
    assert shown(Path(elsewhere)) == elsewhere
    linux = respelled(Path("/srv/share/docs"), "/home/ann/Docs")
    assert linux(Path("/srv/share/docs/a/B.md")) == "/home/ann/Docs/a/B.md"


def test_this_machine_keeps_the_identities_it_had(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """On Linux the identity is what ``normcase(Path.resolve())`` was (existing document ids stay); the display
    does not resolve links."""
    real = tmp_path / "Real Docs"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "Shared").symlink_to(real, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    for path in (tmp_path / "Shared" / "sub" / "A.md", "Shared/sub/../sub/A.md", real / "A.md", "missing/x.md"):
        assert normalise_path(path) == os.path.normcase(str(Path(path).resolve()))
    assert display_path("Shared/sub/A.md") == str(tmp_path / "Shared" / "sub" / "A.md")
    assert normalise_path("Shared/sub/A.md") == str(real / "sub" / "A.md")


# ------------------------------------------------------------------------------ real ingests, both stores


def shown_documents(index) -> dict[str, tuple[str, str]]:
    """id -> (identity, display path), and the display path every chunk of it carries (citations)."""
    reader = index.reader()
    try:
        documents = {d.id: (d.path, d.display_path) for d in reader.documents()}
        for doc_id, (_, shown) in documents.items():
            chunks, _ = reader.document_chunks(doc_id)
            assert chunks and {c.path for c in chunks} == {shown}
            assert {c.path for c in reader.chunks([c.id for c in chunks]).values()} == {shown}
        return documents
    finally:
        reader.close()


def test_a_linked_folder_is_shown_as_spelled_and_replaced_or_deleted_by_either_spelling(store, embedder,
                                                                                        tmp_path: Path):
    real = tmp_path / "Real Docs"
    real.mkdir()
    (tmp_path / "Shared").symlink_to(real, target_is_directory=True)
    (real / "Wombat.md").write_text(WOMBAT, encoding="utf-8")
    index = store.index(fresh_name())
    via_link = tmp_path / "Shared" / "Wombat.md"

    summary = ingest_paths([tmp_path / "Shared"], index, IngestParameters.defaults(embedder))
    assert [(o.path, o.status) for o in summary.outcomes] == [(str(via_link), "added")]
    doc_id = document_id(via_link)
    assert doc_id == document_id(real / "Wombat.md")
    assert shown_documents(index) == {doc_id: (str(real / "Wombat.md"), str(via_link))}

    (real / "Wombat.md").write_text(WOMBAT + "\nThey are mostly nocturnal.\n", encoding="utf-8")
    summary = ingest_paths([real / "Wombat.md"], index,
                           IngestParameters.defaults(embedder))  # the same file by its own name: replaced
    assert [(o.status, o.document_id) for o in summary.outcomes] == [("updated", doc_id)]
    assert shown_documents(index) == {doc_id: (str(real / "Wombat.md"), str(real / "Wombat.md"))}

    summary = ingest_paths([via_link], index,
                           IngestParameters.defaults(embedder))  # unchanged, but seen by another spelling: shown so
    assert [o.status for o in summary.outcomes] == ["unchanged"]
    assert shown_documents(index) == {doc_id: (str(real / "Wombat.md"), str(via_link))}

    assert delete_document(index, str(real / "Wombat.md")).display_path == str(via_link)
    assert shown_documents(index) == {}
    ingest_paths([via_link], index, IngestParameters.defaults(embedder))
    assert delete_document(index, str(via_link)).id == doc_id
    with pytest.raises(DocumentNotFoundError):
        delete_document(index, str(via_link))


@pytest.fixture()
def case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's paths under a case-insensitive file system's rules (as Windows and macOS compare names)."""
    monkeypatch.setattr(paths, "LOCAL", dataclasses.replace(paths.LOCAL, case_insensitive=True))


def test_case_is_kept_for_display_and_ignored_for_identity(store, embedder, tmp_path: Path, case_insensitive):
    upper = tmp_path / "Team Docs" / "Wombat Report.md"
    upper.parent.mkdir()
    upper.write_text(WOMBAT, encoding="utf-8")
    index = store.index(fresh_name())
    ingest_paths([upper.parent], index, IngestParameters.defaults(embedder))
    doc_id = document_id(upper)
    assert shown_documents(index) == {doc_id: (str(upper).lower(), str(upper))}

    # Another spelling of the same name (here a second file: this file system does not fold case) replaces it.
    lower = tmp_path / "team docs" / "wombat report.md"
    lower.parent.mkdir()
    lower.write_text(WOMBAT + "\nThey are mostly nocturnal.\n", encoding="utf-8")
    summary = ingest_paths([lower], index, IngestParameters.defaults(embedder))
    assert [(o.status, o.document_id) for o in summary.outcomes] == [("updated", doc_id)]
    assert shown_documents(index) == {doc_id: (str(upper).lower(), str(lower))}

    record = delete_document(index, str(tmp_path / "TEAM DOCS" / "WOMBAT REPORT.MD"))  # no such file: still it
    assert (record.id, record.display_path) == (doc_id, str(lower))
    assert shown_documents(index) == {}


def test_a_synced_folder_shows_the_spelling_it_was_added_with(store, embedder, tmp_path: Path, case_insensitive):
    # A sync lists the folder by its identity, lower-case here: the folder is, so that this file system finds it.
    real = tmp_path / "share" / "projects"
    real.mkdir(parents=True)
    (tmp_path / "Mapped").symlink_to(tmp_path / "share", target_is_directory=True)  # a drive letter, in effect
    (real / "Wombat.md").write_text(WOMBAT, encoding="utf-8")
    (real / "Quokka.md").write_text(QUOKKA, encoding="utf-8")
    index = store.index(fresh_name())
    shown = tmp_path / "Mapped" / "projects"
    added = add_source(index, embedder, shown)
    assert (added.path, added.display_path) == (str(real).lower(), str(shown))
    assert added.summary()["path"] == str(shown)
    for spelling in (str(shown), str(real), str(real).upper(), added.id):
        assert find_source(index_sources(index), spelling).id == added.id

    result = sync_source(index, added, IngestParameters.defaults(embedder))
    assert sorted((o.path, o.status) for o in result.ingest.outcomes) == [
        (str(shown / "Quokka.md"), "added"), (str(shown / "Wombat.md"), "added")]
    assert sorted(shown_documents(index).values()) == [
        (str(real / n).lower(), str(shown / n)) for n in ("Quokka.md", "Wombat.md")]

    (real / "Wombat.md").rename(real / "Wombats.md")
    (real / "Quokka.md").unlink()
    result = sync_source(index, index_sources(index)[0], IngestParameters.defaults(embedder))
    assert result.renamed == [(str(shown / "Wombat.md"), str(shown / "Wombats.md"))]
    assert result.removed == [str(shown / "Quokka.md")]
    assert result.as_dict()["folder"] == str(shown)
    assert list(shown_documents(index).values()) == [(str(real / "Wombats.md").lower(), str(shown / "Wombats.md"))]


# ------------------------------------------------------------------------------ indexes made before display paths
def test_an_embedded_index_from_before_display_paths_shows_identities_then_migrates(embedder, tmp_path: Path):
    real = tmp_path / "Real Docs"
    real.mkdir()
    (tmp_path / "Shared").symlink_to(real, target_is_directory=True)
    (real / "Wombat.md").write_text(WOMBAT, encoding="utf-8")
    index = EmbeddedStore(tmp_path / "indexes").index("old")
    ingest_paths([tmp_path / "Shared"], index, IngestParameters.defaults(embedder))
    with sqlite3.connect(tmp_path / "indexes" / "old" / DB_NAME) as conn:  # as the previous version made it
        conn.execute("ALTER TABLE documents DROP COLUMN display_path")
    doc_id = document_id(real / "Wombat.md")
    assert shown_documents(index) == {doc_id: (str(real / "Wombat.md"), str(real / "Wombat.md"))}

    reader = index.reader()  # a server's reader, open across the upgrade
    try:
        (real / "Quokka.md").write_text(QUOKKA, encoding="utf-8")
        ingest_paths([real / "Quokka.md"], index,
                     IngestParameters.defaults(embedder))  # the writer adds the column: display = identity
        with sqlite3.connect(tmp_path / "indexes" / "old" / DB_NAME) as conn:
            assert conn.execute("SELECT path, display_path FROM documents WHERE id = ?", (doc_id,)).fetchone() == \
                (str(real / "Wombat.md"), str(real / "Wombat.md"))
        ingest_paths([tmp_path / "Shared"], index,
                     IngestParameters.defaults(embedder))  # unchanged files seen again: their spelling
        hits = reader.chunks(c.id for c in reader.document_chunks(doc_id)[0])
        assert {c.path for c in hits.values()} == {str(tmp_path / "Shared" / "Wombat.md")}
    finally:
        reader.close()


def test_a_postgres_index_from_before_display_paths_migrates(embedder, postgres_url: str, tmp_path: Path):
    import psycopg

    from rag.store.postgres import SCHEMA_VERSION, PostgresStore

    real = tmp_path / "Real Docs"
    real.mkdir()
    (tmp_path / "Shared").symlink_to(real, target_is_directory=True)
    (real / "Wombat.md").write_text(WOMBAT, encoding="utf-8")
    name = fresh_name()
    store = PostgresStore(postgres_url, pool_size=2)
    ingest_paths([tmp_path / "Shared"], store.index(name), IngestParameters.defaults(embedder))
    index_id = store.lookup(name)[0]
    store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as schema version 3 left it
        conn.execute(f"ALTER TABLE rag_index_{index_id}.documents DROP COLUMN display_path")
        conn.execute("DELETE FROM rag.schema_version WHERE version = 4")
    assert SCHEMA_VERSION == 4

    upgraded = PostgresStore(postgres_url, pool_size=2)
    try:
        doc_id = document_id(real / "Wombat.md")
        assert shown_documents(upgraded.index(name)) == {doc_id: (str(real / "Wombat.md"), str(real / "Wombat.md"))}
        ingest_paths([tmp_path / "Shared"], upgraded.index(name), IngestParameters.defaults(embedder))
        assert shown_documents(upgraded.index(name)) == {
            doc_id: (str(real / "Wombat.md"), str(tmp_path / "Shared" / "Wombat.md"))}
        assert upgraded.query("SELECT max(version) FROM rag.schema_version")[0][0] == 4
    finally:
        upgraded.close()


# ------------------------------------------------------------------------------ what people see: API and CLI
def test_the_api_and_the_cli_show_the_spelling_and_take_either(settings, embedder, tmp_path: Path):
    from litestar.testing import TestClient

    from api.app import create_app

    home = tmp_path / "home"
    real = tmp_path / "Real Docs"
    real.mkdir()
    (tmp_path / "Shared").symlink_to(real, target_is_directory=True)
    (real / "Wombat.md").write_text(WOMBAT, encoding="utf-8")
    (real / "Quokka.md").write_text(QUOKKA, encoding="utf-8")
    app_settings = settings.replace(home=home)
    shown = tmp_path / "Shared"
    index = EmbeddedStore(app_settings.indexes_dir).index(app_settings.index)
    add_source(index, embedder, shown)
    sync_source(index, index_sources(index)[0], IngestParameters.defaults(embedder))
    wombat, quokka = document_id(real / "Wombat.md"), document_id(real / "Quokka.md")

    with TestClient(create_app(app_settings), base_url="http://127.0.0.1", timeout=120) as client:
        deadline = time.monotonic() + 120
        while client.get("/healthz").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.1)
        listed = client.get("/v1/documents").json()["documents"]
        assert sorted((d["id"], d["path"]) for d in listed) == sorted(
            [(wombat, str(shown / "Wombat.md")), (quokka, str(shown / "Quokka.md"))])
        assert [s["path"] for s in client.get("/v1/sources").json()["sources"]] == [str(shown)]
        retrieved = client.post("/v1/retrieve", json={"query": "Where do quokkas live?", "top_k": 1}).json()
        assert retrieved["chunks"][0]["path"] == str(shown / "Quokka.md")
        deleted = client.delete(f"/v1/documents/{quokka}")
        assert deleted.status_code == 200 and deleted.json()["path"] == str(shown / "Quokka.md")

    env = cli_env(settings, COLUMNS="300", PYTHONIOENCODING="utf-8")

    def rag(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], capture_output=True,
                              text=True, env=env, cwd=PROJECT_ROOT, timeout=120)

    import json

    listed = json.loads(rag("documents", "list", "--json").stdout)
    assert [(d["id"], d["path"]) for d in listed] == [(wombat, str(shown / "Wombat.md"))]
    assert str(shown / "Wombat.md") in rag("documents", "list").stdout
    assert str(shown) in rag("sources", "list").stdout
    proc = rag("documents", "delete", str(real / "Wombat.md"))  # by its identity's spelling
    assert proc.returncode == 0 and proc.stderr.strip() == f"deleted {wombat} ({shown / 'Wombat.md'}, 1 chunk)"
