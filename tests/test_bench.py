"""``rag bench``: pure helpers, and the three commands end to end on the real models and a real server.

Runs are kept tiny (a few tokens, a couple of repeats): this module measures that the
benchmarks work and report sane numbers, not how fast anything is.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from app.bench.engine import NEUTRAL_TEXT, plan_lengths, synthetic_prompt_tokens
from app.bench.environment import environment, precision_from_name
from app.bench.serve import (RequestRecord, SSEEvent, chunk_fields, parse_sse_line, request_metrics,
                             summarise_level, synthetic_prompt)
from app.bench.stats import parse_int_list, percentile, summarise
from helpers import cli_env, running_server
from rag.core.settings import PROJECT_ROOT, Settings

CLI_TIMEOUT_S = 180
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DOC_TEXT = ("# Zorblat festival\n\n"
            "The Zorblat festival is held every March in Quintessa. Visitors to the Zorblat festival eat purple "
            "dumplings and fly paper kites. The festival ends with a lantern parade along the canal.\n")
QUESTIONS = [
    {"question": "When is the Zorblat festival held?", "answers": ["March"], "unanswerable": False,
     "document": "zorblat.md"},
    {"question": "What do visitors eat at the Zorblat festival?", "answers": ["purple dumplings"],
     "unanswerable": False, "document": "zorblat.md"},
    {"question": "How does the Zorblat festival end?", "answers": ["lantern parade"], "unanswerable": False,
     "document": "zorblat.md"},
    {"question": "What is the boiling point of liquid nitrogen on Mars?", "answers": [], "unanswerable": True,
     "document": "zorblat.md"},
]


# --------------------------------------------------------------------------- helpers


def run_cli(settings: Settings, home: Path, *args: str, env: dict[str, str] | None = None,
            **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], capture_output=True,
                          text=True, env=env or cli_env(settings, **extra), timeout=CLI_TIMEOUT_S, cwd=PROJECT_ROOT)




def csv_rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def assert_png(path: Path) -> None:
    if not have_matplotlib():
        pytest.skip("matplotlib is not installed (the plot extra)")
    assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000


# --------------------------------------------------------------------------- stats
@pytest.mark.parametrize("values", [[3.0], [1, 2], [5, 1, 4, 2, 3], list(np.random.default_rng(7).gamma(2, 30, 101))])
@pytest.mark.parametrize("q", [0, 1, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy_linear(values, q):
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_empty_and_bad_q():
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summarise_prefix_ignores_missing_values():
    stats = summarise([10, None, 30, 20, float("nan")], percentiles=(50, 95), prefix="ttft_ms")
    assert stats == {"ttft_ms_n": 3, "ttft_ms_mean": 20.0, "ttft_ms_min": 10.0, "ttft_ms_max": 30.0,
                     "ttft_ms_p50": 20.0, "ttft_ms_p95": 29.0}
    empty = summarise([], percentiles=(50, 99))
    assert empty == {"n": 0, "mean": None, "min": None, "max": None, "p50": None, "p99": None}


def test_parse_int_list():
    assert parse_int_list("1, 5,10") == [1, 5, 10]
    assert parse_int_list("16") == [16]
    for bad in ("", "1,x", "0", "1,-2", " , "):
        with pytest.raises(ValueError):
            parse_int_list(bad)


# --------------------------------------------------------------------------- SSE
# Lines as OpenAI, vLLM and this project's server send them (one chunk per line, blank separators).
CONTENT_LINE = ('data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
                '"choices":[{"index":0,"delta":{"content":" Hello"},"finish_reason":null}]}')
ROLE_LINE = ('data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
             '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}')
FINISH_LINE = ('data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
               '"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"sources":[],"citations":[]}')
USAGE_LINE = ('data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
              '"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}')
ERROR_LINE = 'data: {"error": {"type": "overloaded", "message": "try again"}}'


def test_parse_sse_line_events_and_ignored_lines():
    assert parse_sse_line("data: [DONE]") == SSEEvent(done=True)
    assert parse_sse_line("data:[DONE]\r\n") == SSEEvent(done=True)
    event = parse_sse_line(CONTENT_LINE)
    assert event is not None and not event.done and event.data["choices"][0]["delta"]["content"] == " Hello"
    assert parse_sse_line('data:{"a": 1}').data == {"a": 1}  # no space after the colon is legal SSE
    for ignored in ("", ": keep-alive", "event: message", "id: 7", "retry: 1000", "data: {not json"):
        assert parse_sse_line(ignored) is None, ignored


def test_chunk_fields_content_usage_error():
    assert chunk_fields(parse_sse_line(CONTENT_LINE).data) == (" Hello", None, None)
    assert chunk_fields(parse_sse_line(ROLE_LINE).data) == ("", None, None)
    assert chunk_fields(parse_sse_line(FINISH_LINE).data) == ("", None, None)
    assert chunk_fields(parse_sse_line(USAGE_LINE).data) == ("", 8, None)
    assert chunk_fields(parse_sse_line(ERROR_LINE).data) == ("", None, "try again")
    completions = {"choices": [{"index": 0, "text": "abc", "finish_reason": None}]}
    assert chunk_fields(completions) == ("abc", None, None)
    assert chunk_fields("not a dict") == ("", None, None)


def test_request_metrics_and_level_summary():
    ok = RequestRecord(start=10.0, end=10.5, status=200, outcome="ok", chunk_times=[10.1, 10.2, 10.25, 10.5],
                       usage_tokens=5, done=True)
    m = request_metrics(ok, origin=9.0)
    assert m["start_s"] == 1.0
    assert m["ttft_ms"] == pytest.approx(100.0) and m["e2e_ms"] == pytest.approx(500.0)
    assert m["itl_ms"] == pytest.approx([100.0, 50.0, 250.0])
    assert m["output_tokens"] == 5 and m["token_source"] == "usage"
    assert m["tpot_ms"] == pytest.approx(100.0)  # (500 - 100) / (5 - 1)
    chunks_only = request_metrics(RequestRecord(start=0.0, end=1.0, outcome="ok", chunk_times=[0.2, 0.6]))
    assert chunks_only["output_tokens"] == 2 and chunks_only["token_source"] == "chunks"
    failed = [request_metrics(RequestRecord(start=0.0, end=0.1, status=s, outcome=o))
              for s, o in ((503, "shed"), (500, "error"), (None, "timeout"))]
    row = summarise_level("chatbot", 2, [m, chunks_only, *failed], wall_s=2.0)
    assert (row["requests"], row["ok"], row["shed"], row["errors"], row["timeouts"]) == (5, 2, 1, 1, 1)
    assert row["output_tokens"] == 7 and row["aggregate_tokens_per_s"] == 3.5 and row["requests_per_s"] == 1.0
    assert row["ttft_ms_n"] == 2 and row["itl_ms_n"] == 4 and row["e2e_ms_p50"] == pytest.approx(750.0)
    assert {"ttft_ms_p90", "ttft_ms_p95", "ttft_ms_p99", "tpot_ms_p50", "itl_ms_p99"} <= row.keys()
    assert row["token_source"] == "chunks/usage"


def test_synthetic_prompt_word_budget():
    for input_tokens, output_tokens in ((128, 128), (2048, 128), (128, 2048)):
        words = synthetic_prompt(input_tokens, output_tokens).split()
        assert abs(len(words) - round(input_tokens * 0.75)) <= 1
    assert synthetic_prompt(128, 8, 0) != synthetic_prompt(128, 8, 1)  # requests differ, sizes do not
    assert len(synthetic_prompt(128, 8, 0).split()) == len(synthetic_prompt(128, 8, 1).split())


# --------------------------------------------------------------------------- engine helpers
@pytest.mark.parametrize("n", [1, 16, 64, 777, 2048])
def test_synthetic_prompt_tokens_exact_length(generator, n):
    ids = synthetic_prompt_tokens(generator, n)
    assert ids.dtype == np.int32 and ids.shape == (n,)
    assert NEUTRAL_TEXT.split()[0] in generator.decode(ids[:8])


def test_plan_lengths_skips_and_clips():
    warnings: list[str] = []
    plan = plan_lengths([16, 100, 120, 200], 50, 128, warnings.append)
    assert plan == [(16, 50), (100, 28), (120, 8)]
    assert len(warnings) == 3 and "skipped" in warnings[-1]


def test_environment_block(settings: Settings):
    env = environment(settings)
    assert env["logical_cores"] == os.cpu_count() and env["cpu"]
    assert env["model"] == settings.generator_path.name and env["precision"] == "int4"
    assert {"numpy", "onnxruntime", "onnxruntime-genai"} <= env["packages"].keys()
    assert env["timestamp"].endswith("+00:00") and env["python"].count(".") == 2
    assert precision_from_name("qwen2.5-0.5b-instruct-fp16") == "fp16" and precision_from_name("gpt-4o") is None


# --------------------------------------------------------------------------- engine command
def test_bench_engine_cli(settings: Settings, tmp_path: Path):
    out_json, out_csv, out_png = tmp_path / "out.json", tmp_path / "out.csv", tmp_path / "engine.png"
    proc = run_cli(settings, tmp_path / "home", "bench", "engine", "--prompt-lengths", "16,64", "--new-tokens", "8",
                   "--warmup", "1", "--repeat", "2", "--json", str(out_json), "--csv", str(out_csv),
                   "--plot", str(out_png))
    assert proc.returncode == 0, proc.stderr
    assert "prompt tok" in proc.stdout and "decode tok/s" in proc.stdout
    result = json.loads(out_json.read_text())
    assert result["benchmark"] == "engine"
    rows = {r["prompt_tokens"]: r for r in result["results"]}
    assert sorted(rows) == [16, 64]
    for row in rows.values():
        assert row["runs"] == 2 and row["output_tokens_min"] == 8  # EOS suppressed: exactly new_tokens
        assert row["ttft_ms_mean"] > 0 and row["ttft_ms_p50"] > 0
        assert row["decode_tokens_per_s_mean"] > 0 and row["tpot_ms_p50"] > 0 and row["total_ms_mean"] > 0
    assert len(result["samples"]) == 4 and {s["prompt_tokens"] for s in result["samples"]} == {16, 64}
    env = result["environment"]
    assert env["model"] == settings.generator_path.name and env["logical_cores"] == os.cpu_count()
    lines = csv_rows(out_csv)
    assert [r["prompt_tokens"] for r in lines] == ["16", "64"] and float(lines[0]["decode_tokens_per_s_mean"]) > 0
    assert_png(out_png)


def test_plot_without_matplotlib_fails_clearly_before_running(settings: Settings, tmp_path: Path):
    blocker = tmp_path / "block" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib blocked for this test')\n")
    env = cli_env(settings, PYTHONPATH=str(tmp_path / "block"))
    start = time.monotonic()
    proc = run_cli(settings, tmp_path / "home", "bench", "engine", "--prompt-lengths", "16", "--new-tokens", "2",
                   "--plot", str(tmp_path / "x.png"), env=env)
    assert proc.returncode == 2, proc.stderr
    assert "--plot needs matplotlib" in proc.stderr and "plot" in proc.stderr
    assert not (tmp_path / "x.png").exists() and time.monotonic() - start < 30


# --------------------------------------------------------------------------- a real server
@pytest.fixture(scope="module")
def bench_home(tmp_path_factory: pytest.TempPathFactory, settings: Settings, embedder) -> Path:
    """A scratch home whose default index holds one small Markdown document."""
    home = tmp_path_factory.mktemp("bench-home")
    docs = home / "docs"
    docs.mkdir()
    (docs / "zorblat.md").write_text(DOC_TEXT, encoding="utf-8")
    summary = ingest_paths([docs / "zorblat.md"], EmbeddedIndex(settings.replace(home=home).index_path()),
                           IngestParameters.from_settings(settings, embedder))
    assert summary.ok and summary.count("added") == 1, summary.as_dict()
    return home


@pytest.fixture(scope="module")
def server(settings: Settings, bench_home: Path, tmp_path_factory: pytest.TempPathFactory):
    """``rag serve`` in a subprocess on a free port; yields the OpenAI base URL; always terminated."""
    with running_server(settings, bench_home, tmp_path_factory.mktemp("bench-server") / "serve.log") as base:
        yield base + "/v1"


def test_bench_serve_against_real_server(settings: Settings, server: str, tmp_path: Path):
    out_json, out_csv, out_png = tmp_path / "serve.json", tmp_path / "serve.csv", tmp_path / "serve.png"
    proc = run_cli(settings, tmp_path / "home", "bench", "serve", "--url", server, "--scenarios", "chatbot",
                   "--concurrency", "1,2", "--requests", "2", "--max-output", "8", "--json", str(out_json),
                   "--csv", str(out_csv), "--plot", str(out_png))
    assert proc.returncode == 0, proc.stderr
    assert "TTFT p50" in proc.stdout
    result = json.loads(out_json.read_text())
    assert result["benchmark"] == "serve" and result["model"] == settings.generator_path.name  # from /v1/models
    assert [(r["scenario"], r["concurrency"]) for r in result["results"]] == [("chatbot", 1), ("chatbot", 2)]
    for row in result["results"]:
        assert (row["requests"], row["ok"], row["errors"], row["shed"], row["timeouts"]) == (2, 2, 0, 0, 0)
        assert row["ttft_ms_p50"] > 0 and row["ttft_ms_p99"] >= row["ttft_ms_p50"]
        assert row["e2e_ms_p50"] >= row["ttft_ms_p50"] and row["requests_per_s"] > 0
        assert row["token_source"] == "usage" and row["max_output_tokens"] == 8
    assert len(result["samples"]) == 4 and all(s["status"] == 200 for s in result["samples"])
    assert result["environment"]["role"] == "client" and result["config"]["url"] == server
    assert [r["concurrency"] for r in csv_rows(out_csv)] == ["1", "2"]
    assert_png(out_png)


def test_bench_serve_duration_mode_stops_at_deadline(settings: Settings, server: str, tmp_path: Path):
    out_json = tmp_path / "serve.json"
    proc = run_cli(settings, tmp_path / "home", "bench", "serve", "--url", server, "--scenarios", "chatbot",
                   "--concurrency", "2", "--duration", "1", "--max-output", "4", "--json", str(out_json))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out_json.read_text())
    row = result["results"][0]
    assert row["requests"] >= 2 and row["errors"] == 0 and row["wall_s"] >= 1.0
    assert all(s["start_s"] < 1.0 for s in result["samples"])  # no request is sent after the deadline


def test_bench_serve_counts_http_errors_and_timeouts(settings: Settings, server: str, tmp_path: Path):
    out_json = tmp_path / "errors.json"
    wrong = server.rsplit("/v1", 1)[0] + "/v9"  # same server, no such route: 404 for every request
    proc = run_cli(settings, tmp_path / "home", "bench", "serve", "--url", wrong, "--model", "m", "--scenarios",
                   "chatbot", "--concurrency", "1", "--requests", "2", "--max-output", "4", "--json", str(out_json))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(out_json.read_text())["results"][0]
    assert (row["ok"], row["errors"], row["shed"], row["timeouts"]) == (0, 2, 0, 0)
    assert "HTTP 404" in proc.stderr
    proc = run_cli(settings, tmp_path / "home", "bench", "serve", "--url", server, "--model", "m", "--scenarios",
                   "chatbot", "--concurrency", "1", "--requests", "1", "--max-output", "4", "--timeout", "0.001",
                   "--json", str(out_json))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(out_json.read_text())["results"][0]
    assert (row["ok"], row["errors"], row["timeouts"]) == (0, 0, 1)


def test_bench_serve_bad_options(settings: Settings, tmp_path: Path):
    for args, message in ((["--scenarios", "chatbot,nope"], "unknown nope"),
                          (["--duration", "1", "--requests", "2"], "not both"),
                          (["--concurrency", "0"], "smaller than 1")):
        proc = run_cli(settings, tmp_path, "bench", "serve", "--url", "http://127.0.0.1:9/v1", *args)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- rag command
def test_bench_rag_cli(settings: Settings, bench_home: Path, tmp_path: Path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    out_json, out_csv = tmp_path / "rag.json", tmp_path / "rag.csv"
    proc = run_cli(settings, bench_home, "bench", "rag", "--questions", str(questions), "--n", "3", "--seed", "1",
                   "--json", str(out_json), "--csv", str(out_csv), RAG_MAX_TOKENS="8")
    assert proc.returncode == 0, proc.stderr
    assert "RAG latency over 3 questions" in proc.stdout
    result = json.loads(out_json.read_text())
    breakdown = result["breakdown"]
    assert list(breakdown) == ["embed_ms", "retrieve_ms", "compress_ms", "ttft_ms", "decode_ms", "total_ms"]
    for stage in ("embed_ms", "retrieve_ms", "total_ms"):
        assert breakdown[stage]["n"] == 3 and breakdown[stage]["p50"] > 0 and breakdown[stage]["p95"] > 0
    # Timed generations: answers that ran the model (an explain / how-does question is answered with its
    # evidence sentences, without generating).
    generated = [s for s in result["samples"] if s["output_tokens"] > 0]
    assert generated and breakdown["ttft_ms"]["n"] == len(generated)
    assert all(s["output_tokens"] <= 8 for s in result["samples"])
    assert result["abstentions"]["total"] == sum(s["abstained"] for s in result["samples"])
    assert {"weak_evidence", "model_declined", "on_unanswerable"} <= result["abstentions"].keys()
    assert result["config"]["max_tokens"] == 8 and result["environment"]["model"] == settings.generator_path.name
    assert [r["stage"] for r in csv_rows(out_csv)] == ["embed", "retrieve", "compress", "ttft", "decode", "total"]


def test_bench_rag_missing_index_fails_before_loading(settings: Settings, tmp_path: Path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps(QUESTIONS[0]) + "\n", encoding="utf-8")
    proc = run_cli(settings, tmp_path, "bench", "rag", "--questions", str(questions), "--index", "nothing-here")
    assert proc.returncode == 2 and "does not exist" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- generation through the server
# Last in the module: when the server's batching engine fails, it stays unhealthy for later requests.
def test_bench_serve_plain_chat_generates_tokens(settings: Settings, server: str, tmp_path: Path):
    out_json = tmp_path / "plain.json"
    proc = run_cli(settings, tmp_path / "home", "bench", "serve", "--url", server, "--scenarios", "chatbot",
                   "--concurrency", "1,2", "--requests", "2", "--max-output", "8", "--no-retrieval",
                   "--json", str(out_json))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out_json.read_text())
    assert [s["error"] for s in result["samples"] if s["outcome"] != "ok"] == []
    for row in result["results"]:
        assert (row["ok"], row["errors"], row["shed"], row["timeouts"]) == (2, 0, 0, 0)
        assert row["output_tokens"] > 0 and row["aggregate_tokens_per_s"] > 0 and row["ttft_ms_p50"] > 0
        assert row["token_source"] == "usage" and row["itl_ms_n"] > 0 and row["tpot_ms_p50"] > 0
    assert all(0 < s["output_tokens"] <= 8 for s in result["samples"])
