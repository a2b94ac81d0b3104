"""Ingest runs: discover files, skip unchanged ones, load, chunk, embed in batches, commit once."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ingest.chunking import chunk_document
from ingest.formats.mail import attachment_title
from ingest.formats.worker import FileLoader
from ingest.loaders import SUPPORTED_SUFFIXES, LoadedDocument, UnsupportedFileType
from ingest.parameters import IngestParameters
from ingest.progress import FileDone, OcrPage, Progress, Started, ignore
from rag.core.records import Chunk, DocumentRecord, display_path, document_id, normalise_path
from rag.store import IndexWriter, StoredIndex
from rag.core import observe
from rag.core.errors import BadRequestError, UnprocessableDocumentError
from rag.core.files import is_link_like, is_system_folder, noise_reason, read_with_stat
from rag.core.names import access_groups

# Embedding many chunks at once lets length-sorting cut padding across files;
# the bound keeps memory flat however large the corpus is.
EMBED_BUFFER_CHUNKS = 256
# reason_type of a symlink inside a folder that points outside it (not followed, by policy: not a failure).
SYMLINK_OUTSIDE = "symlink_outside_folder"
# Skipped by policy, not failures: Office lock files ("~$Report.docx") and hidden or system files (Windows
# attributes); a folder the OS will not list (too long a path, no permission) is reported but fails the run.
NOT_A_DOCUMENT = "not_a_document"
UNREADABLE_FOLDER = "unreadable_folder"


@dataclass(frozen=True)
class FileOutcome:
    """One file's outcome, end to end: an ingest's and a sync's summary, an upload's report, a job's record (which
    stores it as it is) and, field by field, the API's ``FileResult``."""

    path: str  # as shown (an upload: the stored file's name)
    status: str  # added | updated | unchanged | renamed | removed | skipped | failed
    document_id: str | None = None
    chunks: int = 0
    reason: str | None = None
    reason_type: str | None = None
    warning: str | None = None  # added, but not whole (e.g. scanned pages without Tesseract)
    renamed_from: str | None = None  # an upload stored under another name: the name as sent

    def as_dict(self) -> dict[str, Any]:
        """As ``rag ingest --json`` and ``rag sync --json`` list it (``renamed_from`` where there is one)."""
        data = dataclasses.asdict(self)
        if self.renamed_from is None:
            del data["renamed_from"]
        return data


@dataclass
class IngestSummary:
    index: str
    outcomes: list[FileOutcome] = field(default_factory=list)
    chunks_written: int = 0
    pages: int = 0
    seconds: float = 0.0
    generation: int = 0
    ocr_pages: int = 0
    ocr_seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def ok(self) -> bool:
        """True when every readable file made it in (unsupported types do not count against it)."""
        return all(o.status not in ("failed", "skipped")
                   or o.reason_type in (UnsupportedFileType.error_type, SYMLINK_OUTSIDE, NOT_A_DOCUMENT)
                   for o in self.outcomes)

    @property
    def chunks_per_s(self) -> float:
        return self.chunks_written / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "index": self.index, "added": self.count("added"), "updated": self.count("updated"),
            "unchanged": self.count("unchanged"), "skipped": self.count("skipped"), "failed": self.count("failed"),
            "chunks_written": self.chunks_written, "pages": self.pages, "seconds": round(self.seconds, 3),
            "chunks_per_s": round(self.chunks_per_s, 1), "generation": self.generation,
            "ocr_pages": self.ocr_pages, "ocr_seconds": round(self.ocr_seconds, 3),
            "files": [o.as_dict() for o in self.outcomes],
        }


@dataclass
class _Pending:
    record: DocumentRecord
    chunks: list[Chunk]
    outcome: FileOutcome
    loaded: LoadedDocument | None = None


def discover(paths: Sequence[Path], glob: str | None = None,
             rejected: list[FileOutcome] | None = None) -> Iterator[Path]:
    """Files under ``paths`` (recursively), sorted, each once; hidden files and dirs are left out.

    Inside a folder, a symlink (to a file or a folder) that resolves outside that folder is not followed:
    it goes to ``rejected`` as skipped, with the reason. A path named outright may be a symlink.
    """
    seen: set[str] = set()
    for root in paths:
        if not root.exists():
            raise BadRequestError(f"no such file or directory: {root}")
        candidates: Iterable[Path] = [root] if root.is_file() else _folder_files(root, glob, rejected)
        for path in candidates:
            key = normalise_path(path)
            if key not in seen:
                seen.add(key)
                yield path


def _folder_files(root: Path, glob: str | None, rejected: list[FileOutcome] | None) -> list[Path]:
    inside = root.resolve()
    files: list[Path] = []
    links: list[Path] = []  # symlinks within the folder: after the files, so a file is listed by its own name

    def skip(path: Path, reason: str, reason_type: str) -> None:
        if rejected is not None:
            rejected.append(FileOutcome(str(path), "skipped", reason=reason, reason_type=reason_type))

    def unreadable(exc: OSError) -> None:  # a folder the OS refuses (a path past MAX_PATH, no permission)
        skip(Path(exc.filename or root), f"folder cannot be read: {exc.strerror or exc}", UNREADABLE_FOLDER)

    # os.walk, not rglob: a folder that cannot be listed is reported, not the end of the run; links and
    # junctions are never descended into (rglob follows junctions on Windows).
    for folder, dirs, names in os.walk(root, onerror=unreadable):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for system in [d for d in dirs if is_system_folder(base / d)]:
            skip(base / system, "not a document folder: a hidden system folder", NOT_A_DOCUMENT)
            dirs.remove(system)
        for name in sorted(n for n in names if not n.startswith(".")) + [d for d in dirs if is_link_like(base / d)]:
            path = base / name
            is_dir = name in dirs
            if glob and not is_dir and not fnmatch.fnmatch(name, glob):
                continue
            if is_link_like(path):
                try:
                    target: Path | None = path.resolve()
                except (OSError, RuntimeError):  # a symlink loop
                    target = None
                if target is None or (target != inside and inside not in target.parents):
                    what = "symlink" if path.is_symlink() else "junction"
                    where = f"to {target}, outside {root}" if target else "that cannot be resolved (a loop?)"
                    skip(path, f"{what} {where}: not followed", SYMLINK_OUTSIDE)
                elif path.is_file():
                    links.append(path)
                continue
            if not is_dir and (noise := noise_reason(path)) is not None:
                skip(path, f"not a document: {noise}", NOT_A_DOCUMENT)
            elif not is_dir:
                files.append(path)
        dirs[:] = [d for d in dirs if not is_link_like(base / d)]
    return sorted(files) + sorted(links)


def _nothing_to_ingest(paths: Sequence[Path], glob: str | None, rejected: list[FileOutcome]) -> str:
    where = ", ".join(str(p) for p in paths)
    message = f"nothing to ingest: no files match {glob!r} in {where}" if glob else f"nothing to ingest in {where}"
    if rejected:
        message += f" ({len(rejected)} skipped: links leading outside the folder, lock or hidden files)"
    return message


def ingest_paths(
    paths: Sequence[Path],
    index: StoredIndex,
    parameters: IngestParameters,
    glob: str | None = None,
    progress: Progress | None = None,
    groups: Sequence[str] | None = None,
    lock_timeout_s: float = 5.0,
) -> IngestSummary:
    """Ingest files and folders into ``index``. ``groups``: the access groups every document ingested gets
    (``[]``: public); None gives a file under a folder of the parameters' ``folder_groups`` that folder's
    groups and keeps each other existing document's groups (a new one is public)."""
    start = time.perf_counter()
    stored_groups = None if groups is None else access_groups(groups)
    summary = IngestSummary(index=index.name)
    rejected: list[FileOutcome] = []
    files = list(discover(paths, glob, rejected))
    if not files:  # before the writer: an empty run creates no index
        raise BadRequestError(_nothing_to_ingest(paths, glob, rejected))
    summary.outcomes.extend(rejected)
    notify = progress or ignore
    notify(Started(len(files)))
    with observe.start_span(f"ingest {index.name}", {"rag.ingest.files": len(files),
                                                     observe.DATA_SOURCE: index.name}) as run_span:
        _ingest_files(files, summary, index, parameters, notify, lock_timeout_s, stored_groups)
        run_span.set_attributes({
            "rag.ingest.chunks": summary.chunks_written, "rag.ingest.pages": summary.pages,
            "rag.ingest.ocr_pages": summary.ocr_pages, "rag.ingest.ocr_seconds": round(summary.ocr_seconds, 3),
            "rag.ingest.failed": summary.count("failed"), "rag.ingest.generation": summary.generation})
    order = {str(path): i for i, path in enumerate(files)}
    # Attachments right after their mail; skipped symlinks last.
    summary.outcomes.sort(key=lambda o: order.get(o.path, order.get(o.path.split(ATTACHMENT_SEP)[0], len(order))))
    summary.seconds = time.perf_counter() - start
    return summary


def _ingest_files(files: list[Path], summary: IngestSummary, index: StoredIndex, parameters: IngestParameters,
                  notify: Progress, lock_timeout_s: float, stored_groups: str | None) -> None:
    embedder = parameters.embedder
    with index.writer(embedder.config.identity, embedder.dimension, lock_timeout_s) as writer, \
            FileLoader(parameters.load_options) as loader:
        ingest_into(writer, loader, files, summary, parameters, notify, stored_groups)
        summary.generation = writer.commit()


def ingest_into(writer: IndexWriter, loader: FileLoader, files: Sequence[Path], summary: IngestSummary,
                parameters: IngestParameters, notify: Progress, stored_groups: str | None, first: int = 0,
                display: Callable[[Path], str] = str, read_stats: dict[Path, os.stat_result] | None = None) -> None:
    """Load, chunk and embed ``files`` into an open writer, outcomes into ``summary``; the caller commits
    (a sync adds its renames and removals to the same commit). ``first``: files already done before these
    (progress counts on from there). Without ``stored_groups``, a file under a folder of the parameters'
    ``folder_groups`` gets that folder's groups. ``display``: how a file's path is shown (in outcomes, progress
    and, made absolute, as the document's display path). ``read_stats``: filled with the stat of the handle
    each file was read from."""
    instruments = observe.instruments()
    embedder, folder_groups = parameters.embedder, parameters.folder_groups
    index_name = summary.index
    pending: list[_Pending] = []

    def flush() -> None:
        texts = [c.text for p in pending for c in p.chunks]
        with observe.embeddings_span(embedder.config.name, len(texts), **{"rag.ingest.documents": len(pending)}):
            vectors = embedder.embed(texts)
        instruments.ingest_chunks.add(len(texts), {observe.DATA_SOURCE: index_name})
        offset = 0
        for item in pending:
            writer.put_document(item.record, item.chunks, vectors[offset:offset + len(item.chunks)])
            offset += len(item.chunks)
            summary.outcomes.append(item.outcome)
            summary.chunks_written += len(item.chunks)
        pending.clear()

    for done, path in enumerate(files, first + 1):
        chunks_so_far = summary.chunks_written + sum(len(p.chunks) for p in pending)
        shown = display(path)
        loader.progress = lambda ocr_done, ocr_total, shown=shown, files_done=done - 1, chunks=chunks_so_far: \
            notify(OcrPage(shown, ocr_done, ocr_total, files_done, chunks))
        with observe.start_span("ingest file", {"file.path": str(path)}) as file_span:
            groups = stored_groups
            if groups is None:
                groups = folder_groups.groups_for(path)
            outcome, item = _prepare_file(path, writer, parameters, loader, groups=groups, shown=shown,
                                          read_stats=read_stats)
            results = [(outcome, item)]
            if item is not None and item.loaded is not None and item.loaded.kind == "eml":
                results += prepare_attachments(path, item.loaded, writer, parameters, loader,
                                               groups=item.record.access_groups, display=display)
            observe_file(file_span, results, instruments, index_name)
        for outcome, item in results:
            if item is None:
                summary.outcomes.append(outcome)
                continue
            summary.pages += item.record.pages or 0
            if item.loaded is not None:
                summary.ocr_pages += item.loaded.ocr_pages
                summary.ocr_seconds += item.loaded.ocr_seconds
                item.loaded = None  # the text lives on in the chunks; do not hold it until the flush
            pending.append(item)
            if sum(len(p.chunks) for p in pending) >= EMBED_BUFFER_CHUNKS:
                flush()
        notify(FileDone(shown, done, summary.chunks_written + sum(len(p.chunks) for p in pending)))
    if pending:
        flush()


def observe_file(span: Any, results: list[tuple[FileOutcome, "_Pending | None"]], instruments: observe.Instruments,
                 index: str) -> None:
    """A file's span attributes: its format, pages, OCR work, chunks and outcome (attachments counted in)."""
    outcome, item = results[0]
    loaded = item.loaded if item is not None else None
    attributes: dict[str, Any] = {
        "rag.ingest.outcome": outcome.status, "rag.ingest.chunks": sum(o.chunks for o, i in results if i),
        "rag.ingest.attachments": len(results) - 1}
    if loaded is not None:
        attributes.update({"rag.ingest.format": loaded.kind, "rag.ingest.pages": loaded.pages or 0,
                           "rag.ingest.ocr_pages": loaded.ocr_pages,
                           "rag.ingest.ocr_seconds": round(loaded.ocr_seconds, 3)})
        instruments.ocr_pages.add(loaded.ocr_pages, {observe.DATA_SOURCE: index})
    if outcome.warning:
        attributes["rag.ingest.warning"] = outcome.warning
    span.set_attributes(attributes)
    if outcome.status == "failed":
        observe.fail(span, outcome.reason_type or "failed")
        span.set_attribute("rag.ingest.reason", outcome.reason or "")
    instruments.ingest_files.add(1, {observe.DATA_SOURCE: index, "rag.ingest.outcome": outcome.status})


def _prepare_file(path: Path, writer: IndexWriter, parameters: IngestParameters, loader: FileLoader,
                  data: bytes | None = None,
                  title: Callable[[LoadedDocument], str] | None = None,
                  groups: str | None = None, shown: str | None = None,
                  read_stats: dict[Path, os.stat_result] | None = None) -> tuple[FileOutcome, _Pending | None]:
    """``data``: the bytes of a file that is not on disk (an attachment); ``title``: names the document;
    ``groups``: its access groups (None: as it had them, or public); ``shown``: how its path is shown (default:
    as given)."""
    display = str(path) if shown is None else shown
    doc_id = document_id(path)
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        return FileOutcome(display, "skipped", reason=f"unsupported file type '{path.suffix or path.name}'",
                           reason_type=UnsupportedFileType.error_type), None
    try:
        if data is None:
            data, stat_result = read_with_stat(path)
            if read_stats is not None:
                read_stats[path] = stat_result
    except OSError as exc:
        return FileOutcome(display, "failed", doc_id, reason=f"cannot read file: {exc.strerror or exc}",
                           reason_type="unreadable"), None
    sha = hashlib.sha256(data).hexdigest()
    existing = writer.document(doc_id)
    if groups is None:
        groups = existing.access_groups if existing is not None else ""
    if existing is not None and existing.sha256 == sha and existing.access_groups == groups:
        if existing.display_path != display_path(display):  # reached by another spelling: show that one
            writer.set_display_path(doc_id, display_path(display))
        return FileOutcome(display, "unchanged", doc_id, existing.chunks), None
    try:
        loaded: LoadedDocument = loader.load(path, data)
    except UnprocessableDocumentError as exc:
        status = "skipped" if isinstance(exc, UnsupportedFileType) else "failed"
        return FileOutcome(display, status, doc_id, reason=exc.message, reason_type=exc.error_type), None
    chunks = chunk_document(loaded, parameters.embedder.tokenizer, parameters.chunk_tokens, parameters.chunk_overlap)
    record = DocumentRecord(
        id=doc_id, path=normalise_path(path), title=title(loaded) if title else loaded.title, kind=loaded.kind,
        sha256=sha, pages=loaded.pages, bytes=len(data), chunks=len(chunks),
        ingested_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), access_groups=groups,
        display_path=display_path(display))
    outcome = FileOutcome(display, "updated" if existing is not None else "added", doc_id, len(chunks),
                          warning="; ".join(loaded.warnings) or None)
    return outcome, _Pending(record, chunks, outcome, loaded)


# --------------------------------------------------------------------------- attachments (e-mail)
# A mail's attachments are documents of their own, stored at "<mail path>#<attachment name>" (so their
# ids follow from the mail's path), read by the loader for their type, titled "attachment NAME of SUBJECT".
ATTACHMENT_SEP = "#"
MAX_ATTACHMENT_DEPTH = 3  # a mail attached to a mail attached to a mail: deeper ones are not opened


def attachment_path(mail: Path, name: str) -> Path:
    return Path(f"{mail}{ATTACHMENT_SEP}{name}")


def prepare_attachments(mail: Path, loaded: LoadedDocument, writer: IndexWriter, parameters: IngestParameters,
                        loader: FileLoader, depth: int = 1, groups: str = "",
                        display: Callable[[Path], str] = str) -> list[tuple[FileOutcome, _Pending | None]]:
    """Outcomes (and documents to write) for a freshly loaded mail's attachments, which get the mail's
    access ``groups``; attachments an older version of the mail had and this one has not are deleted."""
    results: list[tuple[FileOutcome, _Pending | None]] = []
    kept: set[str] = set()
    for attachment in loaded.attachments:
        path = attachment_path(mail, attachment.name)
        kept.add(normalise_path(path))
        outcome, item = _prepare_file(path, writer, parameters, loader, attachment.data,
                                      lambda doc, name=attachment.name: attachment_title(name, loaded.title), groups,
                                      shown=display(path))
        results.append((outcome, item))
        if item is not None and item.loaded is not None and item.loaded.kind == "eml":
            if depth < MAX_ATTACHMENT_DEPTH:
                results += prepare_attachments(path, item.loaded, writer, parameters, loader, depth + 1, groups,
                                               display)
    for stale in writer.documents_under(normalise_path(mail) + ATTACHMENT_SEP):
        if stale.path not in kept and not any(stale.path.startswith(k + ATTACHMENT_SEP) for k in kept):
            writer.delete_document(stale.id)
    return results


def delete_document(index: StoredIndex, id_or_path: str, lock_timeout_s: float = 5.0) -> DocumentRecord:
    with index.existing_writer(lock_timeout_s) as writer:
        record = writer.find_document(id_or_path)
        writer.delete_document(record.id)
        for attachment in writer.documents_under(record.path + ATTACHMENT_SEP):  # a mail's attachments go too
            writer.delete_document(attachment.id)
        writer.commit()
    return record
