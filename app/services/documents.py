"""Indexes and their documents as a caller may see them: resolving and authorizing the index a request names,
listing, finding and deleting documents, counting an index, deleting one with its uploaded originals."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from app.services.access import require_role
from app.services.audit import Auditor
from ingest.uploads import Uploads
from rag.core.access import RequestContext
from rag.core.errors import DocumentNotFoundError, ForbiddenError, IndexBusyError, IndexNotFoundError, RagError
from rag.core.files import remove_tree
from rag.core.names import IndexName, index_name
from rag.core.records import DocumentRecord
from rag.core.settings import Settings
from rag.store import Store, StoredIndex

log = logging.getLogger("rag")


def _nothing_held(name: str | None) -> None:
    """What lets go of an index's files when nothing in this process holds them."""


@dataclass
class Documents:
    settings: Settings
    store: Store
    uploads: Uploads
    audit: Auditor
    # Lets go of what this process holds open of an index (the answer service's retrievers; None: of every
    # index deleted meanwhile), so that its files can go.
    release: Callable[[str | None], None] = field(default=_nothing_held)

    # ------------------------------------------------------------------ which index
    def resolve(self, name: IndexName) -> IndexName:
        """``name`` as the store spells it (the embedded store's "HR" is an existing "hr")."""
        spelled = self.store.index(name.value).name
        return name if spelled == name.value else IndexName(spelled)

    def authorized(self, context: RequestContext, requested: str | None, role: str, route: str) -> IndexName:
        """The index a request acts on (its name, else the default), once ``context`` may act there as
        ``role``; a refusal is audited."""
        name = index_name(requested, self.settings.index)
        resolved = self.resolve(name)
        try:
            require_role(context, resolved, role, name)
        except ForbiddenError:
            self.audit.record(context, "refused", route=route, index=name.value, outcome="refused",
                              role_needed=role)
            raise
        return resolved

    def default(self) -> IndexName:
        """The default index (the ``index`` setting) as the store spells it."""
        return self.resolve(index_name(None, self.settings.index))

    def index(self, name: IndexName) -> StoredIndex:
        return self.store.index(name.value)

    def names(self) -> list[str]:
        return self.store.names()

    # ------------------------------------------------------------------ documents
    @staticmethod
    def all_documents(target: StoredIndex) -> list[DocumentRecord]:
        """Every document of ``target`` (none for an index not created yet)."""
        if not target.exists():
            return []
        try:
            reader = target.reader()
        except IndexNotFoundError:  # deleted, or still being made by its first writer, since exists()
            return []
        try:
            return reader.documents()
        finally:
            reader.close()

    @staticmethod
    def listed(target: StoredIndex) -> list[DocumentRecord]:
        """Every document of an index that must exist (the store's "no such index" error otherwise)."""
        reader = target.reader()
        try:
            return reader.documents()
        finally:
            reader.close()

    def visible_documents(self, target: StoredIndex, context: RequestContext) -> list[DocumentRecord]:
        """The documents of ``target`` that ``context``'s principal may see (all of them without groups)."""
        return [d for d in self.all_documents(target) if context.principal.sees(d.groups)]

    @staticmethod
    def visible_document(target: StoredIndex, context: RequestContext, id_or_path: str) -> DocumentRecord:
        """One document by id or path; one the principal may not see is "not found", like a missing one."""
        reader = target.reader()
        try:
            record = reader.find_document(id_or_path)
        finally:
            reader.close()
        if record is None or not context.principal.sees(record.groups):
            raise DocumentNotFoundError(f"no document {id_or_path!r} in index {target.name!r}")
        return record

    def delete(self, target: StoredIndex, id_or_path: str) -> DocumentRecord:
        """Remove a document (by id or path) and its vectors; an uploaded one's stored file too."""
        return self.uploads.delete(target, id_or_path)

    def delete_visible(self, target: StoredIndex, context: RequestContext, id_or_path: str,
                       route: str) -> DocumentRecord:
        """Delete a document ``context``'s principal may see (another is "not found"), audited either way."""
        try:
            visible = self.visible_document(target, context, id_or_path)
            record = self.delete(target, visible.id)
        except RagError as exc:
            self.audit.record(context, "delete", route=route, index=target.name, outcome="error",
                              error=exc.error_type)
            raise
        self.audit.record(context, "delete", route=route, index=target.name, outcome="deleted",
                          document_id=record.id, path=record.display_path, chunks=record.chunks)
        return record

    def summary(self, name: IndexName, context: RequestContext) -> tuple[str, int, int]:
        """(index, documents, chunks) as ``context``'s principal sees them: a document outside their groups
        is not counted (for /healthz and /v1/indexes alike)."""
        target = self.index(name)
        if not target.exists():
            return target.name, 0, 0
        if context.groups is None:
            reader = target.reader()
            try:
                info = reader.info()
            finally:
                reader.close()
            return info.name, info.documents, info.chunks
        documents = self.visible_documents(target, context)
        return target.name, len(documents), sum(d.chunks for d in documents)

    # ------------------------------------------------------------------ whole indexes
    def delete_index(self, name: str) -> None:
        """Delete an index and the uploaded originals kept for it (``uploads/<index>/``), what this process
        holds of it let go first (Windows removes no file a process holds)."""
        self.release(name)
        index = self.store.index(name)
        busy: IndexBusyError | None = None
        try:
            self.store.delete(index.name)
        except IndexBusyError as exc:  # deleted, its folder held elsewhere: its uploads go all the same
            busy = exc
        try:
            remove_tree(self.uploads.folder(index.name))
        except OSError as exc:  # one held file: nothing reads that folder now, a new upload replaces what it needs
            log.warning("the uploads of deleted index %s were not all removed: %s", index.name, exc)
        if busy is not None:
            raise busy

    def sweep(self) -> list[str]:
        """Remove what deletes and restores left in the store (where it is free now)."""
        return self.store.sweep()

    def close(self) -> None:
        self.store.close()
