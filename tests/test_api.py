"""The REST API end to end: real models, a real index, the real HTTP stack — no mocks.

Most tests drive the Litestar app in-process through ``litestar.testing.TestClient``
(the lifespan loads the models). The disconnect test and the official ``openai``
client test run against a real ``rag serve`` (uvicorn) subprocess.
Generations are kept short (``max_tokens`` 8-16) so the whole module stays fast on CPU.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from litestar.testing import TestClient

from api.app import create_app
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from rag.answering.prompt import ABSTENTION_MESSAGE
from helpers import running_server
from rag.core.settings import PROJECT_ROOT, Settings

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
SQUAD_DOCS = SHARED_DATA / "squad2-dev" / "docs"
PDF_DIR = SHARED_DATA / "pdfs"
DOC_NAMES = ("normans.md", "victoria_australia.md")
ROLLO_QUESTION = "Who was Rollo, the leader of the Normans?"
OFF_TOPIC_QUESTION = "What is the boiling point of liquid nitrogen on Jupiter's moons?"
ZORBLAT_TEXT = ("Zorblat festival notes\n\n"
                "The Zorblat festival is held every March in Quintessa. "
                "Visitors to the Zorblat festival eat purple dumplings and fly paper kites.\n")
SEED_METRIC_KEYS = {"ttft", "total_latency", "tokens_per_second", "output_tokens_per_second", "input_tokens",
                    "output_tokens", "tpot", "model"}
SHORT = 12  # max_tokens for most generations


# --------------------------------------------------------------------------- helpers
def sse_events(text: str) -> list:
    """Parse an SSE body strictly: ``data: <payload>`` lines, each followed by a blank line."""
    assert text.endswith("\n\n"), f"SSE body must end with a blank line: {text[-200:]!r}"
    events = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, f"bad SSE frame {block!r}"
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert events, "empty event stream"
    return events


def sse_response(response: httpx.Response) -> list:
    """The events of a 200 SSE response (one ``text/event-stream`` Content-Type, no caching)."""
    assert response.status_code == 200, response.text
    assert response.headers.get_list("content-type") == ["text/event-stream; charset=utf-8"], response.headers
    assert response.headers["cache-control"] == "no-cache"
    return sse_events(response.text)


def assert_error(response: httpx.Response, status: int | None = None) -> dict:
    """A client error in the one error shape: ``{"error": {"type", "message"}}``."""
    assert response.status_code != 500, response.text
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    if status is not None:
        assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    error = body["error"]
    assert isinstance(error["type"], str) and error["type"], body
    assert isinstance(error["message"], str) and error["message"], body
    return error




def doc_ids(client: TestClient) -> dict[str, str]:
    """Document id -> path of every document in the default index."""
    response = client.get("/v1/documents")
    assert response.status_code == 200, response.text
    return {d["id"]: d["path"] for d in response.json()["documents"]}


def ttft_observed(client: TestClient) -> bool:
    """Whether the TTFT histogram has seen at least one answer."""
    match = re.search(r"^rag_ttft_seconds_count (\S+)$", client.get("/metrics").text, re.MULTILINE)
    return bool(match) and float(match.group(1)) >= 1


def upload(client: TestClient, filename: str, content: bytes, mime: str = "text/plain") -> httpx.Response:
    return client.post("/v1/documents", files={"data": (filename, content, mime)})


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def api_home(tmp_path_factory: pytest.TempPathFactory, settings: Settings, embedder) -> Path:
    """A scratch home whose default index holds a few SQuAD documents."""
    if not SQUAD_DOCS.is_dir():
        pytest.skip(f"SQuAD docs not found at {SQUAD_DOCS}")
    home = tmp_path_factory.mktemp("api-home")
    docs = home / "docs"
    docs.mkdir()
    for name in DOC_NAMES:
        shutil.copy2(SQUAD_DOCS / name, docs / name)
    app_settings = settings.replace(home=home)
    summary = ingest_paths([docs / n for n in DOC_NAMES], EmbeddedIndex(app_settings.index_path()),
                           IngestParameters.from_settings(app_settings, embedder))
    assert summary.count("added") == len(DOC_NAMES), summary.as_dict()
    return home


@pytest.fixture(scope="module")
def app_settings(settings: Settings, api_home: Path) -> Settings:
    return settings.replace(home=api_home)


@contextmanager
def ready_client(app_settings: Settings) -> Iterator[TestClient]:
    """The app in-process, once its background model loading has finished."""
    with TestClient(create_app(app_settings), base_url="http://127.0.0.1", timeout=120) as test_client:
        deadline = time.monotonic() + 120
        while test_client.get("/healthz").json()["status"] == "loading" and time.monotonic() < deadline:
            time.sleep(0.1)
        yield test_client


@pytest.fixture(scope="module")
def client(app_settings: Settings):
    with ready_client(app_settings) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def server_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("server") / "serve.log"


@pytest.fixture(scope="module")
def server(app_settings: Settings, api_home: Path, server_log: Path):
    """``rag serve`` (uvicorn) in a subprocess on a free port; yields its base URL."""
    with running_server(app_settings, api_home, server_log) as base:
        yield base


# --------------------------------------------------------------------------- health and metrics
def test_models_load_in_the_background_behind_a_503(app_settings: Settings):
    with TestClient(create_app(app_settings), base_url="http://127.0.0.1", timeout=120) as loading:
        health = loading.get("/healthz")  # the app is up before its models (loading takes seconds)
        assert health.status_code == 503 and health.json()["status"] == "loading", health.text
        assert health.json()["reason"] and health.headers["retry-after"]
        asked = loading.post("/v1/ask", json={"question": ROLLO_QUESTION})
        assert asked.status_code == 503 and asked.json()["error"]["type"] == "model_unavailable", asked.text
    with ready_client(app_settings) as ready:
        assert ready.get("/healthz").json()["status"] == "ok"


def test_healthz_reports_ready_backend_and_index(client: TestClient):
    response = client.get("/healthz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "ok"
    assert body["backend"] == "onnx-genai"
    assert body["device"] == "cpu"
    assert body["index"]["documents"] == len(DOC_NAMES)
    assert body["index"]["chunks"] > 0
    assert response.headers.get("x-request-id")


def test_metrics_exposes_prometheus_series(client: TestClient):
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    # A histogram has series from its first observation on (rag_ttft_seconds: test_ask_returns_answer_...).
    for name in ("rag_requests_total", "rag_index_documents", "rag_generation_queue_depth",
                 "rag_generated_tokens_total"):
        assert name in text, name
    assert re.search(r'^rag_index_documents\{index="default"\} 2\.0$', text, re.MULTILINE), text
    assert re.search(r'^rag_requests_total\{method="GET",route="/healthz",status="200"\} \d', text, re.MULTILINE)


# --------------------------------------------------------------------------- /v1/ask
def test_ask_returns_answer_sources_and_metrics(client: TestClient):
    response = client.post("/v1/ask", json={"question": ROLLO_QUESTION, "max_tokens": SHORT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answer"].strip()
    assert isinstance(body["abstained"], bool)
    assert body["sources"]
    for source in body["sources"]:
        assert source["document_id"] and source["path"] and source["title"] and source["snippet"]
        assert isinstance(source["score"], float)
    assert any(Path(s["path"]).name == "normans.md" for s in body["sources"]), body["sources"]
    assert Path(body["sources"][0]["path"]).name == "normans.md"
    metrics = body["metrics"]
    assert metrics["prompt_tokens"] > 0
    assert 0 < metrics["output_tokens"] <= SHORT
    assert 0 < metrics["ttft_ms"] <= metrics["total_ms"]
    assert ttft_observed(client)


def test_ask_stream_is_sse_tokens_then_done(client: TestClient):
    response = client.post("/v1/ask", json={"question": ROLLO_QUESTION, "max_tokens": SHORT, "stream": True})
    events = sse_response(response)
    tokens = [e["token"] for e in events[:-1]]
    assert tokens and all(isinstance(t, str) for t in tokens), events
    assert all(set(e) == {"token"} for e in events[:-1]), events
    final = events[-1]
    assert final["done"] is True
    assert final["answer"].strip()
    assert any(Path(s["path"]).name == "normans.md" for s in final["sources"])
    assert len(tokens) <= final["metrics"]["output_tokens"] <= SHORT  # a token may decode to no text yet
    assert final["metrics"]["ttft_ms"] > 0
    if not final["abstained"]:
        assert "".join(tokens).strip() == final["answer"]


def test_off_topic_question_abstains_with_sources(client: TestClient):
    response = client.post("/v1/ask", json={"question": OFF_TOPIC_QUESTION, "max_tokens": SHORT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["abstained"] is True, body
    assert body["answer"] == ABSTENTION_MESSAGE
    assert body["citations"] == []
    assert body["sources"], "retrieved sources are still reported when abstaining"


def test_retrieve_returns_scored_chunks(client: TestClient):
    response = client.post("/v1/retrieve", json={"query": "Rollo and the Normans in Normandy", "top_k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["query"] == "Rollo and the Normans in Normandy"
    chunks = body["chunks"]
    assert 1 <= len(chunks) <= 3
    for chunk in chunks:
        assert isinstance(chunk["score"], float)
        assert chunk["text"].strip() and chunk["document_id"]
    scores = [c["score"] for c in chunks]
    assert scores == sorted(scores, reverse=True)
    assert Path(chunks[0]["path"]).name == "normans.md"
    assert "embed_ms" in body["metrics"] and "search_ms" in body["metrics"]
    relevance = [c["relevance"] for c in chunks]  # the figure people are shown, in the same order
    assert relevance == sorted(relevance, reverse=True) and all(0 < r <= 1 for r in relevance)


def test_upload_formats_come_from_the_registry(client: TestClient):
    from ingest.formats.registry import FORMATS

    body = client.get("/v1/documents/formats").json()
    assert [(f["kind"], f["suffixes"]) for f in body["formats"]] == [(f.kind, list(f.suffixes)) for f in FORMATS]
    assert all(f["label"] for f in body["formats"])
    assert body["accept"].split(",") == [suffix for f in FORMATS for suffix in f.suffixes]


def test_schema_tells_the_two_meanings_of_top_k_side_by_side(client: TestClient):
    schemas = client.get("/schema/openapi.json").json()["components"]["schemas"]

    def top_k(name: str) -> str:
        prop = schemas[name]["properties"]["top_k"]
        return " ".join(part.get("description", "") for part in prop.get("anyOf", [prop]))

    assert "retrieval depth" in top_k("AskRequest") and "sampling top-k" in top_k("AskRequest")
    assert "retrieval depth" in top_k("RetrieveRequest")
    assert top_k("ChatRequest").startswith("sampling top-k") and "retrieval depth" in top_k("ChatRequest")


# --------------------------------------------------------------------------- seed-compatible chat
def test_seed_chat_returns_content_and_metrics(client: TestClient):
    response = client.post("/v1/chat", json={"messages": [{"role": "user", "content": ROLLO_QUESTION}],
                                             "max_tokens": SHORT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["content"].strip()
    assert set(body["metrics"]) == SEED_METRIC_KEYS
    metrics = body["metrics"]
    assert metrics["input_tokens"] > 0 and 0 < metrics["output_tokens"] <= SHORT
    assert 0 < metrics["ttft"] <= metrics["total_latency"]
    assert metrics["model"]
    assert body["sources"]


def test_seed_chat_stream_ends_with_done_marker(client: TestClient):
    response = client.post("/v1/chat/stream", json={"messages": [{"role": "user", "content": ROLLO_QUESTION}],
                                                    "max_tokens": SHORT})
    events = sse_response(response)
    assert any("token" in e and e.get("token") != "[DONE]" for e in events[:-1]), events
    final = events[-1]
    assert final["done"] is True and final["token"] == "[DONE]"
    assert set(final["metrics"]) == SEED_METRIC_KEYS


def test_seed_chat_without_context_has_no_sources(client: TestClient):
    response = client.post("/v1/chat", json={"messages": [{"role": "user", "content": "Say hello."}],
                                             "max_tokens": 8, "use_context": False})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["content"].strip()
    assert body["sources"] == [] and body["abstained"] is False
    assert set(body["metrics"]) == SEED_METRIC_KEYS


# --------------------------------------------------------------------------- OpenAI-compatible
def test_openai_models_list(client: TestClient):
    response = client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    assert body["data"] and body["data"][0]["object"] == "model" and body["data"][0]["id"]


def test_openai_chat_completion_shape(client: TestClient):
    response = client.post("/v1/chat/completions", json={
        "model": "anything", "messages": [{"role": "user", "content": ROLLO_QUESTION}], "max_tokens": SHORT})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= SHORT
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert body["sources"]


def test_openai_stop_strings_cut_the_reply(client: TestClient):
    request = {"messages": [{"role": "user", "content": "Write two sentences about the sea."}],
               "max_tokens": 40, "use_context": False}
    full = client.post("/v1/chat/completions", json=request).json()["choices"][0]["message"]["content"]
    words = full.split()
    assert len(words) > 4, full
    stop = " " + words[3]  # a word inside the reply: everything from it on is cut
    expected = full[:full.index(stop)]
    body = client.post("/v1/chat/completions", json={**request, "stop": [stop, "never-said-zzz"]}).json()
    assert body["choices"][0]["message"]["content"] == expected
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] < len(words) + 40
    events = sse_response(client.post("/v1/chat/completions", json={**request, "stop": stop, "stream": True}))
    chunks = [e for e in events[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert_error(client.post("/v1/chat/completions", json={**request, "stop": ["a", "b", "c", "d", "e"]}), 400)


def test_openai_text_content_parts_equal_plain_content(client: TestClient):
    plain = {"messages": [{"role": "user", "content": ROLLO_QUESTION}], "max_tokens": SHORT}
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": ROLLO_QUESTION}]}],
             "max_tokens": SHORT}
    answers = [client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
               for body in (plain, parts)]
    assert answers[0].strip() and answers[0] == answers[1]
    image = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": ROLLO_QUESTION}, {"type": "image_url", "image_url": {"url": "x"}}]}]}
    assert "image_url" in assert_error(client.post("/v1/chat/completions", json=image), 400)["message"]


def test_openai_usage_reports_prefix_cache_hits(client: TestClient):
    request = {"messages": [{"role": "user", "content": ROLLO_QUESTION}], "max_tokens": SHORT}
    usages = [client.post("/v1/chat/completions", json=request).json()["usage"] for _ in range(2)]
    # The same prompt again: all of it but the last token comes from the prefix cache.
    assert usages[1]["prompt_tokens"] == usages[0]["prompt_tokens"]
    assert usages[1]["prompt_tokens_details"]["cached_tokens"] == usages[1]["prompt_tokens"] - 1


def test_openai_chat_completion_stream_shape(client: TestClient):
    response = client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": ROLLO_QUESTION}], "max_tokens": SHORT, "stream": True,
        "stream_options": {"include_usage": True}})
    events = sse_response(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert content.strip()
    finished = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finished) == 1 and finished[0]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


# --------------------------------------------------------------------------- documents
def test_upload_retrieve_list_delete_document(client: TestClient, api_home: Path):
    response = upload(client, "zorblat.txt", ZORBLAT_TEXT.encode())
    assert response.status_code == 200, response.text
    [outcome] = response.json()["files"]
    assert outcome["status"] == "added" and outcome["chunks"] >= 1
    doc_id = outcome["document_id"]
    stored = api_home / "uploads" / "default" / "zorblat.txt"
    assert stored.read_text() == ZORBLAT_TEXT
    assert not list(stored.parent.glob(".incoming-*"))

    listed = doc_ids(client)
    assert doc_id in listed and listed[doc_id].endswith("zorblat.txt")
    retrieved = client.post("/v1/retrieve", json={"query": "When is the Zorblat festival held?", "top_k": 3})
    assert retrieved.status_code == 200
    assert retrieved.json()["chunks"][0]["path"].endswith("zorblat.txt")
    asked = client.post("/v1/ask", json={"question": "When is the Zorblat festival held?", "max_tokens": SHORT})
    assert asked.status_code == 200
    assert any(s["path"].endswith("zorblat.txt") for s in asked.json()["sources"])
    assert client.get("/healthz").json()["index"]["documents"] == len(DOC_NAMES) + 1

    deleted = client.delete(f"/v1/documents/{doc_id}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"] == doc_id
    assert doc_id not in doc_ids(client)
    assert not stored.exists(), "our stored copy of the upload is removed with the document"
    retrieved = client.post("/v1/retrieve", json={"query": "When is the Zorblat festival held?", "top_k": 5})
    assert not any(c["path"].endswith("zorblat.txt") for c in retrieved.json()["chunks"])
    assert_error(client.delete(f"/v1/documents/{doc_id}"), 404)


def test_upload_encrypted_pdf_is_rejected(client: TestClient):
    pdf = PDF_DIR / "libreoffice-writer-password.pdf"
    if not pdf.is_file():
        pytest.skip(f"{pdf} not found")
    before = doc_ids(client)
    response = upload(client, pdf.name, pdf.read_bytes(), "application/pdf")
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["files"][0]["status"] == "failed"
    assert "password" in body["files"][0]["reason"].lower()
    assert body["error"]["type"] == "encrypted_document" and "password" in body["error"]["message"].lower()
    assert doc_ids(client) == before


def test_upload_unsupported_type_is_rejected(client: TestClient, api_home: Path):
    before = doc_ids(client)
    response = upload(client, "setup.exe", b"MZ\x90\x00binary", "application/octet-stream")
    assert response.status_code == 422, response.text
    assert response.json()["error"]["type"] == "unsupported_file_type"
    assert doc_ids(client) == before
    assert not (api_home / "uploads" / "default" / "setup.exe").exists()


def test_upload_without_extension_or_files_is_a_client_error(client: TestClient):
    assert_error(upload(client, "README", b"no extension here"), 400)
    assert_error(client.post("/v1/documents", data={"note": "no file"}), 400)
    assert_error(client.post("/v1/documents"), 400)  # no body at all
    assert_error(client.post("/v1/documents", content=b"",
                             headers={"Content-Type": "multipart/form-data; boundary=xyz"}), 400)
    assert_error(client.post("/v1/documents", files={"other": ("a.txt", b"wrong field", "text/plain")}), 400)


def test_upload_of_two_files_with_one_name_is_refused(client: TestClient):
    before = doc_ids(client)
    response = client.post("/v1/documents", files=[("data", ("twin.txt", b"The first twin.", "text/plain")),
                                                   ("data", ("../twin.txt", b"The second twin.", "text/plain"))])
    assert "twin.txt" in assert_error(response, 400)["message"]
    assert doc_ids(client) == before


def test_upload_refused_by_a_locked_index_keeps_the_stored_file(client: TestClient, app_settings: Settings,
                                                                 embedder):
    from rag.store.embedded import EmbeddedWriter

    first = upload(client, "wombat.txt", b"Wombats are marsupials that dig burrows in Australia.\n")
    assert first.status_code == 200, first.text
    stored = app_settings.home / "uploads" / "default" / "wombat.txt"
    with EmbeddedWriter(app_settings.index_path(), embedder.config.identity, embedder.dimension):
        locked = upload(client, "wombat.txt", b"Kangaroos replaced the wombats in this version.\n")
    assert assert_error(locked, 409)["type"] == "index_locked"
    assert stored.read_text() == "Wombats are marsupials that dig burrows in Australia.\n"
    assert sorted(p.name for p in stored.parent.iterdir() if p.name.startswith(".")) == []
    hits = client.post("/v1/retrieve", json={"query": "What do wombats dig?", "top_k": 1}).json()["chunks"]
    assert "burrows" in hits[0]["text"]
    assert client.delete(f"/v1/documents/{first.json()['files'][0]['document_id']}").status_code == 200


def test_deleting_an_index_needs_its_name_repeated_and_takes_its_uploads(client: TestClient, api_home: Path):
    response = client.post("/v1/documents", params={"index": "doomed"},
                           files=[("data", ("note.txt", b"The doomed index holds one note about herons.\n"))])
    assert response.status_code == 200, response.text
    assert (api_home / "uploads" / "doomed" / "note.txt").exists()
    unconfirmed = assert_error(client.delete("/v1/indexes/doomed"), 409)
    assert unconfirmed["type"] == "confirmation_required"
    assert "1 documents" in unconfirmed["message"] and "confirm=doomed" in unconfirmed["message"]
    assert_error(client.delete("/v1/indexes/doomed", params={"confirm": "other"}), 409)
    assert assert_error(client.delete("/v1/indexes/nowhere", params={"confirm": "nowhere"}), 404)["type"] == \
        "index_not_found"
    deleted = client.delete("/v1/indexes/doomed", params={"confirm": "doomed"})
    assert deleted.status_code == 200 and deleted.json() == {"deleted": "doomed", "documents": 1, "chunks": 1}
    assert "doomed" not in [i["name"] for i in client.get("/v1/indexes").json()["indexes"]]
    assert not (api_home / "uploads" / "doomed").exists()


def test_upload_path_traversal_is_stored_inside_uploads(client: TestClient, api_home: Path):
    uploads = (api_home / "uploads").resolve()
    target = (uploads / "default" / "../../evil.txt").resolve()  # == <home>/evil.txt
    response = upload(client, "../../evil.txt", b"The evil file says the Gribbleflux tower is green.\n")
    assert response.status_code == 200, response.text
    [outcome] = response.json()["files"]
    assert outcome["status"] == "added"
    assert not target.exists()
    assert not (api_home.parent / "evil.txt").exists()
    path = Path(doc_ids(client)[outcome["document_id"]])
    assert path.resolve().is_relative_to(uploads), path
    assert path.is_file()
    assert client.delete(f"/v1/documents/{outcome['document_id']}").status_code == 200
    assert not path.exists()


def test_unknown_document_filter_is_not_found(client: TestClient):
    for path, body in (("/v1/ask", {"question": ROLLO_QUESTION, "documents": ["no-such-doc"]}),
                       ("/v1/retrieve", {"query": ROLLO_QUESTION, "documents": ["no-such-doc"]})):
        error = assert_error(client.post(path, json=body), 404)
        assert error["type"] == "document_not_found" and "no-such-doc" in error["message"]
    some_id = next(iter(doc_ids(client)))
    by_id = client.post("/v1/retrieve", json={"query": ROLLO_QUESTION, "documents": [some_id]})
    assert by_id.status_code == 200 and {c["document_id"] for c in by_id.json()["chunks"]} == {some_id}


# --------------------------------------------------------------------------- errors
LONG_QUESTION = "Normans " * 400  # far beyond max_question_tokens (256) yet under the 20,000-char body limit
BAD_REQUESTS = [
    ("malformed-json", "/v1/ask", b'{"question": "Who was Rollo?"', 400),
    ("not-an-object", "/v1/ask", b'["Who was Rollo?"]', 400),
    ("empty-body", "/v1/ask", b"", 400),
    ("body-over-the-json-limit", "/v1/ask", b'{"question": "' + b"a" * (5 * 1024 * 1024) + b'"}', 413),
    ("question-wrong-type", "/v1/ask", {"question": 42}, 400),
    ("stream-wrong-type", "/v1/ask", {"question": "Who?", "stream": "yes"}, 400),
    ("missing-question", "/v1/ask", {}, 400),
    ("unknown-field", "/v1/ask", {"question": "Who?", "bogus": 1}, 400),
    ("empty-question", "/v1/ask", {"question": ""}, 400),
    ("whitespace-question", "/v1/ask", {"question": "  \n\t "}, 400),
    ("too-long-question", "/v1/ask", {"question": LONG_QUESTION}, 400),
    ("huge-question", "/v1/ask", {"question": "x" * 20_001}, 400),
    ("unknown-index", "/v1/ask", {"question": "Who was Rollo?", "index": "no-such-index"}, 404),
    ("invalid-index-name", "/v1/ask", {"question": "Who was Rollo?", "index": "../etc"}, 400),
    ("top-k-zero", "/v1/ask", {"question": "Who was Rollo?", "top_k": 0}, 400),
    ("top-k-huge", "/v1/ask", {"question": "Who was Rollo?", "top_k": 51}, 400),
    ("max-tokens-zero", "/v1/ask", {"question": "Who was Rollo?", "max_tokens": 0}, 400),
    ("temperature-negative", "/v1/ask", {"question": "Who was Rollo?", "temperature": -1}, 400),
    ("retrieve-empty", "/v1/retrieve", {"query": " "}, 400),
    ("retrieve-top-k", "/v1/retrieve", {"query": "Rollo", "top_k": 100}, 400),
    ("retrieve-unknown-index", "/v1/retrieve", {"query": "Rollo", "index": "missing"}, 404),
    ("chat-no-user", "/v1/chat", {"messages": [{"role": "system", "content": "Be brief."}]}, 400),
    ("chat-empty-user", "/v1/chat", {"messages": [{"role": "user", "content": "   "}]}, 400),
    ("chat-no-messages", "/v1/chat", {"messages": []}, 400),
    ("chat-bad-role", "/v1/chat", {"messages": [{"role": "wizard", "content": "hi"}]}, 400),
    ("chat-stream-no-user", "/v1/chat/stream", {"messages": [{"role": "assistant", "content": "hi"}]}, 400),
    ("openai-no-user", "/v1/chat/completions", {"messages": [{"role": "system", "content": "x"}]}, 400),
    ("openai-stream-no-user", "/v1/chat/completions",
     {"messages": [{"role": "system", "content": "x"}], "stream": True}, 400),
    ("openai-n-2", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2}, 400),
]


@pytest.mark.parametrize("path, body, status", [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_requests_are_client_errors(client: TestClient, path: str, body, status: int):
    if isinstance(body, bytes):
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = client.post(path, json=body)
    assert_error(response, status)


def test_stream_request_errors_before_output_are_http_errors(client: TestClient):
    response = client.post("/v1/ask", json={"question": " ", "stream": True})
    assert_error(response, 400)
    assert not response.headers["content-type"].startswith("text/event-stream")


def test_unknown_route_and_method(client: TestClient):
    assert_error(client.get("/v1/nothing-here"), 404)
    assert_error(client.post("/nope", json={}), 404)
    assert_error(client.get("/v1/ask"), 405)
    assert_error(client.get("/v1/documents", params={"index": "no-such-index"}), 404)
    assert_error(client.get("/v1/documents", params={"index": "bad/name"}), 400)


# --------------------------------------------------------------------------- auth
def test_bearer_auth(app_settings: Settings):
    key = "s3cret-token"
    with ready_client(app_settings.replace(api_key=key)) as auth_client:
        assert auth_client.get("/healthz").status_code == 200
        question = {"question": ROLLO_QUESTION, "max_tokens": 8}
        missing = auth_client.post("/v1/ask", json=question)
        assert assert_error(missing, 401)["type"] == "unauthorized"
        assert missing.headers.get("www-authenticate") == "Bearer"
        assert_error(auth_client.post("/v1/ask", json=question, headers={"Authorization": "Bearer wrong"}), 401)
        assert_error(auth_client.post("/v1/ask", json=question, headers={"Authorization": key}), 401)
        assert_error(auth_client.get("/metrics"), 401)
        assert_error(auth_client.get("/v1/documents"), 401)
        assert_error(auth_client.get("/schema/openapi.json"), 401)
        ok = auth_client.post("/v1/ask", json=question, headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["answer"].strip()
        # The scheme name is case-insensitive (RFC 7235).
        assert auth_client.get("/schema/openapi.json", headers={"Authorization": f"bearer {key}"}).status_code == 200


# --------------------------------------------------------------------------- concurrency
def test_concurrent_asks_all_succeed(client: TestClient):
    questions = [ROLLO_QUESTION, "Where is Normandy?", "What is the capital of Victoria?",
                 "What is the population of Melbourne?"]

    def ask(question: str) -> httpx.Response:
        return client.post("/v1/ask", json={"question": question, "max_tokens": SHORT})

    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        responses = list(pool.map(ask, questions))
    for question, response in zip(questions, responses):
        assert response.status_code == 200, (question, response.text)
        body = response.json()
        assert body["question"] == question
        assert body["answer"].strip() and body["sources"]
    depth = re.search(r"^rag_generation_queue_depth (\S+)$", client.get("/metrics").text, re.MULTILINE)
    assert depth and float(depth.group(1)) == 0


# --------------------------------------------------------------------------- real server
def queue_depth(base: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=5).text
    match = re.search(r"^rag_generation_queue_depth (\S+)$", text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


def test_client_disconnect_cancels_generation(server: str):
    """Closing a streaming response mid-generation frees the engine within a couple of seconds.

    The request asks for a long story (1000 tokens, plain chat without retrieval; about 30 s on a
    2-core CPU), far longer than the 3 s allowed here, so a drained queue proves the generation was
    cancelled. (Breaking out of ``iter_lines`` closes httpx's connection at once.)
    """
    body = {"messages": [{"role": "user", "content": "Write a very long, detailed story about a dragon, "
                                                     "a knight and a village, with many chapters."}],
            "use_context": False, "max_tokens": 1000}
    with httpx.Client(base_url=server, timeout=60) as http:
        with http.stream("POST", "/v1/chat/stream", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            tokens = 0
            for line in response.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[len("data: "):])
                    assert not event.get("done"), "the generation ended before the client went away"
                    tokens += "token" in event
                    if tokens >= 3:
                        # Asked while the stream is open (leaving the loop closes the connection).
                        assert queue_depth(server) == 1, "the generation runs while the client listens"
                        break
            assert tokens >= 3
    closed = time.monotonic()
    while queue_depth(server) != 0:
        assert time.monotonic() - closed < 3, "generation still running 3 s after the client disconnected"
        time.sleep(0.1)
    # The server keeps serving normally afterwards.
    after = httpx.post(f"{server}/v1/ask", json={"question": ROLLO_QUESTION, "max_tokens": 8}, timeout=60)
    assert after.status_code == 200 and after.json()["answer"].strip()


def test_openai_client_against_real_server(server: str):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": ROLLO_QUESTION}]

    completion = client.chat.completions.create(model=model, messages=messages, max_tokens=16)
    assert completion.choices[0].message.content.strip()
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage.completion_tokens > 0

    pieces, reasons = [], []
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=16, stream=True)
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            reasons.append(chunk.choices[0].finish_reason)
    assert "".join(pieces).strip()
    assert reasons[-1] in ("stop", "length") and all(r is None for r in reasons[:-1])


def test_server_logs_are_json_lines(server: str, server_log: Path):
    assert httpx.get(f"{server}/healthz", timeout=10).status_code == 200
    lines = [line for line in server_log.read_text(encoding="utf-8").splitlines()
             if line.strip() and not line.startswith("serving on ")]  # the CLI's one console line
    records = [json.loads(line) for line in lines]  # fails on any plain-text line
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    requests = [r for r in records if r["message"] == "request" and r["route"] == "/healthz"]
    assert requests and all(r["request_id"] and r["status"] in (200, 503) for r in requests)
    assert any(r["logger"] == "rag.generation.scheduler" for r in records)  # not only the API's own logger
