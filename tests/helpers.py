"""Helpers shared by tests: a prompt the real model loops on; the CLI or a real server in a subprocess;
signed JWTs and a reverse proxy that signs requests in, as a site's single sign-on does."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from rag.answering.compress import Passage
from rag.generation.ort import LocalGenerator
from rag.core.settings import PROJECT_ROOT, Settings

# A real loop of the default model (examples/docs passages): without the loop guard it repeats
# "The answer to the question ... is:" until max_tokens.
LOOPING_QUESTION = "Where is Normandy?"
LOOPING_PASSAGES = (
    Passage(1, "This relationship eventually produced closer ties of blood through the marriage of Emma, "
               "sister of Duke Richard II of Normandy, and King Ethelred II of England. Because of this, "
               "Ethelred fled to Normandy in 1013, when he was forced from his kingdom by Sweyn Forkbeard."),
    Passage(5, "In 1066, Duke William II of Normandy conquered England killing King Harold II at the "
               "Battle of Hastings."),
)


# The long-answer prompt the answer flow once built (question first, then the numbered context).
LOOPING_SYSTEM = ("You answer questions using only the numbered context. Give a short answer (a few words or one "
                  "sentence) and cite the source number like [1]. If the context does not contain the answer, reply "
                  "exactly: I don't know.")


# The reply starts looping already: without it the 135M looped with AVX-512 VNNI kernels ("The answer to this question
# is: [1] This relationship …" twice) but ended after one sentence with a Zen 1's AVX2 ones (2026-12-04), so the
# tests of a loop's end tested the kernels. After twelve times this line greedy decoding goes on with it, each of its
# next 24 tokens ahead of the runner-up by 3.2 logits or more (AVX2; "Normandy is in France [1]." led by 0.8 only).
LOOPING_REPLY_START = "The answer to this question is: [1]\n" * 12


def looping_prompt(generator: LocalGenerator) -> np.ndarray:
    context = "\n".join(f"[{p.number}] {p.text}" for p in LOOPING_PASSAGES)
    messages = [{"role": "system", "content": LOOPING_SYSTEM},
                {"role": "user", "content": f"Question: {LOOPING_QUESTION}\n\nContext:\n{context}"}]
    return generator.encode(generator.chat_prompt(messages) + LOOPING_REPLY_START)


# Uploads and "sync now" answer inline in tests however loaded the machine is; tests/test_jobs.py runs
# with the product's default (202 and a job after job_wait_s).
INLINE_JOB_WAIT_S = 30
# Set during the Windows pass (pytest --windows-rules): servers run under the rules as well.
WINDOWS_RULES_ENV = "RAG_TEST_WINDOWS_RULES"


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a child `rag` process: no inherited RAG_*, the test run's model dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env.update(RAG_GENERATOR_DIR=str(settings.generator_path), RAG_EMBEDDER_DIR=str(settings.embedder_path),
               PYTHONUNBUFFERED="1", RAG_JOB_WAIT_S=str(INLINE_JOB_WAIT_S))
    env.update(extra)
    if urlsplit(env.get("RAG_STORE_URL", "")).path == "/postgres" and "RAG_AUDIT_KEY_FILE" not in env:
        # Writers of one PostgreSQL trail share one audit key (docs/access.md): the servers and commands of
        # many tests, each with a home of its own, write the session's database (``postgres_url``), so they hold
        # one key file, as a deployment's replicas would. Tests with a database of their own keep their homes'.
        digest = hashlib.sha256(env["RAG_STORE_URL"].encode()).hexdigest()[:16]
        env["RAG_AUDIT_KEY_FILE"] = str(Path(tempfile.gettempdir()) / f"rag-test-audit-key-{digest}" / "audit.key")
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(settings: Settings, home: Path, log_path: Path, timeout_s: float = 90) -> Iterator[str]:
    """`rag serve` (uvicorn) on a free port until the block ends; yields its base URL once /healthz is 200."""
    with server_process(settings, home, log_path, timeout_s=timeout_s) as base:
        yield base


@contextmanager
def server_process(settings: Settings, home: Path, log_path: Path, wait_ready: bool = True, timeout_s: float = 90,
                   **env: str) -> Iterator[str]:
    """Like ``running_server``, with extra ``RAG_*`` environment for the server; with ``wait_ready=False`` it
    yields as soon as the port answers (while /healthz may still be 503 "loading")."""
    with server_and_process(settings, home, log_path, wait_ready, timeout_s, **env) as (base, _):
        yield base


@contextmanager
def server_and_process(settings: Settings, home: Path, log_path: Path, wait_ready: bool = True,
                       timeout_s: float = 90, **env: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """``server_process`` that also yields the server's process (to kill it)."""
    port = free_port()
    with open(log_path, "wb") as log:
        rag = [sys.executable, str(Path(__file__).with_name("windows_child.py"))] \
            if os.environ.get(WINDOWS_RULES_ENV) else [sys.executable, "-m", "app.cli"]
        proc = subprocess.Popen([*rag, "--home", str(home), "serve", "--port", str(port)],
                                cwd=PROJECT_ROOT, env=cli_env(settings, **env), stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            try:
                status = httpx.get(f"{base}/healthz", timeout=2).status_code
                if status == 200 or not wait_ready:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not up after {timeout_s:.0f} s:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.05 if not wait_ready else 0.25)
        yield base, proc
    finally:
        stop_process(proc, timeout_s=15)


def stop_process(proc: subprocess.Popen, timeout_s: float) -> None:
    """Ask ``proc`` to stop; kill it when it has not within ``timeout_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- single sign-on (JWT) and proxies
ISSUER, AUDIENCE = "https://sso.example.test/realms/acme", "rag"


def signing_key():
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def sign(private_key, kid: str = "k1", **claims) -> str:
    """A real RS256 token as an identity provider signs it (user "dana", group "hr-staff" unless ``claims``
    say otherwise; ``exp=None`` leaves a claim out)."""
    import jwt

    now = int(time.time())
    body = {"sub": "u-42", "preferred_username": "dana", "iss": ISSUER, "aud": AUDIENCE, "iat": now,
            "exp": now + 300, "groups": ["hr-staff"], **claims}
    return jwt.encode(body, private_key, algorithm="RS256", headers={"kid": kid})


def jwt_env(folder: Path, private_key, groups_table: dict[str, Any]) -> dict[str, str]:
    """A server's ``RAG_JWT_*`` environment: ``private_key``'s public half as a JWKS file in ``folder`` (kid
    "k1"), the test issuer and audience, and the groups table."""
    import jwt

    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private_key.public_key()))
    jwks = folder / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    return {"RAG_JWT_JWKS": str(jwks), "RAG_JWT_ISSUER": ISSUER, "RAG_JWT_AUDIENCE": AUDIENCE,
            "RAG_JWT_GROUPS": json.dumps(groups_table)}


HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "content-length"})


@contextmanager
def header_proxy(upstream: str, headers: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """A reverse proxy (uvicorn in a thread, httpx to ``upstream``) that sets ``headers`` on every request it
    forwards, replacing the browser's, as a site's proxy adds the signed-in user's bearer token. It passes the
    browser's ``Host`` on (nginx: ``proxy_set_header Host $host``) and streams responses (SSE). ``headers`` is
    read at each request (a test may change it: a token that expired). Yields its base URL and the list of
    paths it forwarded."""
    import uvicorn

    forwarded: list[str] = []
    clients: list[httpx.AsyncClient] = []

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    clients.append(httpx.AsyncClient(base_url=upstream, timeout=None))
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await clients[0].aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        replaced = {name.lower(): value for name, value in headers.items()}
        passed = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        out = [(k, v) for k, v in passed if k.lower() not in HOP_BY_HOP and k.lower() not in replaced]
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        forwarded.append(target)
        request = clients[0].build_request(scope["method"], target, headers=out + list(replaced.items()),
                                           content=body)
        response = await clients[0].send(request, stream=True)
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in
                                    response.headers.multi_items() if k.lower() not in HOP_BY_HOP]})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, name="header-proxy", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the test's reverse proxy did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", forwarded
    finally:
        server.should_exit = True
        thread.join(timeout=15)
