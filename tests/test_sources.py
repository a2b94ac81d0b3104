"""Watched folders (docs/sources.md, "Sources and sync"): `rag sources add` + `rag sync` against a real folder that
changes, on the embedded store and on PostgreSQL; the index after a sync equals a clean ingest of the folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from rag.core.settings import PROJECT_ROOT, Settings, load_settings
from tests.helpers import cli_env

TEXTS = {
    "a.md": "# Alder\n\nThe alder grove is pruned in March by the river wardens.\n\nIts bark is used for dye.",
    "b.md": "# Birch\n\nBirch sap is tapped in early spring at the northern farms.",
    "c.md": "# Cedar\n\nThe cedar hall was built in 1932 by the guild of carpenters.\n\nIt seats four hundred.",
    "keep.md": "# Kestrel\n\nThe Kestrel Club meets on Thursdays in the old mill by the weir.",
    "sub/d.md": "# Dogwood\n\nDogwood hedges line the east road to the quarry.",
}


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(params=["embedded", "postgres"])
def store_env(request) -> dict[str, str]:
    if request.param == "embedded":
        return {}
    return {"RAG_STORE_URL": request.getfixturevalue("postgres_url")}


def rag(settings: Settings, home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, RAG_TELEMETRY="off", **env), capture_output=True, text=True,
                          timeout=300)


def index_contents(home: Path, env: dict[str, str], index: str) -> dict[str, list[str]]:
    """Path -> chunk texts of every document of an index, read through the store itself."""
    from app.runtime import open_store

    store = open_store(load_settings(environ={}, overrides={"home": home, "store_url": env.get("RAG_STORE_URL")}))
    reader = store.index(index).reader()
    try:
        return {d.path: [c.text for c in reader.document_chunks(d.id)[0]] for d in reader.documents()}
    finally:
        reader.close()
        store.close()


def sync(settings: Settings, home: Path, env: dict[str, str], index: str) -> dict:
    done = rag(settings, home, env, "sync", "--index", index, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["errors"] == []
    return report["synced"][0]


def test_a_sync_brings_the_index_to_the_folder_state(settings: Settings, tmp_path: Path, store_env):
    home, folder = tmp_path / "home", tmp_path / "share"
    index = f"synced{os.getpid()}{len(store_env)}"
    for name, text in TEXTS.items():
        write(folder, name, text)
    added = rag(settings, home, store_env, "sources", "add", str(folder), "--index", index)
    assert added.returncode == 0, added.stderr
    first = sync(settings, home, store_env, index)
    assert (first["added"], first["removed"], first["renamed"]) == (5, [], [])

    # The share changes: one file edited, one deleted, one renamed, a subfolder removed, one new file.
    write(folder, "a.md", TEXTS["a.md"] + "\n\nA second alder grove was planted in 1990.")
    (folder / "b.md").unlink()
    (folder / "c.md").rename(folder / "c renamed.md")
    shutil.rmtree(folder / "sub")
    write(folder, "e.md", "# Elm\n\nThe elm avenue leads to the station and was replanted after the storm.")
    second = sync(settings, home, store_env, index)
    assert (second["added"], second["updated"], second["unchanged"]) == (1, 1, 1)
    assert [(Path(r["from"]).name, Path(r["to"]).name) for r in second["renamed"]] == [("c.md", "c renamed.md")]
    assert sorted(Path(p).name for p in second["removed"]) == ["b.md", "d.md"]
    after = index_contents(home, store_env, index)
    embedded = sum(len(chunks) for path, chunks in after.items() if Path(path).name in ("a.md", "e.md"))
    assert second["chunks_embedded"] == embedded  # the renamed file was not embedded again

    # The index now equals a clean ingest of the folder as it is.
    clean = rag(settings, home, store_env, "ingest", str(folder), "--index", f"{index}clean")
    assert clean.returncode == 0, clean.stderr
    assert after == index_contents(home, store_env, f"{index}clean")

    # Nothing changed: nothing is read. Same size and time with other bytes shows it: that edit goes unseen.
    again = sync(settings, home, store_env, index)
    assert (again["unchanged"], again["chunks_embedded"], again["added"], again["updated"]) == (4, 0, 0, 0)
    keep = folder / "keep.md"
    stat = keep.stat()
    keep.write_text(TEXTS["keep.md"].replace("Thursdays", "Saturdays"), encoding="utf-8")
    os.utime(keep, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sync(settings, home, store_env, index)["unchanged"] == 4

    # A share that is not there deletes nothing and says why; `rag sources list` shows it.
    folder.rename(tmp_path / "unmounted")
    missing = rag(settings, home, store_env, "sync", "--index", index)
    assert missing.returncode == 2 and "does not exist" in missing.stdout + missing.stderr
    assert index_contents(home, store_env, index) == after
    listed = rag(settings, home, store_env, "sources", "list", "--index", index, "--json")
    assert json.loads(listed.stdout)[0]["last"]["status"] == "error"
    (tmp_path / "unmounted").rename(folder)

    # An unmounted share is often an empty mount-point folder: that deletes nothing either, unless told.
    folder.rename(tmp_path / "moved-away")
    folder.mkdir()
    empty = rag(settings, home, store_env, "sync", "--index", index)
    assert empty.returncode == 2 and "no file to follow" in empty.stdout + empty.stderr, empty.stdout + empty.stderr
    assert index_contents(home, store_env, index) == after
    emptied = rag(settings, home, store_env, "sync", "--index", index, "--allow-empty", "--json")
    assert emptied.returncode == 0, emptied.stdout + emptied.stderr
    assert len(json.loads(emptied.stdout)["synced"][0]["removed"]) == 4 and not index_contents(home, store_env, index)
    folder.rmdir()
    (tmp_path / "moved-away").rename(folder)

    removed = rag(settings, home, store_env, "sources", "remove", str(folder), "--index", index)
    assert removed.returncode == 0 and "stay in the index" in removed.stdout
    assert json.loads(rag(settings, home, store_env, "sources", "list", "--index", index, "--json").stdout) == []


def test_one_process_syncs_a_source_at_a_time_on_postgres(settings: Settings, tmp_path: Path, postgres_url: str):
    """Replicas on one PostgreSQL: a sync holds an advisory lock on (index, source); another is refused at once,
    changing nothing. Here the test's own session stands for the replica that is syncing."""
    import psycopg

    from rag.store.postgres import source_lock_key

    env = {"RAG_STORE_URL": postgres_url}
    home, folder = tmp_path / "home", tmp_path / "share"
    index = f"busy{uuid.uuid4().hex[:8]}"
    write(folder, "a.md", TEXTS["a.md"])
    write(folder, "b.md", TEXTS["b.md"])
    added = rag(settings, home, env, "sources", "add", str(folder), "--index", index, "--json")
    assert added.returncode == 0, added.stderr
    source_id = json.loads(added.stdout)["id"]
    key = source_lock_key(index, source_id)
    with psycopg.connect(postgres_url, autocommit=True) as replica:
        assert replica.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        refused = rag(settings, home, env, "sync", "--index", index, "--json")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        report = json.loads(refused.stdout)
        assert report["synced"] == []
        assert [(e["source"], e["type"]) for e in report["errors"]] == [(source_id, "source_busy")]
        plain = rag(settings, home, env, "sync", source_id, "--index", index)
        assert plain.returncode == 2
        assert (f"error: source {source_id} of index '{index}' is being synced by another process right now"
                in " ".join((plain.stdout + plain.stderr).split()))
        assert index_contents(home, env, index) == {}  # nothing ingested ...
        listed = json.loads(rag(settings, home, env, "sources", "list", "--index", index, "--json").stdout)
        assert (listed[0]["last"], listed[0]["files"]) == (None, 0)  # ... and nothing recorded
    # That session ended, and its lock with it: the sync runs, and gives the lock back when done.
    assert sync(settings, home, env, index)["added"] == 2
    assert set(map(Path, index_contents(home, env, index))) == {folder / "a.md", folder / "b.md"}
    with psycopg.connect(postgres_url, autocommit=True) as replica:
        assert replica.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]


def test_a_sync_killed_mid_run_leaves_committed_state_and_the_next_one_converges(settings: Settings, tmp_path: Path,
                                                                                 store_env):
    """`rag sync` killed with SIGKILL while it OCRs a scanned PDF, after it has removed, edited and added files in
    its run: on the embedded store the index is exactly as the last sync left it (one commit per sync); on
    PostgreSQL, where each document commits on its own, every document is whole, either as before or as the
    folder has it now, and the source still records the previous sync. The next sync converges to a clean ingest."""
    import sqlite3

    import psutil

    from tests.format_fixtures import scanned_page

    home, folder = tmp_path / "home", tmp_path / "share"
    index = f"killed{uuid.uuid4().hex[:8]}"
    for name, text in TEXTS.items():
        write(folder, name, text)
    added = rag(settings, home, store_env, "sources", "add", str(folder), "--index", index, "--json")
    assert added.returncode == 0, added.stderr
    source_id = json.loads(added.stdout)["id"]
    assert sync(settings, home, store_env, index)["added"] == 5
    before = index_contents(home, store_env, index)
    listed_before = rag(settings, home, store_env, "sources", "list", "--index", index, "--json").stdout

    write(folder, "a.md", TEXTS["a.md"] + "\n\nA second alder grove was planted in 1990.")
    (folder / "b.md").unlink()
    write(folder, "e.md", "# Elm\n\nThe elm avenue leads to the station and was replanted after the storm.")
    write(folder, "f.md", "# Fir\n\nThe fir plantation on the ridge is thinned every seven years.")
    pages = [scanned_page(f"Survey sheet {n} of the harbour.\nThe tide gauge at berth {n} was read at dawn.",
                          seed=n) for n in range(1, 4)]  # loaded last ("zz"), in the loader process, OCR'd
    pages[0].save(folder / "zz-scan.pdf", "PDF", resolution=200, save_all=True, append_images=pages[1:])

    log = (tmp_path / "killed.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--home", str(home), "sync", "--index", index],
                            cwd=PROJECT_ROOT, env=cli_env(settings, RAG_TELEMETRY="off", **store_env),
                            stdout=log, stderr=subprocess.STDOUT)
    children: list[psutil.Process] = []
    try:
        # Mid-run, provably: tesseract is reading a page of the scanned PDF, the last file of the run.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            children = psutil.Process(proc.pid).children(recursive=True)
            try:
                if any(c.name() == "tesseract" and not {"--version", "--list-langs"} & set(c.cmdline())
                       for c in children):
                    break
            except psutil.Error:  # one ended while we looked
                pass
            time.sleep(0.02)
        else:
            pytest.fail(f"the sync never reached OCR: {(tmp_path / 'killed.log').read_text()}")
        if store_env:  # the sync holds its source's lock (what keeps other replicas out)
            import psycopg

            from rag.store.postgres import source_lock_key

            with psycopg.connect(store_env["RAG_STORE_URL"], autocommit=True) as other:
                assert not other.execute("SELECT pg_try_advisory_lock(%s)",
                                         (source_lock_key(index, source_id),)).fetchone()[0]
        else:  # its transaction is open: SQLite's write lock is held
            probe = sqlite3.connect(home / "indexes" / index / "store.sqlite", timeout=0, isolation_level=None)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                probe.execute("BEGIN IMMEDIATE")
            probe.close()
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.kill()
        assert proc.wait(timeout=30) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        orphans = list(children)  # the loader process and its tesseracts outlive the sync: end them
        for child in children:
            try:
                orphans += child.children(recursive=True)
            except psutil.Error:
                pass
        for orphan in orphans:
            try:
                orphan.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(orphans, timeout=30)
        log.close()

    killed = index_contents(home, store_env, index)
    assert rag(settings, home, store_env, "sources", "list", "--index", index, "--json").stdout == listed_before
    if not store_env:
        assert killed == before
    else:  # the run's removal of b.md had committed on its own (removals go first); no document is partial
        names = {Path(p).name for p in killed}
        assert "b.md" not in names and {"a.md", "c.md", "d.md", "keep.md"} <= names
        from app.runtime import open_store

        store = open_store(load_settings(environ={}, overrides={"home": home, "store_url": store_env["RAG_STORE_URL"]}))
        reader = store.index(index).reader()
        try:
            assert all(d.chunks == len(reader.document_chunks(d.id)[0]) > 0 for d in reader.documents())
        finally:
            reader.close()
            store.close()

    again = sync(settings, home, store_env, index)
    assert again["failed"] == 0
    assert {Path(o["path"]).name: o["status"] for o in again["files"]}["zz-scan.pdf"] == "added"
    clean = rag(settings, home, store_env, "ingest", str(folder), "--index", f"{index}clean")
    assert clean.returncode == 0, clean.stderr
    converged = index_contents(home, store_env, index)
    assert converged == index_contents(home, store_env, f"{index}clean")
    scanned = next(chunks for path, chunks in converged.items() if Path(path).name == "zz-scan.pdf")
    assert "tide gauge at berth 3" in " ".join(" ".join(scanned).split())  # OCR'd, page 3 included
    # Whatever the killed run left, each document was as before or as now: never a mix.
    assert all(chunks in (before.get(path), converged.get(path)) for path, chunks in killed.items())


def test_sources_are_checked_when_added(settings: Settings, tmp_path: Path):
    home, folder = tmp_path / "home", tmp_path / "share"
    write(folder, "inner/x.md", "# X\n\nSome text about the x.")
    missing = rag(settings, home, {}, "sources", "add", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert rag(settings, home, {}, "sources", "add", str(folder), "--every", "15m").returncode == 0
    again = rag(settings, home, {}, "sources", "add", str(folder))  # a provisioning script run twice
    assert again.returncode == 0
    listed = json.loads(rag(settings, home, {}, "sources", "list", "--json").stdout)
    assert [s["every_s"] for s in listed] == [900]  # the schedule stays unless --every is given
    assert rag(settings, home, {}, "sources", "add", str(folder), "--every", "off").returncode == 0
    assert json.loads(rag(settings, home, {}, "sources", "list", "--json").stdout)[0]["every_s"] is None
    inner = rag(settings, home, {}, "sources", "add", str(folder / "inner"))
    assert inner.returncode == 2 and "overlaps" in inner.stderr
    unknown = rag(settings, home, {}, "sync", "nope")
    assert unknown.returncode == 2 and "no source 'nope'" in unknown.stderr


def source_series(base: str) -> dict[tuple[str, ...], float]:
    """The rag_source_* samples of the server's /metrics: (name, index, source[, outcome]) -> value."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(f"{base}/metrics")
    assert response.status_code == 200, response.text
    return {(s.name, s.labels["index"], s.labels["source"], *([s.labels["outcome"]] if "outcome" in s.labels else [])):
            s.value for family in text_string_to_metric_families(response.text) for s in family.samples
            if s.name.startswith("rag_source_")}


def test_the_server_lists_sources_and_syncs_one_now(settings: Settings, tmp_path: Path):
    import httpx

    from tests.helpers import server_process

    home, folder = tmp_path / "home", tmp_path / "share"
    write(folder, "keep.md", TEXTS["keep.md"])
    added = rag(settings, home, {}, "sources", "add", str(folder))
    assert added.returncode == 0, added.stderr
    with server_process(settings, home, tmp_path / "server.log", RAG_TELEMETRY="off") as base:
        listed = httpx.get(f"{base}/v1/sources").json()
        assert [(s["path"], s["files"], s["last"]) for s in listed["sources"]] == [(str(folder), 0, None)]
        source_id = listed["sources"][0]["id"]
        write(folder, "a.md", TEXTS["a.md"])
        synced = httpx.post(f"{base}/v1/sources/{source_id}/sync", timeout=120)
        assert synced.status_code == 200, synced.text
        last = synced.json()["last"]
        assert (last["status"], last["added"], last["unchanged"]) == ("ok", 2, 0)
        assert synced.json()["files"] == 2
        # /metrics: the last sync of each source, labelled by its id (not its folder); no schedule, no next sync.
        index, started = listed["index"], datetime.fromisoformat(last["started_at"]).timestamp()
        files = {outcome: 0.0 for outcome in ("added", "updated", "unchanged", "renamed", "removed", "failed")}
        assert source_series(base) == {
            ("rag_source_last_sync_timestamp_seconds", index, source_id): started,
            ("rag_source_last_sync_duration_seconds", index, source_id): last["seconds"],
            ("rag_source_last_sync_ok", index, source_id): 1.0,
            **{("rag_source_last_sync_files", index, source_id, outcome): count
               for outcome, count in {**files, "added": 2.0}.items()}}
        assert abs(started - time.time()) < 120 and last["seconds"] > 0
        assert str(folder) not in httpx.get(f"{base}/metrics").text
        titles = {d["title"] for d in httpx.get(f"{base}/v1/documents").json()["documents"]}
        assert titles == {"Kestrel", "Alder"}
        missing = httpx.post(f"{base}/v1/sources/{'0' * 12}/sync")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "source_not_found"
        folder.rename(tmp_path / "unmounted")
        gone = httpx.post(f"{base}/v1/sources/{source_id}/sync")
        assert gone.status_code == 400 and gone.json()["error"]["type"] == "source_unavailable"
        assert len(httpx.get(f"{base}/v1/documents").json()["documents"]) == 2  # nothing removed
        assert httpx.get(f"{base}/v1/sources").json()["sources"][0]["last"]["status"] == "error"
        failed = source_series(base)
        assert failed[("rag_source_last_sync_ok", index, source_id)] == 0.0  # the folder could not be read
        assert failed[("rag_source_last_sync_timestamp_seconds", index, source_id)] >= started


def test_the_server_syncs_a_source_on_its_schedule(settings: Settings, tmp_path: Path):
    import httpx

    from tests.helpers import server_process

    home, folder = tmp_path / "home", tmp_path / "share"
    write(folder, "keep.md", TEXTS["keep.md"])
    bad = rag(settings, home, {}, "sources", "add", str(folder), "--every", "soon")
    assert bad.returncode == 2 and "cannot read 'soon' as an interval" in bad.stderr
    added = rag(settings, home, {}, "sources", "add", str(folder), "--every", "1s")
    assert added.returncode == 0, added.stderr
    with server_process(settings, home, tmp_path / "server.log", RAG_TELEMETRY="off") as base:
        def titles() -> set[str]:
            response = httpx.get(f"{base}/v1/documents")
            return {d["title"] for d in response.json()["documents"]} if response.status_code == 200 else set()

        deadline = time.monotonic() + 30
        while titles() != {"Kestrel"} and time.monotonic() < deadline:
            time.sleep(0.25)
        assert titles() == {"Kestrel"}  # the first scheduled sync, with nobody asking
        write(folder, "a.md", TEXTS["a.md"])
        (folder / "keep.md").unlink()
        deadline = time.monotonic() + 30
        while titles() != {"Alder"} and time.monotonic() < deadline:
            time.sleep(0.25)
        assert titles() == {"Alder"}
        listed = httpx.get(f"{base}/v1/sources").json()["sources"][0]
        assert listed["every_s"] == 1 and listed["last"]["status"] == "ok"
        series = source_series(base)  # a scheduled source also says when its next sync is due
        nexts = [(key, value) for key, value in series.items() if key[0] == "rag_source_next_sync_timestamp_seconds"]
        assert len(nexts) == 1 and nexts[0][0][2] == listed["id"]
        started = series[("rag_source_last_sync_timestamp_seconds", *nexts[0][0][1:])]
        assert started + 1.0 <= nexts[0][1] <= started + 1.1  # every 1 s, stretched by up to 10%
    assert '"message": "scheduled sync of' in (tmp_path / "server.log").read_text(encoding="utf-8")
