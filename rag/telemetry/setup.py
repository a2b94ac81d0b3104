"""One process's OpenTelemetry SDK: traces, metrics and logs, to OTLP JSON Lines files or an OTLP/HTTP collector.

Exporting happens on the SDK's background threads (batch span and log processors, a periodic metric reader),
so a request never waits on a disk or a collector; a failing exporter is logged once and its data dropped.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Sequence

from opentelemetry import metrics, trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from rag.core.settings import Settings
from rag.telemetry.files import RotatingLines

SIGNALS = ("traces", "metrics", "logs")
# The GenAI conventions are in development: instrumentations emit their latest form only when opted in; the
# HTTP server span follows the stable HTTP conventions (http.request.method, url.path, http.response.status_code).
SEMCONV_OPT_IN = "gen_ai_latest_experimental,http"
METRIC_INTERVAL_MS = 30_000
EXPORT_TIMEOUT_S = 5.0  # a collector that does not answer holds an exporter thread this long, never a request
SERVICE_NAME = "offline-rag"


@dataclass
class Telemetry:
    """The providers this process installed; ``shutdown`` flushes what is pending and stops the exporters.
    With ``telemetry = "off"`` and readers of the process's own, only the meter provider (no traces, no logs)."""

    meter_provider: MeterProvider
    tracer_provider: TracerProvider | None = None
    logger_provider: LoggerProvider | None = None
    handler: logging.Handler | None = None
    streams: list[RotatingLines] = field(default_factory=list)

    @property
    def tracing(self) -> bool:
        return self.tracer_provider is not None

    def flush(self) -> None:
        for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
            if provider is not None:
                provider.force_flush()

    def shutdown(self) -> None:
        if self.handler is not None:
            logging.getLogger().removeHandler(self.handler)
        for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
            if provider is None:
                continue
            try:
                provider.shutdown()
            except Exception as exc:  # noqa: BLE001 - stopping telemetry must never fail the caller
                logging.getLogger("rag.telemetry").warning("telemetry: shutdown failed: %s", exc)
        for stream in self.streams:
            stream.close()


class _Once(logging.Filter):
    """The SDK's exporters log each failed export; an unreachable collector is worth one line, not one a second.
    One line per exporter and level: an exporter fails with either of two messages ("… batch code: …" or "… due to
    timeout, max retries or shutdown."), and on a loaded machine one exporter gave both."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, Any]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


class _StructuredHandler(LoggingHandler):
    """Log records as OTLP logs; the product's ``fields`` (see api.telemetry) become attributes."""

    def _get_attributes(self, record: logging.LogRecord):  # type: ignore[no-untyped-def]
        attributes, event = super()._get_attributes(record)
        attributes.pop("json_line", None)  # the JSON log line api.telemetry formatted it into, kept on it
        fields = attributes.pop("fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                attributes[str(key)] = value if isinstance(value, (str, bool, int, float)) else str(value)
        return attributes, event


def _not_telemetry(record: logging.LogRecord) -> bool:
    """Telemetry's own warnings stay out of the telemetry logs (a failing exporter would feed itself)."""
    return not record.name.startswith(("opentelemetry", "rag.telemetry"))


def resource_for(component: str) -> Resource:
    try:
        release = version("offline-rag")
    except PackageNotFoundError:
        release = "unknown"
    return Resource.create({"service.name": SERVICE_NAME, "service.version": release,
                            "service.instance.id": f"{socket.gethostname()}-{os.getpid()}",
                            "rag.component": component})


def start_telemetry(settings: Settings, component: str, capture_logs: bool = True,
                    metric_readers: Sequence[MetricReader] = ()) -> Telemetry | None:
    """Install the SDK for this process as ``settings.telemetry`` says (None when "off"). ``component``: "api",
    "cli", ... (a resource attribute). ``capture_logs``: send the process's log records too (the server's JSON
    logs; a CLI command's warnings stay on its stderr). ``metric_readers``: the process's own readers of the
    same instruments beside the exporters (the server's /metrics); with them the process gets its meter provider
    even when "off". Call once per process, before serving."""
    if settings.telemetry == "off":
        if not metric_readers:
            return None
        meter_provider = MeterProvider(resource=resource_for(component), metric_readers=list(metric_readers))
        metrics.set_meter_provider(meter_provider)
        return Telemetry(meter_provider)
    os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", SEMCONV_OPT_IN)
    streams: list[RotatingLines] = []
    if settings.telemetry == "file":
        # lazy: only the exporter the telemetry setting picks is loaded (~0.1 s each)
        from opentelemetry.exporter.otlp.json.file import FileMetricExporter, FileSpanExporter
        from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter

        folder = settings.telemetry_path
        streams = [RotatingLines(folder / f"{signal}.jsonl", settings.telemetry_max_mb * 1024 * 1024,
                                 settings.telemetry_files) for signal in SIGNALS]
        span_exporter: Any = FileSpanExporter(stream=streams[0])
        metric_exporter: Any = FileMetricExporter(stream=streams[1])
        log_exporter: Any = FileLogExporter(stream=streams[2])
    else:
        # lazy: only the exporter the telemetry setting picks is loaded (~0.1 s each)
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        base = settings.otlp_endpoint.rstrip("/")
        span_exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=EXPORT_TIMEOUT_S)
        metric_exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics", timeout=EXPORT_TIMEOUT_S)
        log_exporter = OTLPLogExporter(endpoint=f"{base}/v1/logs", timeout=EXPORT_TIMEOUT_S)
    once = _Once()  # logger filters do not reach child loggers: each exporter's own logger gets it
    for name in {type(e).__module__ for e in (span_exporter, metric_exporter, log_exporter)} | {
            "opentelemetry.exporter.otlp.proto.http._common", "opentelemetry.exporter.otlp.json.file._internal"}:
        logging.getLogger(name).addFilter(once)
    resource = resource_for(component)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter, schedule_delay_millis=1000))
    meter_provider = MeterProvider(resource=resource, metric_readers=[
        PeriodicExportingMetricReader(metric_exporter, export_interval_millis=METRIC_INTERVAL_MS), *metric_readers])
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter, schedule_delay_millis=1000))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    set_logger_provider(logger_provider)
    handler = _StructuredHandler(level=logging.INFO, logger_provider=logger_provider)
    handler.addFilter(_not_telemetry)
    if capture_logs:
        logging.getLogger().addHandler(handler)
    return Telemetry(meter_provider, tracer_provider, logger_provider, handler, streams)
