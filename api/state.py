"""What the HTTP front end holds for its lifetime: the application's ``Services`` (built whole by the
composition root, ``app.runtime``), the authenticator and the serving metrics. Routes receive them as typed
dependencies: ``services: ServicesDep`` and ``server: ServerDep``."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.di import NamedDependency
from litestar.params import SkipValidation

from api.auth import Authenticator
from api.telemetry import IndexFigures, ServiceMetrics, every_source
from app.runtime import generation_backend, open_services
from app.services import Services
from rag.core.access import RequestContext
from rag.core.errors import RagError
from rag.core.settings import Settings


@dataclass(frozen=True)
class ServerState:
    settings: Settings
    metrics: ServiceMetrics
    services: Services
    auth: Authenticator

    @classmethod
    def open(cls, settings: Settings, metrics: ServiceMetrics) -> "ServerState":
        services = open_services(settings, metrics)
        server = cls(settings, metrics, services, Authenticator.from_settings(settings, services.keys.store))
        metrics.watch(server.index_figures)
        return server

    def index_figures(self) -> IndexFigures:
        """What the index and source gauges report (blocking reads): the default index's totals as an operator
        sees them (metrics need a key), and every source of every index; what cannot be read now is left out."""
        documents = self.services.documents
        try:
            summary: tuple[str, int, int] | None = documents.summary(documents.default(), RequestContext.local())
        except RagError:
            summary = None
        return IndexFigures(summary, every_source(documents.store))

    @property
    def backend(self) -> tuple[str, str | None]:
        """The generation backend's name, and the host of a remote one."""
        return generation_backend(self.settings)

    def close(self) -> None:
        self.metrics.freeze()  # the metrics exported at shutdown, after the store closed, have the last reading
        self.services.close()


# Handed over as they are: Litestar would otherwise try to convert them field by field, as if from a request.
ServicesDep = NamedDependency[SkipValidation[Services]]  # a route's parameter ``services: ServicesDep``
ServerDep = NamedDependency[SkipValidation[ServerState]]  # ``server: ServerDep`` (health, metrics, who am I)
