"""The server's metrics (OpenTelemetry instruments, rendered for Prometheus at /metrics) and structured JSON logs."""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric

from ingest.sources import Source, next_sync
from rag.core import observe
from rag.core.logfiles import SharedRotatingFileHandler
from rag.core.settings import Settings
from rag.telemetry import Telemetry, start_telemetry

SYNC_OUTCOMES = ("added", "updated", "unchanged", "renamed", "removed", "failed")
TOKEN_USAGE = "gen_ai_client_token_usage"  # gen_ai.client.token.usage, as the Prometheus reader names it


class _Instruments:
    """A Prometheus collector: what the OpenTelemetry instruments hold now (the Prometheus reader's families),
    and ``rag_generated_tokens_total`` (the /metrics series from before there were OpenTelemetry metrics) read
    off their output tokens, so that the tokens are recorded once."""

    def __init__(self, exported: CollectorRegistry) -> None:
        self.exported = exported

    def collect(self) -> Iterator[Metric]:
        output = 0.0
        for family in self.exported.collect():
            if family.name == TOKEN_USAGE:
                output += sum(s.value for s in family.samples
                              if s.name == f"{TOKEN_USAGE}_sum" and s.labels.get("gen_ai_token_type") == "output")
            yield family
        yield CounterMetricFamily("rag_generated_tokens", "Tokens generated (the output tokens of "
                                  "gen_ai.client.token.usage)", value=output)


class ServiceMetrics:
    """The server's figures. Each is recorded once, into the OpenTelemetry instruments of ``rag.core.observe``
    (``instruments``), which the process's exporters send as telemetry says and a Prometheus reader renders for
    /metrics; the index and source gauges are read at scrape time, for /metrics only. Build it with
    ``service_metrics``."""

    def __init__(self, registry: CollectorRegistry, provider: MeterProvider) -> None:
        self.registry = registry
        self.instruments = observe.instruments(provider.get_meter(observe.SCOPE))
        self.instruments.queue_depth.set(0)  # /metrics has the queue from the start
        self.documents = Gauge("rag_index_documents", "Documents in the index", ["index"], registry=registry)
        self.chunks = Gauge("rag_index_chunks", "Chunks in the index", ["index"], registry=registry)
        # Watched folders (ingest.sources), read from each index at scrape time; labelled by source id, not path.
        source = ["index", "source"]
        self.source_last_sync = Gauge("rag_source_last_sync_timestamp_seconds",
                                      "When the source's last sync started (Unix time)", source, registry=registry)
        self.source_duration = Gauge("rag_source_last_sync_duration_seconds", "How long the source's last sync took",
                                     source, registry=registry)
        self.source_files = Gauge("rag_source_last_sync_files", "Files of the source's last sync, by outcome",
                                  source + ["outcome"], registry=registry)
        self.source_ok = Gauge("rag_source_last_sync_ok", "1 if the source's last sync read its folder and every "
                               "file, 0 if a file failed or the folder could not be read", source,
                               registry=registry)
        self.source_next = Gauge("rag_source_next_sync_timestamp_seconds", "When the server syncs the scheduled "
                                 "source next (Unix time; 0: never synced, due now)", source, registry=registry)

    def request(self, route: str, method: str, status: int) -> None:
        self.instruments.requests.add(1, {"route": route, "method": method, "status": str(status)})

    def queue(self, depth: int) -> None:
        """Generations queued or running."""
        self.instruments.queue_depth.set(depth)

    def rejected(self, error_type: str) -> None:
        """A request refused with 503 (queue full, models not loaded)."""
        self.instruments.rejected.add(1, {observe.ERROR_TYPE: error_type})

    def observe_answer(self, ttft_ms: float, total_ms: float, output_tokens: int) -> None:
        """An answer's times (its tokens are in ``gen_ai.client.token.usage``, recorded as it was generated)."""
        if output_tokens:
            self.instruments.answer_ttft.record(ttft_ms / 1000)
        self.instruments.answer_duration.record(total_ms / 1000)

    def sources(self, sources: Iterable[tuple[str, Source]]) -> None:
        """The series of each (index name, source) now; those of sources gone since the last scrape go too."""
        gauges = (self.source_last_sync, self.source_duration, self.source_files, self.source_ok, self.source_next)
        for gauge in gauges:
            gauge.clear()
        for index, source in sources:
            labels = (index, source.id)
            when = next_sync(source)
            if when is not None:
                self.source_next.labels(*labels).set(when)
            last = source.last
            if last is None:
                continue
            self.source_last_sync.labels(*labels).set(datetime.fromisoformat(last.started_at).timestamp())
            self.source_duration.labels(*labels).set(last.seconds)
            self.source_ok.labels(*labels).set(1 if last.status == "ok" else 0)
            for outcome in SYNC_OUTCOMES:
                self.source_files.labels(*labels, outcome).set(getattr(last, outcome))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def service_metrics(settings: Settings, telemetry: bool) -> tuple[ServiceMetrics, Telemetry | None]:
    """The app's metrics, and with ``telemetry`` (a serving process) the process's OpenTelemetry as the settings
    say: its meter provider then has the Prometheus reader too, even with telemetry "off", so that everything
    the process records (answers, retrieval, ingest) is on /metrics and in the exported metrics alike. Without
    (an app inside another program, such as tests) the app records into a provider of its own, leaving the
    process's telemetry alone: its /metrics has what the app records, not the stages' ingest counts."""
    exported = CollectorRegistry()
    # No target_info or otel_scope_* labels: the series keep the names and labels /metrics always had.
    reader = PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False, registry=exported)
    registry = CollectorRegistry()
    registry.register(_Instruments(exported))
    exporting = start_telemetry(settings, "api", metric_readers=[reader]) if telemetry else None
    if exporting is not None:
        return ServiceMetrics(registry, exporting.meter_provider), exporting
    return ServiceMetrics(registry, MeterProvider(metric_readers=[reader], shutdown_on_exit=False)), None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                 "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", {}))
        span = trace.get_current_span().get_span_context()
        if span.is_valid:  # the same ids as the OpenTelemetry spans and log records (README "Telemetry")
            entry["trace_id"] = format(span.trace_id, "032x")
            entry["span_id"] = format(span.span_id, "016x")
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(log_file: Path | None) -> logging.Logger:
    """JSON lines for everything the server process logs: the product's ``rag`` loggers at INFO, and
    warnings from libraries (asyncio, uvicorn, faiss) through the root logger; returns the API's request
    logger. Idempotent: a second app in the same process adds no second set of handlers."""
    root = logging.getLogger()
    if not any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        stderr = logging.StreamHandler(sys.stderr)
        stderr.setFormatter(JsonFormatter())
        root.addHandler(stderr)
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            rotating = SharedRotatingFileHandler(log_file, maxBytes=10_000_000, backupCount=5, encoding="utf-8")
            rotating.setFormatter(JsonFormatter())
            root.addHandler(rotating)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)
    logging.getLogger("rag").setLevel(logging.INFO)
    return logging.getLogger("rag.api")
