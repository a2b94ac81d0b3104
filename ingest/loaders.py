"""One file -> one LoadedDocument: ``load_document`` and the names the rest of the product uses.

The loader is picked in one place, ``ingest.formats.registry`` (by suffix, then by the content's magic
bytes); the document model, the errors and the shared text helpers are in ``ingest.formats.base``, which
every format module (``ingest/formats/``) builds on. Every failure a user's file can cause leaves as an
UnprocessableDocumentError subclass with a human message; nothing from a parser library or the codecs escapes.
"""

from __future__ import annotations

from pathlib import Path

from ingest.formats.base import (Attachment, BrokenDocument, EncryptedDocument, LoadedDocument, NoExtractableText,
                                 Section, UnsupportedFileType, normalize_pdf_text)
from ingest.formats.options import LoadOptions, PageProgress
from ingest.formats.registry import SUPPORTED_SUFFIXES, load

__all__ = ["SUPPORTED_SUFFIXES", "Attachment", "BrokenDocument", "EncryptedDocument", "LoadedDocument",
           "NoExtractableText", "Section", "UnsupportedFileType", "load_document", "normalize_pdf_text"]


def load_document(path: Path, data: bytes | None = None, options: LoadOptions | None = None,
                  progress: PageProgress | None = None) -> LoadedDocument:
    """Read one file (``data``: its bytes, when already read)."""
    return load(Path(path), data, options, progress)
