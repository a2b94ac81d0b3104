"""/v1/indexes: the indexes under the home's indexes/ folder (for the web app's index picker)."""

from __future__ import annotations

from litestar import Controller, get
from litestar.datastructures import State

from api.state import AppState
from ingest.store import DB_NAME, INDEX_NAME_RE, IndexReader


class IndexesController(Controller):
    path = "/v1/indexes"
    tags = ["documents"]

    @get("", summary="Indexes on this server, with their document and chunk counts")
    async def list_indexes(self, state: State) -> dict:
        app: AppState = state.app
        folder = app.settings.indexes_dir
        indexes = []
        names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        for name in names:
            root = folder / name
            if not INDEX_NAME_RE.match(name) or not (root / DB_NAME).is_file():
                continue
            reader = IndexReader(root)
            try:
                info = reader.info()
            finally:
                reader.close()
            indexes.append({"name": name, "documents": info.documents, "chunks": info.chunks})
        return {"default": app.settings.index, "indexes": indexes}
