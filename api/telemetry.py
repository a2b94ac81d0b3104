"""The server's metrics (OpenTelemetry instruments, rendered for Prometheus at /metrics) and structured JSON logs."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric

from ingest.sources import LastSync, Source, index_sources, next_sync
from rag.store import Store
from rag.core import observe
from rag.core.errors import RagError
from rag.core.logfiles import SharedRotatingFileHandler
from rag.core.settings import Settings
from rag.telemetry import Telemetry, start_telemetry

SYNC_OUTCOMES = ("added", "updated", "unchanged", "renamed", "removed", "failed")
# What the Prometheus reader names gen_ai.client.token.usage and http.server.request.duration.
TOKEN_USAGE = "gen_ai_client_token_usage"
HTTP_DURATION = "http_server_request_duration_seconds"
HTTP_METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"})
# HTTP semantic conventions (stable): the server's request metrics.
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_SCHEME = "url.scheme"
PROTOCOL_VERSION = "network.protocol.version"
LATENCY_BUCKETS = [0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0]
HTTP_DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]  # semconv's


@dataclass(frozen=True)
class ServerInstruments:
    """The server's own instruments, beside the stages' (``rag.core.observe.Instruments``): each HTTP request,
    once (its count is the request count), each answer's time to its first token and to its end, the
    generation queue and the requests it refused. Named so that the Prometheus translation gives the /metrics
    names they have always had (``rag.ttft`` in seconds -> ``rag_ttft_seconds``). Requests in flight,
    ``http.server.active_requests``, are an observable counter of ``ServiceMetrics``."""

    http_duration: metrics.Histogram
    answer_ttft: metrics.Histogram
    answer_duration: metrics.Histogram
    queue_depth: metrics._Gauge
    rejected: metrics.Counter


def server_instruments(meter: metrics.Meter) -> ServerInstruments:
    return ServerInstruments(
        http_duration=meter.create_histogram(
            "http.server.request.duration", unit="s", description="Duration of HTTP server requests",
            explicit_bucket_boundaries_advisory=HTTP_DURATION_BUCKETS),
        answer_ttft=meter.create_histogram(
            "rag.ttft", unit="s", description="Time to first answer token",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS),
        answer_duration=meter.create_histogram(
            "rag.answer", unit="s", description="Total answer latency",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS),
        queue_depth=meter.create_gauge(
            "rag.generation.queue_depth", unit="{request}", description="Generations queued or running"),
        rejected=meter.create_counter(
            "rag.requests.rejected", unit="{request}", description="Requests refused with 503 (queue full)"),
    )


class _Instruments:
    """A Prometheus collector: what the OpenTelemetry instruments hold now (the Prometheus reader's families),
    and two /metrics series from before there were OpenTelemetry metrics, read off them so that each figure is
    recorded once: ``rag_generated_tokens_total`` (the output tokens of ``gen_ai.client.token.usage``) and
    ``rag_requests_total`` (the count of ``http.server.request.duration``)."""

    def __init__(self, exported: CollectorRegistry) -> None:
        self.exported = exported

    def collect(self) -> Iterator[Metric]:
        output = 0.0
        requests: dict[tuple[str, str, str], float] = {}
        for family in self.exported.collect():
            if family.name == TOKEN_USAGE:
                output += sum(s.value for s in family.samples
                              if s.name == f"{TOKEN_USAGE}_sum" and s.labels.get("gen_ai_token_type") == "output")
            elif family.name == HTTP_DURATION:
                for sample in family.samples:
                    if sample.name == f"{HTTP_DURATION}_count":
                        labels = sample.labels
                        key = (labels.get("http_request_method", ""), labels.get("http_route") or "unmatched",
                               labels.get("http_response_status_code", ""))
                        requests[key] = requests.get(key, 0.0) + sample.value
            yield family
        yield CounterMetricFamily("rag_generated_tokens", "Tokens generated (the output tokens of "
                                  "gen_ai.client.token.usage)", value=output)
        answered = CounterMetricFamily("rag_requests", "HTTP requests answered (the count of "
                                       "http.server.request.duration)", labels=["method", "route", "status"])
        for key, count in sorted(requests.items()):
            answered.add_metric(list(key), count)
        yield answered


@dataclass(frozen=True)
class IndexFigures:
    """What the index and source gauges report: the default index's (name, documents, chunks) as an operator
    sees them (None: it cannot be read now), and (index name, source) for every source of every index."""

    index: tuple[str, int, int] | None = None
    sources: tuple[tuple[str, Source], ...] = ()


class _Reading:
    """One reading of the indexes per collection, shared by the gauges' callbacks. A collection (a /metrics
    scrape, an export) calls each callback once, and the SDK runs one collection at a time, so a callback
    that was served already starts the next collection: a new reading."""

    def __init__(self) -> None:
        self.read: Callable[[], IndexFigures] | None = None
        self.figures: IndexFigures | None = None
        self.served: set[str] = set()
        self.lock = threading.Lock()

    def get(self, gauge: str) -> IndexFigures:
        with self.lock:
            if self.figures is None or gauge in self.served:
                self.figures = self.read() if self.read is not None else IndexFigures()
                self.served = set()
            self.served.add(gauge)
            return self.figures


class ServiceMetrics:
    """The server's figures. Each is recorded once, into the OpenTelemetry instruments of ``rag.core.observe``
    (``instruments``, which the answer service records into too) or the server's own (``server``), which the
    process's exporters send as telemetry says and a Prometheus reader renders for
    /metrics. The index and source gauges are observable gauges of the same meter: read from the indexes
    (``watch``) whenever /metrics is scraped or the metrics are exported. Build it with ``service_metrics``."""

    def __init__(self, registry: CollectorRegistry, provider: MeterProvider) -> None:
        self.registry = registry
        meter = provider.get_meter(observe.SCOPE)
        self.instruments = observe.instruments(meter)
        self.server = server_instruments(meter)
        self.server.queue_depth.set(0)  # /metrics has the queue from the start
        self._reading = _Reading()
        gauges: list[tuple[str, str, str, Callable[[IndexFigures], Iterator[Observation]]]] = [
            ("rag.index.documents", "{document}", "Documents in the index",
             lambda f: iter([Observation(f.index[1], {"index": f.index[0]})] if f.index else [])),
            ("rag.index.chunks", "{chunk}", "Chunks in the index",
             lambda f: iter([Observation(f.index[2], {"index": f.index[0]})] if f.index else [])),
            # Watched folders (ingest.sources), labelled by source id, not path.
            ("rag.source.last_sync_timestamp", "s", "When the source's last sync started (Unix time)",
             lambda f: _last_syncs(f, lambda last: datetime.fromisoformat(last.started_at).timestamp())),
            ("rag.source.last_sync_duration", "s", "How long the source's last sync took",
             lambda f: _last_syncs(f, lambda last: last.seconds)),
            ("rag.source.last_sync_files", "{file}", "Files of the source's last sync, by outcome",
             _sync_files),
            ("rag.source.last_sync_ok", "1", "1 if the source's last sync read its folder and every file, 0 if "
             "a file failed or the folder could not be read", lambda f: _last_syncs(f, lambda last: int(
                 last.status == "ok"))),
            ("rag.source.next_sync_timestamp", "s", "When the server syncs the scheduled source next (Unix "
             "time; 0: never synced, due now)", _next_syncs),
        ]
        for name, unit, description, observations in gauges:
            meter.create_observable_gauge(name, [self._callback(name, observations)], unit=unit,
                                          description=description)
        # Requests in flight, by (method, scheme): counted by the event loop as plain numbers, observed when
        # collected (two SDK measurements per request, each into both readers, cost more than the request's one).
        self._in_flight: dict[tuple[str, str], int] = {}
        self._in_flight_lock = threading.Lock()
        meter.create_observable_up_down_counter("http.server.active_requests", [self._observe_in_flight],
                                                unit="{request}", description="HTTP server requests in flight")

    def _callback(self, name: str, observations: Callable[[IndexFigures], Iterator[Observation]]
                  ) -> Callable[[CallbackOptions], Iterator[Observation]]:
        return lambda _options: observations(self._reading.get(name))

    def watch(self, read: Callable[[], IndexFigures]) -> None:
        """Where the index and source gauges read from (blocking reads: a collection runs off the event loop)."""
        self._reading.read = read

    def freeze(self) -> None:
        """Read the indexes one last time and report that from now on (the indexes are about to close; the
        export at shutdown still has the gauges)."""
        read = self._reading.read
        if read is None:
            return
        try:
            figures = read()
        except Exception as exc:  # noqa: BLE001 - stopping the server must not fail on a figure
            logging.getLogger("rag.api").warning("metrics: cannot read the indexes at shutdown: %s", exc)
            figures = IndexFigures()
        self._reading.read = lambda: figures

    def request(self, method: str, route: str | None, status: int, scheme: str, http_version: str,
                seconds: float) -> None:
        """An HTTP request answered (HTTP semantic conventions); its count is ``rag_requests_total``."""
        attributes: dict[str, str | int] = {
            HTTP_METHOD: http_method(method), URL_SCHEME: scheme, HTTP_STATUS: status, PROTOCOL_VERSION: http_version}
        if route:
            attributes[HTTP_ROUTE] = route
        if status >= 500:
            attributes[observe.ERROR_TYPE] = str(status)
        self.server.http_duration.record(seconds, attributes)

    def active(self, method: str, scheme: str, change: int) -> None:
        """A request began (+1) or ended (-1)."""
        key = (http_method(method), scheme)
        with self._in_flight_lock:
            self._in_flight[key] = self._in_flight.get(key, 0) + change

    def _observe_in_flight(self, _options: CallbackOptions) -> Iterator[Observation]:
        with self._in_flight_lock:
            counts = list(self._in_flight.items())
        for (method, scheme), count in counts:
            yield Observation(count, {HTTP_METHOD: method, URL_SCHEME: scheme})

    def queue(self, depth: int) -> None:
        """Generations queued or running."""
        self.server.queue_depth.set(depth)

    def rejected(self, error_type: str) -> None:
        """A request refused with 503 (queue full, models not loaded)."""
        self.server.rejected.add(1, {observe.ERROR_TYPE: error_type})

    def observe_answer(self, ttft_ms: float, total_ms: float, output_tokens: int) -> None:
        """An answer's times (its tokens are in ``gen_ai.client.token.usage``, recorded as it was generated)."""
        if output_tokens:
            self.server.answer_ttft.record(ttft_ms / 1000)
        self.server.answer_duration.record(total_ms / 1000)

    def render(self) -> bytes:
        """/metrics (blocking: the gauges read the indexes)."""
        return generate_latest(self.registry)


def http_method(method: str) -> str:
    """The method as the HTTP conventions record it: a method outside the standard ones is ``_OTHER``."""
    return method if method in HTTP_METHODS else "_OTHER"


def _last_syncs(figures: IndexFigures, value: Callable[[LastSync], float | int]) -> Iterator[Observation]:
    for index, source in figures.sources:
        if source.last is not None:
            yield Observation(value(source.last), {"index": index, "source": source.id})


def _sync_files(figures: IndexFigures) -> Iterator[Observation]:
    for index, source in figures.sources:
        if source.last is not None:
            for outcome in SYNC_OUTCOMES:
                yield Observation(getattr(source.last, outcome), {"index": index, "source": source.id,
                                                                 "outcome": outcome})


def _next_syncs(figures: IndexFigures) -> Iterator[Observation]:
    for index, source in figures.sources:
        when = next_sync(source)
        if when is not None:
            yield Observation(when, {"index": index, "source": source.id})


def every_source(store: Store) -> tuple[tuple[str, Source], ...]:
    """(index name, source) for every source of every index of ``store`` (blocking reads). An index (or a
    store) that cannot be read right now is left out of this reading."""
    found: list[tuple[str, Source]] = []
    try:
        names = store.names()
    except RagError:
        return ()
    for name in names:
        try:
            found += [(name, source) for source in index_sources(store.index(name))]
        except RagError:
            continue
    return tuple(found)


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
        line = getattr(record, "json_line", None)
        if line is None:  # formatted once for every handler of it (stderr and log_file)
            line = record.json_line = self._format(record)
        return line

    def _format(self, record: logging.LogRecord) -> str:
        entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
                 "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        entry.update(getattr(record, "fields", {}))
        span = trace.get_current_span().get_span_context()
        if span.is_valid:  # the same ids as the OpenTelemetry spans and log records (docs/telemetry.md, "Telemetry")
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
