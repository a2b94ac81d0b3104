"""Hidden means absent: every path around document permissions, driven against a real ``rag serve`` as the
attacker would (issue 34). For a principal, a document outside its groups behaves in every reply, score, count,
job record, error and side effect exactly as if it did not exist; a principal never grants, sees or changes more
than it holds; a missing piece of the access machinery means "refuse", never "open".

Each test names the finding it covers. Where the path touches the store, it runs on both stores (the embedded
FAISS + SQLite one and PostgreSQL + pgvector)."""

from __future__ import annotations

import json
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
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
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
    "boss": ("admin", ("*",), ("staff",)),  # administers every index, sees staff documents
    "owner": ("admin", ("owned",), ("staff",)),  # administers index "owned", sees staff documents
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
        from rag.store.keys import SqliteKeyStore

        keys = SqliteKeyStore(home)
    else:
        import psycopg

        from rag.store.keys import PostgresKeyStore

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


# --------------------------------------------------------------------------- 2. least privilege by default
def store_env(d: Deployment) -> dict[str, str]:
    return {k: v for k, v in d.env.items() if k == "RAG_STORE_URL"}


def make_legacy(d: Deployment, name: str) -> None:
    """Turn key ``name`` into one made before every document was an explicit grant (groups stored as NULL)."""
    if d.store == "embedded":
        import sqlite3

        with sqlite3.connect(d.home / "access.sqlite") as conn:
            conn.execute("UPDATE api_keys SET groups = NULL WHERE name = ?", (name,))
    else:
        import psycopg

        with psycopg.connect(d.env["RAG_STORE_URL"], autocommit=True) as conn:
            conn.execute("UPDATE rag.api_keys SET groups = NULL WHERE name = %s", (name,))


MIGRATED = "keep seeing every document"


def test_a_key_without_groups_sees_public_documents_only(deployment: Deployment, settings: Settings):
    """Finding 2: `rag keys create bob --role reader --index X` (no --groups) sees public documents only; every
    document is the explicit grant --groups '*'; a key made before (groups stored as NULL) keeps seeing every
    document, migrated to '*' and said once; `rag keys list` says "public only" / "all groups"."""
    d, index = deployment, fresh_index()
    hidden = files_of(d.upload("admin", index, "Budget.md", SECRET, groups="finance"))[0]
    public = files_of(d.upload("admin", index, "canteen.md", b"# Canteen\n\nThe canteen serves soup.\n"))[0]
    env = store_env(d)
    tokens = {}
    for name, extra in (("bob", ()), ("carol", ("--groups", "*"))):
        made = run_cli(d.home, settings, "keys", "create", f"{name}-{index}", "--role", "reader", "--index", index,
                       *extra, **env)
        assert made.returncode == 0, made.stderr
        tokens[name] = made.stdout.strip().splitlines()[-1]
    bob, carol = bearer(tokens["bob"]), bearer(tokens["carol"])
    listed = httpx.get(f"{d.base}/v1/documents?index={index}", headers=bob).json()["documents"]
    assert [doc["id"] for doc in listed] == [public["document_id"]]
    found = httpx.post(f"{d.base}/v1/retrieve", headers=bob, json={"query": "Zorblax merger budget", "index": index})
    assert found.status_code == 200 and all(c["document_id"] != hidden["document_id"] for c in found.json()["chunks"])
    assert not any(word in str(found.json()["chunks"]) for word in SECRET_WORDS)
    everything = httpx.get(f"{d.base}/v1/documents?index={index}", headers=carol).json()["documents"]
    assert {doc["id"] for doc in everything} == {hidden["document_id"], public["document_id"]}
    me = httpx.get(f"{d.base}/v1/me", headers=bob).json()
    assert me["groups"] == [] and me["sees"] == "public only"
    # A key from before: its NULL groups keep meaning every document, written out as "*" and said once.
    make_legacy(d, f"bob-{index}")
    legacy_listed = httpx.get(f"{d.base}/v1/documents?index={index}", headers=bob).json()["documents"]
    assert {doc["id"] for doc in legacy_listed} == {hidden["document_id"], public["document_id"]}
    first, second = (run_cli(d.home, settings, "keys", "list", "--json", **env) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    assert MIGRATED in first.stderr and f"bob-{index}" in first.stderr and MIGRATED not in second.stderr
    import json

    rows = {row["name"]: row for row in json.loads(second.stdout)}
    assert rows[f"bob-{index}"]["groups"] == ["*"] and rows[f"bob-{index}"]["sees"] == "all groups"
    assert rows[f"carol-{index}"]["sees"] == "all groups"
    assert rows["hidden-finance"]["sees"] == "public + finance"
    table = run_cli(d.home, settings, "keys", "list", **env)
    assert "all groups" in table.stdout and "public + finance" in table.stdout, table.stdout


def test_keys_made_before_are_migrated_and_said_once_at_start(settings: Settings, tmp_path: Path):
    """Finding 2: a server started on a home whose keys were made before says once, at start, which keys now
    hold the explicit grant '*'; a restart says nothing more."""
    from rag.store.keys import SqliteKeyStore

    keys = SqliteKeyStore(tmp_path)
    record, token = new_key("old-key", parse_grants("reader", ("*",)))
    keys.add(record)
    keys.close()
    import sqlite3

    with sqlite3.connect(tmp_path / "access.sqlite") as conn:
        conn.execute("UPDATE api_keys SET groups = NULL")
    for attempt in range(2):
        log = tmp_path / f"serve-{attempt}.log"
        with server_process(settings, tmp_path, log) as base:
            me = httpx.get(f"{base}/v1/me", headers=bearer(token)).json()
            assert me["groups"] == ["*"] and me["sees"] == "all groups", me
        said = log.read_text(errors="replace").count(MIGRATED)
        assert said == (1 if attempt == 0 else 0), log.read_text(errors="replace")


# --------------------------------------------------------------------------- 3. groups-restricted admins
def test_a_restricted_admin_grants_at_most_what_it_holds(deployment: Deployment):
    """Finding 3: an admin of every index who sees staff documents creates keys with at most its own groups,
    roles and indexes, and revokes only keys that hold no more; an admin of one index with groups cannot delete
    it (it holds documents the admin cannot see) — the index and its hidden document stay."""
    d = deployment
    boss = d.as_("boss")
    tag = uuid.uuid4().hex[:6]

    def create(name: str, **body: Any) -> httpx.Response:
        return httpx.post(f"{d.base}/v1/keys", headers=boss, json={"name": f"{name}-{tag}", **body}, timeout=60)

    for body in ({"role": "reader", "groups": ["finance"]}, {"role": "reader", "groups": ["*"]},
                 {"role": "reader", "groups": ["staff", "finance"]}):
        refused = create("wider", **body)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden", (body, refused.text)
    for name, body in (("plain", {"role": "reader"}), ("staffer", {"role": "editor", "groups": ["staff"]}),
                       ("peer", {"role": "admin", "groups": ["staff"]})):
        made = create(name, **body)
        assert made.status_code == 201, made.text
    owner = d.as_("owner")
    assert httpx.post(f"{d.base}/v1/keys", headers=owner, json={"name": f"x-{tag}", "role": "reader"}).status_code == 403
    listed = {k["name"]: k for k in httpx.get(f"{d.base}/v1/keys", headers=boss).json()["keys"]}
    assert listed[f"plain-{tag}"]["sees"] == "public only" and f"wider-{tag}" not in listed
    # Listing: the keys it could have made, not wider ones (no "finance" named to it).
    assert {f"staffer-{tag}", f"peer-{tag}", "hidden-staff", "hidden-boss"} <= set(listed), sorted(listed)
    assert "hidden-finance" not in listed and "hidden-owner" in listed, sorted(listed)
    assert "finance" not in json.dumps(list(listed.values()))
    everyone = {k["name"] for k in httpx.get(f"{d.base}/v1/keys", headers=d.as_("admin")).json()["keys"]}
    assert "hidden-finance" in everyone and set(listed) < everyone
    # Revoking: only a key that holds no more than the caller.
    # A wider key is not found, exactly as a key that never was (its name is not confirmed to exist).
    wider, never = (httpx.delete(f"{d.base}/v1/keys/{name}", headers=boss)
                    for name in ("hidden-finance", "no-such-key"))
    assert wider.status_code == never.status_code == 404, (wider.text, never.text)
    assert wider.json()["error"]["type"] == never.json()["error"]["type"]
    assert wider.json()["error"]["message"].replace("hidden-finance", "X") == never.json()["error"]["message"].replace(
        "no-such-key", "X")
    assert httpx.delete(f"{d.base}/v1/keys/staffer-{tag}", headers=boss).json()["state"] == "revoked"
    # Deleting an index needs an admin who sees every document.
    hidden = files_of(d.upload("admin", "owned", "Budget.md", SECRET, groups="finance"))[0]
    files_of(d.upload("owner", "owned", "rota.md", b"# Rota\n\nStaff rota.\n", groups="staff"))
    for who in ("owner", "boss"):
        gone = httpx.delete(f"{d.base}/v1/indexes/owned?confirm=owned", headers=d.as_(who), timeout=60)
        assert gone.status_code == 403 and gone.json()["error"]["type"] == "forbidden", gone.text
    kept = {doc["id"]: doc for doc in d.documents("finance", "owned")}
    assert kept[hidden["document_id"]]["access_groups"] == "finance"


# --------------------------------------------------------------------------- 4. access fails closed
@pytest.fixture(params=STORES)
def keyed_server(request, settings: Settings, tmp_path: Path) -> Iterator[tuple[str, str, Any, Any]]:
    """A server of its own with one key (no RAG_API_KEY); yields its URL, the key, and how to take the key
    store away and give it back."""
    env: dict[str, str] = {}
    if request.param == "embedded":
        from rag.store.keys import SqliteKeyStore

        keys: Any = SqliteKeyStore(tmp_path)
        files = [tmp_path / f"access.sqlite{suffix}" for suffix in ("", "-wal", "-shm")]
        aside = tmp_path / "aside"

        def take_away(garbage: bool) -> None:
            aside.mkdir(exist_ok=True)
            for path in files:
                if path.exists():
                    path.replace(aside / path.name)
            if garbage:
                files[0].write_bytes(b"this is not a database\n" * 64)

        def give_back() -> None:
            for path in files:
                path.unlink(missing_ok=True)
                if (aside / path.name).exists():
                    (aside / path.name).replace(path)
    else:
        import psycopg

        from rag.store.keys import PostgresKeyStore

        url = request.getfixturevalue("postgres_url")
        name = f"rag_closed_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = url.replace("/postgres?", f"/{name}?", 1)
        env["RAG_STORE_URL"] = url
        keys = PostgresKeyStore(url)

        def take_away(garbage: bool) -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ALTER TABLE rag.api_keys RENAME TO api_keys_aside")

        def give_back() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP TABLE IF EXISTS rag.api_keys")
                conn.execute("ALTER TABLE rag.api_keys_aside RENAME TO api_keys")
    record, token = new_key("only-key", parse_grants("reader", ("*",)))
    keys.add(record)
    keys.close()
    with server_process(settings, tmp_path, tmp_path / "serve.log", **env) as base:
        yield base, token, take_away, give_back


def test_a_server_that_required_keys_never_serves_without_them(keyed_server):
    """Finding 4: once a server required keys, a key store that disappears (a restore, an operator "resetting
    keys") or cannot be read never opens it: no token is still 401, a key is 503 store_unavailable (never the
    local admin), and the keys work again once the store is back."""
    base, token, take_away, give_back = keyed_server
    assert httpx.get(f"{base}/v1/documents").status_code == 401
    assert httpx.get(f"{base}/v1/indexes", headers=bearer(token)).status_code == 200
    take_away(garbage=False)
    try:
        anonymous = httpx.get(f"{base}/v1/indexes")
        assert anonymous.status_code == 401, anonymous.text
        keyed = httpx.get(f"{base}/v1/indexes", headers=bearer(token))
        assert keyed.status_code in (401, 503) and keyed.status_code != 200, keyed.text
        first = httpx.get(f"{base}/v1/me")
        assert first.status_code == 401, first.text
    finally:
        give_back()
    take_away(garbage=True)
    try:
        keyed = httpx.get(f"{base}/v1/indexes", headers=bearer(token))
        assert keyed.status_code in (401, 503), keyed.text
        assert httpx.get(f"{base}/v1/documents").status_code == 401
    finally:
        give_back()
    assert httpx.get(f"{base}/v1/indexes", headers=bearer(token)).status_code == 200


def test_a_missing_key_store_is_503_not_an_unknown_key(settings: Settings, tmp_path: Path):
    """Finding 4: the embedded key store that this process saw and that is gone (or is no database) answers a
    key with 503 store_unavailable, so an operator sees the store is broken rather than the key unknown."""
    from rag.store.keys import SqliteKeyStore

    keys = SqliteKeyStore(tmp_path)
    record, token = new_key("only-key", parse_grants("reader", ("*",)))
    keys.add(record)
    keys.close()
    with server_process(settings, tmp_path, tmp_path / "serve.log") as base:
        assert httpx.get(f"{base}/v1/indexes", headers=bearer(token)).status_code == 200
        (tmp_path / "access.sqlite").replace(tmp_path / "access.sqlite.aside")
        gone = httpx.get(f"{base}/v1/indexes", headers=bearer(token))
        assert gone.status_code == 503 and gone.json()["error"]["type"] == "store_unavailable", gone.text
        assert httpx.get(f"{base}/v1/indexes").status_code == 401


def test_the_answer_services_default_context_sees_public_documents_only(settings: Settings, embedder, generator,
                                                                       tmp_path: Path):
    """Finding 4: a request that forgets its context is answered as "public documents only"; every document
    is the explicit RequestContext.local()."""
    from ingest.pipeline import ingest_paths
    from ingest.parameters import IngestParameters
    from rag.store.embedded import EmbeddedStore
    from rag.answering.service import AnswerRequest, AnswerService
    from rag.core.access import RequestContext

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "budget.md").write_bytes(SECRET)
    (folder / "canteen.md").write_bytes(b"# Canteen\n\nThe canteen budget buys soup.\n")
    store = EmbeddedStore(tmp_path / "indexes")
    ingest_paths([folder / "budget.md"], store.index("default"), IngestParameters.defaults(embedder),
                 groups=["finance"])
    ingest_paths([folder / "canteen.md"], store.index("default"), IngestParameters.defaults(embedder))
    service = AnswerService(settings.replace(home=tmp_path), store, embedder, generator)
    try:
        forgot = service.retrieve("Zorblax merger budget")
        assert forgot.hits and not any("Zorblax" in h.chunk.text for h in forgot.hits)
        assert AnswerRequest(question="q").context.groups == frozenset()
        operator = service.retrieve("Zorblax merger budget", context=RequestContext.local())
        assert "Zorblax" in operator.hits[0].chunk.text
    finally:
        service.close()
        store.close()


# --------------------------------------------------------------------------- 5. jobs and sources
def test_jobs_and_sources_of_hidden_documents_do_not_exist(deployment: Deployment, settings: Settings,
                                                           tmp_path: Path):
    """Finding 5: an editor of ``staff`` does not see, follow, cancel, forget or re-run the job that uploaded a
    finance document (404, as a job that never was), nor the finance source with its failures, nor sync it;
    its own jobs and a public source it sees as before."""
    d, index = deployment, fresh_index()
    hidden = files_of(d.upload("admin", index, "Budget.md", SECRET, groups="finance"))[0]
    mine = files_of(d.upload("staff", index, "rota.md", b"# Rota\n\nThe rota turns on Thursdays.\n", groups="staff"))[0]
    admin_jobs = httpx.get(f"{d.base}/v1/jobs?index={index}", headers=d.as_("admin")).json()["jobs"]
    secret_job = next(j for j in admin_jobs if any(f["document_id"] == hidden["document_id"] for f in j["files"]))
    listed = httpx.get(f"{d.base}/v1/jobs?index={index}", headers=d.as_("staff"))
    assert listed.status_code == 200 and not any(w in listed.text for w in ("Budget", hidden["document_id"]))
    assert [f["document_id"] for j in listed.json()["jobs"] for f in j["files"]] == [mine["document_id"]]
    never = uuid.uuid4().hex
    for method, path in (("GET", "{}"), ("GET", "{}/events"), ("DELETE", "{}"), ("POST", "{}/retry")):
        theirs = httpx.request(method, f"{d.base}/v1/jobs/{path.format(secret_job['id'])}", headers=d.as_("staff"))
        missing = httpx.request(method, f"{d.base}/v1/jobs/{path.format(never)}", headers=d.as_("staff"))
        assert theirs.status_code == missing.status_code == 404, (method, path, theirs.text)
        assert theirs.json()["error"]["message"].replace(secret_job["id"], "X") == \
            missing.json()["error"]["message"].replace(never, "X")
    assert httpx.get(f"{d.base}/v1/jobs/{secret_job['id']}", headers=d.as_("admin")).status_code == 200
    # Sources: a finance folder (with a file that fails) and a public one.
    env = store_env(d)
    folders = {}
    for name, groups in (("finance-share", "finance"), ("public-share", None)):
        folder = tmp_path / f"{name}-{index}"
        folder.mkdir()
        (folder / f"{name}.md").write_text(f"# {name}\n\nNotes of the {name} folder.\n", encoding="utf-8")
        (folder / f"{name}-broken.pdf").write_bytes(b"%PDF-1.4 not really")
        added = run_cli(d.home, settings, "sources", "add", str(folder), "--index", index,
                        *(("--groups", groups) if groups else ()), "--json", **env)
        assert added.returncode == 0, added.stderr
        folders[name] = folder
    sources = httpx.get(f"{d.base}/v1/sources?index={index}", headers=d.as_("admin")).json()["sources"]
    ids = {Path(s["path"]).name.split("-" + index)[0]: s["id"] for s in sources}
    for source_id in ids.values():
        synced = httpx.post(f"{d.base}/v1/sources/{source_id}/sync?index={index}", headers=d.as_("admin"), timeout=120)
        assert synced.status_code == 200, synced.text
    seen = httpx.get(f"{d.base}/v1/sources?index={index}", headers=d.as_("staff"))
    assert [s["id"] for s in seen.json()["sources"]] == [ids["public-share"]], seen.text
    assert "finance-share" not in seen.text
    theirs = httpx.post(f"{d.base}/v1/sources/{ids['finance-share']}/sync?index={index}", headers=d.as_("staff"))
    missing = httpx.post(f"{d.base}/v1/sources/{'0' * 12}/sync?index={index}", headers=d.as_("staff"))
    assert theirs.status_code == missing.status_code == 404, theirs.text
    assert theirs.json()["error"]["message"].replace(ids["finance-share"], "X") == \
        missing.json()["error"]["message"].replace("0" * 12, "X")
    jobs_text = httpx.get(f"{d.base}/v1/jobs?index={index}", headers=d.as_("staff")).text
    assert "finance-share" not in jobs_text and "Budget" not in jobs_text
    ours = httpx.post(f"{d.base}/v1/sources/{ids['public-share']}/sync?index={index}", headers=d.as_("staff"),
                      timeout=120)
    assert ours.status_code == 200, ours.text


# --------------------------------------------------------------------------- 8. credentials in generator_url
def test_generator_url_credentials_are_never_shown(settings: Settings, tmp_path: Path):
    """Finding 8: with ``generator_url = http://user:pass@host:port/v1``, the open /healthz, upstream errors and
    the log show host:port only."""
    from helpers import free_port

    port = free_port()  # nothing listens there: every call to the generator fails
    url = f"http://svc-user:Sup3r%2FS3cret@127.0.0.1:{port}/v1"
    log = tmp_path / "serve.log"
    with server_process(settings, tmp_path, log, RAG_GENERATOR_URL=url, RAG_GENERATOR_TIMEOUT_S="1") as base:
        health = httpx.get(f"{base}/healthz")
        assert health.json()["upstream"] == f"127.0.0.1:{port}", health.text
        chat = {"messages": [{"role": "user", "content": "Say hello."}], "use_context": False}
        failed = httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=30)
        assert failed.status_code in (502, 503, 504) and f"127.0.0.1:{port}" in failed.text, failed.text
        asked = httpx.post(f"{base}/v1/ask", json={"question": "Who was Rollo?"}, timeout=30)
        for text in (health.text, failed.text, asked.text, log.read_text(errors="replace")):
            assert not any(s in text for s in ("svc-user", "Sup3r", "S3cret")), text


# --------------------------------------------------------------------------- 7. the prefix cache
@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)  # the prefix cache does not touch the store
def test_the_prefix_cache_tells_no_one_what_another_was_shown(deployment: Deployment):
    """Finding 7: a finance reader's prompt (here a plain chat holding a finance sentence, as its evidence would
    be) stays in the generator's prefix cache (or in a row, or a spare, of the batched decoder); staff-side askers
    sending a guess of it with ``use_context: false`` are told the same ``cached_tokens`` whether the guess is
    right or wrong (only the fixed shared prefix is ever reused across askers). Each guesser asks for the first
    time: an asker's own earlier prompts are reused in full (the batched decoder keeps several, so a second guess
    of the same asker would reuse the first's opening words), which the last lines check."""
    d = deployment
    secret = "The Zorblax merger budget is 41 million crowns, for the finance board only."
    wrong = "The Zorblax merger budget is 97 million ducats, for the harbour board only."

    def chat(who: str, sentence: str) -> int:
        body = {"index": "default", "use_context": False, "max_tokens": 2,
                "messages": [{"role": "system", "content": "You repeat notes."},
                             {"role": "user", "content": f"Note: {sentence}\nRepeat the note."}]}
        reply = httpx.post(f"{d.base}/v1/chat/completions", headers=d.as_(who), json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    chat("finance", secret)
    right_guess = chat("staff", secret)
    chat("finance", secret)
    wrong_guess = chat("boss", wrong)
    assert right_guess == wrong_guess, (right_guess, wrong_guess)
    chat("boss", wrong)
    assert chat("boss", wrong) > wrong_guess  # one's own prompt is reused in full


# --------------------------------------------------------------------------- 11. a sync removes only its own
def test_a_sync_removes_only_what_it_ingested(deployment: Deployment, settings: Settings, tmp_path: Path):
    """Finding 11: a folder's Markdown files ingested with their groups, then the folder added as a source with
    a narrower glob (the README's `--glob '*.pdf'`, here '*.txt'): a sync ingests the matching files and keeps
    the earlier documents and their groups; a file it ingested and that is gone is still removed."""
    d, index = deployment, fresh_index()
    env = store_env(d)
    folder = tmp_path / f"share-{index}"
    folder.mkdir()
    (folder / "policy.md").write_text("# Policy\n\nThe finance policy caps travel at 900 crowns.\n", encoding="utf-8")
    (folder / "notes.txt").write_text("Notes: the share holds policies.\n", encoding="utf-8")
    (folder / "old.txt").write_text("Old notes: the share once held memos.\n", encoding="utf-8")
    ingested = run_cli(d.home, settings, "ingest", str(folder / "policy.md"), "--index", index, "--groups", "finance",
                       **env)
    assert ingested.returncode == 0, ingested.stderr
    added = run_cli(d.home, settings, "sources", "add", str(folder), "--index", index, "--glob", "*.txt", **env)
    assert added.returncode == 0, added.stderr
    (source,) = httpx.get(f"{d.base}/v1/sources?index={index}", headers=d.as_("admin")).json()["sources"]

    def sync() -> dict[str, Any]:
        synced = httpx.post(f"{d.base}/v1/sources/{source['id']}/sync?index={index}", headers=d.as_("admin"),
                            timeout=120)
        assert synced.status_code == 200, synced.text
        return synced.json()["last"]

    assert sync()["removed"] == 0
    kept = {Path(doc["path"]).name: doc for doc in d.documents("admin", index)}
    assert set(kept) == {"policy.md", "notes.txt", "old.txt"}
    assert kept["policy.md"]["access_groups"] == "finance"
    (folder / "old.txt").unlink()
    assert sync()["removed"] == 1
    assert {Path(doc["path"]).name for doc in d.documents("admin", index)} == {"policy.md", "notes.txt"}


# --------------------------------------------------------------------------- 12. caller input never touches the disk
def test_caller_paths_are_matched_by_spelling_never_resolved(deployment: Deployment, settings: Settings,
                                                            tmp_path: Path):
    """Finding 12: a document named by a path that reaches it only through a link on the server's disk is
    "no document" (as a filter, to delete, as a source): the server matched the caller's text against stored
    identities and never resolved it there (on Windows, a ``\\\\host\\share`` path would have made it connect)."""
    d, index = deployment, fresh_index()
    env = store_env(d)
    real = tmp_path / f"real-{index}"
    real.mkdir()
    (real / "memo.md").write_text("# Memo\n\nThe memo names the Quarry project.\n", encoding="utf-8")
    assert run_cli(d.home, settings, "ingest", str(real), "--index", index, **env).returncode == 0
    assert run_cli(d.home, settings, "sources", "add", str(real), "--index", index, **env).returncode == 0
    alias = tmp_path / f"alias-{index}"
    alias.symlink_to(real, target_is_directory=True)
    admin = d.as_("admin")
    (doc,) = d.documents("admin", index)
    by_own_path = httpx.post(f"{d.base}/v1/retrieve", headers=admin, timeout=60,
                             json={"query": "Quarry memo", "index": index, "documents": [str(real / "memo.md")]})
    assert by_own_path.status_code == 200 and by_own_path.json()["chunks"], by_own_path.text
    through_link = httpx.post(f"{d.base}/v1/retrieve", headers=admin, timeout=60,
                              json={"query": "Quarry memo", "index": index, "documents": [str(alias / "memo.md")]})
    assert through_link.status_code == 404, through_link.text
    from urllib.parse import quote

    deleted = httpx.delete(f"{d.base}/v1/documents/{quote(str(alias / 'memo.md'), safe='')}?index={index}",
                           headers=admin)
    assert deleted.status_code == 404, deleted.text
    assert [x["id"] for x in d.documents("admin", index)] == [doc["id"]]


# --------------------------------------------------------------------------- 10. JWT issuer and audience
def test_jwt_needs_issuer_audience_and_https_keys(settings: Settings, tmp_path: Path):
    """Finding 10: `rag serve` with jwt_jwks but without jwt_issuer or jwt_audience refuses to start (a token made
    for any other application of the identity provider would get in), as it does with an http:// JWKS URL; the
    explicit opt-out starts and says so loudly."""
    from helpers import free_port, jwt_env, signing_key

    full = jwt_env(tmp_path, signing_key(), {"staff": {"roles": ["reader"]}})
    cases = {"no audience": {k: v for k, v in full.items() if k != "RAG_JWT_AUDIENCE"},
             "no issuer": {k: v for k, v in full.items() if k != "RAG_JWT_ISSUER"},
             "http keys": {**full, "RAG_JWT_JWKS": "http://sso.example.test/jwks.json"}}
    for what, env in cases.items():
        started = run_cli(tmp_path / what.replace(" ", "-"), settings, "serve", "--port", str(free_port()), **env)
        assert started.returncode == 3, (what, started.returncode, started.stderr[-2000:])
        assert ("jwt_issuer and jwt_audience" in started.stderr) or ("https://" in started.stderr), started.stderr
    opted = {**cases["no audience"], "RAG_JWT_SKIP_ISS_AUD": "true"}
    log = tmp_path / "opted.log"
    with server_process(settings, tmp_path / "opted", log, **opted) as base:
        assert httpx.get(f"{base}/v1/documents").status_code == 401
    assert "SECURITY: jwt_skip_iss_aud" in log.read_text(errors="replace")


# --------------------------------------------------------------------------- 6. scores
def test_scores_do_not_count_hidden_chunks(deployment: Deployment):
    """Finding 6: a staff reader's retrieval (every score: lexical BM25, dense, fused, relevance, and the order)
    is the same while finance documents hold the query's words and once they are gone — BM25's statistics are
    taken over what it may see, never over the whole index."""
    d, index = deployment, fresh_index()
    files_of(d.upload("admin", index, "weather.md", b"# Weather\n\nA zephyr is a soft wind; the zephyr came west.\n"))
    files_of(d.upload("admin", index, "sailing.md",
                      b"# Sailing\n\nThe harbour wind turned, and a zephyr filled the sails at noon.\n"))
    hidden = [files_of(d.upload("admin", index, f"memo-{n}.md",
                                (f"# Memo {n}\n\nZephyr zephyr: the Zephyr account pays {n} crowns.\n").encode(),
                                groups="finance"))[0] for n in range(3)]

    def seen() -> list[dict[str, Any]]:
        reply = httpx.post(f"{d.base}/v1/retrieve", headers=d.as_("staff"), timeout=60,
                           json={"query": "zephyr wind", "index": index, "top_k": 5})
        assert reply.status_code == 200, reply.text
        return reply.json()["chunks"]

    with_hidden = seen()
    assert with_hidden and all(c["lexical_score"] for c in with_hidden)
    for doc in hidden:
        assert d.delete("admin", index, doc["document_id"]).status_code == 200
    assert seen() == with_hidden


# --------------------------------------------------------------------------- 14. metrics
@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)  # the route reads no document before refusing
def test_metrics_need_an_admin_who_sees_everything(deployment: Deployment):
    """Finding 14 (metrics): /metrics counts every document and names every index, so it answers only an admin of
    every index who sees every document; a reader, an editor or an admin with groups gets 403."""
    d = deployment
    for who in ("finance", "staff", "boss"):
        refused = httpx.get(f"{d.base}/metrics", headers=d.as_(who))
        assert refused.status_code == 403 and "rag_" not in refused.text, (who, refused.text[:200])
    assert "rag_requests_total" in httpx.get(f"{d.base}/metrics", headers=d.as_("admin")).text


def key_for(d: Deployment, settings: Settings, role: str, *indexes: str, groups: str = "*") -> dict[str, str]:
    """A new key (``rag keys create``) with ``role`` on ``indexes``."""
    made = run_cli(d.home, settings, "keys", "create", f"k-{uuid.uuid4().hex[:8]}", "--role", role,
                   *[arg for index in indexes for arg in ("--index", index)], "--groups", groups, **store_env(d))
    assert made.returncode == 0, made.stderr
    return bearer(made.stdout.strip().splitlines()[-1])


def index_names(d: Deployment) -> list[str]:
    return [i["name"] for i in httpx.get(f"{d.base}/v1/indexes", headers=d.as_("admin")).json()["indexes"]]


def test_index_not_found_names_only_the_indexes_the_caller_holds(deployment: Deployment, settings: Settings):
    """Finding 14 (index names): "index not found" lists only the indexes the caller holds a grant on (its
    "did you mean" too), on every route and as a stream; an index it holds no grant on is refused exactly as
    one that does not exist (same status, same body but for the name)."""
    d, mine, held, other = deployment, fresh_index(), fresh_index(), fresh_index()
    for index in (held, other):
        files_of(d.upload("admin", index, "canteen.md", b"# Canteen\n\nThe canteen serves soup.\n"))
    key = key_for(d, settings, "editor", mine, held)
    unheld = [n for n in index_names(d) if n != held]
    assert other in unheld
    replies = [httpx.post(f"{d.base}/v1/retrieve", headers=key, json={"query": "soup", "index": mine}, timeout=60),
               httpx.post(f"{d.base}/v1/ask", headers=key, json={"question": "soup?", "index": mine}, timeout=60),
               httpx.post(f"{d.base}/v1/ask", headers=key, timeout=60,
                          json={"question": "soup?", "index": mine, "stream": True}),
               httpx.get(f"{d.base}/v1/documents?index={mine}", headers=key, timeout=60),
               httpx.get(f"{d.base}/v1/documents/nothing/original?index={mine}", headers=key, timeout=60),
               httpx.delete(f"{d.base}/v1/documents/nothing?index={mine}", headers=key, timeout=60)]
    for reply in replies:
        assert "index_not_found" in reply.text and reply.status_code in (200, 404), reply.text
        assert held in reply.text, reply.text  # the one other index it holds
        assert not [n for n in unheld if n in reply.text], (reply.request.url, reply.text)
    # No grant: an index that exists and one that does not are refused alike.
    ghost = fresh_index()
    for route, body in (("/v1/retrieve", {"query": "soup"}), ("/v1/ask", {"question": "soup?"})):
        there = httpx.post(f"{d.base}{route}", headers=key, json={**body, "index": other}, timeout=60)
        not_there = httpx.post(f"{d.base}{route}", headers=key, json={**body, "index": ghost}, timeout=60)
        assert there.status_code == not_there.status_code == 403, there.text
        assert there.text.replace(other, "X") == not_there.text.replace(ghost, "X")
    listed = httpx.get(f"{d.base}/v1/documents?index={other}", headers=key)
    assert listed.status_code == 403 and listed.text.replace(other, "X") == \
        httpx.get(f"{d.base}/v1/documents?index={ghost}", headers=key).text.replace(ghost, "X")


def test_healthz_names_the_default_index_only_to_a_caller_with_a_role_there(deployment: Deployment,
                                                                              settings: Settings):
    """Finding 14 (/healthz): the default index's name and counts go only to a caller with a role there; an
    anonymous load balancer still gets the status (and /v1/indexes names the default to such a caller only)."""
    d = deployment
    elsewhere = key_for(d, settings, "reader", fresh_index())
    for headers in ({}, elsewhere):
        health = httpx.get(f"{d.base}/healthz", headers=headers)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        assert "index" not in health.json() and "default" not in health.text, health.text
    assert httpx.get(f"{d.base}/v1/indexes", headers=elsewhere).json() == {"default": None, "indexes": []}
    shown = httpx.get(f"{d.base}/healthz", headers=d.as_("finance")).json()
    assert shown["index"]["name"] == "default", shown
    assert httpx.get(f"{d.base}/v1/indexes", headers=d.as_("finance")).json()["default"] == "default"


def test_a_grant_holds_the_index_the_store_resolves_not_a_spelling(deployment: Deployment, settings: Settings):
    """Finding 14 (letter case): the store resolves an index name without regard to letter case ("HR" is an
    existing "hr"), so a grant is checked against the resolved name: a grant for "HR" opens nothing of "hr"
    and makes no second index beside it; a grant for "hr" opens it however it is spelled."""
    d = deployment
    lower = fresh_index()
    upper = lower.upper()
    hidden = files_of(d.upload("admin", lower, "Budget.md", SECRET))[0]
    spelled = key_for(d, settings, "editor", upper)
    listed = httpx.get(f"{d.base}/v1/documents?index={upper}", headers=spelled)
    found = httpx.post(f"{d.base}/v1/retrieve", headers=spelled, json={"query": "Zorblax budget", "index": upper})
    stored = httpx.post(f"{d.base}/v1/documents?index={upper}", headers=spelled, timeout=120,
                        files={"data": ("mine.md", b"# Mine\n\nMy own text.\n", "text/markdown")})
    for reply in (listed, found, stored):
        assert reply.status_code == 403, (reply.request.url, reply.text)
        assert not any(word in reply.text for word in SECRET_WORDS) and lower not in reply.text, reply.text
    assert upper not in index_names(d)
    assert [doc["id"] for doc in d.documents("admin", lower)] == [hidden["document_id"]]
    holder = key_for(d, settings, "reader", lower)
    seen = httpx.get(f"{d.base}/v1/documents?index={upper}", headers=holder)
    assert seen.status_code == 200 and [doc["id"] for doc in seen.json()["documents"]] == [hidden["document_id"]]
    if d.store == "postgresql":  # a second index differing only in case is never made, even past the resolving
        from rag.store.postgres import PostgresIndex, PostgresStore
        from rag.core.errors import ConflictError

        store = PostgresStore(d.env["RAG_STORE_URL"])
        try:
            assert store.index(upper).name == lower
            with pytest.raises(ConflictError, match="only in letter case"):
                PostgresIndex(store, upper).writer("some/embedder@384", 384)
            assert upper not in store.names()
            store.delete(upper)  # `rag index delete HR` deletes "hr", as on the embedded store
            assert lower not in store.names()
        finally:
            store.close()


# --------------------------------------------------------------------------- the property: hidden means absent
WORDS = ("harbour", "lantern", "copper", "orchard", "glacier", "ledger", "falcon", "meadow", "quarry", "beacon",
         "saffron", "tundra", "violin", "walnut", "zephyr", "amber", "basalt", "cobalt", "dune", "ember")
GROUP_CHOICES = ("", "", "staff", "staff,hr", "finance", "hr", "finance,board")
VOLATILE = {"metrics", "created_at", "started_at", "finished_at", "request_id", "cached_prompt_tokens",
            "cached_tokens", "prompt_tokens_details"}


def steady(value: Any) -> Any:
    """A reply without what changes from one run to the next whatever the index holds (timings, timestamps, the
    asker's own prefix-cache reuse)."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items()
                if k not in VOLATILE and not k.endswith(("_ms", "_s"))}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def test_a_restricted_principals_replies_are_the_same_without_hidden_documents(deployment: Deployment):
    """The "Done when" property: random documents with random groups; a staff editor's replies to 220 generated
    requests (retrieve with scores and document filters, ask, the document list, jobs, sources, and errors that
    name hidden documents) are identical between the index without the documents it cannot see and the same index
    once they were added."""
    import random

    from rag.core.records import document_id

    d, index = deployment, fresh_index()
    rng = random.Random(f"hidden-means-absent-{d.store}")

    def text(n: int) -> str:
        return ". ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))).capitalize()
                         for _ in range(n)) + "."

    documents = []
    for n in range(16):
        groups = rng.choice(GROUP_CHOICES)
        visible = not groups or "staff" in groups.split(",")
        name = f"doc-{n:02d}.md"
        documents.append((name, f"# {' '.join(rng.sample(WORDS, 2)).title()}\n\n{text(rng.randint(2, 5))}\n".encode(),
                          groups, visible))
    assert any(v for *_, v in documents) and not all(v for *_, v in documents)
    shown = [doc for doc in documents if doc[3]]
    hidden = [doc for doc in documents if not doc[3]]
    folder = d.home / "uploads" / index
    hidden_names = [str(folder / name) for name, *_ in hidden] + [document_id(folder / name) for name, *_ in hidden]

    def upload(doc: tuple[str, bytes, str, bool]) -> dict[str, Any]:
        name, content, groups, _ = doc
        return files_of(d.upload("admin", index, name, content, groups=groups or None))[0]

    shown_ids = [upload(doc)["document_id"] for doc in shown]
    visible_jobs = [j["id"] for j in httpx.get(f"{d.base}/v1/jobs?index={index}", headers=d.as_("admin")).json()["jobs"]]
    requests: list[tuple[str, str, dict[str, Any] | None]] = []
    for _ in range(220):
        kind = rng.random()
        query = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
        if kind < 0.55:
            body: dict[str, Any] = {"query": query, "index": index, "top_k": rng.randint(1, 8)}
            if rng.random() < 0.25:
                body["documents"] = [rng.choice([*shown_ids, *hidden_names])]
            requests.append(("POST", "/v1/retrieve", body))
        elif kind < 0.62:
            requests.append(("POST", "/v1/ask", {"question": f"What about the {query}?", "index": index}))
        elif kind < 0.70:
            requests.append(("GET", f"/v1/documents?index={index}", None))
        elif kind < 0.78:
            requests.append(("GET", f"/v1/jobs?index={index}", None))
        elif kind < 0.84:
            requests.append(("GET", f"/v1/jobs/{rng.choice(visible_jobs)}", None))
        elif kind < 0.88:
            requests.append(("GET", f"/v1/sources?index={index}", None))
        elif kind < 0.94:
            requests.append(("DELETE", f"/v1/documents/{rng.choice(hidden_names[len(hidden):])}?index={index}", None))
        else:
            requests.append(("GET", f"/v1/indexes", None))

    def replies() -> list[tuple[int, Any]]:
        out = []
        for method, path, body in requests:
            reply = httpx.request(method, f"{d.base}{path}", json=body, headers=d.as_("staff"), timeout=120)
            try:
                content: Any = reply.json()
            except ValueError:
                content = reply.text
            out.append((reply.status_code, steady(content)))
        return out

    without = replies()
    for doc in hidden:
        upload(doc)
    with_hidden = replies()
    differing = [(requests[i], a, b) for i, (a, b) in enumerate(zip(without, with_hidden)) if a != b]
    assert not differing, f"{len(differing)} of {len(requests)} replies differ; the first: {differing[0]}"
    assert {status for status, _ in without} >= {200, 404}


# --------------------------------------------------------------------------- 13. folder groups on a drive this session lacks
def test_a_folder_group_on_a_drive_the_session_lacks_is_refused():
    """Finding 13 (with Windows' facts, as tests/test_windows.py does on Linux: a service has no drive Z: although
    the user mapped it): a [folder_groups] entry "Z:\\HR" would never match, and new HR files would be public;
    start refuses it and names the UNC path instead. Drives this session has (C:, a mapping it sees) and UNC
    paths pass."""
    import ntpath

    from rag.core.paths import PathRules, unreachable_drive

    service = PathRules(windows=True, case_insensitive=True, realpath=ntpath.abspath,
                        mapped_drive=lambda drive: "\\\\files\\share" if drive == "Y:" else None,
                        drive_exists=lambda drive: drive == "C:")
    assert unreachable_drive("Z:\\HR", service) == "Z:"
    assert unreachable_drive("z:\\hr\\pay", service) == "Z:"
    assert unreachable_drive("C:\\Shares\\HR", service) is None
    assert unreachable_drive("Y:\\HR", service) is None  # mapped in this session: spelled as its UNC root
    assert unreachable_drive("\\\\files\\share\\HR", service) is None
    posix = PathRules(windows=False, case_insensitive=False, realpath=lambda p: p)
    assert unreachable_drive("/srv/share/hr", posix) is None


def test_audit_records_say_which_kind_of_principal_acted(deployment: Deployment, settings: Settings):
    """Finding 14 (one namespace): a key, RAG_API_KEY and a signed-in user may share a name; each audit record
    carries the principal's kind (key, env, jwt, local, anonymous, system) beside its name."""
    import json

    d, index = deployment, fresh_index()
    files_of(d.upload("admin", index, "canteen.md", b"# Canteen\n\nSoup on Mondays.\n"))
    httpx.post(f"{d.base}/v1/retrieve", headers=d.as_("staff"), json={"query": "soup", "index": index}, timeout=60)
    import time

    time.sleep(1.5)  # fsync'd within a second
    shown = run_cli(d.home, settings, "audit", "show", "--json", "--index", index, **store_env(d))
    assert shown.returncode == 0, shown.stderr
    kinds = {(r["principal"], r.get("principal_kind")) for r in map(json.loads, shown.stdout.splitlines())}
    assert ("hidden-staff", "key") in kinds and ("api-key", "env") in kinds, kinds
