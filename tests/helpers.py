"""Helpers shared by tests: a prompt the real model loops on; the CLI or a real server in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest

from rag.answering.compress import Passage
from rag.generation.ort import LocalGenerator
from rag.answering.prompt import build_messages
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


def looping_prompt(generator: LocalGenerator) -> np.ndarray:
    return generator.encode(generator.chat_prompt(build_messages(LOOPING_QUESTION, LOOPING_PASSAGES)))


# Uploads and "sync now" answer inline in tests however loaded the machine is; tests/test_jobs.py runs
# with the product's default (202 and a job after job_wait_s).
INLINE_JOB_WAIT_S = 30


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a child `rag` process: no inherited RAG_*, the test run's model dirs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env.update(RAG_GENERATOR_DIR=str(settings.generator_path), RAG_EMBEDDER_DIR=str(settings.embedder_path),
               PYTHONUNBUFFERED="1", RAG_JOB_WAIT_S=str(INLINE_JOB_WAIT_S))
    env.update(extra)
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
        proc = subprocess.Popen([sys.executable, "-m", "rag.cli", "--home", str(home), "serve", "--port", str(port)],
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
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
