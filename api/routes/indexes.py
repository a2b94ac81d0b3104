"""/v1/indexes: the indexes in the store (for the web app's index picker), and deleting one (admins)."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from litestar import Controller, delete, get
from litestar.params import Parameter, QueryParameter

from api.auth import Context
from api.openapi import errors
from api.protocol import IndexDeleted, IndexList, IndexSummary
from api.state import ServicesDep
from rag.core.errors import ConfirmationRequiredError, ConflictError, ForbiddenError, IndexNotFoundError
from rag.core.names import INDEX_NAME_PATTERN, IndexName


class IndexesController(Controller):
    path = "/v1/indexes"
    tags = ["documents"]

    @get("", summary="Indexes on this server, with their document and chunk counts", responses=errors())
    async def list_indexes(self, services: ServicesDep, context: Context) -> IndexList:
        documents = services.documents
        indexes = []
        for name in documents.names():
            if context.principal.role_for(name) is None:  # an index the principal may not use is not listed
                continue
            try:
                name, count, chunks = documents.summary(IndexName(name), context)  # a name the store lists
            except IndexNotFoundError:  # deleted while the list was made
                continue
            indexes.append(IndexSummary(name=name, documents=count, chunks=chunks))
        default = documents.default().value  # named to a caller with a role there only, as on /healthz
        return IndexList(default=default if context.principal.role_for(default) is not None else None,
                         indexes=indexes)

    @delete("/{name:str}", status_code=200, summary="Delete an index and everything in it, its uploaded originals "
            "too (admins; `confirm` must repeat the index name, else 409 `confirmation_required` saying how big it is; 409 while a job of it runs; 409 `index_busy` when another process still holds it: it is deleted, its folder goes when that process lets go)", responses=errors(400, 404, 409))
    async def delete_index(self, services: ServicesDep, context: Context,
                           name: Annotated[str, Parameter(pattern=INDEX_NAME_PATTERN, description="the index")],
                           confirm: Annotated[str | None, QueryParameter(
                               description="the index name again: there is no undo")] = None) -> IndexDeleted:
        index = services.documents.authorized(context, name, "admin", "/v1/indexes/{name}")
        target = services.documents.index(index)
        if not context.principal.unrestricted:  # it would delete documents it cannot see
            services.audit.record(context, "refused", route="/v1/indexes/{name}", index=target.name, outcome="refused",
                       role_needed="admin", groups_needed=["*"])
            raise ForbiddenError(f"deleting index {target.name!r} needs an admin who sees every document (groups "
                                 "'*')")
        _, documents, chunks = await anyio.to_thread.run_sync(services.documents.summary, index, context)
        if not target.exists():
            target.reader().close()  # the store's own "no index" error (the API names the indexes the caller holds)
        if confirm != target.name:
            raise ConfirmationRequiredError(f"this deletes index {target.name!r} ({documents} documents, {chunks} chunks) for "
                                  f"good: repeat its name as confirm={target.name} (back it up first: "
                                  f"rag index backup {target.name} --to {target.name}.zip)")
        if running := services.jobs.active_on(target.name):
            raise ConflictError(f"index {target.name!r} has {len(running)} upload or sync job(s) running "
                                f"({', '.join(j.id for j in running)}): cancel them first (DELETE /v1/jobs/{{id}})")
        await anyio.to_thread.run_sync(services.documents.delete_index, target.name)
        services.audit.record(context, "index_delete", route="/v1/indexes/{name}", index=target.name, outcome="deleted",
                   documents=documents, chunks=chunks)
        return IndexDeleted(deleted=target.name, documents=documents, chunks=chunks)
