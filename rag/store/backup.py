"""Backups of the embedded store: one committed generation of an index in one file, restored elsewhere.

A backup is a zip holding ``manifest.json`` (index, generation, counts, embedder identity, app version, and
the sha256 of every other member), ``store.sqlite`` (SQLite's online-backup API: a consistent copy while
readers and a writer work) and ``vectors.faiss`` (that generation's vectors; a generation's file is never
rewritten, only a newer one written beside it). Taken while an ingest commits, the copy is retried until the
database and the vectors file are of one generation. Restoring verifies every checksum first and writes the
index beside its final name, then renames it into place: a failed restore leaves nothing behind.
PostgreSQL indexes are backed up with ``pg_dump`` (docs/sources.md, Backup and restore).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import uuid
import zipfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from rag.store.copy import ReEmbedder, copy_index
from rag.store.embedded import DB_NAME, RESTORE_PREFIX, EmbeddedIndex, EmbeddedStore, read_faiss, vectors_file
from rag.core.errors import BadRequestError, EmbedderMismatchError, InvalidBackupError
from rag.core.files import replace_file, scratch_folder
from rag.core.names import index_not_found, validate_index_name

FORMAT = 1
MANIFEST = "manifest.json"
DATABASE = "store.sqlite"
VECTORS = "vectors.faiss"
ATTEMPTS = 10  # commits that overtake a copy before the backup gives up


@dataclass(frozen=True)
class BackupManifest:
    format: int
    index: str
    generation: int
    documents: int
    chunks: int
    embedder: str
    dimension: int
    app_version: str
    created: str
    sha256: dict[str, str]


@dataclass(frozen=True)
class IndexCheck:
    index: str
    generation: int
    documents: int
    chunks: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _meta(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(str(db))
    try:
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()


def _counts(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(str(db))
    try:
        return conn.execute("SELECT (SELECT COUNT(*) FROM documents), (SELECT COUNT(*) FROM chunks)").fetchone()
    finally:
        conn.close()


def backup_index(index: EmbeddedIndex, target: Path, app_version: str) -> BackupManifest:
    """Write one committed generation of ``index`` to the zip ``target`` (replaced only once complete)."""
    if not index.exists():
        raise index_not_found(index.name, EmbeddedStore(index.root.parent).names())
    with scratch_folder("rag-backup-") as work:
        db, vectors = work / DATABASE, work / VECTORS
        for _ in range(ATTEMPTS):
            source = sqlite3.connect(str(index.root / DB_NAME), timeout=30)
            try:
                copy = sqlite3.connect(str(db))
                try:
                    source.backup(copy)  # one consistent snapshot, whatever a writer does meanwhile
                finally:
                    copy.close()
            finally:
                source.close()
            meta = _meta(db)
            generation = int(meta.get("generation", 0))
            if generation == 0:
                raise BadRequestError(f"index {index.name!r} has nothing committed yet")
            try:  # that generation's vectors: immutable, but removed two commits later
                shutil.copyfile(vectors_file(index.root, generation), vectors)
                break
            except FileNotFoundError:
                db.unlink()
        else:
            raise BadRequestError(f"index {index.name!r} committed {ATTEMPTS} times while it was being copied; "
                                  "try again when the ingest is done")
        documents, chunks = _counts(db)
        manifest = BackupManifest(FORMAT, index.name, generation, documents, chunks, meta.get("embedder", ""),
                                  int(meta.get("dimension", 0) or 0), app_version,
                                  datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  {DATABASE: _sha256(db), VECTORS: _sha256(vectors)})
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
                archive.writestr(MANIFEST, json.dumps(asdict(manifest), indent=2) + "\n")
                archive.write(db, DATABASE)
                archive.write(vectors, VECTORS)
            replace_file(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return manifest


def read_backup(path: Path, into: Path) -> BackupManifest:
    """Unpack ``path`` into the folder ``into`` and verify every member's checksum."""
    try:
        with zipfile.ZipFile(path) as archive:
            manifest = BackupManifest(**json.loads(archive.read(MANIFEST)))
            if manifest.format != FORMAT:
                raise InvalidBackupError(f"{path}: backup format {manifest.format}, this program reads {FORMAT}")
            _check_manifest(path, manifest)
            for member in (DATABASE, VECTORS):
                archive.extract(member, into)
    except FileNotFoundError as exc:
        raise BadRequestError(f"no backup file {path}") from exc
    except (zipfile.BadZipFile, KeyError, TypeError, ValueError, OSError) as exc:
        raise InvalidBackupError(f"{path} is not a readable index backup ({exc})") from exc
    for member, expected in manifest.sha256.items():
        if _sha256(into / member) != expected:
            raise InvalidBackupError(f"{path}: {member} does not match its checksum (the file is damaged); nothing restored")
    return manifest


def _check_manifest(path: Path, manifest: BackupManifest) -> None:
    """A manifest that vouches for every file it comes with: a sha256 for each (a backup whose manifest left one
    out would be restored unchecked), and the generation as a positive integer (it names the vectors file)."""
    try:
        validate_index_name(manifest.index if isinstance(manifest.index, str) else "")
    except BadRequestError:
        raise InvalidBackupError(f"{path}: its manifest names no valid index ({manifest.index!r}); "
                                 "nothing restored") from None
    generation = manifest.generation
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
        raise InvalidBackupError(f"{path}: its manifest gives no generation (a positive integer: {generation!r}); "
                                 "nothing restored")
    checksums = manifest.sha256 if isinstance(manifest.sha256, dict) else {}
    missing = [m for m in (DATABASE, VECTORS)
               if not (isinstance(checksums.get(m), str) and re.fullmatch(r"[0-9a-f]{64}", checksums[m]))]
    if missing or set(checksums) != {DATABASE, VECTORS}:
        what = f"no sha256 of {', '.join(missing)}" if missing else \
            f"checksums of files it does not hold ({', '.join(sorted(set(checksums) - {DATABASE, VECTORS}))})"
        raise InvalidBackupError(f"{path}: its manifest has {what}: every file of a backup must be checked; "
                                 "nothing restored")


@dataclass(frozen=True)
class Restored:
    """A restore: the backup's manifest, the index it became, and the followed folders whose schedules were
    dropped (restored under its own name) or that were forgotten (under another name)."""

    manifest: BackupManifest
    index: str
    unscheduled: list[str]
    forgotten: list[str]


def restore_index(path: Path, store: EmbeddedStore, name: str | None, embedder_identity: str,
                  reembed: ReEmbedder | None = None) -> Restored:
    """Restore the backup ``path`` as index ``name`` (default: its own name), which must not exist yet.
    A backup made with another embedder is refused (its vectors would not match this server's questions),
    unless ``reembed`` (the configured embedder) is given: then every chunk is embedded again. Restored under
    another name, the index follows no folders; under its own, it follows them on no schedule (a backup, old or
    from elsewhere, never starts syncing on its own: `rag sources add FOLDER --every` again)."""
    with scratch_folder("rag-restore-") as scratch:
        manifest = read_backup(path, Path(scratch))
        other_embedder = manifest.embedder != embedder_identity
        if other_embedder and reembed is None:
            raise EmbedderMismatchError(
                f"{path} was made with embedder {manifest.embedder}, not the configured {embedder_identity}; "
                "restore it with --re-embed (every chunk is embedded again with the configured one), restore it "
                "where that embedder is configured, or ingest the original files again")
        target = store.index(name or manifest.index)
        if target.exists():
            raise BadRequestError(f"index {target.name!r} exists already: restore with --as NEW_NAME, or delete it "
                                  f"first (rag index delete {target.name} --yes)")
        as_backed_up = Path(scratch) / "restored" / target.name if other_embedder else target.root
        staging = as_backed_up.with_name(f"{RESTORE_PREFIX}{uuid.uuid4().hex[:8]}")
        staging.mkdir(parents=True)
        try:
            shutil.copyfile(Path(scratch) / DATABASE, staging / DB_NAME)
            shutil.copyfile(Path(scratch) / VECTORS, vectors_file(staging, manifest.generation))
            replace_file(staging, as_backed_up)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if other_embedder:  # documents, chunks and sources as backed up; vectors from the configured embedder
            assert reembed is not None
            try:
                copy_index(EmbeddedStore(as_backed_up.parent).index(target.name), target, reembed=reembed)
            except BaseException:
                if target.exists():
                    delete_index(target)  # never half an index under its name
                raise
    unscheduled, forgotten = _settle_sources(target, forget=target.name != manifest.index)
    return Restored(manifest, target.name, unscheduled, forgotten)


def _settle_sources(index: EmbeddedIndex, forget: bool) -> tuple[list[str], list[str]]:
    """A copy restored under another name does not follow the original's folders (the server would sync
    them into both): they are forgotten. The original, restored under its own name (a new machine), follows
    them, on no schedule: whoever restores says again which to sync by themselves. The folders unscheduled and
    forgotten."""
    unscheduled, forgotten = [], []
    with index.existing_writer() as writer:
        for data in writer.sources():
            record = json.loads(data)
            if forget:
                writer.delete_source(record["id"])
                forgotten.append(record.get("display_path") or record["path"])
            elif record.get("every_s") is not None:
                record["every_s"] = None
                writer.put_source(record["id"], json.dumps(record))
                unscheduled.append(record.get("display_path") or record["path"])
        writer.commit()
    return unscheduled, forgotten


def verify_index(index: EmbeddedIndex) -> IndexCheck:
    """Check an index's files against its own records: SQLite's integrity, the committed generation's vectors
    (present, readable, one per chunk, the same ids), the text index and the documents' chunk counts."""
    if not index.exists():
        raise index_not_found(index.name, EmbeddedStore(index.root.parent).names())
    problems: list[str] = []
    conn = sqlite3.connect(str(index.root / DB_NAME))
    try:
        conn.execute("BEGIN")  # one snapshot for every check below
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            problems.append(f"SQLite integrity check: {integrity}")
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        generation = int(meta.get("generation", 0))
        documents, chunks = conn.execute("SELECT (SELECT COUNT(*) FROM documents), (SELECT COUNT(*) FROM chunks)").fetchone()
        chunk_ids = {row[0] for row in conn.execute("SELECT id FROM chunks")}
        miscounted = conn.execute(
            "SELECT d.id FROM documents d LEFT JOIN (SELECT doc_id, COUNT(*) n FROM chunks GROUP BY doc_id) c "
            "ON c.doc_id = d.id WHERE COALESCE(c.n, 0) != d.chunks").fetchall()
        if miscounted:
            problems.append(f"{len(miscounted)} documents' chunk counts differ from their chunks "
                            f"(first: {miscounted[0][0]})")
        fts = conn.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()[0]
        if fts != chunks:
            problems.append(f"the text index holds {fts} rows for {chunks} chunks")
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    if generation:
        vectors = vectors_file(index.root, generation)
        try:
            faiss_index = read_faiss(vectors)
        except FileNotFoundError:
            problems.append(f"{vectors.name} (generation {generation}) is missing")
        except RuntimeError as exc:
            problems.append(f"{vectors.name} cannot be read: {str(exc).splitlines()[0][:200]}")
        else:
            if faiss_index.ntotal != chunks:
                problems.append(f"{vectors.name} holds {faiss_index.ntotal} vectors for {chunks} chunks")
            else:
                import faiss  # lazy: keeps rag --help fast (faiss: ~0.08 s)

                id_map = faiss.downcast_index(faiss_index)
                ids = set(faiss.vector_to_array(id_map.id_map).tolist()) if hasattr(id_map, "id_map") else chunk_ids
                if ids != chunk_ids:
                    problems.append(f"{vectors.name}: {len(chunk_ids - ids)} chunks have no vector, "
                                    f"{len(ids - chunk_ids)} vectors belong to no chunk")
    elif chunks:
        problems.append("chunks without a committed generation")
    return IndexCheck(index.name, generation, documents, chunks, problems)


def delete_index(index: EmbeddedIndex) -> None:
    """Remove an index folder (see ``EmbeddedStore.delete``)."""
    EmbeddedStore(index.root.parent).delete(index.name)
