"""How files are read, cut and grouped, built once from the settings (``IngestParameters.from_settings``): the
server for its upload and sync jobs, the CLI for ``rag ingest``, ``rag sync``, eval and bench. Every ingest
goes through one of its three methods, so no caller re-reads the settings by hand and drops one of them (the
load options: OCR and limits; the folder groups)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rag.embedder import Embedder
from ingest.formats.options import LoadOptions
from ingest.pipeline import IngestSummary, Progress, ingest_paths
from rag.core.records import FolderGroups
from ingest.sources import Source, SyncSummary, sync_source
from rag.store import StoredIndex
from ingest.uploads import IncomingFile, UploadReport, Uploads
from rag.core.settings import Settings, parse_folder_groups


@dataclass(frozen=True)
class IngestParameters:
    """The same for every ingest of a process (``rag ingest --chunk-tokens`` changes the settings it comes from)."""

    embedder: Embedder
    chunk_tokens: int
    chunk_overlap: int
    max_file_bytes: int  # of one uploaded file
    load_options: LoadOptions
    folder_groups: FolderGroups = field(default_factory=FolderGroups)  # `[folder_groups]` of rag.toml

    @classmethod
    def from_settings(cls, settings: Settings, embedder: Embedder) -> "IngestParameters":
        return cls(embedder, settings.chunk_tokens, settings.chunk_overlap, settings.max_upload_mb * 1024 * 1024,
                   LoadOptions.from_settings(settings), FolderGroups.of(parse_folder_groups(settings.folder_groups)))

    def ingest(self, paths: Sequence[Path], index: StoredIndex, glob: str | None = None,
               progress: Progress | None = None, groups: Sequence[str] | None = None) -> IngestSummary:
        """``ingest.pipeline.ingest_paths`` with these parameters."""
        return ingest_paths(paths, index, self.embedder, self.chunk_tokens, self.chunk_overlap, glob, progress,
                            load_options=self.load_options, groups=groups, folder_groups=self.folder_groups)

    def sync(self, index: StoredIndex, source: Source, progress: Progress | None = None,
             allow_empty: bool = False) -> SyncSummary:
        """``ingest.sources.sync_source`` with these parameters."""
        return sync_source(index, source, self.embedder, self.chunk_tokens, self.chunk_overlap, progress,
                           load_options=self.load_options, folder_groups=self.folder_groups, allow_empty=allow_empty)

    def upload(self, uploads: Uploads, index: StoredIndex, files: Sequence[IncomingFile],
               groups: Sequence[str] | None, progress: Progress | None = None,
               scope: frozenset[str] | None = None) -> UploadReport:
        """``Uploads.add`` with these parameters (uploads are not mapped by folder: their groups come with them);
        ``scope``: the document groups the uploader sees (None: every document)."""
        return uploads.add(index, files, self.embedder, self.chunk_tokens, self.chunk_overlap, self.max_file_bytes,
                           self.load_options, groups, progress=progress, scope=scope)
