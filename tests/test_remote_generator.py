"""The remote generator: a real OpenAI-compatible server generates (this project's own `rag serve`, started
in a second process), and a tiny local HTTP server that misbehaves on purpose (garbage, slow, errors, cut
streams, gone) shows the failures a client sees: clear 502/503/504, no hang, a server that stays healthy."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.answering.service import AnswerRequest, options_from
from rag.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from rag.core.settings import PROJECT_ROOT, Settings
from rag.generation.base import GenerationStats, SamplingOptions
from rag.generation.remote import RemoteGenerator, TokenCounter
from app.runtime import Models, answer_service, load_answer_generator, open_index
from tests.helpers import free_port, server_process

QUESTIONS = (
    "Who was the leader of the Normans who swore fealty to Charles III?",
    "In what country is Normandy located?",
    "What is the capital of Victoria?",
    "Who conquered England in 1066?",
    "When did Victoria become a separate colony?",
)


def remote_settings(settings: Settings, url: str, **changes) -> Settings:
    return settings.replace(generator_url=url, generator_tokenizer=settings.generator_path / "tokenizer.json",
                            **changes)


def test_remote_answers_are_verified_like_local(settings: Settings, embedder, generator, upstream_generator: str,
                                    tmp_path: Path) -> None:
    """Same prompts through the HTTP hop; the remote replies are verified against the passages like local ones."""
    home_settings = settings.replace(home=tmp_path)
    docs = PROJECT_ROOT / "examples" / "docs"
    ingest_paths([docs / "normans.md", docs / "victoria_australia.md"], open_index(home_settings),
                 IngestParameters.defaults(embedder))
    local = answer_service(home_settings, Models(embedder, generator))
    remote_config = remote_settings(home_settings, upstream_generator)
    remote_generator = load_answer_generator(remote_config, embedder)
    assert isinstance(remote_generator, RemoteGenerator)
    remote = answer_service(remote_config, Models(embedder, remote_generator))
    options = options_from(home_settings, max_tokens=32)
    answered = 0
    for question in QUESTIONS:
        mine = local.ask(AnswerRequest(question=question, options=options))
        theirs = remote.ask(AnswerRequest(question=question, options=options))
        assert theirs.context == mine.context, question  # same compression: exact token counts
        # A remote server cannot be constrained to the evidence spans (a local logits step), so its reply may
        # differ; it is aligned to the passages all the same: a verified phrase or the best quote.
        assert theirs.abstained == mine.abstained
        if not theirs.abstained:
            by_number = {s.number: s for s in theirs.sources}
            assert theirs.evidence and all(by_number[e.source].text[e.start:e.end] == e.quote
                                           for e in theirs.evidence)
            assert theirs.answer in theirs.evidence[0].quote and theirs.citations == [theirs.evidence[0].source]
            answered += 1
            assert theirs.metrics.ttft_ms > 0 and theirs.metrics.prompt_tokens == mine.metrics.prompt_tokens
    assert answered >= 3
    assert remote_generator.model_id == generator.model_id  # resolved from the server's /models
    # stop strings and max_tokens reach the server
    stopped = remote.ask(AnswerRequest(question=QUESTIONS[0], options=options_from(home_settings, stop=["Rollo"])))
    assert "Rollo" not in stopped.answer
    short = remote.ask(AnswerRequest(question=QUESTIONS[4], options=options_from(home_settings, max_tokens=2)))
    assert short.metrics.output_tokens <= 2
    local.close()
    remote.close()


# ---------------------------------------------------------------------- a server that misbehaves
class Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = "ok"
        self.disconnected = threading.Event()
        self.requests: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def sse(payload) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()


def delta(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        server: Upstream = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append(body)
        mode = server.mode
        if mode == "garbage":
            return self._send(200, b"<html>this is not an event stream</html>", "text/html")
        if mode == "error":
            return self._send(500, json.dumps({"error": {"message": "boom", "type": "server_error"}}).encode())
        if mode == "overloaded":
            return self._send(503, b'{"error": "too many requests"}')
        if mode == "slow":
            time.sleep(3)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if mode == "cut":
            self.wfile.write(sse(delta("Hello")))
            return  # the connection closes: no finish_reason, no [DONE]
        if mode == "drip":
            try:
                for i in range(200):
                    self.wfile.write(sse(delta(f" w{i}")))
                    self.wfile.flush()
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                server.disconnected.set()
            return
        try:
            for frame in (sse(delta("Hello")), sse(delta(" world")), sse(delta("", "stop")),
                          sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}), sse("[DONE]")):
                self.wfile.write(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # "slow": the client gave up waiting, as it should


@pytest.fixture()
def upstream():
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def tiny_generator(url: str, settings: Settings, timeout_s: float = 1.0) -> RemoteGenerator:
    return RemoteGenerator(url, TokenCounter.from_file(settings.embedder_path / "tokenizer.json"),
                           timeout_s=timeout_s, context_length=2048, extra_body='{"use_context": false}')


async def collect(generator: RemoteGenerator, options: SamplingOptions = SamplingOptions()) -> tuple[str, GenerationStats]:
    stats = GenerationStats()
    prompt = generator.prompt([{"role": "user", "content": "Say hello."}])
    text = "".join([piece async for piece in generator.stream(prompt, options, stats)])
    return text, stats


def test_remote_generator_reads_the_stream_and_maps_failures(upstream: Upstream, settings: Settings) -> None:
    generator = tiny_generator(upstream.url, settings)
    text, stats = asyncio.run(collect(generator, SamplingOptions(max_tokens=5, stop=("zzz",))))
    assert text == "Hello world" and (stats.output_tokens, stats.prompt_tokens) == (2, 7)
    assert stats.finish_reason == "stop" and 0 < stats.ttft_s <= stats.total_s
    sent = upstream.requests[-1]
    assert sent["stream"] is True and sent["model"] == "tiny" and sent["max_tokens"] == 5
    assert sent["stop"] == ["zzz"] and sent["use_context"] is False and sent["messages"][0]["content"] == "Say hello."
    text, _ = asyncio.run(collect(generator, SamplingOptions(stop=(" wor",))))
    assert text == "Hello"  # a stop string is cut here too, whatever the server does with it

    for mode, error in (("garbage", UpstreamError), ("error", UpstreamError), ("cut", UpstreamError),
                        ("overloaded", UpstreamUnavailable), ("slow", UpstreamTimeout)):
        upstream.mode = mode
        started = time.perf_counter()
        with pytest.raises(error) as caught:
            asyncio.run(collect(generator))
        assert type(caught.value) is error, mode
        assert time.perf_counter() - started < 2.5, mode  # the 1 s timeout holds; nothing hangs
        if mode == "error":
            assert "HTTP 500: boom" in caught.value.message  # the upstream's own message, passed on
    with pytest.raises(UpstreamUnavailable):
        asyncio.run(collect(tiny_generator(f"http://127.0.0.1:{free_port()}/v1", settings)))


def test_closing_the_stream_closes_the_upstream_request(upstream: Upstream, settings: Settings) -> None:
    upstream.mode = "drip"
    generator = tiny_generator(upstream.url, settings, timeout_s=5)

    async def read_two_then_leave() -> GenerationStats:
        stats = GenerationStats()
        stream = generator.stream(generator.prompt([{"role": "user", "content": "Talk."}]), SamplingOptions(), stats)
        pieces = [await stream.__anext__(), await stream.__anext__()]
        await stream.aclose()
        assert pieces == [" w0", " w1"]
        return stats

    stats = asyncio.run(read_two_then_leave())
    assert stats.finish_reason == "cancelled"
    assert upstream.disconnected.wait(3), "the upstream kept streaming to a client that had left"


def test_server_with_remote_generator_reports_upstream_errors(upstream: Upstream, settings: Settings,
                                                               tmp_path: Path) -> None:
    with server_process(settings, tmp_path, tmp_path / "server.log", RAG_GENERATOR_URL=upstream.url,
                        RAG_GENERATOR_TIMEOUT_S="1") as base:
        health = httpx.get(f"{base}/healthz").json()
        assert health["backend"] == "openai-remote" and health["upstream"] == upstream.url.split("/")[2]
        assert health["scheduler"] is None and health["status"] == "ok"
        assert health.get("providers") is None  # ONNX Runtime's providers are not asked: nothing runs here
        assert httpx.get(f"{base}/v1/models").json()["data"][0]["id"] == "tiny"  # learnt from the upstream
        chat = {"messages": [{"role": "user", "content": "Say hello."}], "use_context": False}
        ok = httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=10)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "Hello world"
        for mode, status, kind in (("garbage", 502, "upstream_error"), ("error", 502, "upstream_error"),
                                   ("overloaded", 503, "upstream_unavailable"), ("slow", 504, "upstream_timeout")):
            upstream.mode = mode
            started = time.perf_counter()
            reply = httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=10)
            assert (reply.status_code, reply.json()["error"]["type"]) == (status, kind), mode
            assert time.perf_counter() - started < 3, mode
            streamed = httpx.post(f"{base}/v1/chat/completions", json={**chat, "stream": True}, timeout=10)
            assert streamed.status_code == status, mode  # before any output: an HTTP error, not a broken stream
        upstream.mode = "cut"  # after output has started: the stream ends with an error event
        streamed = httpx.post(f"{base}/v1/chat/completions", json={**chat, "stream": True}, timeout=10)
        assert streamed.status_code == 200 and '"upstream_error"' in streamed.text and "Hello" in streamed.text
        upstream.shutdown()
        upstream.server_close()
        gone = httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=10)
        assert (gone.status_code, gone.json()["error"]["type"]) == (503, "upstream_unavailable")
        assert httpx.get(f"{base}/healthz").status_code == 200  # the server itself stays healthy
