"""What the app holds for its lifetime: settings, metrics, and once loaded, the models, the generation
scheduler and the one answer service (all built by the composition root, ``rag.runtime``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import AsyncIterator
from urllib.parse import urlsplit

from litestar.types import Receive

from api.observability import ServiceMetrics
from api.requests import cancel_on_disconnect
from ingest.store import Store, StoredIndex
from ingest.uploads import Uploads
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, AnswerService, final_result
from rag.core.errors import ModelError
from rag.core.names import validate_index_name
from rag.core.settings import Settings
from rag.generation.base import GenerationStats
from rag.generation.scheduler import GenerationScheduler
from rag.runtime import Models, answer_service, open_store, open_uploads

log = logging.getLogger("rag.api")


@dataclass
class AppState:
    settings: Settings
    metrics: ServiceMetrics
    status: str = "loading"  # loading | ready | failed
    error: str | None = None
    models: Models | None = None
    scheduler: GenerationScheduler | None = None
    answers: AnswerService | None = None
    store: Store | None = None
    uploads: Uploads | None = None

    def __post_init__(self) -> None:
        self.store = open_store(self.settings)
        self.uploads = open_uploads(self.settings)

    def load(self) -> None:
        """Load models once (called from the lifespan, off the event loop)."""
        try:
            self.models = Models.load(self.settings)
            local = self.models.local_generator
            # A remote generator (generator_url) queues and batches on its own server: no scheduler here.
            self.scheduler = GenerationScheduler(local, self.settings.max_queue) if local is not None else None
            self.models.warm_up()
            self.answers = answer_service(self.settings, self.models, generator=self.scheduler, store=self.store)
            self.status = "ready"
        except ModelError as exc:
            self.status, self.error = "failed", exc.message
        except Exception as exc:  # noqa: BLE001 - it runs in a background thread: report it on /healthz
            log.exception("loading the models failed")
            self.status, self.error = "failed", f"loading the models failed: {exc}"

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
        if self.answers is not None:
            self.answers.close()
        if self.store is not None:
            self.store.close()

    def service(self) -> AnswerService:
        if self.status != "ready" or self.answers is None:
            raise ModelError(self.error or "models are still loading")
        return self.answers

    def require_ready(self) -> Models:
        self.service()
        assert self.models is not None
        return self.models

    def index(self, name: str | None) -> StoredIndex:
        assert self.store is not None
        return self.store.index(validate_index_name(name or self.settings.index))

    # ------------------------------------------------------------------ answers, observed
    async def events(self, request: AnswerRequest) -> AsyncIterator[str | AnswerResult]:
        """The answer service's stream, with the server's metrics recorded (the tokens of a stream closed
        early too)."""
        service = self.service()
        depth = (lambda: self.scheduler.depth) if self.scheduler is not None else (lambda: 0)
        self.metrics.queue_depth.set(depth() + 1)
        stats = GenerationStats()
        stream = service.stream(request, stats)
        finished = False
        try:
            async for item in stream:
                if isinstance(item, AnswerResult):
                    self.metrics.observe_answer(item.metrics.ttft_ms, item.metrics.total_ms,
                                                item.metrics.output_tokens)
                    finished = True
                yield item
        finally:
            await stream.aclose()
            if not finished:
                self.metrics.tokens.inc(stats.output_tokens)
            self.metrics.queue_depth.set(depth())

    @property
    def backend(self) -> tuple[str, str | None]:
        """The generation backend's name, and the host of a remote one."""
        if self.settings.generator_url:
            return "openai-remote", urlsplit(self.settings.generator_url).netloc
        return "onnx-genai", None

    async def answer(self, request: AnswerRequest, receive: Receive | None = None) -> AnswerResult:
        """The whole answer; with the request's ASGI ``receive``, a client that disconnects cancels it."""
        work = final_result(self.events(request))
        return await (work if receive is None else cancel_on_disconnect(receive, work))
