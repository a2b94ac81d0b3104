"""/healthz and /metrics."""

from __future__ import annotations

import anyio.to_thread
from litestar import Controller, Response, get
from litestar.datastructures import State

from api.auth import Context, authorize_all
from api.openapi import HEALTH_RESPONSES, errors
from api.protocol import HealthResponse, IndexSummary
from api.state import AppState
from rag.core.access import RequestContext
from rag.core.errors import ForbiddenError
from rag.generation.ort import provider_facts
from rag.store import store_kind


def index_summary(app: AppState, context: RequestContext) -> IndexSummary | None:
    """The default index as the caller sees it; None (left out) for a caller without a role there: its name and
    size are no business of an anonymous load balancer's or of a key for other indexes (issue 34)."""
    # A caller with no role anywhere (a load balancer's probe) is answered before the store resolves the name.
    if app.store is None or not context.principal.roles or context.principal.role_for(app.index(None).name) is None:
        return None
    name, documents, chunks = app.summary(None, context)
    return IndexSummary(name=name, documents=documents, chunks=chunks)


class HealthController(Controller):
    tags = ["operations"]

    @get("/healthz", summary="Liveness and readiness", exclude_from_auth=True, responses=HEALTH_RESPONSES)
    async def healthz(self, state: State, context: Context) -> Response[HealthResponse]:
        app: AppState = state.app
        backend, upstream = app.backend
        body = HealthResponse(
            status="ok" if app.status == "ready" else app.status, backend=backend,
            scheduler=app.scheduler.mode if app.scheduler else None,
            device=app.models.generator.device if app.models else app.settings.device,
            generator=app.models.generator.model_id if upstream and app.models else app.settings.generator_path.name,
            embedder=app.settings.embedder_path.name, index=index_summary(app, context), upstream=upstream,
            store=store_kind(app.settings),
            providers=None if upstream else list(provider_facts()["usable"]))  # a remote generator runs elsewhere
        if app.status != "ready":
            body.reason = app.error or "models are loading"
            return Response(body, status_code=503, headers={"Retry-After": "5"})
        return Response(body)

    @get("/metrics", summary="Prometheus metrics (an admin of every index who sees every document: the figures "
         "count every document and name every index)", media_type="text/plain; version=0.0.4", responses=errors())
    async def metrics(self, state: State, context: Context) -> bytes:
        app: AppState = state.app
        authorize_all(context, "admin")
        if not context.principal.unrestricted:
            raise ForbiddenError("the metrics count every document: they need an admin who sees every document "
                                 "(groups '*')")
        if app.scheduler is not None:
            app.metrics.queue(app.scheduler.depth)
        return await anyio.to_thread.run_sync(app.metrics.render)  # the index gauges read the indexes
