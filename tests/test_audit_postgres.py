"""The audit trail in PostgreSQL (``store_url``): replicas and processes appending at once make one hash chain
(``rag.store.audit_postgres``), and ``rag audit verify`` names the first edited, deleted or moved record by its
sequence number. Each test has a database of its own: it tampers with the trail."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import psycopg
import pytest

from helpers import cli_env, server_process
from rag.store.audit_postgres import PostgresAuditTrail
from rag.core.settings import PROJECT_ROOT, Settings

QUESTION = "Who was the leader of the Normans who swore fealty to Charles III?"
NORMANS = (PROJECT_ROOT / "examples" / "docs" / "normans.md").read_bytes()
APPENDER = """
import sys, time
from rag.store.audit_postgres import PostgresAuditTrail
trail = PostgresAuditTrail(sys.argv[1])
trail.records(principal="nobody")  # connected, tables there
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
for n in range(int(sys.argv[3])):
    trail.append("retrieve", principal=sys.argv[4], index="default", outcome="retrieved", n=n)
trail.close()
"""


@pytest.fixture
def database(postgres_url: str) -> str:
    """A database of the session's PostgreSQL for this test alone."""
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


def rag(settings: Settings, home: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, RAG_STORE_URL=url, RAG_AUDIT_KEY_FILE=str(home / "audit.key")),
                          capture_output=True, text=True, timeout=120)


def test_processes_appending_at_once_make_one_chain(settings: Settings, database: str, tmp_path: Path):
    start_at = str(time.time() + 4)  # both processes are connected by then and start together
    appenders = [subprocess.Popen([sys.executable, "-c", APPENDER, database, start_at, "300", who],
                                  cwd=PROJECT_ROOT, env=cli_env(settings), stderr=subprocess.PIPE, text=True)
                 for who in ("one", "two")]
    trail, seen = PostgresAuditTrail(database), set()
    try:
        while any(p.poll() is None for p in appenders):  # verified while they append: never a false alarm
            checked, problems = trail.verify()
            assert problems == [], problems
            seen.add(checked)
    finally:
        trail.close()
    for process in appenders:
        assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    assert any(0 < n < 600 for n in seen), seen
    records = [json.loads(text) for (text,) in rows(database, "SELECT record FROM rag.audit ORDER BY seq")]
    assert [r["seq"] for r in records] == list(range(1, 601))
    assert all(b["prev"] == a["hash"] for a, b in zip(records, records[1:]))
    principals = [r["principal"] for r in records]
    assert principals.count("one") == principals.count("two") == 300
    switches = sum(a != b for a, b in zip(principals, principals[1:]))
    assert switches > 10, f"the two processes did not append at the same time ({switches} switches)"
    assert len({r["writer"] for r in records}) == 2
    verified = rag(settings, tmp_path, database, "audit", "verify")
    assert verified.returncode == 0 and "audit trail intact: 600 records in rag.audit" in verified.stderr, \
        verified.stderr


def test_a_replica_connecting_while_another_appends_neither_waits_nor_deadlocks(database: str):
    """CI at f360be2: a replica opening its first connection re-ran the schema's DDL, whose table locks (ALTER
    TABLE's ACCESS EXCLUSIVE) wait for any append in progress; with the append's INSERT behind the DDL's CREATE
    INDEX, PostgreSQL broke the deadlock by failing one of them (a 503 to the user)."""
    first = PostgresAuditTrail(database)
    first.append("retrieve", principal="one", index="default", outcome="retrieved")  # the tables exist
    with psycopg.connect(database) as appending:  # an append in progress: the head row locked, not committed
        appending.execute("SELECT seq FROM rag.audit_head FOR UPDATE")
        with ThreadPoolExecutor(1) as pool:
            second = PostgresAuditTrail(database)
            read = pool.submit(second.records)
            try:
                assert [r["principal"] for r in read.result(timeout=20)] == ["one"]
            finally:
                appending.rollback()  # lets an old build's DDL through, so that a failing run ends
                second.close()
    first.append("retrieve", principal="two", index="default", outcome="retrieved")
    assert first.verify()[1] == []
    first.close()


def test_replicas_share_one_trail_and_verify_names_the_tampered_record(settings: Settings, database: str,
                                                                         tmp_path: Path):
    keys = {}
    for name, role in (("alice", "reader"), ("bob", "editor")):
        created = rag(settings, tmp_path, database, "keys", "create", name, "--role", role, "--json")
        assert created.returncode == 0, created.stderr
        keys[name] = {"Authorization": f"Bearer {json.loads(created.stdout)['key']}"}
    # Replicas share the audit key (the CLI's, made in its home by `rag keys create`), as they share the store.
    env = {"RAG_STORE_URL": database, "RAG_UPLOADS_DIR": str(tmp_path / "shared-uploads"), "RAG_MAX_TOKENS": "8",
           "RAG_AUDIT_QUESTIONS": "full", "RAG_AUDIT_KEY_FILE": str(tmp_path / "audit.key")}
    with ExitStack() as stack:
        a, b = (stack.enter_context(server_process(settings, tmp_path / f"home-{n}", tmp_path / f"{n}.log",
                                                   wait_ready=False, **env)) for n in "ab")
        for base in (a, b):
            deadline = time.monotonic() + 90
            while httpx.get(f"{base}/healthz", timeout=5).status_code != 200:
                assert time.monotonic() < deadline, "a replica did not get ready"
                time.sleep(0.25)
        first = httpx.post(f"{a}/v1/documents", files={"data": ("normans.md", NORMANS)}, headers=keys["bob"],
                           timeout=120)
        assert first.status_code == 200, first.text

        def call(args: tuple[str, str, str]) -> httpx.Response:
            base, who, what = args
            if what == "ask":
                return httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, headers=keys[who], timeout=120)
            if what == "retrieve":
                return httpx.post(f"{base}/v1/retrieve", json={"query": QUESTION}, headers=keys[who], timeout=60)
            return httpx.post(f"{base}/v1/documents", files={"data": (f"note-{who}-{base[-5:]}.md",
                                                                      b"# Note\n\nThe Normans came from Normandy.\n")},
                              headers=keys[who], timeout=120)

        calls = [(base, who, what) for base in (a, b) for who in ("alice", "bob")
                 for what in ("ask", "retrieve", "retrieve", "upload")]
        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(call, calls))
    for (base, who, what), response in zip(calls, responses):
        expected = 403 if (who, what) == ("alice", "upload") else 200
        assert response.status_code == expected, (base, who, what, response.text)

    table = rows(database, "SELECT seq, record FROM rag.audit ORDER BY seq")
    records = [json.loads(text) for _, text in table]
    assert [seq for seq, _ in table] == [r["seq"] for r in records] == list(range(1, len(records) + 1))
    request_ids = [r["request_id"] for r in records if "request_id" in r]  # the CLI's two key records have none
    assert sorted(request_ids) == sorted(r.headers["x-request-id"] for r in (first, *responses))
    assert len(records) == 2 + 1 + len(calls)
    assert {r["event"] for r in records} == {"key.create", "upload", "answer", "retrieve", "refused"}
    assert len({r["writer"] for r in records if r.get("request_id")}) == 2, "both replicas wrote to the one trail"
    intact = rag(settings, tmp_path, database, "audit", "verify")
    assert intact.returncode == 0 and f"intact: {len(records)} records" in intact.stderr, intact.stderr

    shown = rag(settings, tmp_path, database, "audit", "show", "--json", "--principal", "alice", "--since", "1h")
    assert shown.returncode == 0, shown.stderr
    alice = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["seq"] for r in alice] == [r["seq"] for r in records if r["principal"] == "alice"]
    assert len(alice) == 8 and {r["event"] for r in alice} == {"answer", "retrieve", "refused"}
    assert all(r["question"] == QUESTION for r in alice if r["event"] != "refused")

    def verify_names(seq: int, reason: str) -> None:
        result = rag(settings, tmp_path, database, "audit", "verify")
        assert result.returncode == 1, result.stderr
        assert f"rag.audit record {seq}: {reason}" in result.stderr, result.stderr

    def restored() -> None:
        assert rag(settings, tmp_path, database, "audit", "verify").returncode == 0

    answer = next(r for r in records if r["event"] == "answer" and r["principal"] == "alice")
    k, original = answer["seq"], table[answer["seq"] - 1][1]
    rows(database, "UPDATE rag.audit SET record = replace(record, %s, %s) WHERE seq = %s",
         (QUESTION, "What is the vault combination?", k))
    verify_names(k, "the record was edited")
    rows(database, "UPDATE rag.audit SET record = %s WHERE seq = %s", (original, k))
    restored()

    saved = rows(database, "DELETE FROM rag.audit WHERE seq = %s RETURNING seq, ts, principal, index_name, record",
                 (k,))
    verify_names(k + 1, f"the chain breaks here: expected record {k} after record {k - 1}, found record {k + 1}")
    rows(database, "INSERT INTO rag.audit (seq, ts, principal, index_name, record) VALUES (%s, %s, %s, %s, %s)",
         saved[0])
    restored()

    for old, new in ((k, -1), (k + 1, k), (-1, k + 1)):  # swap two records' sequence numbers
        rows(database, "UPDATE rag.audit SET seq = %s WHERE seq = %s", (new, old))
    verify_names(k, f"the chain breaks here: expected record {k} after record {k - 1}, found record {k + 1}")
    for old, new in ((k, -1), (k + 1, k), (-1, k + 1)):
        rows(database, "UPDATE rag.audit SET seq = %s WHERE seq = %s", (new, old))
    restored()

    last = len(records)
    rows(database, "DELETE FROM rag.audit WHERE seq = %s", (last,))
    verify_names(last, f"missing: the trail ends at record {last - 1}, but {last} were written")
