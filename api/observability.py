"""Prometheus metrics and structured JSON logs."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


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

    def observe_answer(self, ttft_ms: float, total_ms: float, output_tokens: int) -> None:
        if output_tokens:
            self.ttft.observe(ttft_ms / 1000)
        self.total.observe(total_ms / 1000)
        self.tokens.inc(output_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                 "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class SharedRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file that several server processes (``rag serve --workers N``) write at once.

    On Windows a file another worker holds open cannot be renamed: the rotation is put off (the record is
    written, to the current file) and tried again with the next record. When another worker has rotated the
    file, this one follows it to the new file instead of writing on into the renamed one."""

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        if self.stream is not None:
            try:
                moved = not os.path.samestat(os.fstat(self.stream.fileno()), os.stat(self.baseFilename))
            except OSError:
                moved = True
            if moved:
                self.stream.close()
                self.stream = self._open()
        return bool(super().shouldRollover(record))

    def doRollover(self) -> None:
        """The current file is moved aside first: when that fails (held), nothing else has moved yet."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None  # type: ignore[assignment]
        base = self.baseFilename
        aside = f"{base}.{os.getpid()}.rotating"
        try:
            os.rename(base, aside)
        except OSError:  # held by another process: keep appending; the next record tries again
            self.stream = self._open()
            return
        for i in range(self.backupCount - 1, 0, -1):
            if os.path.exists(f"{base}.{i}"):
                try:
                    os.replace(f"{base}.{i}", f"{base}.{i + 1}")
                except OSError:
                    pass  # a reader holds an old backup: it is overwritten next time
        try:
            os.replace(aside, f"{base}.1" if self.backupCount else aside)
        except OSError:
            pass
        if not self.backupCount:
            os.remove(aside)
        self.stream = self._open()


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
