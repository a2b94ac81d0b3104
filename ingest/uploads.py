"""Uploaded files: stored under ``uploads/<index>/`` and ingested through the same pipeline as any file.

The one home of upload, replace and delete, for every front end (HTTP API, web app, CLI).
A file that fails to ingest, or every file when the ingest itself fails (the index is busy),
gets its previously stored version back; deleting a document also removes our stored copy.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ingest.embedder import Embedder
from ingest.formats.options import LoadOptions
from ingest.loaders import load_document
from ingest.pipeline import FileOutcome, delete_document, ingest_paths
from ingest.records import DocumentRecord, normalise_path
from ingest.store import StoredIndex
from rag.core.errors import BadRequestError, UnprocessableDocumentError

SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
TOO_LARGE = "payload_too_large"


def safe_filename(name: str | None) -> str:
    """A plain file name from an untrusted one: no directories, no leading dots, no odd characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    cleaned = SAFE_NAME.sub("_", base).lstrip("._")[:120]
    if not cleaned or "." not in cleaned:
        raise BadRequestError(f"unusable file name {name!r}: it needs a name with an extension")
    return cleaned


@dataclass(frozen=True)
class IncomingFile:
    name: str  # as the client sent it
    content: bytes


@dataclass(frozen=True)
class _Staged:
    staged: Path  # the upload, written beside its final name
    final: Path  # where it is stored (and indexed from) once accepted


@dataclass
class UploadReport:
    index: str
    outcomes: list[FileOutcome] = field(default_factory=list)

    @property
    def accepted(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status in ("added", "updated", "unchanged")]

    @property
    def all_too_large(self) -> bool:
        return bool(self.outcomes) and all(o.reason_type == TOO_LARGE for o in self.outcomes)


class Uploads:
    """The uploads folder of every index; uploads to one index run one at a time (they move stored files
    before the index's own write lock is taken)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def folder(self, index: str) -> Path:
        return self.root / index

    def _lock(self, index: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(index, threading.Lock())

    def add(self, index: StoredIndex, files: Sequence[IncomingFile], embedder: Embedder, chunk_tokens: int,
            chunk_overlap: int, max_file_bytes: int, load_options: LoadOptions | None = None) -> UploadReport:
        """Store and ingest ``files``; per-file outcomes, in the order given. Raises BadRequestError for an
        upload that cannot be taken at all (no files, unusable or repeated names)."""
        if not files:
            raise BadRequestError("no files in the upload (send them in the multipart field 'data')")
        names = [safe_filename(f.name) for f in files]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise BadRequestError(f"one upload holds several files named {', '.join(repeated)}; "
                                  "stored names must differ")
        folder = self.folder(index.name)
        folder.mkdir(parents=True, exist_ok=True)
        report = UploadReport(index.name)
        accepted: list[_Staged] = []
        for incoming, name in zip(files, names):
            if len(incoming.content) > max_file_bytes:
                report.outcomes.append(FileOutcome(name, "failed", reason_type=TOO_LARGE,
                                                   reason=f"file is larger than {max_file_bytes // 2**20} MB"))
                continue
            try:  # refuse an unreadable file before it replaces anything
                load_document(folder / name, incoming.content, load_options)
            except UnprocessableDocumentError as exc:
                report.outcomes.append(FileOutcome(name, "failed", reason_type=exc.error_type, reason=exc.message))
                continue
            staged = folder / f".incoming-{uuid.uuid4().hex}-{name}"
            staged.write_bytes(incoming.content)
            accepted.append(_Staged(staged, folder / name))
        if accepted:
            with self._lock(index.name):
                report.outcomes += _ingest_staged(accepted, index, embedder, chunk_tokens, chunk_overlap,
                                                  load_options)
        return report

    def delete(self, index: StoredIndex, id_or_path: str) -> DocumentRecord:
        """Remove a document and its vectors; an uploaded document's stored file goes too (files elsewhere
        stay where they are)."""
        record = delete_document(index, id_or_path)
        stored = Path(record.path)
        if normalise_path(stored.parent) == normalise_path(self.folder(index.name)):
            stored.unlink(missing_ok=True)
        return record


def _ingest_staged(uploads: list[_Staged], index: StoredIndex, embedder: Embedder, chunk_tokens: int,
                   chunk_overlap: int, load_options: LoadOptions | None) -> list[FileOutcome]:
    previous: dict[Path, Path] = {}
    moved: list[Path] = []

    def restore(final: Path) -> None:
        if final in previous:
            previous.pop(final).replace(final)
        else:
            final.unlink(missing_ok=True)

    try:
        for upload in uploads:
            if upload.final.exists():
                kept = upload.final.with_name(f".previous-{uuid.uuid4().hex}-{upload.final.name}")
                upload.final.replace(kept)
                previous[upload.final] = kept
            upload.staged.replace(upload.final)
            moved.append(upload.final)
        summary = ingest_paths(moved, index, embedder, chunk_tokens, chunk_overlap, load_options=load_options)
    except BaseException:
        for final in moved + list(previous.keys() - set(moved)):  # the rest: moved aside, upload not in place
            restore(final)
        for upload in uploads:
            upload.staged.unlink(missing_ok=True)
        raise
    stored = {upload.final.name: upload.final for upload in uploads}
    outcomes = []
    for outcome in summary.outcomes:
        name = Path(outcome.path).name
        if outcome.status == "failed" and name in stored:
            restore(stored[name])
        outcomes.append(dataclasses.replace(outcome, path=name))
    for kept in previous.values():
        kept.unlink(missing_ok=True)
    return outcomes
