"""The records that flow through ingest: chunks cut from a document, and what a store keeps of them."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rag.core.errors import BadRequestError


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

    @property
    def groups(self) -> frozenset[str]:
        return frozenset(g for g in self.access_groups.split(",") if g)


GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


def access_groups(groups: Iterable[str] | None) -> str:
    """The stored form of a document's groups: sorted, comma-separated, "" for a public document."""
    names = {g.strip() for g in groups or () if g.strip()}
    bad = sorted(g for g in names if not GROUP_NAME.fullmatch(g))
    if bad:
        raise BadRequestError(f"invalid document group {bad[0]!r}: use letters, digits and _ . @ - (at most 64, "
                              "starting with a letter or digit)")
    return ",".join(sorted(names))


@dataclass(frozen=True)
class ChunkRecord:
    """A stored chunk with its document's title and path (what retrieval returns)."""

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
    """A file's identity: its absolute, resolved path (case-folded where the file system ignores case)."""
    return os.path.normcase(str(Path(path).resolve()))


def document_id(path: Path | str) -> str:
    return hashlib.sha256(normalise_path(path).encode("utf-8")).hexdigest()[:16]


def candidate_ids(id_or_path: str) -> tuple[str, ...]:
    """The document ids a user's "id or path" may stand for: itself, and the id of the file it names.
    Text that can be neither (a NUL byte, an unpaired surrogate) stands for none: it is simply not found."""
    try:
        id_or_path.encode("utf-8")
        return id_or_path, document_id(id_or_path)
    except (ValueError, OSError):  # UnicodeEncodeError is a ValueError; NUL: "embedded null byte"
        return ()
