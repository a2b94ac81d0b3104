"""The ``chat {model}`` span and GenAI metrics of one generation (docs/telemetry.md, "Telemetry")."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

from rag.core import observe
from rag.generation.base import GenerationStats, Generator, Message, SamplingOptions


class ChatTrace:
    """Opened before the first token is asked for, ended once generation stops (however it stops): INTERNAL for
    the local model, CLIENT for a ``generator_url`` (whose request then carries this span's traceparent)."""

    def __init__(self, generator: Generator, sampling: SamplingOptions, messages: Sequence[Message],
                 instruments: observe.Instruments, capture_content: bool) -> None:
        remote = generator.remote
        self.model = generator.model_id
        self.capture_content = capture_content
        self.instruments = instruments
        self.metric = {observe.OPERATION: "chat", observe.REQUEST_MODEL: self.model,
                       observe.PROVIDER: observe.REMOTE_PROVIDER if remote else observe.LOCAL_PROVIDER}
        attributes: dict[str, Any] = {
            **self.metric, observe.REQUEST_TEMPERATURE: sampling.temperature,
            observe.REQUEST_MAX_TOKENS: sampling.max_tokens, observe.REQUEST_TOP_P: sampling.top_p,
            observe.REQUEST_STREAM: True,
            "rag.constrained_spans": len(sampling.spans)}
        if remote:
            attributes.update(observe.server_attributes(generator.url))
        if capture_content:
            attributes[observe.INPUT_MESSAGES] = observe.messages_attribute(messages)
        self.span = observe.tracer().start_span(f"chat {self.model}", attributes=attributes,
                                                kind=observe.SpanKind.CLIENT if remote else observe.SpanKind.INTERNAL)
        self.started = time.perf_counter()
        self.first: float | None = None

    def current(self) -> Any:
        """``with trace.current()``: the span is the parent of what runs inside (the remote request)."""
        return observe.current(self.span)

    def chunk(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def end(self, stats: GenerationStats, reply: str, error: BaseException | None = None) -> None:
        ended = time.perf_counter()
        span = self.span
        if span.is_recording():
            span.set_attributes({
                observe.RESPONSE_MODEL: self.model, observe.INPUT_TOKENS: stats.prompt_tokens,
                observe.OUTPUT_TOKENS: stats.output_tokens, observe.CACHE_READ_TOKENS: stats.cached_tokens,
                observe.FINISH_REASONS: [stats.finish_reason]})
            if self.first is not None:
                span.set_attribute(observe.TIME_TO_FIRST_CHUNK, round(self.first - self.started, 6))
            if self.capture_content:
                span.set_attribute(observe.OUTPUT_MESSAGES,
                                   observe.messages_attribute([{"role": "assistant", "content": reply}]))
            if error is not None:
                observe.fail(span, "cancelled" if isinstance(error, (GeneratorExit, asyncio.CancelledError))
                             else error)
        span.end()
        self.instruments.token_usage.record(stats.prompt_tokens, {**self.metric, observe.TOKEN_TYPE: "input"})
        self.instruments.token_usage.record(stats.output_tokens, {**self.metric, observe.TOKEN_TYPE: "output"})
        self.instruments.operation_duration.record(ended - self.started, self.metric)
        if self.first is not None:
            self.instruments.time_to_first_chunk.record(self.first - self.started, self.metric)
