"""Prometheus metrics and structured JSON logs."""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Iterable

from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ingest.sources import Source, next_sync
from rag.core import observe
from rag.core.logfiles import SharedRotatingFileHandler

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
SYNC_OUTCOMES = ("added", "updated", "unchanged", "renamed", "removed", "failed")


class ServiceMetrics:
    """One registry per app, so tests and several apps in one process never share counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("rag_requests_total", "HTTP requests", ["route", "method", "status"],
                                registry=self.registry)
        self.queue_depth = Gauge("rag_generation_queue_depth", "Generations queued or running",
                                 registry=self.registry)
        self.ttft = Histogram("rag_ttft_seconds", "Time to first answer token", buckets=LATENCY_BUCKETS,
                              registry=self.registry)
        self.total = Histogram("rag_answer_seconds", "Total answer latency", buckets=LATENCY_BUCKETS,
                               registry=self.registry)
        self.tokens = Counter("rag_generated_tokens_total", "Tokens generated", registry=self.registry)
        self.documents = Gauge("rag_index_documents", "Documents in the index", ["index"], registry=self.registry)
        self.chunks = Gauge("rag_index_chunks", "Chunks in the index", ["index"], registry=self.registry)
        # Watched folders (ingest.sources), read from each index at scrape time; labelled by source id, not path.
        source = ["index", "source"]
        self.source_last_sync = Gauge("rag_source_last_sync_timestamp_seconds",
                                      "When the source's last sync started (Unix time)", source, registry=self.registry)
        self.source_duration = Gauge("rag_source_last_sync_duration_seconds", "How long the source's last sync took",
                                     source, registry=self.registry)
        self.source_files = Gauge("rag_source_last_sync_files", "Files of the source's last sync, by outcome",
                                  source + ["outcome"], registry=self.registry)
        self.source_ok = Gauge("rag_source_last_sync_ok", "1 if the source's last sync read its folder and every "
                               "file, 0 if a file failed or the folder could not be read", source,
                               registry=self.registry)
        self.source_next = Gauge("rag_source_next_sync_timestamp_seconds", "When the server syncs the scheduled "
                                 "source next (Unix time; 0: never synced, due now)", source, registry=self.registry)
        self.otel = observe.instruments()  # the OpenTelemetry side (no-ops unless telemetry is on)

    def queue(self, depth: int) -> None:
        """Generations queued or running, to Prometheus and OpenTelemetry alike."""
        self.queue_depth.set(depth)
        self.otel.queue_depth.set(depth)

    def rejected(self, error_type: str) -> None:
        """A request refused with 503 (queue full, models not loaded)."""
        self.otel.rejected.add(1, {"error.type": error_type})

    def observe_answer(self, ttft_ms: float, total_ms: float, output_tokens: int) -> None:
        if output_tokens:
            self.ttft.observe(ttft_ms / 1000)
        self.total.observe(total_ms / 1000)
        self.tokens.inc(output_tokens)

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
