"""Answers as the application gives them: the answer service's stream with the serving metrics recorded (the
tokens of a stream closed early too) and one audit record per answer or retrieval; the models load after the
server starts, and until they have, every answer is a 503 that says so."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import AsyncIterator, Protocol, Sequence

from app.services.audit import Auditor
from rag.answering.result import AnswerResult
from rag.answering.retrieval import Retrieval
from rag.answering.service import AnswerRequest, AnswerService
from rag.core import observe
from rag.core.access import RequestContext
from rag.core.errors import ModelError, RagError
from rag.core.names import IndexName
from rag.embedder import Embedder
from rag.generation.base import Generator
from rag.generation.scheduler import GenerationScheduler


class AnswerMetrics(Protocol):
    """What the serving metrics record of answers (``api.telemetry.ServiceMetrics``); ``instruments``: those
    the answer service records into."""

    instruments: observe.Instruments

    def queue(self, depth: int) -> None: ...
    def rejected(self, error_type: str) -> None: ...
    def observe_answer(self, ttft_ms: float, total_ms: float, output_tokens: int) -> None: ...


@dataclass(frozen=True)
class Answering:
    """What answers, once the models are loaded (built by ``app.runtime.load_answering``)."""

    service: AnswerService
    embedder: Embedder
    generator: Generator  # the model itself (a LocalGenerator, or a RemoteGenerator with ``generator_url``)
    scheduler: GenerationScheduler | None  # the local model's turns; a remote server queues its own


@dataclass
class Answers:
    metrics: AnswerMetrics
    audit: Auditor
    status: str = "loading"  # loading | ready | failed
    error: str | None = None
    loaded: Answering | None = None  # None while loading (or after a failed load)

    def ready_with(self, answering: Answering) -> None:
        self.loaded, self.status = answering, "ready"

    def failed(self, message: str) -> None:
        self.status, self.error = "failed", message

    def ready(self) -> Answering:
        """What answers; a ``ModelError`` (503) while the models load or when loading them failed."""
        if self.status != "ready" or self.loaded is None:
            raise ModelError(self.error or "models are still loading")
        return self.loaded

    def embedder(self) -> Embedder:
        return self.ready().embedder

    @property
    def queue_depth(self) -> int:
        scheduler = self.loaded.scheduler if self.loaded is not None else None
        return scheduler.depth if scheduler is not None else 0

    def forget(self, index: str | None) -> None:
        """Let go of the retrievers of ``index`` (None: of every index deleted meanwhile)."""
        if self.loaded is not None:
            self.loaded.service.forget(index)

    # ------------------------------------------------------------------ answers, observed and audited
    async def events(self, request: AnswerRequest, context: RequestContext,
                     route: str) -> AsyncIterator[str | AnswerResult]:
        """The answer service's stream for ``context``'s principal (the asker travels with the request to
        retrieval: their document groups), with the metrics recorded and one audit record."""
        started = time.perf_counter()
        result: AnswerResult | None = None
        error: RagError | None = None
        request = dataclasses.replace(request, context=context)
        try:
            async for item in self._observed(request):
                if isinstance(item, AnswerResult):
                    result = item
                yield item
        except RagError as exc:
            error = exc
            if exc.status_code == 503:
                self.metrics.rejected(exc.error_type)
            raise
        finally:
            self.audit.record_answer(context, route, str(request.index or ""), request.question, result, error,
                                     started)

    async def _observed(self, request: AnswerRequest) -> AsyncIterator[str | AnswerResult]:
        service = self.ready().service
        self.metrics.queue(self.queue_depth + 1)
        stream = service.stream(request)  # its tokens, a stream closed early's too, go to gen_ai.client.token.usage
        try:
            async for item in stream:
                if isinstance(item, AnswerResult):
                    self.metrics.observe_answer(item.metrics.ttft_ms, item.metrics.total_ms,
                                                item.metrics.output_tokens)
                yield item
        finally:
            await stream.aclose()
            self.metrics.queue(self.queue_depth)

    def retrieve(self, context: RequestContext, query: str, index: IndexName, top_k: int | None,
                 documents: Sequence[str] | None, route: str) -> Retrieval:
        """Retrieval alone, as ``context``'s principal may see the index, with one audit record."""
        retrieval = self.ready().service.retrieve(query, index, top_k, documents, context)
        self.audit.record(context, "retrieve", route=route, index=index.value, **self.audit.question(query),
                          retrieved=[{"chunk_id": h.chunk.id, "document_id": h.chunk.doc_id,
                                      "score": round(h.score, 5)} for h in retrieval.hits], outcome="retrieved")
        return retrieval

    def close(self) -> None:
        if self.loaded is not None:
            if self.loaded.scheduler is not None:
                self.loaded.scheduler.close()
            self.loaded.service.close()
