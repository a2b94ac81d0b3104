"""What the stages record for OpenTelemetry: span names and attributes (the GenAI semantic conventions) and the
metric instruments every floor records into, through the OpenTelemetry *API* only (the server's own HTTP and
answer instruments are api.telemetry's).

The stages (retrieval, generation, ingest) call ``tracer()`` and ``instruments()``; without a configured SDK
(library use, tests) these are OpenTelemetry's no-ops. ``rag.telemetry`` installs the SDK and its exporters once
per process, from settings, before any request is served; a server's process always has a meter provider, whose
Prometheus reader renders the same instruments as ``/metrics`` (api.telemetry).
"""

from __future__ import annotations

import asyncio
import functools
import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

SCOPE = "rag"

# GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/), development status:
# OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental opts in (rag.telemetry sets it).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_TOP_K = "gen_ai.request.top_k"
REQUEST_STREAM = "gen_ai.request.stream"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
DATA_SOURCE = "gen_ai.data_source.id"
QUERY_TEXT = "gen_ai.retrieval.query.text"
RETRIEVED_DOCUMENTS = "gen_ai.retrieval.documents"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
DIMENSIONS = "gen_ai.embeddings.dimension.count"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
LOCAL_PROVIDER = "onnxruntime_genai"  # no registered value for a local ORT GenAI model
REMOTE_PROVIDER = "openai"  # a generator_url speaks the OpenAI chat completions protocol


def tracer() -> trace.Tracer:
    """The process's tracer, got once per tracer provider (the SDK's ``get_tracer`` builds a new tracer, under
    a warnings filter, on every call: it was a third of what starting a span cost)."""
    return _tracer_of(trace.get_tracer_provider())


@functools.lru_cache(maxsize=8)
def _tracer_of(provider: trace.TracerProvider) -> trace.Tracer:
    return provider.get_tracer(SCOPE)


@contextmanager
def start_span(name: str, attributes: Mapping[str, Any] | None = None,
               kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span]:
    """``with start_span(...) as span``: a child of the current span; an exception escaping it sets the span's
    ``error.type`` (its error type or class name) and ERROR status, and is re-raised. What a span gets after
    it started is worth computing only when ``span.is_recording()`` (telemetry off: never)."""
    with tracer().start_as_current_span(name, kind=kind, attributes=attributes, record_exception=False,
                                        set_status_on_exception=False) as span:
        try:
            yield span
        except SystemExit as exc:  # a command's exit: only a failing code is an error
            if exc.code not in (0, None):
                fail(span, f"exit_{exc.code}")
            raise
        except BaseException as exc:
            fail(span, "cancelled" if isinstance(exc, (GeneratorExit, asyncio.CancelledError)) else exc)
            raise


def embeddings_span(model: str, inputs: int, **attributes: Any) -> Any:
    """``with embeddings_span(...)``: one call of the local embedder (query or ingest batch)."""
    return start_span(f"embeddings {model}", {OPERATION: "embeddings", REQUEST_MODEL: model, PROVIDER: "onnxruntime",
                                              "rag.embeddings.inputs": inputs, **attributes})


def current(span: Span) -> Any:
    """``with current(span)``: make an open span the parent of what runs inside, without ending it after."""
    return trace.use_span(span, end_on_exit=False)


def carried() -> Any:
    """The current trace context, to continue in another thread (``continued``): a job started by a request
    stays in that request's trace."""
    return otel_context.get_current()


@contextmanager
def continued(context: Any) -> Iterator[None]:
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def trace_headers() -> dict[str, str]:
    """W3C ``traceparent`` (and ``tracestate``) of the current span, for a call to another service."""
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


def fail(span: Span, error: BaseException | str) -> None:
    """Mark a span failed: ``error.type`` (the exception's class, or a reason code) and an ERROR status."""
    kind = error if isinstance(error, str) else getattr(error, "error_type", None) or type(error).__name__
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, str(error)[:200] if not isinstance(error, str) else None))


def server_attributes(url: str) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of a CLIENT span calling ``url``."""
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    return {SERVER_ADDRESS: parts.hostname,
            SERVER_PORT: parts.port or (443 if parts.scheme == "https" else 80)}


def record_outcome(abstained: bool, reason: str | None, citations: int, verified_quotes: int) -> None:
    """The answer's outcome on the span it was asked in (the request's server span, or the CLI's command)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attributes({"rag.answer.abstained": abstained, "rag.answer.citations": citations,
                         "rag.answer.verified_quotes": verified_quotes})
    if reason:
        span.set_attribute("rag.answer.abstain_reason", reason)


def documents_attribute(hits: Iterable[tuple[int | str, float]]) -> str:
    """``gen_ai.retrieval.documents``: the retrieved ``[{"id", "score"}]`` as a JSON string."""
    return json.dumps([{"id": chunk_id, "score": round(score, 5)} for chunk_id, score in hits])


def messages_attribute(messages: Iterable[Mapping[str, str]]) -> str:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` as the conventions' JSON (role + text parts)."""
    return json.dumps([{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]}
                       for m in messages])


# Each figure is recorded once, in one of these instruments (or the server's, api.telemetry); the OTLP exporters
# and the server's /metrics read them alike. The product's own figures are named so that the
# OpenTelemetry-to-Prometheus translation (dots to underscores, the unit as a suffix, ``_total`` on counters)
# gives the /metrics names they have always had, which is also what a Prometheus fed over OTLP stores.
GENAI_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
RETRIEVAL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]


@dataclass(frozen=True)
class Instruments:
    """The metric instruments every figure is recorded in (OpenTelemetry no-ops without an SDK)."""

    token_usage: metrics.Histogram
    operation_duration: metrics.Histogram
    time_to_first_chunk: metrics.Histogram
    retrieval_duration: metrics.Histogram
    ingest_files: metrics.Counter
    ingest_chunks: metrics.Counter
    ocr_pages: metrics.Counter


def instruments(meter: metrics.Meter | None = None) -> Instruments:
    """The instruments of ``meter`` (default: the process's); the SDK gives the same instrument for a name again."""
    meter = meter or metrics.get_meter(SCOPE)
    return Instruments(
        token_usage=meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per operation, by token type",
            explicit_bucket_boundaries_advisory=[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0]),
        operation_duration=meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=GENAI_DURATION_BUCKETS),
        time_to_first_chunk=meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", unit="s",
            description="Time from the request to the first generated chunk",
            explicit_bucket_boundaries_advisory=GENAI_DURATION_BUCKETS),
        retrieval_duration=meter.create_histogram(
            "rag.retrieval.duration", unit="s", description="Query embedding and hybrid search",
            explicit_bucket_boundaries_advisory=RETRIEVAL_BUCKETS),
        ingest_files=meter.create_counter("rag.ingest.files", unit="{file}", description="Files ingested, by outcome"),
        ingest_chunks=meter.create_counter("rag.ingest.chunks", unit="{chunk}", description="Chunks written"),
        ocr_pages=meter.create_counter("rag.ingest.ocr_pages", unit="{page}", description="Pages read by OCR"),
    )
