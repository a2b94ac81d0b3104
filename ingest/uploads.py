"""Uploaded files: stored under ``uploads/<index>/`` and ingested through the same pipeline as any file.

The one home of upload, replace and delete, for every front end (HTTP API, web app, CLI).
A file that fails to ingest, or every file when the ingest itself fails (the index is busy),
gets its previously stored version back; deleting a document also removes our stored copy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import threading
import time
import unicodedata
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ingest.parameters import IngestParameters
from ingest.pipeline import FileOutcome, delete_document, ingest_paths
from ingest.progress import Progress
from rag.core.access import visible
from rag.core.records import DocumentRecord, FolderGroups, document_id, normalise_path
from rag.store import StoredIndex
from rag.core.errors import BadRequestError
from rag.core.files import WINDOWS_DEVICE_NAMES, replace_file, unlink_file
from rag.core.paths import fold_case

UNSAFE_CHARACTERS = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')  # reserved on Windows, or control characters
# ext4 and most file systems allow 255 bytes; staged copies get short names of their own (".incoming-<12 hex>"),
# so a stored path stays within Windows' 260 characters wherever the uploads folder is not itself deep.
MAX_NAME_BYTES = 200
WINDOWS_MAX_PATH = 260  # with the terminating NUL, where LongPathsEnabled is off
STAGED_PREFIX = ".incoming-"
SCOPE_PREFIX = "@"  # an uploader's own folder (``scope_folder``): "@staff-1a2b3c4d"
Scope = frozenset[str] | None  # the document groups an uploader sees; None: every document
# A staged file lives from its write until it is moved into place, after at most the wait for the index's
# upload lock; one older than this was left by a server that was killed mid-upload (replicas sharing the
# folder may be staging younger ones right now, so those stay).
STALE_STAGED_S = 600
MAX_EXTENSION_BYTES = 32
TOO_LARGE = "payload_too_large"
logger = logging.getLogger(__name__)


def _unusable(name: str | None, why: str) -> BadRequestError:
    return BadRequestError(f"unusable file name {name!r}: {why}")


def _clip(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8, never inside a character."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def name_as_sent(name: str | None) -> str:
    """The file name part of a client's name (no directories), NFC-normalised."""
    return unicodedata.normalize("NFC", re.split(r"[\\/]", name or "")[-1])


def safe_filename(name: str | None) -> str:
    """The name an uploaded file is stored under: the client's file name (no directories), NFC-normalised,
    safe on Windows and Linux. Unicode letters stay. When making it safe changes the name (reserved or
    control characters, a device name like CON, trailing dots or spaces, more than MAX_NAME_BYTES), a short
    hash of the name as sent is added, so two different names never become one stored file."""
    sent = name_as_sent(name)
    readable = sent.encode("utf-8", errors="replace").decode("utf-8")  # unpaired surrogates become "?"
    cleaned = UNSAFE_CHARACTERS.sub("_", readable).strip().rstrip(". ").lstrip(".")
    stem, dot, extension = cleaned.rpartition(".")
    stem, extension = stem.rstrip(". "), extension.strip()
    if not dot or not stem or not extension:
        raise _unusable(name, "it needs a name with an extension")
    if len(extension.encode("utf-8")) > MAX_EXTENSION_BYTES:
        raise _unusable(name, f"its extension is longer than {MAX_EXTENSION_BYTES} bytes")
    head, dot, rest = stem.partition(".")
    if head.strip().upper() in WINDOWS_DEVICE_NAMES:  # Windows reads "CON.tar.gz" as the device CON
        stem = f"{head}_{dot}{rest}"
    stored = f"{stem}.{extension}"
    if stored == sent and len(stored.encode("utf-8")) <= MAX_NAME_BYTES:
        return stored
    tag = hashlib.sha256(sent.encode("utf-8", errors="surrogatepass")).hexdigest()[:8]
    room = MAX_NAME_BYTES - len(f"-{tag}.{extension}".encode("utf-8"))
    return f"{_clip(stem, room).rstrip('. ')}-{tag}.{extension}"


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
    outcomes: list[FileOutcome] = field(default_factory=list)  # renamed_from: where the stored name differs

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
        with self._guard:  # "Docs" and "docs" are one folder on Windows
            return self._locks.setdefault(fold_case(index), threading.Lock())

    def remove_stale_staged(self, now: float | None = None) -> list[Path]:
        """Remove staged uploads left behind by a killed server (the index never saw them); the removed paths."""
        now = time.time() if now is None else now
        removed = []
        for staged in [*self.root.glob(f"*/{STAGED_PREFIX}*"), *self.root.glob(f"*/{SCOPE_PREFIX}*/{STAGED_PREFIX}*")]:
            try:
                if now - staged.stat().st_mtime > STALE_STAGED_S:
                    unlink_file(staged)
                    removed.append(staged)
            except OSError as exc:  # gone meanwhile, or held open on Windows: the next start tries again
                logger.debug("could not remove staged upload %s: %s", staged, exc)
        if removed:
            logger.info("removed %d staged upload file(s) left by an interrupted upload (the index never had "
                        "them): %s", len(removed), ", ".join(str(p) for p in removed))
        return removed

    def check(self, index: StoredIndex, files: Sequence[IncomingFile], scope: Scope = None) -> list[Path]:
        """Where ``files`` will be stored (``placement``); raises BadRequestError for an upload that cannot be
        taken at all (no files, unusable or repeated names) — before any work is queued for it."""
        if not files:
            raise BadRequestError("no files in the upload (send them in the multipart field 'data')")
        stored = [safe_filename(f.name) for f in files]
        finals = placement(self.folder(index.name), stored, scope, _visible_in(index, scope))
        folded = [fold_case(p.name) for p in finals]  # one file on Windows and macOS: "Report.pdf", "report.pdf"
        repeated = sorted({p.name for p, f in zip(finals, folded) if folded.count(f) > 1})
        if repeated:
            raise BadRequestError(f"one upload holds several files named {', '.join(repeated)} (letter case "
                                  "aside); stored names must differ")
        return finals

    def add(self, index: StoredIndex, files: Sequence[IncomingFile], parameters: IngestParameters,
            groups: Sequence[str] | None = None, progress: Progress | None = None,
            scope: Scope = None) -> UploadReport:
        """Store and ingest ``files``; per-file outcomes, in the order given. Raises BadRequestError for an
        upload that cannot be taken at all (no files, unusable or repeated names). ``groups``: as for
        ``ingest_paths`` (uploads are not mapped by folder: their groups come with them); ``progress``: as for
        ``ingest_paths`` (it may raise to stop the upload: nothing of it is kept then). ``scope``: the document
        groups the uploader sees (None: every document; see ``placement``)."""
        finals = self.check(index, files, scope)
        self.remove_stale_staged()
        names = [p.name for p in finals]
        renamed = {stored: name_as_sent(f.name) for f, stored in zip(files, names) if stored != name_as_sent(f.name)}
        report = UploadReport(index.name)
        accepted: list[_Staged] = []
        for incoming, final in zip(files, finals):
            name, folder = final.name, final.parent
            folder.mkdir(parents=True, exist_ok=True)
            if len(incoming.content) > parameters.max_file_bytes:
                report.outcomes.append(FileOutcome(name, "failed", reason_type=TOO_LARGE, reason=(
                    f"file is larger than {parameters.max_file_bytes // 2**20} MB")))
                continue
            staged = folder / f"{STAGED_PREFIX}{uuid.uuid4().hex[:12]}"
            try:
                staged.write_bytes(incoming.content)
            except OSError as exc:  # a path Windows refuses (too long for MAX_PATH), a full disk
                unlink_file(staged)
                report.outcomes.append(FileOutcome(name, "failed", reason_type="unwritable",
                                                   reason=f"cannot store {folder / name}: {exc.strerror or exc}"))
                continue
            accepted.append(_Staged(staged, final))
        if accepted:
            with self._lock(index.name):
                report.outcomes += _ingest_staged(accepted, index, parameters, groups, progress)
        given = {name: position for position, name in enumerate(names)}
        report.outcomes.sort(key=lambda o: given.get(o.path, len(given)))
        report.outcomes = [dataclasses.replace(o, renamed_from=renamed[o.path]) if o.path in renamed else o
                           for o in report.outcomes]
        return report

    def delete(self, index: StoredIndex, id_or_path: str) -> DocumentRecord:
        """Remove a document and its vectors; an uploaded document's stored file goes too (files elsewhere
        stay where they are)."""
        record = delete_document(index, id_or_path)
        stored = Path(record.display_path)  # the file as spelled on disk (the identity may be case-folded)
        folder = normalise_path(self.folder(index.name))
        if normalise_path(stored.parent) == folder or (
                stored.parent.name.startswith(SCOPE_PREFIX) and normalise_path(stored.parent.parent) == folder):
            try:  # retried while a scanner holds it; a file someone keeps open stays behind, the document is gone
                unlink_file(stored)
            except OSError as exc:
                logger.warning("document %s deleted, but its stored upload %s could not be removed: %s",
                               record.id, stored, exc)
        return record


def scope_folder(groups: frozenset[str]) -> str:
    """The uploads subfolder of an uploader who sees only public documents and those of ``groups``: readable,
    and never a stored file's name (stored names always hold a dot; this one never does)."""
    readable = "+".join(sorted(groups)).replace(".", "_")[:80] or "public"
    tag = hashlib.sha256(",".join(sorted(groups)).encode("utf-8")).hexdigest()[:8]
    return f"{SCOPE_PREFIX}{readable}-{tag}"


def _stored_files(folder: Path) -> dict[str, str]:
    """The files of ``folder`` by case-folded name (nothing when it does not exist)."""
    if not folder.is_dir():
        return {}
    return {fold_case(p.name): p.name for p in folder.iterdir() if not p.name.startswith(".") and p.is_file()}


def placement(folder: Path, names: Sequence[str], scope: Scope, visible: Callable[[Path], bool]) -> list[Path]:
    """Where each of ``names`` is stored, spelled as a file already stored there with other letter case
    ("report.pdf" updates "Report.pdf": a name is one document on every platform, as it is one file on Windows).

    An uploader who sees every document (``scope`` None) stores in the index's folder. One who sees less
    stores in a folder of its own scope (``scope_folder``), where every document is one it sees (only uploaders
    of that very scope write there, with groups they hold), unless the index's folder already holds that name
    as a document it sees (``visible``): it replaces that one. A name whose document it cannot see is never
    matched, re-spelled or replaced, so where an upload goes, and what it answers, is the same whether or not
    such a document exists."""
    if scope is None:
        stored = _stored_files(folder)
        return [folder / stored.get(fold_case(n), n) for n in names]
    own = folder / scope_folder(scope)
    mine, shared = _stored_files(own), _stored_files(folder)
    finals = []
    for name in names:
        key = fold_case(name)
        if key in mine:
            finals.append(own / mine[key])
        elif key in shared and visible(folder / shared[key]):
            finals.append(folder / shared[key])
        else:
            finals.append(own / name)
    return finals


def _visible_in(index: StoredIndex, scope: Scope) -> Callable[[Path], bool]:
    """Whether the document stored from a path is one an uploader of ``scope`` sees (no document: no)."""

    def sees(path: Path) -> bool:
        if scope is None:
            return True
        if not index.exists():
            return False
        reader = index.reader()
        try:
            record = reader.find_document(document_id(path))
        finally:
            reader.close()
        return record is not None and visible(record.groups, scope)

    return sees


def _unstorable(final: Path, exc: OSError) -> FileOutcome:
    why = exc.strerror or str(exc)
    if len(str(final)) >= WINDOWS_MAX_PATH:
        why = (f"its path is {len(str(final))} characters, longer than Windows allows ({WINDOWS_MAX_PATH - 1} "
               "without long paths enabled): upload it under a shorter name, or keep uploads in a shorter folder")
    return FileOutcome(final.name, "failed", reason_type="unwritable", reason=f"cannot store {final}: {why}")


def _ingest_staged(uploads: list[_Staged], index: StoredIndex, parameters: IngestParameters,
                   groups: Sequence[str] | None = None, progress: Progress | None = None) -> list[FileOutcome]:
    previous: dict[Path, Path] = {}
    moved: list[Path] = []

    def restore(final: Path) -> None:
        if final in previous:
            replace_file(previous.pop(final), final)
        else:
            unlink_file(final)

    unstored: list[FileOutcome] = []
    try:
        for upload in uploads:
            kept = None
            try:
                if upload.final.exists():
                    kept = upload.final.with_name(f".previous-{uuid.uuid4().hex[:12]}")
                    replace_file(upload.final, kept)
                replace_file(upload.staged, upload.final)
            except OSError as exc:  # this file cannot take its name (MAX_PATH, held): the others go on
                if kept is not None and kept.exists():
                    replace_file(kept, upload.final)
                unlink_file(upload.staged)
                unstored.append(_unstorable(upload.final, exc))
                continue
            if kept is not None:
                previous[upload.final] = kept
            moved.append(upload.final)
        # Not mapped by folder: an upload's groups come with it.
        unmapped = dataclasses.replace(parameters, folder_groups=FolderGroups())
        summary = ingest_paths(moved, index, unmapped, progress=progress, groups=groups)
    except BaseException:
        for final in moved + list(previous.keys() - set(moved)):  # the rest: moved aside, upload not in place
            restore(final)
        for upload in uploads:
            unlink_file(upload.staged)
        raise
    stored = {upload.final.name: upload.final for upload in uploads}
    outcomes = unstored
    for outcome in summary.outcomes:
        name = Path(outcome.path).name
        # Each file is parsed once, by the loader process with its timeout; one it cannot use is put back
        # as it was (the previous version, or nothing), so an upload never replaces a good file with a bad one.
        if outcome.status in ("failed", "skipped") and name in stored:
            restore(stored[name])
            outcome = dataclasses.replace(outcome, status="failed")
        outcomes.append(dataclasses.replace(outcome, path=name))
    for kept in previous.values():
        try:
            unlink_file(kept)
        except OSError as exc:  # the new version is in place; a dot-file left behind is never ingested
            logger.warning("could not remove the previous version %s: %s", kept, exc)
    return outcomes
