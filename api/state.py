"""What the app holds for its lifetime: settings, loaded models, the generation scheduler, metrics."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from api.observability import ServiceMetrics
from ingest.store import IndexReader, validate_index_name
from rag.answer import AnswerService
from rag.errors import ModelError
from rag.retrieval import Retriever
from rag.runtime import Models
from rag.scheduler import GenerationScheduler
from rag.settings import Settings

log = logging.getLogger("rag.api")


@dataclass
class AppState:
    settings: Settings
    metrics: ServiceMetrics
    status: str = "loading"  # loading | ready | failed
    error: str | None = None
    models: Models | None = None
    scheduler: GenerationScheduler | None = None
    _services: dict[str, AnswerService] = field(default_factory=dict)
    _uploads_locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def load(self) -> None:
        """Load models once (called from the lifespan, off the event loop)."""
        try:
            self.models = Models.load(self.settings)
            self.scheduler = GenerationScheduler(self.models.generator, self.settings.max_queue)
            self.models.warm_up()
            self.status = "ready"
        except ModelError as exc:
            self.status, self.error = "failed", exc.message
        except Exception as exc:  # noqa: BLE001 - it runs in a background thread: report it on /healthz
            log.exception("loading the models failed")
            self.status, self.error = "failed", f"loading the models failed: {exc}"

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
        for service in self._services.values():
            if service.retriever is not None:
                service.retriever.reader.close()

    def require_ready(self) -> Models:
        if self.status != "ready" or self.models is None:
            raise ModelError(self.error or "models are still loading")
        return self.models

    def uploads_lock(self, index: str) -> threading.Lock:
        """Serialises the uploads of one index (they move stored files before the index lock is taken)."""
        with self._lock:
            return self._uploads_locks.setdefault(index, threading.Lock())

    def index_name(self, name: str | None) -> str:
        return validate_index_name(name or self.settings.index)

    def index_root(self, name: str | None) -> Path:
        return self.settings.index_path(self.index_name(name))

    def plain_service(self) -> AnswerService:
        """Chat without retrieval (``use_context: false``): the generator only, no index."""
        models = self.require_ready()
        with self._lock:
            if "" not in self._services:
                self._services[""] = AnswerService(None, models.embedder, models.generator,
                                                   self.settings.max_question_tokens)
            return self._services[""]

    def service(self, index: str | None) -> AnswerService:
        """The answer service of an index (readers follow new commits by themselves)."""
        models = self.require_ready()
        name = self.index_name(index)
        with self._lock:
            if name not in self._services:
                reader = IndexReader(self.settings.index_path(name))
                self._services[name] = AnswerService(Retriever(reader, models.embedder), models.embedder,
                                                     models.generator, self.settings.max_question_tokens)
            return self._services[name]
