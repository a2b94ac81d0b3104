"""The folders an index follows: which of them a caller may see, following and unfollowing one, syncing one
now (``rag sync``; the server's scheduled and requested syncs run as jobs, ``app.services.jobs``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from app.services.documents import Documents
from ingest.parameters import IngestParameters
from ingest.pipeline import Progress
from ingest.sources import (Source, SyncSummary, add_source, index_sources, remove_source, source_visible_to,
                            sync_source)
from rag.core.access import RequestContext
from rag.core.records import DocumentRecord, FolderGroups
from rag.core.settings import Settings, parse_folder_groups
from rag.embedder import Embedder
from rag.store import StoredIndex


@dataclass
class Sources:
    settings: Settings

    @staticmethod
    def of(target: StoredIndex) -> list[Source]:
        """Every folder ``target`` follows (an index not created yet follows none)."""
        return index_sources(target)

    def visible(self, target: StoredIndex, context: RequestContext,
                documents: list[DocumentRecord] | None = None) -> list[Source]:
        """The sources of ``target`` its principal may see (``ingest.sources.source_visible_to``)."""
        sources = index_sources(target)
        if context.principal.unrestricted:
            return sources
        documents = Documents.all_documents(target) if documents is None else documents
        folder_groups = FolderGroups.of(parse_folder_groups(self.settings.folder_groups))
        return [s for s in sources if source_visible_to(context.principal, s, documents, folder_groups)]

    @staticmethod
    def add(target: StoredIndex, embedder: Embedder, folder: Path, pattern: str | None,
            groups: Sequence[str] | None, every_s: int | None) -> Source:
        """Follow ``folder`` (recursively); nothing is read until it is synced."""
        return add_source(target, embedder, folder, pattern, None if groups is None else list(groups),
                          every_s=every_s)

    @staticmethod
    def remove(target: StoredIndex, id_or_path: str) -> Source:
        """Stop following a source; its documents stay in the index."""
        return remove_source(target, id_or_path)

    @staticmethod
    def sync(target: StoredIndex, source: Source, parameters: IngestParameters, progress: Progress | None = None,
             allow_empty: bool = False) -> SyncSummary:
        """Bring ``target`` to the state of ``source``'s folder, in this thread."""
        return sync_source(target, source, parameters, progress, allow_empty=allow_empty)
