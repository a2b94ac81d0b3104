"""/v1/indexes: the indexes in the store (for the web app's index picker)."""

from __future__ import annotations

from litestar import Controller, get
from litestar.datastructures import State

from api.auth import Context
from api.openapi import errors
from api.protocol import IndexList, IndexSummary
from api.state import AppState


class IndexesController(Controller):
    path = "/v1/indexes"
    tags = ["documents"]

    @get("", summary="Indexes on this server, with their document and chunk counts", responses=errors())
    async def list_indexes(self, state: State, context: Context) -> IndexList:
        app: AppState = state.app
        indexes = []
        for name in app.store.names():
            if context.principal.role_for(name) is None:  # an index the principal may not use is not listed
                continue
            name, documents, chunks = app.summary(name, context)
            indexes.append(IndexSummary(name=name, documents=documents, chunks=chunks))
        return IndexList(default=app.settings.index, indexes=indexes)
