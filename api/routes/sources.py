"""/v1/sources: the folders an index follows (`rag sources add`), their last sync, and "sync now"."""

from __future__ import annotations

import anyio.to_thread
import msgspec
from litestar import Controller, Response, get, post
from litestar.openapi import ResponseSpec
from litestar.params import FromPath

from api.auth import Context
from api.jobs import accepted, finished
from api.openapi import errors
from api.protocol import JobStatus, SourceList, SourceStatus
from api.routes.documents import AsyncQuery, IndexQuery
from api.state import ServicesDep
from ingest.sources import Source, find_source


def status(source: Source) -> SourceStatus:
    return msgspec.convert(source.summary(), SourceStatus)


class SourcesController(Controller):
    path = "/v1/sources"
    tags = ["documents"]

    @get("", summary="Folders the index follows, with how their last sync went (editors)",
         responses=errors(400, 404))
    async def list_sources(self, services: ServicesDep, context: Context, index: IndexQuery = None) -> SourceList:
        target = services.documents.index(services.documents.authorized(context, index, "editor", "/v1/sources"))
        sources = await anyio.to_thread.run_sync(services.sources.visible, target, context)
        return SourceList(index=target.name, sources=[status(s) for s in sources])

    @post("/{source_id:str}/sync", status_code=200,
          responses={**errors(400, 404, 409, 503), 202: ResponseSpec(
              JobStatus, generate_examples=False, description="The sync goes on as a job (it took longer than "
                                                              "job_wait_s, or `async=true`): follow it at Location")},
          summary="Sync a source now: new and changed files in, deleted ones out (400 when its folder cannot be "
                  "read: nothing is removed then)")
    async def sync_now(self, services: ServicesDep, context: Context, source_id: FromPath[str],
                       index: IndexQuery = None, run_async: AsyncQuery = False) -> Response[SourceStatus]:
        target = services.documents.index(services.documents.authorized(context, index, "editor",
                                                                        "/v1/sources/{source_id}/sync"))
        services.answers.ready()  # the embedder: a 503 at once while the models load
        source = find_source(await anyio.to_thread.run_sync(services.sources.visible, target, context), source_id)
        running = await anyio.to_thread.run_sync(services.jobs.start_sync, target, source.id, context)
        if run_async or not await finished(running, services.settings.job_wait_s):
            return accepted(running.job, services.jobs)
        if running.error is not None:
            raise running.error
        return Response(status(running.result.source), status_code=200)
