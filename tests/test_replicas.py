"""Two `rag serve` replicas that hold no state of their own: one PostgreSQL store, one remote generator
(this project's own `rag serve`, see ``upstream_generator``), one shared uploads folder. An upload through
one is answerable through the other, and a delete through either is gone from both."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from rag.core.settings import PROJECT_ROOT, Settings
from tests.helpers import server_process

QUESTION = "Who was the leader of the Normans who swore fealty to Charles III?"


def test_two_replicas_share_store_generator_and_uploads(settings: Settings, postgres_url: str,
                                                        upstream_generator: str, tmp_path: Path) -> None:
    shared_uploads = tmp_path / "shared-uploads"
    env = {"RAG_STORE_URL": postgres_url, "RAG_GENERATOR_URL": upstream_generator,
           "RAG_GENERATOR_TOKENIZER": str(settings.generator_path / "tokenizer.json"),
           "RAG_UPLOADS_DIR": str(shared_uploads), "RAG_INDEX": f"replicas-{uuid.uuid4().hex[:8]}"}
    normans = (PROJECT_ROOT / "examples" / "docs" / "normans.md").read_bytes()
    with server_process(settings, tmp_path / "home-a", tmp_path / "a.log", **env) as a, \
            server_process(settings, tmp_path / "home-b", tmp_path / "b.log", **env) as b:
        for base in (a, b):
            health = httpx.get(f"{base}/healthz").json()
            assert (health["backend"], health["store"]) == ("openai-remote", "postgresql")
        uploaded = httpx.post(f"{a}/v1/documents", files={"data": ("normans.md", normans)}, timeout=120).json()
        assert uploaded["files"][0]["status"] == "added"
        doc_id = uploaded["files"][0]["document_id"]
        assert (shared_uploads / env["RAG_INDEX"] / "normans.md").is_file()

        answer = httpx.post(f"{b}/v1/ask", json={"question": QUESTION, "max_tokens": 24}, timeout=120).json()
        assert not answer["abstained"] and answer["answer"] and answer["metrics"]["output_tokens"] > 0
        assert answer["sources"][0]["document_id"] == doc_id
        assert [d["id"] for d in httpx.get(f"{b}/v1/documents").json()["documents"]] == [doc_id]

        # Uploading the same name through the other replica replaces the one document (same stored path).
        again = httpx.post(f"{b}/v1/documents", files={"data": ("normans.md", normans)}, timeout=120).json()
        assert (again["files"][0]["status"], again["files"][0]["document_id"]) == ("unchanged", doc_id)

        deleted = httpx.delete(f"{b}/v1/documents/{doc_id}", timeout=30)
        assert deleted.status_code == 200 and deleted.json()["deleted"] == doc_id
        assert httpx.get(f"{a}/v1/documents").json()["documents"] == []
        assert not (shared_uploads / env["RAG_INDEX"] / "normans.md").exists()
        listed = {i["name"]: i["documents"] for i in httpx.get(f"{a}/v1/indexes").json()["indexes"]}
        assert listed[env["RAG_INDEX"]] == 0
        after = httpx.post(f"{a}/v1/ask", json={"question": QUESTION, "max_tokens": 24}, timeout=120).json()
        assert after["abstained"] and after["sources"] == []
        assert httpx.get(f"{a}/healthz").json()["index"]["documents"] == 0


def test_a_key_revoked_through_one_replica_is_refused_by_the_other(settings: Settings, postgres_url: str,
                                                                     upstream_generator: str, tmp_path: Path) -> None:
    """The keys table lives in the shared PostgreSQL store: revocation holds on the next request everywhere."""
    admin = f"replica-admin-{uuid.uuid4().hex[:8]}"
    env = {"RAG_STORE_URL": postgres_url, "RAG_GENERATOR_URL": upstream_generator,
           "RAG_GENERATOR_TOKENIZER": str(settings.generator_path / "tokenizer.json"),
           "RAG_UPLOADS_DIR": str(tmp_path / "shared-uploads"), "RAG_INDEX": f"keys-{uuid.uuid4().hex[:8]}",
           "RAG_API_KEY": admin}
    name = f"reader-{uuid.uuid4().hex[:8]}"
    with server_process(settings, tmp_path / "home-a", tmp_path / "a.log", **env) as a, \
            server_process(settings, tmp_path / "home-b", tmp_path / "b.log", **env) as b:
        created = httpx.post(f"{a}/v1/keys", json={"name": name, "role": "reader"},
                             headers={"Authorization": f"Bearer {admin}"}, timeout=30)
        assert created.status_code == 201, created.text
        reader = {"Authorization": f"Bearer {created.json()['key']}"}
        me = httpx.get(f"{b}/v1/me", headers=reader, timeout=30)
        assert me.status_code == 200 and me.json()["name"] == name  # made on A, known to B
        listed = httpx.get(f"{b}/v1/keys", headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()
        assert name in [k["name"] for k in listed["keys"]]
        assert httpx.get(f"{b}/v1/indexes", headers=reader, timeout=30).status_code == 200
        revoked = httpx.delete(f"{a}/v1/keys/{name}", headers={"Authorization": f"Bearer {admin}"}, timeout=30)
        assert revoked.status_code == 200, revoked.text
        refused = httpx.get(f"{b}/v1/indexes", headers=reader, timeout=30)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "unauthorized", refused.text
