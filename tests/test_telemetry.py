"""OpenTelemetry (docs/telemetry.md): a real `rag serve` and real `rag` commands write OTLP JSON Lines files that
parse into the official protobuf messages, one trace per request with the GenAI stages beneath it; OTLP/HTTP
reaches a real receiver; a disk that refuses the files never fails a request."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client.parser import text_string_to_metric_families

from rag.core.settings import PROJECT_ROOT, Settings
from tests.format_fixtures import make_scanned_pdf
from tests.helpers import cli_env, free_port, server_process

QUESTION = "When did Rollo sign the treaty of Saint-Clair-sur-Epte?"
STREAMED = "When did Rollo sign the treaty?"
INCOMING_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING_PARENT = "00f067aa0ba902b7"
ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def as_protobuf_json(node):
    """OTLP JSON writes trace and span ids as hex; protobuf's JSON mapping of bytes is base64."""
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ID_FIELDS and v else as_protobuf_json(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [as_protobuf_json(v) for v in node]
    return node


def parse_lines(path: Path, message_type) -> list:
    """Every line of an OTLP JSON Lines file as the official message (a line that does not parse fails)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines, f"{path} is empty"
    return [json_format.Parse(json.dumps(as_protobuf_json(json.loads(line))), message_type()) for line in lines]


def value(any_value: AnyValue):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def spans_of(requests: list[ExportTraceServiceRequest]) -> list[Span]:
    return [span for request in requests for resource in request.resource_spans
            for scope in resource.scope_spans for span in scope.spans]


def attrs(span: Span) -> dict:
    return {a.key: value(a.value) for a in span.attributes}


def children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.trace_id == parent.trace_id and s.parent_span_id == parent.span_id]


def only(spans: list[Span], name_start: str) -> Span:
    found = [s for s in spans if s.name.startswith(name_start)]
    assert len(found) == 1, (name_start, [s.name for s in spans])
    return found[0]


def answer_tree(spans: list[Span], server: Span) -> tuple[Span, Span, Span]:
    """server -> retrieval -> embeddings, and server -> chat: the spans of one answered request."""
    below = children(spans, server)
    retrieval = only(below, "retrieval ")
    embeddings = only(children(spans, retrieval), "embeddings ")
    chat = only(below, "chat ")
    return retrieval, embeddings, chat


def run_rag(settings: Settings, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), *args], cwd=PROJECT_ROOT,
                          env=cli_env(settings, **env), capture_output=True, text=True, timeout=300)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(PROJECT_ROOT / "examples" / "docs" / "normans.md", folder)
    make_scanned_pdf(folder / "scanned notice.pdf")
    return folder


def test_file_telemetry_of_a_real_server_and_cli(settings: Settings, tmp_path: Path, docs: Path):
    home = tmp_path / "home"
    ingested = run_rag(settings, home, "ingest", str(docs))
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    upload = tmp_path / "uploaded.md"
    upload.write_text("# Kestrel Club\n\nThe Kestrel Club meets on Thursdays in the old mill.\n", encoding="utf-8")

    with server_process(settings, home, tmp_path / "server.log") as base:
        asked = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60,
                           headers={"traceparent": f"00-{INCOMING_TRACE}-{INCOMING_PARENT}-01"})
        assert asked.status_code == 200, asked.text
        answer = asked.json()
        with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": STREAMED}], "stream": True,
                "stream_options": {"include_usage": True}}) as response:
            assert response.status_code == 200
            chunks = [json.loads(line[6:]) for line in response.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        usage = chunks[-1]["usage"]
        uploaded = httpx.post(f"{base}/v1/documents", timeout=120,
                              files={"data": ("kestrel.md", upload.read_bytes(), "text/markdown")})
        assert uploaded.status_code == 200, uploaded.text
    # The server stopped gracefully: everything pending was flushed.

    folder = home / "telemetry"
    assert sorted(p.name for p in folder.iterdir()) == ["logs.jsonl", "metrics.jsonl", "traces.jsonl"]
    spans = spans_of(parse_lines(folder / "traces.jsonl", ExportTraceServiceRequest))
    for span in spans:
        assert len(span.trace_id) == 16 and len(span.span_id) == 8, span.name

    # /v1/ask: the incoming traceparent is continued; server -> retrieval -> embeddings, server -> chat.
    incoming = bytes.fromhex(INCOMING_TRACE)
    server = only([s for s in spans if s.trace_id == incoming], "POST /v1/ask")
    assert server.kind == Span.SPAN_KIND_SERVER and server.parent_span_id == bytes.fromhex(INCOMING_PARENT)
    http = attrs(server)
    assert http["http.request.method"] == "POST" and http["http.route"] == "/v1/ask"
    assert http["http.response.status_code"] == 200 and http["url.path"] == "/v1/ask"
    assert http["rag.answer.abstained"] is False and http["rag.answer.citations"] >= 1
    retrieval, embeddings, chat = answer_tree(spans, server)
    r = attrs(retrieval)
    assert r["gen_ai.operation.name"] == "retrieval" and r["gen_ai.data_source.id"] == "default"
    assert r["gen_ai.request.top_k"] == 5 and r["rag.retrieval.hits"] == 5
    assert isinstance(r["rag.retrieval.dense_ms"], float) and isinstance(r["rag.retrieval.lexical_ms"], float)
    assert attrs(embeddings)["gen_ai.operation.name"] == "embeddings"
    assert attrs(embeddings)["gen_ai.embeddings.dimension.count"] == 384
    c = attrs(chat)
    assert chat.kind == Span.SPAN_KIND_INTERNAL and chat.name == f"chat {answer['model']}"
    assert c["gen_ai.operation.name"] == "chat" and c["gen_ai.provider.name"] == "onnxruntime_genai"
    assert c["gen_ai.request.model"] == answer["model"] and c["gen_ai.request.temperature"] == 0.0
    assert isinstance(c["gen_ai.request.max_tokens"], int)
    assert c["gen_ai.usage.input_tokens"] == answer["metrics"]["prompt_tokens"]
    assert c["gen_ai.usage.output_tokens"] == answer["metrics"]["output_tokens"] > 0
    assert c["gen_ai.response.finish_reasons"] == ["stop"] or c["gen_ai.response.finish_reasons"] == ["length"]
    assert 0 < c["gen_ai.response.time_to_first_chunk"] < chat.end_time_unix_nano - chat.start_time_unix_nano
    only(children(spans, server), "compression")

    # The streamed OpenAI-compatible answer: its own trace, token counts equal to the usage it reported.
    stream_server = only(spans, "POST /v1/chat/completions")
    assert stream_server.trace_id not in (incoming, server.trace_id)
    _, _, stream_chat = answer_tree(spans, stream_server)
    assert attrs(stream_chat)["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attrs(stream_chat)["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    servers = [s for s in spans if s.kind == Span.SPAN_KIND_SERVER]
    assert len({s.trace_id for s in servers}) == len(servers)  # one trace per request

    # Ingest, from the CLI and from an upload: a span per run and per file, OCR pages on the scanned PDF.
    cli_root = only(spans, "rag ingest")
    run = only(children(spans, cli_root), "ingest default")
    files = {attrs(s)["file.path"]: attrs(s) for s in children(spans, run) if s.name == "ingest file"}
    scanned = files[str(docs / "scanned notice.pdf")]
    assert scanned["rag.ingest.format"] == "pdf" and scanned["rag.ingest.ocr_pages"] == 1
    assert scanned["rag.ingest.ocr_seconds"] > 0 and scanned["rag.ingest.outcome"] == "added"
    assert files[str(docs / "normans.md")]["rag.ingest.chunks"] > 10
    assert any(s.name.startswith("embeddings ") for s in children(spans, run))
    upload_server = only(spans, "POST /v1/documents")
    upload_run = only([s for s in spans if s.trace_id == upload_server.trace_id], "ingest default")
    assert [attrs(s)["rag.ingest.format"] for s in children(spans, upload_run) if s.name == "ingest file"] == ["md"]

    # Logs: the request log records carry the trace and span of their request.
    records = [record for request in parse_lines(folder / "logs.jsonl", ExportLogsServiceRequest)
               for resource in request.resource_logs for scope in resource.scope_logs
               for record in scope.log_records]
    request_logs = [r for r in records if r.body.string_value == "request"]
    ask_log = next(r for r in request_logs if {a.key: value(a.value) for a in r.attributes}.get("route") == "/v1/ask")
    assert ask_log.trace_id == incoming and ask_log.span_id == server.span_id
    assert {a.key for a in ask_log.attributes} >= {"request_id", "method", "status", "latency_ms"}
    assert "json_line" not in {a.key for a in ask_log.attributes}  # the JSON line is formatted once, not exported
    server_log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert f'"trace_id": "{INCOMING_TRACE}"' in server_log  # the JSON log line names the same trace

    # Metrics: GenAI token usage by token type, operation duration, retrieval, ingest.
    names: dict[str, list] = {}
    for request in parse_lines(folder / "metrics.jsonl", ExportMetricsServiceRequest):
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    names.setdefault(metric.name, []).append(metric)
    usage_points = [p for m in names["gen_ai.client.token.usage"] for p in m.histogram.data_points]
    token_types = {value(a.value) for p in usage_points for a in p.attributes if a.key == "gen_ai.token.type"}
    assert token_types == {"input", "output"}
    assert sum(p.sum for p in usage_points if any(value(a.value) == "output" for a in p.attributes)) >= \
        answer["metrics"]["output_tokens"] + usage["completion_tokens"]
    for name in ("gen_ai.client.operation.duration", "gen_ai.client.operation.time_to_first_chunk",
                 "rag.retrieval.duration", "rag.ingest.files", "rag.ingest.chunks"):
        assert name in names, sorted(names)

    # Content capture is off: no question text anywhere in the files.
    for path in folder.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "Saint-Clair" not in text and "Rollo sign" not in text, path.name

    # `rag trace show` draws the answer's tree from the files.
    shown = run_rag(settings, home, "trace", "show", "--trace", INCOMING_TRACE[:8])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"trace {INCOMING_TRACE}")
    assert lines[1].lstrip().startswith("POST /v1/ask [server]")
    retrieval_line = next(line for line in lines if line.lstrip().startswith("retrieval default"))
    embeddings_line = next(line for line in lines if line.lstrip().startswith("embeddings "))
    chat_line = next(line for line in lines if line.lstrip().startswith("chat "))
    indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731
    assert indent(retrieval_line) == indent(chat_line) == indent(lines[1]) + 2
    assert indent(embeddings_line) == indent(retrieval_line) + 2
    assert f"output_tokens={answer['metrics']['output_tokens']}" in chat_line
    slowest = run_rag(settings, home, "trace", "show", "--slowest", "1")
    assert slowest.returncode == 0 and "rag ingest" in slowest.stdout  # OCR makes the ingest the slowest
    missing = run_rag(settings, home, "trace", "show", str(tmp_path / "nowhere"))
    assert missing.returncode != 0 and "does not exist" in missing.stderr


def test_content_capture_records_the_question_and_retrieved_chunks(settings: Settings, tmp_path: Path, docs: Path):
    home = tmp_path / "home"
    ingested = run_rag(settings, home, "ingest", str(docs / "normans.md"))
    assert ingested.returncode == 0, ingested.stderr
    asked = run_rag(settings, home, "ask", QUESTION, "--json", RAG_TELEMETRY_CONTENT="true")
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    spans = spans_of(parse_lines(home / "telemetry" / "traces.jsonl", ExportTraceServiceRequest))
    root = only(spans, "rag ask")
    retrieval, _, chat = answer_tree(spans, root)
    r = attrs(retrieval)
    assert r["gen_ai.retrieval.query.text"] == QUESTION
    assert [d["id"] for d in json.loads(r["gen_ai.retrieval.documents"])] == \
        [s["chunk_id"] for s in result["sources"]]
    c = attrs(chat)
    assert json.loads(c["gen_ai.input.messages"])[-1]["role"] == "user"
    assert json.loads(c["gen_ai.output.messages"])[0]["role"] == "assistant"
    assert c["gen_ai.usage.output_tokens"] == result["metrics"]["output_tokens"]


# What /metrics calls each OpenTelemetry metric: the OpenTelemetry-to-Prometheus translation (docs/telemetry.md).
PROMETHEUS_NAMES = {
    "gen_ai.client.token.usage": "gen_ai_client_token_usage",
    "gen_ai.client.operation.duration": "gen_ai_client_operation_duration_seconds",
    "gen_ai.client.operation.time_to_first_chunk": "gen_ai_client_operation_time_to_first_chunk_seconds",
    "rag.retrieval.duration": "rag_retrieval_duration_seconds",
    "rag.ttft": "rag_ttft_seconds",
    "rag.answer": "rag_answer_seconds",
    "rag.ingest.files": "rag_ingest_files_total",
    "rag.ingest.chunks": "rag_ingest_chunks_total",
    "rag.ingest.ocr_pages": "rag_ingest_ocr_pages_total",
    "rag.generation.queue_depth": "rag_generation_queue_depth",
    "http.server.request.duration": "http_server_request_duration_seconds",
    # Observable gauges, read from the indexes at each scrape and each export.
    "rag.index.documents": "rag_index_documents",
    "rag.index.chunks": "rag_index_chunks",
    "rag.source.last_sync_timestamp": "rag_source_last_sync_timestamp_seconds",
    "rag.source.last_sync_duration": "rag_source_last_sync_duration_seconds",
    "rag.source.last_sync_files": "rag_source_last_sync_files",
    "rag.source.last_sync_ok": "rag_source_last_sync_ok",
    "rag.source.next_sync_timestamp": "rag_source_next_sync_timestamp_seconds",
}
HTTP_COUNT = "http_server_request_duration_seconds_count"


def label(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "_", key)


def last_exports(path: Path) -> dict[str, object]:
    """The last export of each metric in an OTLP JSON Lines metrics file (cumulative: the totals)."""
    last: dict[str, object] = {}
    for request in parse_lines(path, ExportMetricsServiceRequest):
        for resource in request.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    last[metric.name] = metric
    return last


def exported_figures(path: Path) -> dict[tuple, float]:
    """The last export of each metric, as the Prometheus samples it should be: (series name, sorted labels) ->
    value; a histogram as its count, sum and cumulative buckets."""
    last = last_exports(path)
    figures: dict[tuple, float] = {}
    for name, series in PROMETHEUS_NAMES.items():
        metric = last[name]
        kind = metric.WhichOneof("data")
        for point in getattr(metric, kind).data_points:
            labels = tuple(sorted((label(a.key), str(value(a.value))) for a in point.attributes))
            if kind == "histogram":
                assert metric.histogram.aggregation_temporality == 2  # cumulative, as Prometheus counts
                figures[(f"{series}_count", labels)] = float(point.count)
                figures[(f"{series}_sum", labels)] = point.sum
                running = 0
                for bound, count in zip([*point.explicit_bounds, float("inf")], point.bucket_counts):
                    running += count
                    figures[(f"{series}_bucket", tuple(sorted((*labels, ("le", repr(bound) if bound != float("inf")
                                                                              else "+Inf")))))] = float(running)
            else:
                if kind == "sum":
                    assert metric.sum.aggregation_temporality == 2 and metric.sum.is_monotonic
                figures[(series, labels)] = point.as_double or float(point.as_int)
    return figures


def scraped(text: str) -> dict[tuple, float]:
    """/metrics as (sample name, sorted labels) -> value. An empty label is no label (as Prometheus has it: the
    reader gives a series without an attribute that others of its metric have, such as error.type, an empty one)."""
    return {(sample.name, tuple(sorted((k, v) for k, v in sample.labels.items() if v))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def requests_counted(figures: dict[tuple, float], **labels: str) -> list[float]:
    """The counts of http.server.request.duration whose labels include ``labels``."""
    return [v for (name, series), v in figures.items() if name == HTTP_COUNT and labels.items() <= dict(series).items()]


def test_metrics_and_the_exported_metrics_are_one_set(settings: Settings, tmp_path: Path):
    """The figures /metrics gives Prometheus are the exported OpenTelemetry metrics, value for value: each is
    recorded once, into one set of instruments, which both read (the index and source gauges too)."""
    home = tmp_path / "home"
    ingested = run_rag(settings, home, "ingest", str(PROJECT_ROOT / "examples" / "docs" / "normans.md"),
                       RAG_TELEMETRY="off")
    assert ingested.returncode == 0, ingested.stderr
    share = tmp_path / "share"
    share.mkdir()  # an empty watched folder: its sync sets the source gauges and ingests nothing
    added = run_rag(settings, home, "sources", "add", str(share), "--every", "1h", RAG_TELEMETRY="off")
    assert added.returncode == 0, added.stderr
    scan = tmp_path / "notice.pdf"
    make_scanned_pdf(scan)
    with server_process(settings, home, tmp_path / "server.log") as base:
        for _ in range(240):  # never synced: the server syncs it as soon as it is ready
            source = httpx.get(f"{base}/v1/sources", timeout=10).json()["sources"][0]
            if source["last"] is not None:
                break
            threading.Event().wait(0.25)
        assert source["last"] and source["last"]["status"] == "ok", source
        asked = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60)
        assert asked.status_code == 200, asked.text
        chatted = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": STREAMED}], "max_tokens": 8})
        assert chatted.status_code == 200, chatted.text
        uploaded = httpx.post(f"{base}/v1/documents", timeout=120, files=[
            ("data", ("kestrel.md", b"# Kestrel Club\n\nThe Kestrel Club meets on Thursdays.\n", "text/markdown")),
            ("data", ("notice.pdf", scan.read_bytes(), "application/pdf"))])
        assert uploaded.status_code == 200, uploaded.text
        text = httpx.get(f"{base}/metrics", timeout=10).text
    served = scraped(text)
    exported = exported_figures(home / "telemetry" / "metrics.jsonl")
    # The scrape is recorded once it has been answered: in the export at shutdown, not in what it rendered.
    assert requests_counted(exported, http_route="/metrics") == [1.0]
    assert requests_counted(served, http_route="/metrics") == []
    exported = {key: v for key, v in exported.items() if ("http_route", "/metrics") not in key[1]}
    assert {key: served.get(key) for key in exported} == exported

    output = {"gen_ai_operation_name": "chat", "gen_ai_token_type": "output"}
    tokens = sum(v for (name, labels), v in exported.items()
                 if name == "gen_ai_client_token_usage_sum" and output.items() <= dict(labels).items())
    assert tokens == asked.json()["metrics"]["output_tokens"] + chatted.json()["usage"]["completion_tokens"] > 0
    assert served[("rag_generated_tokens_total", ())] == tokens  # the /metrics series it always had, read off them
    assert served[("rag_ttft_seconds_count", ())] == 2 and served[("rag_generation_queue_depth", ())] == 0
    files = {dict(labels)["rag_ingest_outcome"]: v for (name, labels), v in exported.items()
             if name == "rag_ingest_files_total"}
    assert files == {"added": 2}
    upload_chunks = sum(f["chunks"] for f in uploaded.json()["files"])
    assert exported[("rag_ingest_chunks_total", (("gen_ai_data_source_id", "default"),))] == upload_chunks
    assert exported[("rag_ingest_ocr_pages_total", (("gen_ai_data_source_id", "default"),))] == 1
    assert "kestrel" not in text and "notice" not in text  # labels name indexes, never files

    # Each HTTP request is recorded once, in http.server.request.duration (HTTP conventions): the one /v1/ask
    # is 1 in the file and on /metrics, and rag_requests_total is that count under the labels it always had.
    ask = {"http_request_method": "POST", "http_route": "/v1/ask", "http_response_status_code": "200",
           "url_scheme": "http"}
    assert requests_counted(exported, **ask) == requests_counted(served, **ask) == [1.0]
    assert served[("rag_requests_total", (("method", "POST"), ("route", "/v1/ask"), ("status", "200")))] == 1
    for (name, labels), count in served.items():
        if name == "rag_requests_total":
            method, route, status = (dict(labels)[k] for k in ("method", "route", "status"))
            assert requests_counted(served, http_request_method=method, http_route=route,
                                    http_response_status_code=status) == [count]
    assert served[("rag_requests_total", (("method", "GET"), ("route", "/healthz"), ("status", "200")))] == 1
    last = last_exports(home / "telemetry" / "metrics.jsonl")
    assert {name for name in last if name.startswith("http.")} == {"http.server.request.duration",
                                                                    "http.server.active_requests"}
    assert "rag.requests" not in last  # no second count of the same requests
    in_flight = {v for (name, labels), v in served.items() if name == "http_server_active_requests"
                 and dict(labels)["http_request_method"] == "GET"}
    assert in_flight == {1.0}  # the scrape itself
    assert all(p.as_int == 0 for p in last["http.server.active_requests"].sum.data_points)  # all done at shutdown

    # The index and source gauges: the same values in the file as on /metrics (compared above), and right.
    index = (("index", "default"),)
    assert exported[("rag_index_documents", index)] == 3  # normans.md, kestrel.md, notice.pdf
    assert exported[("rag_index_chunks", index)] == served[("rag_index_chunks", index)] > upload_chunks
    labels = (("index", "default"), ("source", source["id"]))
    started = datetime.fromisoformat(source["last"]["started_at"]).timestamp()
    assert exported[("rag_source_last_sync_timestamp_seconds", labels)] == started
    assert exported[("rag_source_last_sync_duration_seconds", labels)] == source["last"]["seconds"]
    assert exported[("rag_source_last_sync_ok", labels)] == 1
    assert exported[("rag_source_last_sync_files", (*labels[:1], ("outcome", "added"), *labels[1:]))] == 0
    assert started + 3600 <= exported[("rag_source_next_sync_timestamp_seconds", labels)] <= started + 3960


def test_metrics_work_with_telemetry_off(settings: Settings, tmp_path: Path):
    """``telemetry = "off"`` exports nothing, and /metrics still has every figure."""
    home = tmp_path / "home"
    ingested = run_rag(settings, home, "ingest", str(PROJECT_ROOT / "examples" / "docs" / "normans.md"),
                       RAG_TELEMETRY="off")
    assert ingested.returncode == 0, ingested.stderr
    with server_process(settings, home, tmp_path / "server.log", RAG_TELEMETRY="off") as base:
        asked = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60)
        assert asked.status_code == 200, asked.text
        served = scraped(httpx.get(f"{base}/metrics", timeout=10).text)
    output = asked.json()["metrics"]["output_tokens"]
    usage = {dict(labels)["gen_ai_token_type"]: v for (name, labels), v in served.items()
             if name == "gen_ai_client_token_usage_sum"}
    assert usage == {"input": asked.json()["metrics"]["prompt_tokens"], "output": output}
    assert served[("rag_generated_tokens_total", ())] == output > 0
    assert served[("rag_retrieval_duration_seconds_count", (("gen_ai_data_source_id", "default"),))] == 1
    assert served[("rag_answer_seconds_count", ())] == 1
    assert not (home / "telemetry").exists()


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: protobuf bodies on /v1/traces, /v1/metrics, /v1/logs."""

    received: dict[str, list[bytes]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_otlp_http_reaches_a_collector_and_an_absent_one_fails_nothing(settings: Settings, tmp_path: Path):
    home = tmp_path / "home"
    ingested = run_rag(settings, home, "ingest", str(PROJECT_ROOT / "examples" / "docs" / "normans.md"),
                       RAG_TELEMETRY="off")
    assert ingested.returncode == 0, ingested.stderr
    assert not (home / "telemetry").exists()  # off is off
    handler = type("Handler", (Receiver,), {"received": {}})
    collector = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
        with server_process(settings, home, tmp_path / "server.log", RAG_TELEMETRY="otlp",
                            RAG_OTLP_ENDPOINT=endpoint) as base:
            asked = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60)
            assert asked.status_code == 200, asked.text
    finally:
        collector.shutdown()
    assert set(handler.received) >= {"/v1/traces", "/v1/logs", "/v1/metrics"}
    spans = spans_of([ExportTraceServiceRequest.FromString(body) for body in handler.received["/v1/traces"]])
    server = only(spans, "POST /v1/ask")
    _, _, chat = answer_tree(spans, server)
    assert attrs(chat)["gen_ai.usage.output_tokens"] == asked.json()["metrics"]["output_tokens"]
    assert not (home / "telemetry").exists()

    # No collector at all: answers still come, and the failure is logged once, not once per export.
    closed = f"http://127.0.0.1:{free_port()}"
    log_path = tmp_path / "unreachable.log"
    with server_process(settings, home, log_path, RAG_TELEMETRY="otlp", RAG_OTLP_ENDPOINT=closed) as base:
        for _ in range(3):
            assert httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60).status_code == 200
    failures = [line for line in log_path.read_text(encoding="utf-8").splitlines() if "Failed to export" in line]
    assert 1 <= len(failures) <= 3, failures  # at most once per signal


@pytest.mark.skipif(os.name == "nt", reason="RLIMIT_FSIZE is POSIX; Windows runs the rest of this file")
def test_a_disk_that_refuses_the_files_never_fails_a_request(settings: Settings, tmp_path: Path):
    """A file-size limit stands in for a full disk: every telemetry write past it fails (EFBIG)."""
    import resource

    home = tmp_path / "home"
    ingested = run_rag(settings, home, "ingest", str(PROJECT_ROOT / "examples" / "docs" / "normans.md"))
    assert ingested.returncode == 0, ingested.stderr
    limit = 64 * 1024  # above what the server's own databases need, below a few dozen answers' spans

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    port = free_port()
    # Output through a pipe: the limit holds for every file the server writes, a log file included.
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--home", str(home), "serve", "--port", str(port)],
                            cwd=PROJECT_ROOT, env=cli_env(settings, RAG_AUDIT="false"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, preexec_fn=limited)
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, b"".join(output).decode(errors="replace")
            threading.Event().wait(0.25)
        for _ in range(30):
            asked = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60)
            assert asked.status_code == 200, asked.text
            assert asked.json()["answer"]
        threading.Event().wait(2.5)  # the batch exports have run into the limit by now
        assert httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=10)
    logged = b"".join(output).decode(errors="replace")
    assert proc.returncode in (0, -15), logged
    assert "dropping telemetry until it can" in logged, logged[-3000:]
    assert logged.count("cannot write") <= 3, logged[-3000:]  # once per file, not once per export
    assert "Traceback" not in logged, logged[-3000:]
    assert (home / "telemetry" / "traces.jsonl").stat().st_size <= limit


def test_a_remote_generator_call_continues_the_trace_upstream(settings: Settings, tmp_path: Path):
    """`rag serve` with generator_url pointing at another `rag serve`: the CLIENT chat span's traceparent goes
    with the request, and the upstream's SERVER span is its child in the same trace."""
    down_home, up_home = tmp_path / "down", tmp_path / "up"
    ingested = run_rag(settings, down_home, "ingest", str(PROJECT_ROOT / "examples" / "docs" / "normans.md"))
    assert ingested.returncode == 0, ingested.stderr
    with server_process(settings, up_home, tmp_path / "up.log") as upstream, \
            server_process(settings, down_home, tmp_path / "down.log", RAG_GENERATOR_URL=f"{upstream}/v1",
                           RAG_GENERATOR_TOKENIZER=str(settings.generator_path / "tokenizer.json")) as base:
        asked = httpx.post(f"{base}/v1/ask", json={"question": QUESTION}, timeout=60)
        assert asked.status_code == 200, asked.text
        assert not asked.json()["abstained"]
    down = spans_of(parse_lines(down_home / "telemetry" / "traces.jsonl", ExportTraceServiceRequest))
    up = spans_of(parse_lines(up_home / "telemetry" / "traces.jsonl", ExportTraceServiceRequest))
    server = only(down, "POST /v1/ask")
    _, _, chat = answer_tree(down, server)
    assert chat.kind == Span.SPAN_KIND_CLIENT
    c = attrs(chat)
    assert c["gen_ai.provider.name"] == "openai" and c["server.address"] == "127.0.0.1"
    assert c["server.port"] == int(upstream.rsplit(":", 1)[1])
    upstream_server = only([s for s in up if s.trace_id == server.trace_id], "POST /v1/chat/completions")
    assert upstream_server.parent_span_id == chat.span_id and upstream_server.kind == Span.SPAN_KIND_SERVER
    upstream_chat = only(children(up, upstream_server), "chat ")  # the upstream generated it, locally
    assert attrs(upstream_chat)["gen_ai.usage.output_tokens"] == c["gen_ai.usage.output_tokens"]
