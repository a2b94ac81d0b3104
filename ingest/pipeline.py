"""Ingest runs: discover files, skip unchanged ones, load, chunk, embed in batches, commit once."""

from __future__ import annotations

import fnmatch
import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ingest.chunking import chunk_document
from ingest.embedder import Embedder
from ingest.loaders import SUPPORTED_SUFFIXES, LoadedDocument, UnsupportedFileType, load_document
from ingest.records import Chunk, DocumentRecord, document_id, normalise_path
from ingest.store import IndexWriter, StoredIndex
from rag.core.errors import BadRequestError, UnprocessableDocumentError

# Embedding many chunks at once lets length-sorting cut padding across files;
# the bound keeps memory flat however large the corpus is.
EMBED_BUFFER_CHUNKS = 256
# reason_type of a symlink inside a folder that points outside it (not followed, by policy: not a failure).
SYMLINK_OUTSIDE = "symlink_outside_folder"


@dataclass(frozen=True)
class FileOutcome:
    path: str
    status: str  # added | updated | unchanged | skipped | failed
    document_id: str | None = None
    chunks: int = 0
    reason: str | None = None
    reason_type: str | None = None


@dataclass
class IngestSummary:
    index: str
    outcomes: list[FileOutcome] = field(default_factory=list)
    chunks_written: int = 0
    pages: int = 0
    seconds: float = 0.0
    generation: int = 0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def ok(self) -> bool:
        """True when every readable file made it in (unsupported types do not count against it)."""
        return all(o.status not in ("failed", "skipped")
                   or o.reason_type in (UnsupportedFileType.error_type, SYMLINK_OUTSIDE) for o in self.outcomes)

    @property
    def chunks_per_s(self) -> float:
        return self.chunks_written / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "index": self.index, "added": self.count("added"), "updated": self.count("updated"),
            "unchanged": self.count("unchanged"), "skipped": self.count("skipped"), "failed": self.count("failed"),
            "chunks_written": self.chunks_written, "pages": self.pages, "seconds": round(self.seconds, 3),
            "chunks_per_s": round(self.chunks_per_s, 1), "generation": self.generation,
            "files": [o.__dict__ for o in self.outcomes],
        }


@dataclass
class _Pending:
    record: DocumentRecord
    chunks: list[Chunk]
    outcome: FileOutcome


Progress = Callable[[str, int, int], None]  # (event, files_done, chunks_done)


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
    for path in sorted(root.rglob("*")):  # rglob lists a symlinked folder but does not descend into it
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        is_dir = path.is_dir()
        if glob and not is_dir and not fnmatch.fnmatch(path.name, glob):
            continue
        if path.is_symlink():
            try:
                target: Path | None = path.resolve()
            except (OSError, RuntimeError):  # a symlink loop
                target = None
            if target is None or (target != inside and inside not in target.parents):
                if rejected is not None:
                    where = f"to {target}, outside {root}" if target else "that cannot be resolved (a loop?)"
                    rejected.append(FileOutcome(str(path), "skipped", reason=f"symlink {where}: not followed",
                                                reason_type=SYMLINK_OUTSIDE))
                continue
            if path.is_file():
                links.append(path)
        elif path.is_file():
            files.append(path)
    return files + links


def _nothing_to_ingest(paths: Sequence[Path], glob: str | None, rejected: list[FileOutcome]) -> str:
    where = ", ".join(str(p) for p in paths)
    message = f"nothing to ingest: no files match {glob!r} in {where}" if glob else f"nothing to ingest in {where}"
    if rejected:
        message += f" ({len(rejected)} symlink(s) pointing outside the folder skipped)"
    return message


def ingest_paths(
    paths: Sequence[Path],
    index: StoredIndex,
    embedder: Embedder,
    chunk_tokens: int = 200,
    overlap: int = 30,
    glob: str | None = None,
    progress: Progress | None = None,
    lock_timeout_s: float = 5.0,
) -> IngestSummary:
    start = time.perf_counter()
    summary = IngestSummary(index=index.name)
    rejected: list[FileOutcome] = []
    files = list(discover(paths, glob, rejected))
    if not files:  # before the writer: an empty run creates no index
        raise BadRequestError(_nothing_to_ingest(paths, glob, rejected))
    summary.outcomes.extend(rejected)
    notify = progress or (lambda event, files_done, chunks_done: None)
    notify(f"start:{len(files)}", 0, 0)
    with index.writer(embedder.config.identity, embedder.dimension, lock_timeout_s) as writer:
        pending: list[_Pending] = []

        def flush() -> None:
            texts = [c.text for p in pending for c in p.chunks]
            vectors = embedder.embed(texts)
            offset = 0
            for item in pending:
                writer.put_document(item.record, item.chunks, vectors[offset:offset + len(item.chunks)])
                offset += len(item.chunks)
                summary.outcomes.append(item.outcome)
                summary.chunks_written += len(item.chunks)
            pending.clear()

        for done, path in enumerate(files, 1):
            outcome, item = _prepare_file(path, writer, embedder, chunk_tokens, overlap)
            if item is None:
                summary.outcomes.append(outcome)
            else:
                summary.pages += item.record.pages or 0
                pending.append(item)
                if sum(len(p.chunks) for p in pending) >= EMBED_BUFFER_CHUNKS:
                    flush()
            notify(str(path), done, summary.chunks_written + sum(len(p.chunks) for p in pending))
        if pending:
            flush()
        summary.generation = writer.commit()
    order = {str(path): i for i, path in enumerate(files)}
    summary.outcomes.sort(key=lambda o: order.get(o.path, len(order)))  # skipped symlinks last
    summary.seconds = time.perf_counter() - start
    return summary


def _prepare_file(path: Path, writer: IndexWriter, embedder: Embedder, chunk_tokens: int,
                  overlap: int) -> tuple[FileOutcome, _Pending | None]:
    display = str(path)
    doc_id = document_id(path)
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        return FileOutcome(display, "skipped", reason=f"unsupported file type '{path.suffix or path.name}'",
                           reason_type=UnsupportedFileType.error_type), None
    try:
        data = path.read_bytes()
    except OSError as exc:
        return FileOutcome(display, "failed", doc_id, reason=f"cannot read file: {exc.strerror or exc}",
                           reason_type="unreadable"), None
    sha = hashlib.sha256(data).hexdigest()
    existing = writer.document(doc_id)
    if existing is not None and existing.sha256 == sha:
        return FileOutcome(display, "unchanged", doc_id, existing.chunks), None
    try:
        loaded: LoadedDocument = load_document(path, data)
    except UnprocessableDocumentError as exc:
        status = "skipped" if isinstance(exc, UnsupportedFileType) else "failed"
        return FileOutcome(display, status, doc_id, reason=exc.message, reason_type=exc.error_type), None
    chunks = chunk_document(loaded, embedder.tokenizer, chunk_tokens, overlap)
    record = DocumentRecord(
        id=doc_id, path=normalise_path(path), title=loaded.title, kind=loaded.kind, sha256=sha,
        pages=loaded.pages, bytes=len(data), chunks=len(chunks),
        ingested_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    outcome = FileOutcome(display, "updated" if existing is not None else "added", doc_id, len(chunks))
    return outcome, _Pending(record, chunks, outcome)


def delete_document(index: StoredIndex, id_or_path: str, lock_timeout_s: float = 5.0) -> DocumentRecord:
    with index.existing_writer(lock_timeout_s) as writer:
        record = writer.find_document(id_or_path)
        writer.delete_document(record.id)
        writer.commit()
    return record
