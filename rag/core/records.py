"""The records that flow through ingest: chunks cut from a document, and what a store keeps of them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rag.core import paths
from rag.core.access import stored_groups
from rag.core.errors import ConfigError


@dataclass(frozen=True)
class Chunk:
    """A piece of a document, cut by ``chunking``; ``text == document.text[start:end]``."""

    text: str
    page: int | None
    section: str | None
    start: int
    end: int
    ordinal: int


@dataclass(frozen=True)
class DocumentRecord:
    id: str
    path: str
    title: str
    kind: str
    sha256: str
    pages: int | None
    bytes: int
    chunks: int
    ingested_at: str
    access_groups: str = ""  # comma-separated document groups (sorted); "" = public: every reader sees it
    # ``path`` is the identity (``normalise_path``: what replace, delete and sync compare); this is the path as
    # the user or the file system spelled it, for people to read ("" when made: the identity).
    display_path: str = ""

    def __post_init__(self) -> None:
        if not self.display_path:
            object.__setattr__(self, "display_path", self.path)

    @property
    def groups(self) -> frozenset[str]:
        return stored_groups(self.access_groups)


@dataclass(frozen=True)
class ChunkRecord:
    """A stored chunk with its document's title and display path (what retrieval returns, citations show)."""

    id: int
    doc_id: str
    ordinal: int
    text: str
    page: int | None
    section: str | None
    start: int
    end: int
    title: str
    path: str


@dataclass(frozen=True)
class IndexInfo:
    name: str
    path: str
    embedder: str
    dimension: int
    generation: int
    documents: int
    chunks: int
    size_bytes: int
    vector_index: str = ""  # the kind of dense search and its parameters (exact, IVF, HNSW)


def normalise_path(path: Path | str) -> str:
    """A file's identity: its absolute, resolved path (case-folded where the file system ignores case, a mapped
    drive spelled as its UNC path: ``rag.core.paths``)."""
    return paths.identity(path)


def display_path(path: Path | str) -> str:
    """A file's path as people see it: absolute, spelled as given (letter case kept, nothing resolved)."""
    return paths.display(path)


@dataclass(frozen=True)
class FolderGroups:
    """Access groups by folder (the ``folder_groups`` setting): a file gets the groups of the deepest mapped
    folder it lies in. Folders and files are compared as ``normalise_path`` spells them."""

    folders: tuple[tuple[str, str], ...] = ()  # (normalised folder, stored groups), deepest first

    @classmethod
    def of(cls, pairs: Iterable[tuple[Path, str]]) -> "FolderGroups":
        """From (folder, stored groups) pairs (``rag.core.settings.parse_folder_groups``)."""
        folders: dict[str, tuple[Path, str]] = {}
        for folder, groups in pairs:
            norm = normalise_path(folder)
            if norm in folders:
                raise ConfigError(f"folder_groups names one folder twice: {str(folders[norm][0])!r} and "
                                  f"{str(folder)!r}")
            folders[norm] = folder, groups
        return cls(tuple(sorted(((norm, groups) for norm, (_, groups) in folders.items()),
                                key=lambda item: len(item[0]), reverse=True)))

    def groups_for(self, path: Path | str) -> str | None:
        """The stored groups of ``path``'s deepest mapped folder; None outside them all."""
        if not self.folders:
            return None
        norm = normalise_path(path)
        for folder, groups in self.folders:
            if norm == folder or paths.is_under(norm, folder):
                return groups
        return None


def document_id(path: Path | str) -> str:
    return hashlib.sha256(normalise_path(path).encode("utf-8")).hexdigest()[:16]


def candidate_ids(id_or_path: str) -> tuple[str, ...]:
    """The document ids a user's "id or path" may stand for: itself, and the id of the identity it spells —
    matched by its spelling alone, never resolved on disk (``paths.lexical_identity``: caller input never
    touches the file system). Text that can be neither (a NUL byte, an unpaired surrogate) stands for none."""
    if "\x00" in id_or_path:  # no path and no id holds one (PostgreSQL text cannot)
        return ()
    try:
        identity = paths.lexical_identity(id_or_path)
        return id_or_path, hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
    except (ValueError, OSError):  # UnicodeEncodeError is a ValueError; NUL: "embedded null byte"
        return ()


def candidate_display(id_or_path: str) -> str | None:
    """The display path a user's "id or path" may spell (absolute, by its spelling alone: never resolved on
    disk): a document is found by the spelling it was last ingested or synced under, a link's too."""
    try:
        id_or_path.encode("utf-8")
        return paths.display(id_or_path) if "\x00" not in id_or_path else None
    except (ValueError, OSError):
        return None
