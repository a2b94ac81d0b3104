"""Fuzzing the running service: schemathesis generates requests for every operation of the published
OpenAPI schema (valid and invalid ones) against a real ``rag serve`` on a small real index, with all its
checks on: no response may be a 5xx, or break the schema (status, content type, body, headers, SSE events).

The run is bounded by ``--fuzz-examples`` / ``--fuzz-seconds`` (tests/conftest.py); the server counts what it
answered (``rag_requests_total`` on /metrics), which is how the test knows that answers were generated.
Settings shared with the long run (README, "Fuzzing"): tests/schemathesis.toml and tests/fuzz_hooks.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from helpers import server_process
from ingest.pipeline import ingest_paths
from ingest.store.embedded import EmbeddedIndex
from rag.core.settings import PROJECT_ROOT, Settings

CONFIG = PROJECT_ROOT / "tests" / "schemathesis.toml"
# The run holds RAG_API_KEY (an admin on every index): keys the fuzzer creates through POST /v1/keys cannot
# lock it out of the server (on an open server the first key created turns authentication on).
FUZZ_KEY = "fuzz-admin-key-3c9d"
AUTH = {"Authorization": f"Bearer {FUZZ_KEY}"}
GENERATION_ROUTES = ("/v1/ask", "/v1/chat", "/v1/chat/stream", "/v1/chat/completions")
REQUESTS = re.compile(r'^rag_requests_total\{method="(\w+)",route="([^"]*)",status="(\d+)"\} (\S+)$', re.MULTILINE)


def answered(base: str) -> Counter:
    """(route, method, status) -> requests the server answered, from its own metrics."""
    text = httpx.get(f"{base}/metrics", timeout=10, headers=AUTH).text
    return Counter({(route, method, int(status)): int(float(n)) for method, route, status, n in REQUESTS.findall(text)})


def fuzzer_env() -> dict[str, str]:
    """schemathesis's environment: ours without RAG_*, and the repository on the path (for the hooks)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAG_")}, "PYTHONPATH": str(PROJECT_ROOT)}


def test_fuzzing_finds_no_server_errors_and_no_schema_violations(request: pytest.FixtureRequest, settings: Settings,
                                                                 embedder, tmp_path: Path):
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    shutil.copy2(PROJECT_ROOT / "examples" / "docs" / "normans.md", home / "docs")
    own = settings.replace(home=home)
    ingest_paths([home / "docs" / "normans.md"], EmbeddedIndex(own.index_path()), embedder, own.chunk_tokens,
                 own.chunk_overlap)
    examples, seconds = request.config.getoption("--fuzz-examples"), request.config.getoption("--fuzz-seconds")
    report = tmp_path / "schemathesis.json"
    with server_process(own, home, tmp_path / "serve.log", RAG_MAX_TOKENS="4",
                        RAG_API_KEY=FUZZ_KEY) as base:
        before = answered(base)  # the readiness polls
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "--no-color",
             "run", f"{base}/schema/openapi.json", "--header", f"Authorization: Bearer {FUZZ_KEY}", "--checks", "all", "--max-examples", str(examples),
             "--max-time", str(seconds), "--seed", str(request.config.getoption("--fuzz-seed")), "--workers", "1",
             "--request-timeout", "60", "--report", "json", "--report-json-path", str(report)],
            cwd=PROJECT_ROOT, env=fuzzer_env(), capture_output=True, text=True, timeout=seconds + 120)
        counts = answered(base) - before
    summary = json.loads(report.read_text())
    failures = {f["code"]: f["count"] for f in summary["failures"]}
    print(f"schemathesis: {summary['test_cases']['generated']} test cases in {summary['running_time']:.0f} s; "
          f"server answered {sum(counts.values())} requests: "
          f"{dict(sorted(Counter(s for (_, _, s) in counts.elements()).items()))}")
    assert summary["operations"]["tested"] == summary["operations"]["total"] >= 12, summary["operations"]
    assert not failures and not summary["errors"], run.stdout[-6000:]
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    server_errors = {key: n for key, n in counts.items() if key[2] >= 500}
    assert not server_errors, server_errors
    for route in GENERATION_ROUTES:  # valid requests got through to generation on every answering route
        assert counts[(route, "POST", 200)] > 0, (route, sorted(counts.items()))


SECRET = "The Pellamy reserve code is 88-31-07, known only to the finance team."


def test_fuzzing_as_a_reader_outside_a_group_finds_no_errors_and_no_leak(settings: Settings, embedder,
                                                                          tmp_path: Path):
    """The same fuzzing with a reader key whose groups exclude a finance document: no 5xx, and the audit trail
    (every answer and retrieval, with the chunk ids it saw) never shows that document to the reader."""
    from ingest.store.keys import SqliteKeyStore
    from rag.core.audit import load_key, read_records, verify
    from rag.core.keys import new_key, parse_grants

    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    shutil.copy2(PROJECT_ROOT / "examples" / "docs" / "normans.md", home / "docs")
    secret = home / "docs" / "pellamy-reserve.md"
    secret.write_text(f"# Pellamy reserve\n\n{SECRET}\n", encoding="utf-8")
    own = settings.replace(home=home)
    index = EmbeddedIndex(own.index_path())
    ingest_paths([home / "docs" / "normans.md"], index, embedder, own.chunk_tokens, own.chunk_overlap)
    ingest_paths([secret], index, embedder, groups=["finance"])
    reader = index.reader()
    secret_id = next(d.id for d in reader.documents() if d.title == "Pellamy reserve")
    reader.close()
    record, token = new_key("fuzz-reader", parse_grants("reader", ("*",)), groups=frozenset({"staff"}))
    keys = SqliteKeyStore(home)
    keys.add(record)
    keys.close()
    report = tmp_path / "schemathesis.json"
    with server_process(own, home, tmp_path / "serve.log", RAG_MAX_TOKENS="4", RAG_API_KEY=FUZZ_KEY,
                        RAG_AUDIT_QUESTIONS="full") as base:
        before = answered(base)
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "--no-color",
             "run", f"{base}/schema/openapi.json", "--header", f"Authorization: Bearer {token}", "--checks",
             "not_a_server_error", "--max-examples", "5", "--max-time", "60", "--seed", "12", "--workers", "1",
             "--request-timeout", "60", "--report", "json", "--report-json-path", str(report)],
            cwd=PROJECT_ROOT, env=fuzzer_env(), capture_output=True, text=True, timeout=240)
        counts = answered(base) - before
    summary = json.loads(report.read_text())
    print(f"schemathesis as a reader: {summary['test_cases']['generated']} test cases; server answered "
          f"{sum(counts.values())} requests: {dict(sorted(Counter(s for (_, _, s) in counts.elements()).items()))}")
    assert not summary["failures"] and not summary["errors"], run.stdout[-6000:]
    server_errors = {key: n for key, n in counts.items() if key[2] >= 500}
    assert not server_errors, server_errors
    assert counts[("/v1/ask", "POST", 200)] + counts[("/v1/chat/completions", "POST", 200)] > 0, counts
    mine = read_records(home / "audit", principal="fuzz-reader")  # fuzzed questions hold U+2028 and the like
    assert len(mine) > 5, len(mine)
    seen = json.dumps(mine)
    assert secret_id not in seen and "88-31-07" not in seen and "Pellamy reserve" not in seen
    # and the trail the fuzzing wrote is intact: every MAC (the server's key), chain and head
    assert verify(home / "audit", load_key(home / "audit.key", create=False))[1] == []
