"""Fuzzing the running service: schemathesis generates requests for every operation of the published
OpenAPI schema (valid and invalid ones) against a real ``rag serve`` on a small real index, with all its
checks on: no response may be a 5xx, or break the schema (status, content type, body, headers, SSE events).

The run is bounded by ``--fuzz-examples`` / ``--fuzz-seconds`` (tests/conftest.py); the server counts what it
answered (``rag_requests_total`` on /metrics), which is how the test knows that answers were generated.
Settings shared with the long run (docs/api.md, "Fuzzing"): tests/schemathesis.toml and tests/fuzz_hooks.py.
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
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
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
    ingest_paths([home / "docs" / "normans.md"], EmbeddedIndex(own.index_path()),
                 IngestParameters.from_settings(own, embedder))
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
UPLOADED_SECRET = "The Quillon vault combination is 4471-XQ, for finance eyes only."
LEAKS = ("88-31-07", "Pellamy", "4471-XQ", "Quillon")


@pytest.mark.parametrize("role", ["reader", "editor"])
def test_fuzzing_as_a_restricted_principal_finds_no_errors_and_no_leak(request: pytest.FixtureRequest, role: str,
                                                                        settings: Settings, embedder,
                                                                        tmp_path: Path):
    """The same fuzzing with a reader key, and an editor key (which may upload and delete), whose groups exclude
    two finance documents — one ingested from a folder, one uploaded by an admin: no 5xx, and no response the
    fuzzer got (every one is recorded, bodies and streams included) nor the audit trail of what it asked names
    either document, its id or a word of its secret. ``--fuzz-restricted-examples`` / ``--fuzz-restricted-seconds``
    make it a long run (docs/api.md, "Fuzzing")."""
    from rag.store.keys import SqliteKeyStore
    from rag.store.audit_files import load_key, read_records, verify
    from rag.core.keys import new_key, parse_grants

    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    shutil.copy2(PROJECT_ROOT / "examples" / "docs" / "normans.md", home / "docs")
    secret = home / "docs" / "pellamy-reserve.md"
    secret.write_text(f"# Pellamy reserve\n\n{SECRET}\n", encoding="utf-8")
    own = settings.replace(home=home)
    index = EmbeddedIndex(own.index_path())
    ingest_paths([home / "docs" / "normans.md"], index, IngestParameters.from_settings(own, embedder))
    ingest_paths([secret], index, IngestParameters.defaults(embedder), groups=["finance"])
    name = f"fuzz-{role}"
    record, token = new_key(name, parse_grants(role, ("*",)), groups=frozenset({"staff"}))
    keys = SqliteKeyStore(home)
    keys.add(record)
    keys.close()
    examples = request.config.getoption("--fuzz-restricted-examples")
    seconds = request.config.getoption("--fuzz-restricted-seconds")
    report, cassette = tmp_path / "schemathesis.json", tmp_path / "responses.yaml"
    with server_process(own, home, tmp_path / "serve.log", RAG_MAX_TOKENS="4", RAG_API_KEY=FUZZ_KEY,
                        RAG_AUDIT_QUESTIONS="full") as base:
        uploaded = httpx.post(f"{base}/v1/documents?groups=finance", headers=AUTH, timeout=120,
                              files={"data": ("quillon-vault.md", f"# Quillon vault\n\n{UPLOADED_SECRET}\n")})
        assert uploaded.status_code == 200, uploaded.text
        hidden_ids = {d["id"] for d in httpx.get(f"{base}/v1/documents", headers=AUTH, timeout=30).json()["documents"]
                      if d["title"] in ("Pellamy reserve", "Quillon vault")}
        assert len(hidden_ids) == 2, hidden_ids
        before = answered(base)
        run = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "--no-color",
             "run", f"{base}/schema/openapi.json", "--header", f"Authorization: Bearer {token}", "--checks",
             "not_a_server_error", "--max-examples", str(examples), "--max-time", str(seconds), "--seed",
             str(request.config.getoption("--fuzz-seed")), "--workers", "1", "--request-timeout", "60",
             "--report", "json,vcr", "--report-json-path", str(report), "--report-vcr-path", str(cassette),
             "--output-sanitize", "false"],
            cwd=PROJECT_ROOT, env=fuzzer_env(), capture_output=True, text=True, timeout=seconds + 180)
        counts = answered(base) - before
        still_there = {d["id"] for d in httpx.get(f"{base}/v1/documents", headers=AUTH, timeout=30).json()["documents"]}
    summary = json.loads(report.read_text())
    print(f"schemathesis as a restricted {role}: {summary['test_cases']['generated']} test cases in "
          f"{summary['running_time']:.0f} s; server answered {sum(counts.values())} requests: "
          f"{dict(sorted(Counter(s for (_, _, s) in counts.elements()).items()))}")
    assert not summary["failures"] and not summary["errors"], run.stdout[-6000:]
    server_errors = {key: n for key, n in counts.items() if key[2] >= 500}
    assert not server_errors, server_errors
    assert counts[("/v1/ask", "POST", 200)] + counts[("/v1/chat/completions", "POST", 200)] > 0, counts
    assert hidden_ids <= still_there  # nothing the fuzzer sent deleted or moved them
    responses = cassette.read_text(encoding="utf-8")
    assert responses.count("status:") >= sum(counts.values()) // 2  # the cassette holds the replies
    assert "Normandy" in responses  # with their bodies: the visible document's passages are there
    for word in (*LEAKS, *hidden_ids):
        assert word not in responses, word
    mine = read_records(home / "audit", principal=name)  # fuzzed questions hold U+2028 and the like
    assert len(mine) > 5, len(mine)
    seen = json.dumps(mine)
    for word in (*LEAKS, *hidden_ids):
        assert word not in seen, word
    # and the trail the fuzzing wrote is intact: every MAC (the server's key), chain and head
    assert verify(home / "audit", load_key(home / "audit.key", create=False))[1] == []
