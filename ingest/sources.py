"""Watched folders ("sources"): a sync brings an index to a folder's current state.

New and changed files are ingested (size and modification time first, so an unchanged file is not even read;
the content hash decides for the rest), files the source ingested that are gone from the folder (or no longer
match its glob) are removed from the index — never a document under the folder it did not ingest — and a file
moved or renamed with the same content keeps its chunks and vectors (nothing is embedded again). A folder that
is missing or cannot be listed is an error and removes nothing; neither does a subfolder that cannot be read.
Sources live with their index (a table in either store); on the embedded store a sync is one commit, so a
sync killed half-way leaves the previous state and the next one converges. A sync holds its store's lock on
the source throughout (``StoredIndex.source_lock``): with replicas on one PostgreSQL, one syncs it at a time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import msgspec

from rag.embedder import Embedder
from ingest.formats.worker import FileLoader
from ingest.parameters import IngestParameters
from ingest.pipeline import ATTACHMENT_SEP, UNREADABLE_FOLDER, FileOutcome, IngestSummary, discover, ingest_into
from ingest.progress import Progress, Started, UnchangedCounted, ignore
from rag.core.records import Chunk, DocumentRecord, FolderGroups, display_path, document_id, normalise_path
from rag.store import IndexWriter, StoredIndex
from rag.core import observe, paths
from rag.core.access import Principal
from rag.core.errors import BadRequestError, SourceBusyError, SourceNotFoundError, SourceUnavailableError
from rag.core.files import read_with_stat
from rag.core.names import access_groups
from rag.core.paths import is_under


class FileState(msgspec.Struct, array_like=True):
    size: int
    mtime_ns: int
    sha256: str


class LastSync(msgspec.Struct):
    started_at: str
    seconds: float
    status: str  # ok | failed (some files failed) | error (the folder could not be read: nothing changed)
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    renamed: int = 0
    removed: int = 0
    failed: int = 0
    chunks_embedded: int = 0
    error: str | None = None
    failures: list[dict[str, str]] = msgspec.field(default_factory=list)


class Source(msgspec.Struct):
    id: str
    index: str
    path: str  # the folder's identity, as normalise_path spells it (what syncs list and compare)
    glob: str | None = None
    groups: str | None = None  # access groups every synced document gets; None: as ingest (kept, or public)
    added_at: str = ""
    every_s: int | None = None  # the server syncs it this often (None: only `rag sync` / sync now)
    last: LastSync | None = None
    files: dict[str, FileState] = msgspec.field(default_factory=dict)  # what the last sync saw
    display_path: str = ""  # the folder as the user spelled it (what people see); "": as ``path``

    def __post_init__(self) -> None:
        if not self.display_path:
            self.display_path = self.path

    def summary(self) -> dict[str, Any]:
        """The source without its per-file state (lists, the API), its folder as the user spelled it."""
        return {"id": self.id, "index": self.index, "path": self.display_path, "glob": self.glob,
                "groups": self.groups,
                "added_at": self.added_at, "every_s": self.every_s, "files": len(self.files),
                "last": msgspec.to_builtins(self.last) if self.last else None}


def next_sync(source: Source) -> float | None:
    """When the server syncs ``source`` next (Unix time; None: not on a schedule). Each source's interval is
    stretched by up to 10% (fixed per source), so sources added together do not all run at once."""
    if source.every_s is None:
        return None
    if source.last is None:
        return 0.0
    started = datetime.fromisoformat(source.last.started_at).timestamp()
    return started + source.every_s * (1 + int(source.id[:4], 16) / 0xFFFF / 10)


def due_sources(sources: Sequence[Source], now: float) -> list[Source]:
    """The scheduled sources whose next sync has come, longest overdue first."""
    due = [(when, s) for s in sources if (when := next_sync(s)) is not None and when <= now]
    return [s for _, s in sorted(due, key=lambda pair: pair[0])]


def source_id(index: str, folder: str) -> str:
    return hashlib.sha256(f"{index}\0{folder}".encode("utf-8")).hexdigest()[:12]


def load_sources(rows: Sequence[str]) -> list[Source]:
    return [msgspec.json.decode(row, type=Source) for row in rows]


def index_sources(index: StoredIndex) -> list[Source]:
    """An index's sources, from its committed state; an index not created yet follows none."""
    if not index.exists():
        return []
    reader = index.reader()
    try:
        return load_sources(reader.sources())
    finally:
        reader.close()


def save_source(writer: IndexWriter, source: Source) -> None:
    writer.put_source(source.id, msgspec.json.encode(source).decode("utf-8"))


def groups_it_gives(source: Source, folder_groups: FolderGroups) -> set[str]:
    """The stored groups a sync of ``source`` may give a new document: its own groups, else those of the mapped
    folder it lies in and of every mapped folder inside it ("" when a file may be public)."""
    if source.groups is not None:
        return {source.groups}
    inside = source.path.rstrip(os.sep) + os.sep
    given = {folder_groups.groups_for(source.path) or ""}
    given.update(groups for folder, groups in folder_groups.folders if folder.startswith(inside))
    return given


def source_visible_to(principal: Principal, source: Source, documents: Sequence[DocumentRecord],
                      folder_groups: FolderGroups) -> bool:
    """Whether ``principal`` may see ``source`` (its folder, its last sync's failures, its jobs) and sync it: it
    sees every document. Anyone else only if it sees every document the source holds and every group a sync
    of it may give; otherwise the source does not exist for it."""
    if principal.unrestricted:
        return True
    inside = source.path.rstrip(os.sep) + os.sep
    return (all(principal.sees(frozenset(g for g in groups.split(",") if g))
                for groups in groups_it_gives(source, folder_groups))
            and all(principal.sees(d.groups) for d in documents if d.path.startswith(inside)))


def find_source(sources: Sequence[Source], id_or_path: str) -> Source:
    """A source by its id or its folder's path (matched by its spelling: never resolved on disk)."""
    try:
        wanted = paths.lexical_identity(id_or_path)
    except (OSError, ValueError):
        wanted = None
    for source in sources:
        if id_or_path in (source.id, source.display_path) or source.path == wanted:
            return source
    raise SourceNotFoundError(f"no source {id_or_path!r}; `rag sources list` shows them")


def check_folder(folder: Path, shown: str | None = None) -> None:
    """A source folder must exist and be listable; otherwise a sync would take it for empty. ``shown``: the
    folder as messages name it (default: as given)."""
    shown = str(folder) if shown is None else shown
    if not folder.exists():
        raise SourceUnavailableError(f"source folder {shown} does not exist (a share not mounted?); "
                                     "nothing was removed from the index")
    if not folder.is_dir():
        raise SourceUnavailableError(f"source {shown} is not a folder; nothing was removed from the index")
    try:
        with os.scandir(folder) as entries:
            next(entries, None)
    except OSError as exc:
        raise SourceUnavailableError(f"source folder {shown} cannot be read ({exc.strerror or exc}); nothing "
                                     "was removed from the index") from exc


def add_source(index: StoredIndex, embedder: Embedder, folder: Path, glob: str | None = None,
               groups: Sequence[str] | None = None, lock_timeout_s: float = 5.0,
               every_s: int | None = None) -> Source:
    """Register ``folder`` as a source of ``index`` (created if new); adding it again updates glob/groups."""
    check_folder(folder)
    path = normalise_path(folder)
    stored_groups = None if groups is None else access_groups(groups)
    with index.writer(embedder.config.identity, embedder.dimension, lock_timeout_s) as writer:
        sources = load_sources(writer.sources())
        overlapping = [s for s in sources if s.path != path and (
            is_under(path, s.path) or is_under(s.path, path))]
        if overlapping:
            raise BadRequestError(f"{folder} overlaps source {overlapping[0].display_path} ({overlapping[0].id}): one "
                                  "folder inside another would have two syncs removing each other's files")
        existing = next((s for s in sources if s.path == path), None)
        source = Source(id=source_id(index.name, path), index=index.name, path=path, glob=glob, groups=stored_groups,
                        added_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), every_s=every_s or None,
                        display_path=display_path(folder))
        if existing is not None:
            source = msgspec.structs.replace(existing, glob=glob, groups=stored_groups,
                                             display_path=display_path(folder),
                                             every_s=existing.every_s if every_s is None else every_s or None)
        save_source(writer, source)
        writer.commit()
    return source


def remove_source(index: StoredIndex, id_or_path: str, lock_timeout_s: float = 5.0) -> Source:
    """Stop watching a folder; its documents stay in the index (delete them with `rag documents delete`)."""
    with index.existing_writer(lock_timeout_s) as writer:
        source = find_source(load_sources(writer.sources()), id_or_path)
        writer.delete_source(source.id)
        writer.commit()
    return source


@dataclass
class SyncSummary:
    source: Source
    ingest: IngestSummary
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.ingest.ok

    def as_dict(self) -> dict[str, Any]:
        data = self.ingest.as_dict()
        data.update({"source": self.source.id, "folder": self.source.display_path, "unchanged": self.unchanged,
                     "renamed": [{"from": a, "to": b} for a, b in self.renamed], "removed": self.removed,
                     "chunks_embedded": self.ingest.chunks_written, "seconds": round(self.seconds, 3)})
        return data


def sync_source(index: StoredIndex, source: Source, parameters: IngestParameters, progress: Progress | None = None,
                allow_empty: bool = False, lock_timeout_s: float = 5.0) -> SyncSummary:
    """One sync of ``source`` (see the module notes); a source without groups of its own gives a file under a
    folder of the parameters' ``folder_groups`` that folder's groups. Raises SourceUnavailableError, changing
    nothing, when the folder is missing or cannot be listed, or holds no file to follow while the last sync saw
    some (an unmounted share is often an empty mount-point folder) unless ``allow_empty``; the error is recorded
    on the source. Raises SourceBusyError, changing and recording nothing, when another process is syncing the
    same source (the store's ``source_lock``: on PostgreSQL, one replica at a time)."""
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    embedder = parameters.embedder
    folder = Path(source.path)  # listed by its identity: a drive letter mapped for the user may not be here
    shown = respelled(folder, source.display_path)
    notify = progress or ignore
    with observe.start_span(f"sync {index.name}", {observe.DATA_SOURCE: index.name, "rag.source.id": source.id,
                                                  "file.path": source.path}) as span, \
            index.source_lock(source.id):
        try:
            check_folder(folder, source.display_path)
        except SourceUnavailableError as exc:
            _record_error(index, embedder, source, started_at, started, exc.message, lock_timeout_s)
            raise
        rejected: list[FileOutcome] = []
        files = list(discover([folder], source.glob, rejected))
        if not files and source.files and not allow_empty:
            exc = SourceUnavailableError(
                f"source folder {source.display_path} has no file to follow where the last sync saw "
                f"{len(source.files)} (a share not mounted?); nothing was removed from the index. If it was emptied "
                "on purpose: rag sync --allow-empty, or rag sources remove")
            _record_error(index, embedder, source, started_at, started, exc.message, lock_timeout_s)
            raise exc
        unreadable = [normalise_path(o.path) for o in rejected if o.reason_type == UNREADABLE_FOLDER]
        summary = IngestSummary(index=index.name)
        summary.outcomes.extend(dataclasses.replace(o, path=shown(Path(o.path))) for o in rejected)
        result = SyncSummary(source, summary)
        notify(Started(len(files)))
        reader = index.reader() if index.exists() else None
        try:
            with index.writer(embedder.config.identity, embedder.dimension, lock_timeout_s) as writer, \
                    FileLoader(parameters.load_options) as loader:
                stored = next((s for s in load_sources(writer.sources()) if s.id == source.id), None)
                if stored is None:
                    raise SourceNotFoundError(f"source {source.id} ({source.display_path}) was removed meanwhile")
                states = _sync_into(writer, loader, reader, stored, files, unreadable, result, parameters, notify,
                                    shown)
                result.seconds = time.perf_counter() - started
                failures = [{"path": o.path, "reason": o.reason or "", "reason_type": o.reason_type or ""}
                            for o in summary.outcomes if o.status == "failed"]
                last = LastSync(started_at, round(result.seconds, 3), "ok" if not failures else "failed",
                                added=summary.count("added"), updated=summary.count("updated"),
                                unchanged=result.unchanged, renamed=len(result.renamed), removed=len(result.removed),
                                failed=len(failures), chunks_embedded=summary.chunks_written, failures=failures[:50])
                result.source = msgspec.structs.replace(stored, last=last, files=states)
                save_source(writer, result.source)
                summary.generation = writer.commit()
        finally:
            if reader is not None:
                reader.close()
        summary.seconds = result.seconds
        span.set_attributes({"rag.sync.added": summary.count("added"), "rag.sync.updated": summary.count("updated"),
                             "rag.sync.unchanged": result.unchanged, "rag.sync.renamed": len(result.renamed),
                             "rag.sync.removed": len(result.removed), "rag.sync.failed": summary.count("failed"),
                             "rag.ingest.chunks": summary.chunks_written})
    return result


def _sync_into(writer: IndexWriter, loader: FileLoader, reader: Any, source: Source, files: list[Path],
               unreadable: list[str], result: SyncSummary, parameters: IngestParameters, notify: Progress,
               shown: Callable[[Path], str]) -> dict[str, FileState]:
    """The sync's changes inside the open writer; returns the per-file state to remember. ``shown``: a listed
    file's path as people see it."""
    summary, folder_groups = result.ingest, parameters.folder_groups

    def wanted(path: Path) -> str | None:  # the groups the file's document must have; None: whatever it has
        return source.groups if source.groups is not None else folder_groups.groups_for(path)

    prefix = source.path.rstrip(os.sep) + os.sep
    indexed = {d.path: d for d in writer.documents_under(prefix) if ATTACHMENT_SEP not in d.path[len(prefix):]}
    # What this source ingested (its last sync's files): only those may it remove or move. A document under the
    # folder that came another way (`rag ingest`, an earlier glob, another index's tool) is not its to delete.
    owned = {path: record for path, record in indexed.items() if path in source.files}
    states: dict[str, FileState] = {}
    current: dict[str, Path] = {}
    for path in files:
        current[normalise_path(path)] = path
    changed: list[Path] = []
    for norm, path in current.items():
        try:
            stat = path.stat()
        except OSError:
            changed.append(path)  # gone or unreadable since the listing: the ingest reports it
            continue
        known, record = source.files.get(norm), indexed.get(norm)
        if (known is not None and record is not None and known.size == stat.st_size
                and known.mtime_ns == stat.st_mtime_ns and known.sha256 == record.sha256
                and wanted(path) in (None, record.access_groups)):
            states[norm] = known
            result.unchanged += 1
            if record.display_path != display_path(shown(path)):  # an index from before display paths
                writer.set_display_path(record.id, display_path(shown(path)))
            summary.outcomes.append(FileOutcome(shown(path), "unchanged", record.id, record.chunks))
            continue
        changed.append(path)
    gone = {p: d for p, d in owned.items()
            if p not in current and not any(is_under(p, u) or p == u for u in unreadable)}
    # Renames: a new path whose content is a vanished document's keeps that document's chunks and vectors.
    by_hash: dict[str, DocumentRecord] = {}
    for record in gone.values():
        if record.kind != "eml":  # a mail's attachments are documents of their own: it is ingested again
            by_hash.setdefault(record.sha256, record)
    to_ingest: list[Path] = []
    for path in changed:
        norm = normalise_path(path)
        if norm in indexed or not by_hash or reader is None:
            to_ingest.append(path)
            continue
        try:
            data, stat = read_with_stat(path)
        except OSError:
            to_ingest.append(path)
            continue
        sha = hashlib.sha256(data).hexdigest()
        old = by_hash.pop(sha, None)
        if old is None:
            to_ingest.append(path)
            continue
        chunks, vectors = reader.document_chunks(old.id)
        groups = wanted(path)
        moved = dataclasses.replace(old, id=document_id(path), path=norm, display_path=display_path(shown(path)),
                                    access_groups=old.access_groups if groups is None else groups,
                                    ingested_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        writer.put_document(moved, [Chunk(c.text, c.page, c.section, c.start, c.end, c.ordinal) for c in chunks],
                            vectors)
        writer.delete_document(old.id)
        del gone[old.path]
        result.renamed.append((old.display_path, moved.display_path))
        states[norm] = FileState(stat.st_size, stat.st_mtime_ns, sha)
        summary.outcomes.append(FileOutcome(shown(path), "renamed", moved.id, moved.chunks,
                                            reason=f"was {old.display_path}"))
    for path, record in sorted(gone.items()):
        writer.delete_document(record.id)
        for attachment in writer.documents_under(record.path + ATTACHMENT_SEP):
            writer.delete_document(attachment.id)
        result.removed.append(record.display_path)
        summary.outcomes.append(FileOutcome(record.display_path, "removed", record.id, record.chunks))
    done_before = len(files) - len(to_ingest)
    notify(UnchangedCounted(done_before))
    read_stats: dict[Path, os.stat_result] = {}
    ingest_into(writer, loader, to_ingest, summary, parameters, notify, source.groups, first=done_before,
                display=shown, read_stats=read_stats)
    for path in to_ingest:
        norm = normalise_path(path)
        outcome = next((o for o in summary.outcomes if o.path == shown(path)), None)
        if outcome is None or outcome.status not in ("added", "updated", "unchanged"):
            continue  # failed or skipped: looked at again next time
        record, stat = writer.document(document_id(path)), read_stats.get(path)
        if record is not None and stat is not None:  # as it was when read, not as it is now
            states[norm] = FileState(stat.st_size, stat.st_mtime_ns, record.sha256)
    return states


def respelled(folder: Path, shown_folder: str) -> Callable[[Path], str]:
    """A path under ``folder`` spelled under ``shown_folder`` instead (the same folder as the user spelled it:
    on Windows an identity is lower-case, and may be the UNC path of the user's mapped drive)."""
    listed = str(folder).rstrip("\\/")

    def shown(path: Path) -> str:
        text = str(path)
        if text == listed or text == str(folder):
            return shown_folder
        if text.startswith(listed) and text[len(listed):len(listed) + 1] in ("/", "\\"):
            return shown_folder.rstrip("\\/") + text[len(listed):]
        return text

    return shown


def _record_error(index: StoredIndex, embedder: Embedder, source: Source, started_at: str, started: float,
                  message: str, lock_timeout_s: float) -> None:
    """Keep the failed sync's reason on the source (its files and documents are left as they were)."""
    with index.writer(embedder.config.identity, embedder.dimension, lock_timeout_s) as writer:
        stored = next((s for s in load_sources(writer.sources()) if s.id == source.id), None)
        if stored is None:
            return
        last = LastSync(started_at, round(time.perf_counter() - started, 3), "error", error=message)
        save_source(writer, msgspec.structs.replace(stored, last=last))
        writer.commit()


__all__ = ["Source", "SourceBusyError", "SourceNotFoundError", "SourceUnavailableError", "SyncSummary", "add_source",
           "find_source", "index_sources", "load_sources", "remove_source", "sync_source"]
