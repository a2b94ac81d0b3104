"""Hidden means absent: every path around document permissions, driven against a real ``rag serve`` as the
attacker would (issue 34). For a principal, a document outside its groups behaves in every reply, score, count,
job record, error and side effect exactly as if it did not exist; a principal never grants, sees or changes more
than it holds; a missing piece of the access machinery means "refuse", never "open".

Each test names the finding it covers. Where the path touches the store, it runs on both stores (the embedded
FAISS + SQLite one and PostgreSQL + pgvector)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from helpers import cli_env, server_process
from rag.core.keys import new_key, parse_grants
from rag.core.settings import PROJECT_ROOT, Settings

ENV_KEY = "hidden-test-env-key-93c1"  # RAG_API_KEY: an admin on every index who sees every document
SECRET = b"# Budget\n\nThe Zorblax merger budget is 41 million crowns, for the finance board only.\n"
SECRET_WORDS = ("Zorblax", "41 million")
STORES = ("embedded", "postgresql")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def run_cli(home: Path, settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rag.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, **env), capture_output=True, text=True, timeout=120)


@dataclass
class Deployment:
    """A running server and the keys of the people in these tests."""

    base: str
    home: Path
    store: str
    env: dict[str, str]
    keys: dict[str, str]

    def as_(self, who: str) -> dict[str, str]:
        return bearer(ENV_KEY if who == "admin" else self.keys[who])

    def upload(self, who: str, index: str, name: str, content: bytes, groups: str | None = None) -> httpx.Response:
        query = f"?index={index}" + (f"&groups={groups}" if groups is not None else "")
        return httpx.post(f"{self.base}/v1/documents{query}", headers=self.as_(who), timeout=120,
                          files={"data": (name, content, "text/markdown")})

    def delete(self, who: str, index: str, doc_id: str) -> httpx.Response:
        return httpx.delete(f"{self.base}/v1/documents/{doc_id}?index={index}", headers=self.as_(who), timeout=60)

    def documents(self, who: str, index: str) -> list[dict[str, Any]]:
        listed = httpx.get(f"{self.base}/v1/documents?index={index}", headers=self.as_(who), timeout=60)
        assert listed.status_code == 200, listed.text
        return listed.json()["documents"]


# The people: groups are always explicit here (a key without groups is the subject of its own test).
PEOPLE = {
    "staff": ("editor", ("*",), ("staff",)),  # edits every index, sees staff documents
    "finance": ("reader", ("*",), ("finance",)),  # reads every index, sees finance documents
}


def make_keys(add) -> dict[str, str]:
    tokens = {}
    for name, (role, indexes, groups) in PEOPLE.items():
        record, tokens[name] = new_key(f"hidden-{name}", parse_grants(role, indexes), groups=frozenset(groups))
        add(record)
    return tokens


@pytest.fixture(scope="module", params=STORES)
def deployment(request, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp(f"hidden-{request.param}")
    env = {"RAG_MAX_TOKENS": "12", "RAG_API_KEY": ENV_KEY, "RAG_AUDIT_QUESTIONS": "full"}
    if request.param == "embedded":
        from ingest.store.keys import SqliteKeyStore

        keys = SqliteKeyStore(home)
    else:
        import psycopg

        from ingest.store.keys import PostgresKeyStore

        url = request.getfixturevalue("postgres_url")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS rag_hidden WITH (FORCE)")
            conn.execute("CREATE DATABASE rag_hidden")
        url = url.replace("/postgres?", "/rag_hidden?", 1)
        assert "rag_hidden" in url, url
        env["RAG_STORE_URL"] = url
        keys = PostgresKeyStore(url)
    try:
        tokens = make_keys(keys.add)
    finally:
        keys.close()
    with server_process(settings, home, home / "serve.log", **env) as base:
        yield Deployment(base, home, request.param, env, tokens)


def fresh_index() -> str:
    return f"h{uuid.uuid4().hex[:8]}"


def files_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return response.json()["files"]


# --------------------------------------------------------------------------- 1. uploads cross the group boundary
def test_upload_over_hidden_document_is_stored_apart(deployment: Deployment):
    """Finding 1: an editor of ``staff`` uploading names of an uploaded ``finance`` document (the same name, a
    case variant, its very bytes, new text with ``&groups=staff``) learns nothing of it — every reply is the one
    it gets once that document is gone — and the finance document keeps its text and groups. Setting a group
    the editor does not hold is refused."""
    d, index = deployment, fresh_index()
    hidden = files_of(d.upload("admin", index, "Budget.md", SECRET, groups="finance"))[0]
    assert hidden["status"] == "added"
    probes = [("Budget.md", SECRET, None), ("budget.md", SECRET, None), ("BUDGET.md", b"# Mine\n\nStaff text.\n", "staff"),
              ("budget.md", SECRET + b" ", None)]

    def probe() -> list[list[dict[str, Any]]]:
        replies = []
        for name, content, groups in probes:
            replies.append(files_of(d.upload("staff", index, name, content, groups)))
            for result in replies[-1]:
                assert d.delete("staff", index, result["document_id"]).status_code == 200
        return replies

    with_hidden = probe()
    finance_view = {doc["id"]: doc for doc in d.documents("finance", index)}
    assert finance_view[hidden["document_id"]]["access_groups"] == "finance"
    assert finance_view[hidden["document_id"]]["chunks"] == hidden["chunks"]
    found = httpx.post(f"{d.base}/v1/retrieve", headers=d.as_("finance"), timeout=60,
                       json={"query": "Zorblax merger budget", "index": index}).json()["chunks"]
    assert found and found[0]["document_id"] == hidden["document_id"] and "41 million" in found[0]["text"]
    assert "Staff text" not in str(found)
    refused = d.upload("staff", index, "Budget.md", b"# Moved\n\nInto staff.\n", groups="finance")
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden", refused.text
    assert d.delete("admin", index, hidden["document_id"]).status_code == 200
    without_hidden = probe()
    assert with_hidden == without_hidden
    assert all(r["status"] == "added" and not r.get("renamed_from") for reply in with_hidden for r in reply)
