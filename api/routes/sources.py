"""/v1/sources: the folders an index follows (`rag sources add`), their last sync, and "sync now"."""

from __future__ import annotations

import anyio.to_thread
import msgspec
from litestar import Controller, get, post
from litestar.datastructures import State
from litestar.params import FromPath

from api.auth import Context
from api.openapi import errors
from api.protocol import SourceList, SourceStatus
from api.routes.documents import IndexQuery
from api.state import AppState
from ingest.formats.options import LoadOptions
from ingest.sources import Source, find_source, index_sources, sync_source
from rag.core.errors import RagError


def status(source: Source) -> SourceStatus:
    return msgspec.convert(source.summary(), SourceStatus)


class SourcesController(Controller):
    path = "/v1/sources"
    tags = ["documents"]

    @get("", summary="Folders the index follows, with how their last sync went (editors)",
         responses=errors(400, 404))
    async def list_sources(self, state: State, context: Context, index: IndexQuery = None) -> SourceList:
        app: AppState = state.app
        target = app.index(app.authorize(context, index, "editor", "/v1/sources"))
        sources = await anyio.to_thread.run_sync(index_sources, target)
        return SourceList(index=target.name, sources=[status(s) for s in sources])

    @post("/{source_id:str}/sync", status_code=200, responses=errors(400, 404, 409),
          summary="Sync a source now: new and changed files in, deleted ones out (400 when its folder cannot be "
                  "read: nothing is removed then)")
    async def sync_now(self, state: State, context: Context, source_id: FromPath[str],
                       index: IndexQuery = None) -> SourceStatus:
        app: AppState = state.app
        target = app.index(app.authorize(context, index, "editor", "/v1/sources/{source_id}/sync"))
        models = app.require_ready()
        settings = app.settings
        try:
            source = find_source(await anyio.to_thread.run_sync(index_sources, target), source_id)
            summary = await anyio.to_thread.run_sync(
                lambda: sync_source(target, source, models.embedder, settings.chunk_tokens, settings.chunk_overlap,
                                    load_options=LoadOptions.from_settings(settings)))
        except RagError as exc:
            app.record(context, "sync", route="/v1/sources/{source_id}/sync", index=target.name, outcome="error",
                       error=exc.error_type)
            raise
        last = summary.source.last
        app.record(context, "sync", route="/v1/sources/{source_id}/sync", index=target.name, source=source.id,
                   outcome=last.status if last else "ok", added=summary.ingest.count("added"),
                   updated=summary.ingest.count("updated"), removed=len(summary.removed),
                   renamed=len(summary.renamed))
        return status(summary.source)

