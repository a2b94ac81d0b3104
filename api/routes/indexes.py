"""/v1/indexes: the indexes in the store (for the web app's index picker)."""

from __future__ import annotations

from litestar import Controller, get
from litestar.datastructures import State

from api.openapi import errors
from api.protocol import IndexList, IndexSummary
from api.state import AppState


class IndexesController(Controller):
    path = "/v1/indexes"
    tags = ["documents"]

    @get("", summary="Indexes on this server, with their document and chunk counts", responses=errors())
    async def list_indexes(self, state: State) -> IndexList:
        app: AppState = state.app
        indexes = []
        for name in app.store.names():
            reader = app.store.index(name).reader()
            try:
                info = reader.info()
            finally:
                reader.close()
            indexes.append(IndexSummary(name=name, documents=info.documents, chunks=info.chunks))
        return IndexList(default=app.settings.index, indexes=indexes)
