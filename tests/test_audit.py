"""An audit trail that proves what it claims (issue 34, finding 9), attacked as a host's administrator or a
database owner would: with the real `rag keys`, a real `rag serve` and `rag audit verify`, and by hand on the
trail's files or rows, never through the code that writes them.

* Records are MACs under a key kept apart from the trail (``audit_key_file``): a chain rewritten end to end with
  its sha256 recomputed (today's format) is reported, with the heads kept or deleted.
* ``audit/heads.sqlite`` anchors every chain (files); the head row carries a MAC (PostgreSQL): a chain folder
  deleted whole, or the last records of a chain cut (its head moved back too, in PostgreSQL), is reported.
* Every ``rag keys`` command appends to one long-lived chain, ``keys``, not a chain of its own that could go.
* 401s and the browser guard's refusals are ``refused`` records, rate-limited: 1000 bad requests leave a few.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from helpers import cli_env, server_process
from rag.store.audit_files import GENESIS, REFUSALS_PER_CLIENT, canonical
from rag.core.settings import PROJECT_ROOT, Settings

BAD_TOKEN = "rag_0123456789ab_not-a-real-secret-but-never-recorded"


def rag(settings: Settings, home: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess:
    env = cli_env(settings, **({"RAG_STORE_URL": url} if url else {}))
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def verify_fails(settings: Settings, home: Path, *reasons: str, url: str | None = None) -> str:
    result = rag(settings, home, "audit", "verify", url=url)
    assert result.returncode == 1, f"the tampering went unnoticed:\n{result.stderr}"
    for reason in reasons:
        assert reason in result.stderr, result.stderr
    return result.stderr


def verify_passes(settings: Settings, home: Path, url: str | None = None) -> str:
    result = rag(settings, home, "audit", "verify", url=url)
    assert result.returncode == 0 and "audit trail intact" in result.stderr, result.stderr
    return result.stderr


def resealed(records: list[dict], change) -> list[dict]:
    """``records`` (one chain) rewritten as the attacker likes, every hash recomputed as sha256 over the
    canonical JSON, the way today's trail is checked; the key's marks dropped (there is no key to use)."""
    out, prev = [], GENESIS
    for record in records:
        body = {k: v for k, v in record.items() if k not in ("hash", "mac", "key_id")}
        change(body)
        body["prev"] = prev
        body["hash"] = prev = hashlib.sha256(canonical(body)).hexdigest()
        out.append(body)
    return out


def chain_folders(home: Path) -> list[Path]:
    return sorted(p for p in (home / "audit").iterdir() if p.is_dir())


def read_chain(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_bytes().splitlines()]


def write_chain(folder: Path, records: list[dict]) -> None:
    for path in folder.glob("*.jsonl"):
        path.unlink()
    (folder / "000001.jsonl").write_bytes(b"".join(canonical(r) + b"\n" for r in records))


def rename_key(body: dict) -> None:
    if body.get("key") == "mallory":
        body["key"] = "maintenance"


# --------------------------------------------------------------------------- embedded store (files)
def test_key_commands_append_to_one_long_lived_chain(settings: Settings, tmp_path: Path):
    for args in (("create", "alice", "--role", "reader"), ("create", "bob", "--role", "editor"),
                 ("revoke", "alice")):
        result = rag(settings, tmp_path, "keys", *args)
        assert result.returncode == 0, result.stderr
    folders = chain_folders(tmp_path)
    assert len(folders) == 1, f"each rag keys command opened a chain of its own: {[f.name for f in folders]}"
    records = read_chain(folders[0])
    assert [(r["seq"], r["event"], r["key"]) for r in records] == [
        (1, "key.create", "alice"), (2, "key.create", "bob"), (3, "key.revoke", "alice")]
    assert all(b["prev"] == a["hash"] for a, b in zip(records, records[1:]))
    assert "intact: 3 records" in verify_passes(settings, tmp_path)


@pytest.mark.parametrize("tamper", ["rewrite", "rewrite-and-drop-heads", "delete-chain", "cut-end",
                                    "cut-end-and-move-head"])
def test_a_rewritten_deleted_or_cut_chain_is_reported(settings: Settings, tmp_path: Path, tamper: str):
    """The host's administrator hides that the key ``mallory`` was made (or the last key made, ``bob``)."""
    for name in ("alice", "mallory", "bob"):
        assert rag(settings, tmp_path, "keys", "create", name, "--role", "admin").returncode == 0
    verify_passes(settings, tmp_path)
    audit = tmp_path / "audit"
    if tamper.startswith("rewrite"):  # every chain rewritten end to end, sha256 recomputed: mallory is gone
        for folder in chain_folders(tmp_path):
            write_chain(folder, resealed(read_chain(folder), rename_key))
        assert b"mallory" not in b"".join(p.read_bytes() for p in audit.rglob("*.jsonl"))
        if tamper == "rewrite-and-drop-heads":
            (audit / "heads.sqlite").unlink()
            verify_fails(settings, tmp_path, "the heads are gone")
        else:
            verify_fails(settings, tmp_path)
    elif tamper == "delete-chain":  # every chain deleted whole (the key records with them)
        for folder in chain_folders(tmp_path):
            shutil.rmtree(folder)
        verify_fails(settings, tmp_path, "missing: the chain is gone, but 3 records of it were written")
    else:  # the end of the chain cut: the last record (bob) removed
        for folder in chain_folders(tmp_path):
            write_chain(folder, read_chain(folder)[:-1])
            if tamper == "cut-end-and-move-head":  # and its head moved back to the new last record
                last = read_chain(folder)[-1]
                with sqlite3.connect(audit / "heads.sqlite") as conn:
                    conn.execute("UPDATE heads SET seq = ?, hash = ? WHERE chain = ?", (2, last["hash"], folder.name))
                verify_fails(settings, tmp_path, "the heads were edited")
            else:
                verify_fails(settings, tmp_path, "missing: the chain ends at record 2, but 3 were written")


def test_key_commands_at_once_take_turns_in_one_chain(settings: Settings, tmp_path: Path):
    assert rag(settings, tmp_path, "keys", "create", "first", "--role", "reader").returncode == 0
    commands = [subprocess.Popen([sys.executable, "-m", "app.cli", "--home", str(tmp_path), "keys", "create",
                                  f"k{n}", "--role", "reader"], cwd=PROJECT_ROOT, env=cli_env(settings),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in range(4)]
    for command in commands:
        assert command.wait(timeout=120) == 0, command.stderr.read() if command.stderr else ""
    (folder,) = chain_folders(tmp_path)
    records = read_chain(folder)
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert sorted(r["key"] for r in records[1:]) == ["k0", "k1", "k2", "k3"]
    assert "intact: 5 records" in verify_passes(settings, tmp_path)


def test_a_trail_from_before_the_key_is_anchored_when_the_key_is_made(settings: Settings, tmp_path: Path):
    """An upgrade: the chains written before (unkeyed sha256, as main writes them) verify afterwards, and
    rewriting them then is reported."""
    legacy = tmp_path / "audit" / "20250101T000000-old-host-1"
    legacy.mkdir(parents=True)
    write_chain(legacy, resealed([{"event": "key.create", "key": name, "seq": n, "ts": f"2025-01-01T00:00:0{n}.000Z"}
                                  for n, name in enumerate(["alice", "mallory"], 1)], lambda body: None))
    assert not (tmp_path / "audit.key").exists()
    assert rag(settings, tmp_path, "keys", "create", "bob", "--role", "reader").returncode == 0
    assert (tmp_path / "audit.key").exists()
    assert "2 record(s) were written without the audit key" in verify_passes(settings, tmp_path)
    write_chain(legacy, resealed(read_chain(legacy), rename_key))
    verify_fails(settings, tmp_path, "record 2 is not the one the heads name")


# --------------------------------------------------------------------------- refusals, both stores
@pytest.fixture
def database(postgres_url: str) -> str:
    """A database of the session's PostgreSQL for this test alone (it tampers with the trail)."""
    name = f"audit_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = postgres_url.replace("/postgres?", f"/{name}?", 1)
    assert name in url, url
    return url


def rows(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, args)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=["embedded", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("database") if request.param == "postgres" else None


def test_a_table_from_before_the_key_is_anchored_when_the_key_is_made(settings: Settings, tmp_path: Path,
                                                                      database: str):
    from rag.store.audit_postgres import PostgresAuditTrail

    old = PostgresAuditTrail(database)  # no key: as main writes the table
    for name in ("alice", "mallory"):
        old.append("key.create", principal="local", key=name, outcome="created")
    old.close()
    assert rag(settings, tmp_path, "keys", "create", "bob", "--role", "reader", url=database).returncode == 0
    events = [json.loads(text)["event"] for (text,) in rows(database, "SELECT record FROM rag.audit ORDER BY seq")]
    assert events == ["key.create", "key.create", "audit.keyed", "key.create"]
    assert "2 record(s) were written without the audit key" in verify_passes(settings, tmp_path, url=database)
    records = [json.loads(text) for (text,) in rows(database, "SELECT record FROM rag.audit WHERE seq <= 2 "
                                                              "ORDER BY seq")]
    for record in resealed(records, rename_key):
        rows(database, "UPDATE rag.audit SET record = %s WHERE seq = %s", (canonical(record).decode(), record["seq"]))
    verify_fails(settings, tmp_path, "rag.audit record 3: the chain breaks here", url=database)


def test_refusals_before_authentication_are_audited_and_bounded(settings: Settings, tmp_path: Path,
                                                                 store_url: str | None):
    home = tmp_path / "home"
    created = rag(settings, home, "keys", "create", "ops", "--role", "admin", "--json", url=store_url)
    assert created.returncode == 0, created.stderr
    key = {"Authorization": f"Bearer {json.loads(created.stdout)['key']}"}
    env = {"RAG_STORE_URL": store_url} if store_url else {}
    with server_process(settings, home, tmp_path / "serve.log", **env) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            assert client.get("/v1/me", headers=key).status_code == 200
            assert client.get("/v1/me", headers={"Authorization": f"Bearer {BAD_TOKEN}"}).status_code == 401
            assert client.get("/v1/indexes").status_code == 401
            assert client.post("/v1/documents", headers={**key, "Origin": "https://evil.example"},
                               files={"data": ("x.md", b"# x\n")}).status_code == 403
            assert client.get("/v1/me", headers={**key, "Host": "evil.example"}).status_code == 403
            for _ in range(1000):  # a flood
                assert client.post("/v1/retrieve", json={"query": "x"},
                                   headers={"Authorization": f"Bearer {BAD_TOKEN}"}).status_code == 401
    shown = rag(settings, home, "audit", "show", "--json", url=store_url)
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    refused = [r for r in records if r["event"] == "refused"]
    by_reason = {reason: [r for r in refused if r.get("reason") == reason]
                 for reason in ("unauthorized", "cross_origin", "forbidden_host")}
    assert len(by_reason["cross_origin"]) == 1 and by_reason["cross_origin"][0]["origin"] == "https://evil.example"
    assert len(by_reason["forbidden_host"]) == 1 and by_reason["forbidden_host"][0]["host"] == "evil.example"
    unauthorized = by_reason["unauthorized"]
    single = [r for r in unauthorized if "suppressed" not in r]
    summaries = [r for r in unauthorized if "suppressed" in r]
    assert len(single) >= REFUSALS_PER_CLIENT, len(single)  # 10 a minute: 20 if the flood took over a minute
    assert all(r["client"] == "127.0.0.1" and r["status"] == 401 and r["outcome"] == "refused" for r in single)
    assert {r["route"] for r in single} >= {"/v1/me", "/v1/indexes"}
    assert sum(r["suppressed"] for r in summaries) == 1002 - len(single), summaries
    assert len(refused) <= 2 * REFUSALS_PER_CLIENT, f"the flood left {len(refused)} records"
    trail = "\n".join(json.dumps(r) for r in records)
    assert BAD_TOKEN not in trail and json.loads(created.stdout)["key"] not in trail
    verify_passes(settings, home, url=store_url)

    if store_url is None:  # the server's own chain: deleted whole, then cut at its end
        audit = home / "audit"
        shutil.copytree(audit, tmp_path / "saved")
        server_chain = next(f for f in chain_folders(home) if f.name != "keys")
        shutil.rmtree(server_chain)
        verify_fails(settings, home, f"{server_chain}: missing: the chain is gone")
        shutil.rmtree(audit)
        shutil.copytree(tmp_path / "saved", audit)
        count = len(read_chain(server_chain))
        write_chain(server_chain, read_chain(server_chain)[:-1])
        verify_fails(settings, home, f"missing: the chain ends at record {count - 1}, but {count} were written")
        return
    # PostgreSQL: the last records cut and the head row moved back to the new last one, as a database owner can;
    # then the whole table rewritten with sha256 recomputed and the head moved to match.
    last = rows(store_url, "SELECT max(seq) FROM rag.audit")[0][0]
    saved = rows(store_url, "SELECT seq, ts, principal, index_name, record FROM rag.audit WHERE seq > %s",
                 (last - 3,))
    head = rows(store_url, "SELECT * FROM rag.audit_head")
    rows(store_url, "DELETE FROM rag.audit WHERE seq > %s", (last - 3,))
    new_last = json.loads(rows(store_url, "SELECT record FROM rag.audit WHERE seq = %s", (last - 3,))[0][0])
    rows(store_url, "UPDATE rag.audit_head SET seq = %s, hash = %s", (new_last["seq"], new_last["hash"]))
    verify_fails(settings, home, f"rag.audit record {last - 3}:", url=store_url)
    for row in saved:
        rows(store_url, "INSERT INTO rag.audit VALUES (%s, %s, %s, %s, %s)", row)
    rows(store_url, "DELETE FROM rag.audit_head")
    rows(store_url, f"INSERT INTO rag.audit_head VALUES ({', '.join(['%s'] * len(head[0]))})", head[0])
    verify_passes(settings, home, url=store_url)

    records = [json.loads(text) for (text,) in rows(store_url, "SELECT record FROM rag.audit ORDER BY seq")]
    forged = resealed(records, lambda body: body.update(client="10.9.9.9") if "client" in body else None)
    for record in forged:
        rows(store_url, "UPDATE rag.audit SET record = %s WHERE seq = %s", (canonical(record).decode(), record["seq"]))
    columns = [c for (c,) in rows(store_url, "SELECT column_name FROM information_schema.columns WHERE "
                                             "table_schema = 'rag' AND table_name = 'audit_head'")]
    rows(store_url, "UPDATE rag.audit_head SET seq = %s, hash = %s" + (", mac = NULL" if "mac" in columns else ""),
         (forged[-1]["seq"], forged[-1]["hash"]))
    verify_fails(settings, home, "rag.audit record", url=store_url)


# --------------------------------------------------------------------------- the key: never made again over a keyed trail
def test_a_deleted_key_is_not_made_again_over_a_keyed_trail(settings: Settings, tmp_path: Path, store_url: str | None):
    """Whoever can write the home but not read the key rewrites the trail without it (sha256), deletes the
    heads and the key: the next writer must not make a new key that would anchor the forgery."""
    for name in ("alice", "mallory"):
        assert rag(settings, tmp_path, "keys", "create", name, "--role", "admin", url=store_url).returncode == 0
    if store_url is None:
        audit = tmp_path / "audit"
        (keys_chain,) = chain_folders(tmp_path)
        shutil.copytree(keys_chain, audit / "20250101T000000-host-7")  # another writer's chain, left keyed
        write_chain(keys_chain, resealed(read_chain(keys_chain), rename_key))
        (audit / "heads.sqlite").unlink()
    (tmp_path / "audit.key").unlink()
    result = rag(settings, tmp_path, "keys", "create", "bob", "--role", "reader", url=store_url)
    assert result.returncode != 0, f"a new key was made over a keyed trail:\n{result.stderr}"
    assert "the audit key is missing" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "audit.key").exists()
    if store_url is None:  # the heads kept, every chain rewritten: refused too
        shutil.rmtree(audit / "20250101T000000-host-7")
        other = tmp_path / "other"
        assert rag(settings, other, "keys", "create", "alice", "--role", "admin").returncode == 0
        shutil.copy(other / "audit" / "heads.sqlite", audit / "heads.sqlite")
        result = rag(settings, tmp_path, "keys", "create", "bob", "--role", "reader")
        assert result.returncode != 0 and "the audit key is missing" in result.stderr, result.stderr


def test_a_trail_from_before_the_key_is_anchored_even_if_its_writer_stops_at_once(settings: Settings,
                                                                                   tmp_path: Path,
                                                                                   store_url: str | None):
    """The key is made by a server that stops before it writes a record: the trail before it still verifies
    (anchored when the key was made, not at a first record that never comes)."""
    home = tmp_path / "home"
    if store_url is None:
        legacy = home / "audit" / "20250101T000000-old-host-1"
        legacy.mkdir(parents=True)
        write_chain(legacy, resealed([{"event": "key.create", "key": name, "seq": n,
                                       "ts": f"2025-01-01T00:00:0{n}.000Z"}
                                      for n, name in enumerate(["alice", "mallory"], 1)], lambda body: None))
    else:
        from rag.store.audit_postgres import PostgresAuditTrail

        old = PostgresAuditTrail(store_url)  # no key: as main writes the table
        for name in ("alice", "mallory"):
            old.append("key.create", principal="local", key=name, outcome="created")
        old.close()
    env = {"RAG_STORE_URL": store_url} if store_url else {}
    with server_process(settings, home, tmp_path / "serve.log", **env):
        assert (home / "audit.key").exists()
    assert "2 record(s) were written without the audit key" in verify_passes(settings, home, url=store_url)


def test_the_keys_chain_goes_on_after_a_command_stopped_before_its_heads(settings: Settings, tmp_path: Path):
    """A `rag keys` command fsync'd its record but stopped before the heads were committed: the next command
    continues after that record, not from the stale head (a fork: "the chain breaks here" for good)."""
    assert rag(settings, tmp_path, "keys", "create", "alice", "--role", "reader").returncode == 0
    heads = tmp_path / "audit" / "heads.sqlite"
    saved = heads.read_bytes()
    assert rag(settings, tmp_path, "keys", "create", "bob", "--role", "reader").returncode == 0
    heads.write_bytes(saved)  # as if the second command had stopped before its heads' commit
    assert rag(settings, tmp_path, "keys", "revoke", "alice").returncode == 0
    (folder,) = chain_folders(tmp_path)
    assert [(r["seq"], r["key"]) for r in read_chain(folder)] == [(1, "alice"), (2, "bob"), (3, "alice")]
    assert "intact: 3 records" in verify_passes(settings, tmp_path)


@pytest.mark.parametrize("damage", ["heads", "empty-key", "unwritable-key"])
def test_a_damaged_heads_file_or_key_file_is_a_clear_error(settings: Settings, tmp_path: Path, damage: str):
    assert rag(settings, tmp_path, "keys", "create", "alice", "--role", "reader").returncode == 0
    if damage == "heads":
        (tmp_path / "audit" / "heads.sqlite").write_bytes(b"not a database\n" * 512)
        expected = "the audit trail's heads"
    elif damage == "empty-key":  # cut by a crash
        (tmp_path / "audit.key").write_bytes(b"")
        expected = "is empty"
    else:  # a key to make where no file can be written (a folder in the way)
        shutil.rmtree(tmp_path / "audit")
        (tmp_path / "audit.key").unlink()
        (tmp_path / "audit.key").mkdir()
        expected = "audit key file"
    result = rag(settings, tmp_path, "keys", "create", "bob", "--role", "reader")
    assert result.returncode != 0, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_an_append_never_waits_for_the_heads(settings: Settings, tmp_path: Path):
    """The heads are moved by the syncer thread, not in a request's append: another process holding their write
    lock (a `rag keys` command, a slow disk) does not hold up the requests of a server."""
    import threading
    import time

    from app.runtime import open_audit

    trail = open_audit(settings.replace(home=tmp_path, audit=True))
    assert trail is not None
    trail.append("answer", principal="p", outcome="answered", n=-1)
    time.sleep(1.5)  # the heads exist (the first record is anchored)
    blocker = sqlite3.connect(tmp_path / "audit" / "heads.sqlite", isolation_level=None, timeout=30,
                              check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(6, lambda: blocker.execute("COMMIT"))  # another process done after 6 s
    release.start()
    started = time.monotonic()
    for n in range(40):
        trail.append("answer", principal="p", outcome="answered", n=n)
    took = time.monotonic() - started
    release.join()
    blocker.close()
    trail.close()
    assert took < 2, f"40 appends took {took:.1f} s while the heads were locked"
    assert tuple(trail.verify()) == (41, [])


def test_a_head_without_a_mac_before_any_keyed_record_is_not_called_moved():
    """A key that exists while nothing was written with it (a key made by a version that did not anchor the
    table at once): not "the head row was moved" (no record was cut, no head moved)."""
    from rag.store.audit_postgres import _walk
    from rag.store.audit_files import AuditKey

    records = resealed([{"event": "key.create", "key": name, "seq": n, "ts": f"2025-01-01T00:00:0{n}.000Z"}
                        for n, name in enumerate(["alice", "bob"], 1)], lambda body: None)
    table = [(r["seq"], r["ts"], None, None, canonical(r).decode()) for r in records]
    checked, unkeyed, problem = _walk(table, (2, records[-1]["hash"], None), AuditKey(b"k" * 32))
    assert (checked, unkeyed) == (2, 2)
    assert problem is None or "moved" not in problem.reason, problem


def test_a_trail_from_before_the_key_is_anchored_when_writers_start_together(settings: Settings, tmp_path: Path):
    """Several writers starting at once over a trail from before the key (workers, commands): whichever makes
    the key anchors the old chains before any other can see it; every one of them verifies."""
    legacy = tmp_path / "audit" / "20250101T000000-old-host-1"
    legacy.mkdir(parents=True)
    write_chain(legacy, resealed([{"event": "key.create", "key": "alice", "seq": 1,
                                   "ts": "2025-01-01T00:00:01.000Z"}], lambda body: None))
    commands = [subprocess.Popen([sys.executable, "-m", "app.cli", "--home", str(tmp_path), "keys", "create",
                                  f"k{n}", "--role", "reader"], cwd=PROJECT_ROOT, env=cli_env(settings),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in range(4)]
    for command in commands:
        assert command.wait(timeout=120) == 0, command.stderr.read() if command.stderr else ""
    assert "1 record(s) were written without the audit key" in verify_passes(settings, tmp_path)
