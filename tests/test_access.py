"""Access control against a real ``rag serve``: API keys and roles per index, revocation and expiry on the next
request, RAG_API_KEY as admin, the browser guard (Host, Origin, text/plain), signed JWT bearer tokens, and the
hash-chained audit trail (``rag audit verify`` on an untouched, an edited, a cut and a reordered trail)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from helpers import cli_env, jwt_env, server_process, sign, signing_key
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from rag.store.keys import SqliteKeyStore
from rag.store.audit_files import AuditTrail, verify
from rag.core.access import EVERY_DOCUMENT, Principal, visible, visible_ids
from rag.core.keys import new_key, parse_grants
from rag.core.settings import PROJECT_ROOT, Settings

EXAMPLE_DOCS = PROJECT_ROOT / "examples" / "docs"
ENV_KEY = "access-test-env-key-5b1e"
QUESTION = "Who was Rollo?"
NOTE = b"Quorple notes\n\nThe quorple bird nests only on the roofs of Zanthor lighthouses.\n"


def run_cli(home: Path, settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, **env), capture_output=True, text=True, timeout=120)


def add_key(home: Path, name: str, role: str, *indexes: str, expires: float | None = None,
            groups: frozenset[str] = frozenset()) -> str:
    record, token = new_key(name, parse_grants(role, indexes), groups=groups, expires=expires)
    store = SqliteKeyStore(home)
    try:
        store.add(record)
    finally:
        store.close()
    return token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, settings: Settings, embedder) -> Path:
    """The example documents in the default index and in a second index, ``hr``."""
    home = tmp_path_factory.mktemp("access-home")
    docs = home / "docs"
    shutil.copytree(EXAMPLE_DOCS, docs)
    paths = sorted(docs.glob("*.md"))
    local = settings.replace(home=home)
    for index in (local.index, "hr"):
        summary = ingest_paths(paths, EmbeddedIndex(local.index_path(index)),
                               IngestParameters.from_settings(settings, embedder))
        assert summary.count("added") == len(paths), summary.as_dict()
    return home


@pytest.fixture(scope="module")
def keys(home: Path) -> dict[str, str]:
    return {"reader": add_key(home, "reader-default", "reader", "default"),
            "hr": add_key(home, "reader-hr", "reader", "hr"),
            "editor": add_key(home, "editor-default", "editor", "default"),
            "admin": add_key(home, "admin-all", "admin", groups=frozenset({"*"}))}


@pytest.fixture(scope="module")
def server(settings: Settings, home: Path, keys: dict[str, str], tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("access-logs") / "serve.log"
    with server_process(settings, home, log, RAG_MAX_TOKENS="12", RAG_API_KEY=ENV_KEY,
                        RAG_AUDIT_QUESTIONS="full") as base:
        yield base


def error_type(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()["error"]["type"]


# --------------------------------------------------------------------------- keys and roles
def test_missing_unknown_and_malformed_keys_get_one_401(server: str, keys: dict[str, str]):
    forged = keys["reader"][:-4] + "AAAA"
    answers = [httpx.get(f"{server}/v1/documents", headers=headers)
               for headers in ({}, bearer("nonsense"), bearer(forged), bearer("rag_000000000000_x"))]
    assert {r.status_code for r in answers} == {401}
    assert len({r.text for r in answers}) == 1, "a 401 must not say which check failed"
    assert answers[0].headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{server}/healthz").status_code == 200  # open, as before


def test_reader_reads_but_may_not_change(server: str, keys: dict[str, str]):
    auth = bearer(keys["reader"])
    listed = httpx.get(f"{server}/v1/documents", headers=auth)
    assert listed.status_code == 200 and listed.json()["documents"]
    retrieved = httpx.post(f"{server}/v1/retrieve", json={"query": QUESTION}, headers=auth)
    assert retrieved.status_code == 200 and retrieved.json()["chunks"]
    asked = httpx.post(f"{server}/v1/ask", json={"question": QUESTION}, headers=auth, timeout=120)
    assert asked.status_code == 200 and asked.json()["sources"], asked.text
    upload = httpx.post(f"{server}/v1/documents", files={"data": ("quorple.md", NOTE, "text/markdown")},
                        headers=auth)
    assert error_type(upload, 403) == "forbidden"
    doc_id = listed.json()["documents"][0]["id"]
    assert error_type(httpx.delete(f"{server}/v1/documents/{doc_id}", headers=auth), 403) == "forbidden"
    assert httpx.get(f"{server}/v1/documents", headers=auth).json() == listed.json()  # nothing changed


def test_a_forbidden_index_is_403_whether_or_not_it_exists(server: str, keys: dict[str, str]):
    auth = bearer(keys["hr"])
    assert httpx.post(f"{server}/v1/retrieve", json={"query": QUESTION, "index": "hr"}, headers=auth).status_code == 200
    existing = httpx.post(f"{server}/v1/retrieve", json={"query": QUESTION}, headers=auth)  # the default index
    missing = httpx.post(f"{server}/v1/retrieve", json={"query": QUESTION, "index": "no-such-index"}, headers=auth)
    assert error_type(existing, 403) == error_type(missing, 403) == "forbidden"
    assert existing.json()["error"]["message"].replace("'default'", "X") == \
        missing.json()["error"]["message"].replace("'no-such-index'", "X")
    listed = httpx.get(f"{server}/v1/documents?index=default", headers=auth)
    assert error_type(listed, 403) == "forbidden"
    indexes = httpx.get(f"{server}/v1/indexes", headers=auth).json()["indexes"]
    assert [i["name"] for i in indexes] == ["hr"]  # the default index is not even listed


def test_editor_and_admin_upload_and_delete(server: str, keys: dict[str, str]):
    for who, target in (("editor", "default"), ("admin", "hr"), ("env", "hr")):
        auth = bearer(ENV_KEY if who == "env" else keys[who])
        name = f"quorple-{who}.md"
        upload = httpx.post(f"{server}/v1/documents?index={target}", headers=auth, timeout=120,
                            files={"data": (name, NOTE, "text/markdown")})
        assert upload.status_code == 200, upload.text
        doc_id = upload.json()["files"][0]["document_id"]
        deleted = httpx.delete(f"{server}/v1/documents/{doc_id}?index={target}", headers=auth)
        assert deleted.status_code == 200 and deleted.json()["deleted"] == doc_id, deleted.text
    hr_editor = httpx.post(f"{server}/v1/documents?index=hr", headers=bearer(keys["editor"]),
                           files={"data": ("x.md", NOTE, "text/markdown")})
    assert error_type(hr_editor, 403) == "forbidden"  # editor of default only


def test_revoked_key_fails_on_the_next_request(server: str, home: Path, settings: Settings):
    created = run_cli(home, settings, "keys", "create", "to-revoke", "--role", "reader", "--index", "default")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("rag_") and token not in (home / "access.sqlite").read_bytes().decode("latin-1")
    assert httpx.get(f"{server}/v1/documents", headers=bearer(token)).status_code == 200
    revoked = run_cli(home, settings, "keys", "revoke", "to-revoke")
    assert revoked.returncode == 0, revoked.stderr
    assert error_type(httpx.get(f"{server}/v1/documents", headers=bearer(token)), 401) == "unauthorized"
    listed = run_cli(home, settings, "keys", "list", "--json")
    states = {row["name"]: row["state"] for row in json.loads(listed.stdout)}
    assert states["to-revoke"] == "revoked" and states["reader-default"] == "active"
    assert token not in listed.stdout


def test_expired_key_fails_on_the_next_request(server: str, home: Path):
    token = add_key(home, "short-lived", "reader", "default", expires=time.time() + 3)
    assert httpx.get(f"{server}/v1/documents", headers=bearer(token)).status_code == 200
    time.sleep(3.2)
    assert error_type(httpx.get(f"{server}/v1/documents", headers=bearer(token)), 401) == "unauthorized"


def test_serve_refuses_a_public_address_without_any_key(settings: Settings, tmp_path: Path):
    result = run_cli(tmp_path, settings, "serve", "--host", "0.0.0.0", "--port", "9")
    assert result.returncode == 2 and "--insecure-no-auth" in result.stderr, result.stderr


# --------------------------------------------------------------------------- the browser guard
@pytest.fixture(scope="module")
def open_server(settings: Settings, tmp_path_factory: pytest.TempPathFactory):
    """A server with no key at all (today's default on 127.0.0.1): open, but not to other web pages."""
    home = tmp_path_factory.mktemp("open-home")
    with server_process(settings, home, home / "serve.log", RAG_MAX_TOKENS="12") as base:
        yield base


@pytest.mark.parametrize("who", ["open server", "admin key"])
def test_foreign_host_cross_origin_posts_and_text_plain_are_refused(request, keys: dict[str, str], who: str):
    server = request.getfixturevalue("open_server" if who == "open server" else "server")
    auth = bearer(keys["admin"]) if who == "admin key" else {}
    port = server.rsplit(":", 1)[1]
    rebound = httpx.get(f"{server}/v1/documents", headers={**auth, "Host": f"evil.example:{port}"})
    assert error_type(rebound, 403) == "forbidden_host"
    assert error_type(httpx.get(f"{server}/", headers={"Host": "evil.example"}), 403) == "forbidden_host"
    form = httpx.post(f"{server}/v1/documents", files={"data": ("evil.md", NOTE, "text/markdown")},
                      headers={**auth, "Origin": "http://evil.example"})
    assert error_type(form, 403) == "cross_origin"
    fetch_marked = httpx.post(f"{server}/v1/documents", files={"data": ("evil.md", NOTE, "text/markdown")},
                              headers={**auth, "Sec-Fetch-Site": "cross-site"})
    assert error_type(fetch_marked, 403) == "cross_origin"
    plain = httpx.post(f"{server}/v1/ask", content=json.dumps({"question": QUESTION}),
                       headers={**auth, "Content-Type": "text/plain"})
    assert error_type(plain, 400) == "invalid_request" and "application/json" in plain.text
    null_origin = httpx.post(f"{server}/v1/retrieve", json={"query": QUESTION},
                             headers={**auth, "Origin": "null"})
    assert error_type(null_origin, 403) == "cross_origin"
    documents = httpx.get(f"{server}/v1/documents", headers=bearer(keys["admin"]))
    assert not any("evil" in d["path"] for d in documents.json().get("documents", []))


def test_the_servers_own_origin_and_localhost_are_accepted(server: str, keys: dict[str, str]):
    auth = bearer(keys["reader"])
    port = server.rsplit(":", 1)[1]
    same = httpx.post(f"{server}/v1/retrieve", json={"query": QUESTION},
                      headers={**auth, "Origin": server, "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200, same.text
    for host in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert httpx.get(f"{server}/healthz", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_admits_a_reverse_proxys_name(settings: Settings, home: Path, tmp_path: Path):
    with server_process(settings, home, tmp_path / "serve.log", RAG_ALLOWED_HOSTS="rag.example.com",
                        RAG_API_KEY=ENV_KEY) as base:
        proxied = {"Host": "rag.example.com", "Origin": "https://rag.example.com", **bearer(ENV_KEY)}
        assert httpx.post(f"{base}/v1/retrieve", json={"query": QUESTION}, headers=proxied).status_code == 200
        other = httpx.get(f"{base}/healthz", headers={"Host": "other.example.com"})
        assert error_type(other, 403) == "forbidden_host"


# --------------------------------------------------------------------------- the audit trail
def test_audit_trail_records_who_did_what_and_verifies(server: str, home: Path, settings: Settings,
                                                       keys: dict[str, str]):
    httpx.post(f"{server}/v1/ask", json={"question": QUESTION}, headers=bearer(keys["reader"]), timeout=120)
    time.sleep(1.5)  # flushed at once, fsync'd within a second
    result = run_cli(home, settings, "audit", "show", "--json", "--principal", "reader-default", "--since", "1h")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    answers = [r for r in records if r["event"] == "answer"]
    assert answers and answers[-1]["question"] == QUESTION and answers[-1]["outcome"] in ("answered", "abstained")
    assert answers[-1]["retrieved"] and answers[-1]["model"] and answers[-1]["index"] == "default"
    assert any(r["event"] == "refused" and r["route"] == "/v1/documents" for r in records)
    trail = b"".join(p.read_bytes() for p in (home / "audit").rglob("*.jsonl"))
    assert all(token.encode() not in trail for token in keys.values()) and ENV_KEY.encode() not in trail
    assert b"key.revoke" in trail  # the CLI's key changes are in the trail too
    intact = run_cli(home, settings, "audit", "verify")
    assert intact.returncode == 0 and "intact" in intact.stderr, intact.stderr


def written_trail(folder: Path, count: int = 6) -> Path:
    trail = AuditTrail(folder, question_mode="full")
    for n in range(count):
        trail.append("answer", principal="p", question=f"question {n}", outcome="answered")
    trail.close()
    (chain,) = list(folder.iterdir())
    return chain / "000001.jsonl"


@pytest.mark.parametrize("tamper, bad_line", [
    ("edit", 3), ("delete", 3), ("swap", 3), ("edit-last", 6)])
def test_audit_verify_names_the_first_bad_line(tmp_path: Path, tamper: str, bad_line: int):
    path = written_trail(tmp_path)
    assert verify(tmp_path) == (6, [])
    lines = path.read_bytes().splitlines(keepends=True)
    if tamper == "edit":
        lines[2] = lines[2].replace(b"question 2", b"question X")
    elif tamper == "edit-last":
        lines[5] = lines[5].replace(b"answered", b"abstained")
    elif tamper == "delete":
        del lines[2]
    else:
        lines[2], lines[3] = lines[3], lines[2]
    path.write_bytes(b"".join(lines))
    checked, problems = verify(tmp_path)
    assert len(problems) == 1 and problems[0].line == bad_line and problems[0].path == path, problems
    assert checked == bad_line - 1


def test_audit_verify_exits_1_naming_the_line(tmp_path: Path, settings: Settings):
    path = written_trail(tmp_path / "audit")
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_bytes(b"".join(lines))
    result = run_cli(tmp_path, settings, "audit", "verify")
    assert result.returncode == 1 and f"{path}:2:" in result.stderr, result.stderr


def test_audit_files_rotate_and_the_chain_carries_over(tmp_path: Path):
    trail = AuditTrail(tmp_path, max_bytes=600)
    for n in range(10):
        trail.append("retrieve", principal="p", outcome="retrieved", n=n)
    trail.close()
    files = sorted(tmp_path.rglob("*.jsonl"))
    assert len(files) > 2 and all(f.stat().st_size <= 600 for f in files)
    assert verify(tmp_path) == (10, [])
    files[1].unlink()  # a whole file gone: the next file's first line breaks the chain
    checked, problems = verify(tmp_path)
    assert problems and problems[0].path == files[2] and problems[0].line == 1


# --------------------------------------------------------------------------- signed tokens (JWT)
@pytest.fixture(scope="module")
def jwt_server(settings: Settings, home: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("jwt")
    key = signing_key()
    table = {"hr-staff": {"roles": ["hr=reader"], "groups": ["hr"]}, "ops": {"roles": ["editor"]}}
    with server_process(settings, home, folder / "serve.log", **jwt_env(folder, key, table)) as base:
        yield base, key


def test_a_signed_token_maps_its_groups_to_roles(jwt_server):
    base, key = jwt_server
    token = sign(key)
    hr = httpx.post(f"{base}/v1/retrieve", json={"query": QUESTION, "index": "hr"}, headers=bearer(token))
    assert hr.status_code == 200, hr.text
    other = httpx.post(f"{base}/v1/retrieve", json={"query": QUESTION}, headers=bearer(token))
    assert error_type(other, 403) == "forbidden"
    ops = sign(key, groups=["ops"])
    assert httpx.get(f"{base}/v1/documents?index=default", headers=bearer(ops)).status_code == 200
    nobody = sign(key, groups=["unmapped"])
    assert error_type(httpx.get(f"{base}/v1/documents?index=hr", headers=bearer(nobody)), 403) == "forbidden"


def test_bad_tokens_are_401(jwt_server):
    base, key = jwt_server
    now = int(time.time())
    bad = {"wrong signature": sign(signing_key()), "wrong issuer": sign(key, iss="https://evil.example"),
           "wrong audience": sign(key, aud="other-app"), "expired": sign(key, exp=now - 120, iat=now - 600),
           "unknown kid": sign(key, kid="k9"), "no expiry": sign(key, exp=None)}
    for what, token in bad.items():
        response = httpx.get(f"{base}/v1/documents?index=hr", headers=bearer(token))
        assert response.status_code == 401, (what, response.text)


# --------------------------------------------------------------------------- keys over HTTP (the web app's admin page)
def test_admins_manage_keys_over_http_and_others_may_not(server: str, keys: dict[str, str]):
    me = httpx.get(f"{server}/v1/me", headers=bearer(keys["hr"])).json()
    assert me == {"name": "reader-hr", "roles": [{"index": "hr", "role": "reader"}], "groups": [],
                  "sees": "public only", "authenticated": True}
    for who in ("reader", "editor", "hr"):
        assert error_type(httpx.get(f"{server}/v1/keys", headers=bearer(keys[who])), 403) == "forbidden"
    admin = bearer(keys["admin"])
    created = httpx.post(f"{server}/v1/keys", headers=admin, json={
        "name": "made-over-http", "role": "reader", "indexes": ["hr"], "expires": "1d", "groups": ["hr"]})
    assert created.status_code == 201, created.text
    token = created.json()["key"]
    assert httpx.get(f"{server}/v1/documents?index=hr", headers=bearer(token)).status_code == 200
    listed = httpx.get(f"{server}/v1/keys", headers=admin)
    assert token not in listed.text
    row = next(k for k in listed.json()["keys"] if k["name"] == "made-over-http")
    assert row["state"] == "active" and row["groups"] == ["hr"] and row["expires"]
    again = httpx.post(f"{server}/v1/keys", headers=admin, json={"name": "made-over-http", "role": "reader"})
    assert error_type(again, 409) == "conflict"
    assert httpx.delete(f"{server}/v1/keys/made-over-http", headers=admin).json()["state"] == "revoked"
    assert error_type(httpx.get(f"{server}/v1/documents?index=hr", headers=bearer(token)), 401) == "unauthorized"
    assert error_type(httpx.delete(f"{server}/v1/keys/no-such-key", headers=admin), 404) == "not_found"


# --------------------------------------------------------------------------- document permissions
VAULT_SECRET = "The vault combination for the Quillon project is 7-4-1-9, known only to the finance team.\n"
VAULT_PUBLIC = "The Quillon project cafeteria opens at eight and serves porridge on Mondays.\n"
VAULT_QUESTION = "What is the vault combination for the Quillon project?"


@pytest.fixture(scope="module")
def vault(home: Path, settings: Settings, embedder) -> dict[str, str]:
    """Index ``vault``: a finance-only document and a public one; keys in and out of finance."""
    folder = home / "vault-docs"
    folder.mkdir()
    secret, public = folder / "quillon-vault.md", folder / "cafeteria.md"
    secret.write_text("# Quillon vault\n\n" + VAULT_SECRET, encoding="utf-8")
    public.write_text("# Cafeteria\n\n" + VAULT_PUBLIC, encoding="utf-8")
    index = EmbeddedIndex(settings.replace(home=home).index_path("vault"))
    ingest_paths([secret], index, IngestParameters.defaults(embedder), groups=["finance"])
    ingest_paths([public], index, IngestParameters.defaults(embedder))
    reader = index.reader()
    try:
        ids = {d.title: d.id for d in reader.documents()}
    finally:
        reader.close()
    return {"secret_id": ids["Quillon vault"], "secret_path": str(secret), "public_id": ids["Cafeteria"],
            "staff": add_key(home, "vault-staff", "editor", "vault", groups=frozenset({"staff"})),
            "finance": add_key(home, "vault-finance", "reader", "vault", groups=frozenset({"finance"}))}


def leaks(text: str, vault: dict[str, str]) -> list[str]:
    """What of the finance document ``text`` gives away: its text, title, file name or id."""
    return [s for s in ("7-4-1-9", "Quillon vault", "quillon-vault", vault["secret_id"]) if s in text]


def test_a_reader_outside_a_documents_groups_never_learns_of_it(server: str, vault: dict[str, str]):
    assert_never_leaks(server, vault)
    assert_uploaded_secret_stays_hidden(server, vault)


UPLOADED_SECRET = b"# Quillon ledger\n\nThe Quillon ledger key is 3-3-8-1, kept by the finance team.\n"


def assert_uploaded_secret_stays_hidden(server: str, vault: dict[str, str]) -> None:
    """An *uploaded* finance document (issue 34): a staff editor's probes — listing, retrieving, uploading a
    case variant of its name and its very bytes — never learn of it, and it keeps its text and groups."""
    admin, staff, finance = bearer(ENV_KEY), bearer(vault["staff"]), bearer(vault["finance"])
    up = httpx.post(f"{server}/v1/documents?index=vault&groups=finance", headers=admin, timeout=120,
                    files={"data": ("Quillon-Ledger.md", UPLOADED_SECRET, "text/markdown")})
    assert up.status_code == 200, up.text
    secret_id = up.json()["files"][0]["document_id"]
    try:
        listed = httpx.get(f"{server}/v1/documents?index=vault", headers=staff)
        found = httpx.post(f"{server}/v1/retrieve", headers=staff, timeout=60,
                           json={"query": "Quillon ledger key", "index": "vault"})
        for response in (listed, found):
            assert response.status_code == 200 and secret_id not in response.text and "3-3-8-1" not in response.text
        for name in ("quillon-ledger.md", "QUILLON-LEDGER.md", "Quillon-Ledger.md"):
            probe = httpx.post(f"{server}/v1/documents?index=vault", headers=staff, timeout=120,
                               files={"data": (name, UPLOADED_SECRET, "text/markdown")})
            assert probe.status_code == 200, probe.text
            result = probe.json()["files"][0]
            assert result["status"] == "added" and not result.get("renamed_from"), result
            assert result["document_id"] != secret_id and "Quillon-Ledger" not in probe.text.replace(name, "")
            assert httpx.delete(f"{server}/v1/documents/{result['document_id']}?index=vault",
                                headers=staff).status_code == 200
        theirs = {d["id"]: d for d in httpx.get(f"{server}/v1/documents?index=vault", headers=finance).json()["documents"]}
        assert theirs[secret_id]["access_groups"] == "finance"
    finally:
        assert httpx.delete(f"{server}/v1/documents/{secret_id}?index=vault", headers=admin).status_code == 200


def assert_never_leaks(server: str, vault: dict[str, str]) -> None:
    """Every route a reader outside ``finance`` may call: the finance document's text, title, file name and id
    never come back, and naming it is "no document", exactly as for one that does not exist."""
    auth = bearer(vault["staff"])
    retrieved = httpx.post(f"{server}/v1/retrieve", json={"query": VAULT_QUESTION, "index": "vault"}, headers=auth)
    assert retrieved.status_code == 200 and retrieved.json()["chunks"], retrieved.text
    assert [c["document_id"] for c in retrieved.json()["chunks"]] == [vault["public_id"]]
    asked = httpx.post(f"{server}/v1/ask", json={"question": VAULT_QUESTION, "index": "vault"}, headers=auth,
                       timeout=120)
    streamed = httpx.post(f"{server}/v1/ask", json={"question": VAULT_QUESTION, "index": "vault", "stream": True},
                          headers=auth, timeout=120)
    conversation = [{"role": "user", "content": "What does the Quillon cafeteria serve?"},
                    {"role": "assistant", "content": "Porridge on Mondays."},
                    {"role": "user", "content": "And what is its vault combination?"}]
    followed = httpx.post(f"{server}/v1/chat", headers=auth, timeout=120,
                          json={"index": "vault", "messages": conversation})
    chat_stream = httpx.post(f"{server}/v1/chat/stream", headers=auth, timeout=120,
                             json={"index": "vault", "messages": conversation})
    openai = httpx.post(f"{server}/v1/chat/completions", headers=auth, timeout=120,
                        json={"index": "vault", "messages": [{"role": "user", "content": VAULT_QUESTION}]})
    openai_stream = httpx.post(f"{server}/v1/chat/completions", headers=auth, timeout=120, json={
        "index": "vault", "stream": True, "messages": [{"role": "user", "content": VAULT_QUESTION}]})
    listed = httpx.get(f"{server}/v1/documents?index=vault", headers=auth)
    indexes = httpx.get(f"{server}/v1/indexes", headers=auth)
    health = httpx.get(f"{server}/healthz", headers=auth)
    metrics = httpx.get(f"{server}/metrics", headers=auth)
    pages = [httpx.get(f"{server}{page}", headers=auth) for page in ("/", "/documents")]
    for response in (retrieved, asked, streamed, followed, chat_stream, openai, openai_stream, listed, indexes,
                     health, *pages):
        assert response.status_code == 200, (response.request.url, response.text)
        assert leaks(response.text, vault) == [], (response.request.url, response.text)
    assert leaks(metrics.text, vault) == []
    assert [d["id"] for d in listed.json()["documents"]] == [vault["public_id"]]
    counts = {i["name"]: i for i in indexes.json()["indexes"]}
    assert counts["vault"]["documents"] == 1
    # By id or by path, as a filter or to delete: "no document", exactly as for one that does not exist.
    for name in (vault["secret_id"], vault["secret_path"]):
        named = httpx.post(f"{server}/v1/retrieve", headers=auth,
                           json={"query": VAULT_QUESTION, "index": "vault", "documents": [name]})
        assert error_type(named, 404) == "document_not_found" and "7-4-1-9" not in named.text
    deleted = httpx.delete(f"{server}/v1/documents/{vault['secret_id']}?index=vault", headers=auth)
    missing = httpx.delete(f"{server}/v1/documents/{'0' * 16}?index=vault", headers=auth)
    assert error_type(deleted, 404) == error_type(missing, 404) == "document_not_found"
    assert deleted.json()["error"]["message"].replace(vault["secret_id"], "X") == \
        missing.json()["error"]["message"].replace("0" * 16, "X")
    # Uploading over it (same file name) makes a new, separate document; the finance one is untouched.
    over = httpx.post(f"{server}/v1/documents?index=vault", headers=auth, timeout=120,
                      files={"data": ("quillon-vault.md", b"# Overwrite\n\nNothing here.\n", "text/markdown")})
    assert over.status_code == 200 and leaks(over.text.replace("quillon-vault.md", ""), vault) == [], over.text
    new_id = over.json()["files"][0]["document_id"]
    assert new_id != vault["secret_id"]
    assert httpx.delete(f"{server}/v1/documents/{new_id}?index=vault", headers=auth).status_code == 200


@pytest.fixture(scope="module")
def postgres_vault(settings: Settings, postgres_url: str, embedder, tmp_path_factory: pytest.TempPathFactory):
    """The same vault on PostgreSQL + pgvector, behind its own `rag serve`, keys in PostgreSQL too — in a
    database of its own: the session's other PostgreSQL tests run open servers, which a key would close."""
    import psycopg

    from rag.store.keys import PostgresKeyStore
    from rag.store.postgres import PostgresStore

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS rag_access_vault")
        conn.execute("CREATE DATABASE rag_access_vault")
    postgres_url = postgres_url.replace("/postgres?", "/rag_access_vault?", 1)
    assert "rag_access_vault" in postgres_url, postgres_url
    home = tmp_path_factory.mktemp("access-pg")
    folder = home / "vault-docs"
    folder.mkdir()
    secret, public = folder / "quillon-vault.md", folder / "cafeteria.md"
    secret.write_text("# Quillon vault\n\n" + VAULT_SECRET, encoding="utf-8")
    public.write_text("# Cafeteria\n\n" + VAULT_PUBLIC, encoding="utf-8")
    store = PostgresStore(postgres_url, pool_size=2)
    keys = PostgresKeyStore(postgres_url)
    try:
        index = store.index("vault")
        ingest_paths([secret], index, IngestParameters.defaults(embedder), groups=["finance"])
        ingest_paths([public], index, IngestParameters.defaults(embedder))
        reader = index.reader()
        ids = {d.title: d.id for d in reader.documents()}
        reader.close()
        tokens = {}
        for name, role, groups in (("pg-vault-staff", "editor", {"staff"}), ("pg-vault-finance", "reader", {"finance"})):
            record, tokens[name] = new_key(name, parse_grants(role, ("vault",)), groups=frozenset(groups))
            keys.add(record)
    finally:
        keys.close()
        store.close()
    vault = {"secret_id": ids["Quillon vault"], "secret_path": str(secret), "public_id": ids["Cafeteria"],
             "staff": tokens["pg-vault-staff"], "finance": tokens["pg-vault-finance"]}
    log = tmp_path_factory.mktemp("access-pg-logs") / "serve.log"
    with server_process(settings, home, log, RAG_MAX_TOKENS="12", RAG_STORE_URL=postgres_url,
                        RAG_API_KEY=ENV_KEY) as base:
        yield base, vault


def test_postgres_a_reader_outside_a_documents_groups_never_learns_of_it(postgres_vault):
    server, vault = postgres_vault
    assert_never_leaks(server, vault)
    assert_uploaded_secret_stays_hidden(server, vault)
    asked = httpx.post(f"{server}/v1/ask", json={"question": VAULT_QUESTION, "index": "vault"}, timeout=120,
                       headers=bearer(vault["finance"]))
    assert asked.status_code == 200 and asked.json()["sources"][0]["document_id"] == vault["secret_id"]


def test_a_reader_in_the_group_gets_the_answer(server: str, vault: dict[str, str]):
    auth = bearer(vault["finance"])
    asked = httpx.post(f"{server}/v1/ask", json={"question": VAULT_QUESTION, "index": "vault"}, headers=auth,
                       timeout=120)
    assert asked.status_code == 200, asked.text
    assert asked.json()["sources"][0]["document_id"] == vault["secret_id"]
    assert "7-4-1-9" in " ".join(e["quote"] for e in asked.json()["evidence"]) + asked.json()["answer"]
    listed = httpx.get(f"{server}/v1/documents?index=vault", headers=auth).json()["documents"]
    assert {d["id"]: d["access_groups"] for d in listed} == {vault["secret_id"]: "finance", vault["public_id"]: ""}


def test_an_upload_with_groups_is_seen_only_by_them(server: str, vault: dict[str, str]):
    staff, finance = bearer(vault["staff"]), bearer(vault["finance"])
    note = b"# Staff rota\n\nThe Quillon night shift rota rotates every Thursday at noon.\n"
    uploaded = httpx.post(f"{server}/v1/documents?index=vault&groups=staff", headers=staff, timeout=120,
                          files={"data": ("rota.md", note, "text/markdown")})
    assert uploaded.status_code == 200, uploaded.text
    doc_id = uploaded.json()["files"][0]["document_id"]
    try:
        mine = {d["id"]: d["access_groups"] for d in
                httpx.get(f"{server}/v1/documents?index=vault", headers=staff).json()["documents"]}
        theirs = [d["id"] for d in httpx.get(f"{server}/v1/documents?index=vault", headers=finance).json()["documents"]]
        assert mine[doc_id] == "staff" and doc_id not in theirs
        bad = httpx.post(f"{server}/v1/documents?index=vault&groups=no%20spaces", headers=staff,
                         files={"data": ("rota.md", note, "text/markdown")})
        assert error_type(bad, 400) == "invalid_request"
    finally:
        assert httpx.delete(f"{server}/v1/documents/{doc_id}?index=vault", headers=staff).status_code == 200


# --------------------------------------------------------------------------- the key store's table, two replicas at once
KEY_STORE_RACES = 12  # fresh databases the two processes create the stores on in step
KEY_STORE_STARTER = """
import sys, time
from rag.store.keys import PostgresKeyStore
from rag.store.postgres import PostgresStore
stores = [(PostgresKeyStore(url), PostgresStore(url, pool_size=1)) for url in sys.argv[2:]]
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
for keys, store in stores:  # what a replica does at start: the key store, then the index store
    assert keys.any() is False
    assert store.names() == []
    store.close()
"""


def test_two_replicas_creating_the_key_store_on_a_fresh_database_at_once_both_succeed(settings: Settings,
                                                                                       postgres_url: str):
    """``CREATE TABLE IF NOT EXISTS`` run by two sessions at once can fail in one of them (a duplicate key in
    PostgreSQL's catalogue); the key store creates its table under the schema's migration lock. Two processes
    walk the same fresh databases in step, so every database is created by both at the same moment."""
    import psycopg

    names = [f"keys_race_{uuid.uuid4().hex[:8]}" for _ in range(KEY_STORE_RACES)]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f"CREATE DATABASE {name}")
    urls = [postgres_url.replace("/postgres?", f"/{name}?", 1) for name in names]
    assert all(name in url for name, url in zip(names, urls)), urls
    start_at = str(time.time() + 4)  # both have imported and built their stores by then
    try:
        starters = [subprocess.Popen([sys.executable, "-c", KEY_STORE_STARTER, start_at, *urls], cwd=PROJECT_ROOT,
                                     env=cli_env(settings), stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for process in starters:
            _, stderr = process.communicate(timeout=120)
            assert process.returncode == 0, stderr
        for url in urls:
            with psycopg.connect(url, autocommit=True) as conn:
                assert conn.execute("SELECT count(*) FROM rag.api_keys").fetchone()[0] == 0
                assert conn.execute("SELECT max(version) FROM rag.schema_version").fetchone()[0] > 0
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for name in names:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize(("document", "reader", "sees"), [
    (frozenset(), frozenset(), True),  # a public document: every reader
    (frozenset(), frozenset({"hr"}), True),
    (frozenset({"finance"}), frozenset(), False),  # a public-only reader sees no grouped document
    (frozenset({"finance"}), frozenset({"hr"}), False),
    (frozenset({"finance"}), frozenset({"finance"}), True),
    (frozenset({"finance", "hr"}), frozenset({"hr", "legal"}), True),  # one group in common is enough
    (frozenset({"finance"}), None, True),  # no filter: every document
    (frozenset({"finance"}), frozenset({"*"}), True),  # the grant of every document
])
def test_the_visibility_rule(document: frozenset[str], reader: frozenset[str] | None, sees: bool):
    """The one rule every reader of documents asks (``rag.core.access.visible``; both stores' agreement with it:
    tests/test_store_backends.py)."""
    assert visible(document, reader) is sees
    assert Principal("p", (), reader if reader is not None else EVERY_DOCUMENT).sees(document) is sees
    assert visible_ids([("d", document)], reader) == (None if sees else [])
