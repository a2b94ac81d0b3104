"""How files are read, cut and grouped, built once from the settings (``IngestParameters.from_settings``): the
server for its upload and sync jobs, the CLI for ``rag ingest``, ``rag sync``, eval and bench. The bundle is
carried whole into every ingest (``ingest_paths``, ``sync_source``, ``Uploads.add``), so no room re-reads the
settings by hand, drops one of them (the load options: OCR and limits; the folder groups) or keeps a default
of its own: the defaults are the settings'."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingest.formats.options import LoadOptions
from rag.core.records import FolderGroups
from rag.core.settings import Settings, parse_folder_groups
from rag.embedder import Embedder


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

    @classmethod
    def defaults(cls, embedder: Embedder) -> "IngestParameters":
        """The built-in settings' parameters (library callers and tests without settings of their own)."""
        return cls.from_settings(Settings(), embedder)
