"""/healthz and /metrics."""

from __future__ import annotations

import anyio.to_thread
from litestar import Controller, Response, get

from api.auth import Context
from api.openapi import HEALTH_RESPONSES, errors
from api.protocol import HealthResponse, IndexSummary
from api.state import ServerDep
from app.services import Services
from app.services.access import require_everywhere
from rag.core.access import RequestContext
from rag.core.errors import ForbiddenError
from rag.generation.ort import provider_facts
from rag.store import store_kind


def index_summary(services: Services, context: RequestContext) -> IndexSummary | None:
    """The default index as the caller sees it; None (left out) for a caller without a role there: its name and
    size are no business of an anonymous load balancer's or of a key for other indexes (issue 34)."""
    # A caller with no role anywhere (a load balancer's probe) is answered before the store resolves the name.
    if not context.principal.roles:
        return None
    default = services.documents.default()
    if context.principal.role_for(default.value) is None:
        return None
    name, documents, chunks = services.documents.summary(default, context)
    return IndexSummary(name=name, documents=documents, chunks=chunks)


class HealthController(Controller):
    tags = ["operations"]

    @get("/healthz", summary="Liveness and readiness", exclude_from_auth=True, responses=HEALTH_RESPONSES)
    async def healthz(self, server: ServerDep, context: Context) -> Response[HealthResponse]:
        settings, answers = server.settings, server.services.answers
        backend, upstream = server.backend
        loaded = answers.loaded
        body = HealthResponse(
            status="ok" if answers.status == "ready" else answers.status, backend=backend,
            scheduler=loaded.scheduler.mode if loaded and loaded.scheduler else None,
            device=loaded.generator.device if loaded else settings.device,
            generator=loaded.generator.model_id if upstream and loaded else settings.generator_path.name,
            embedder=settings.embedder_path.name, index=index_summary(server.services, context), upstream=upstream,
            store=store_kind(settings),
            providers=None if upstream else list(provider_facts()["usable"]))  # a remote generator runs elsewhere
        if answers.status != "ready":
            body.reason = answers.error or "models are loading"
            return Response(body, status_code=503, headers={"Retry-After": "5"})
        return Response(body)

    @get("/metrics", summary="Prometheus metrics (an admin of every index who sees every document: the figures "
         "count every document and name every index)", media_type="text/plain; version=0.0.4", responses=errors())
    async def metrics(self, server: ServerDep, context: Context) -> bytes:
        require_everywhere(context, "admin")
        if not context.principal.unrestricted:
            raise ForbiddenError("the metrics count every document: they need an admin who sees every document "
                                 "(groups '*')")
        loaded = server.services.answers.loaded
        if loaded is not None and loaded.scheduler is not None:
            server.metrics.queue(loaded.scheduler.depth)
        return await anyio.to_thread.run_sync(server.metrics.render)  # the index gauges read the indexes
