"""The embedded store: ``indexes/<name>/`` = SQLite (documents, chunks, FTS5 for BM25) + FAISS vectors.

Commit protocol (crash-safe, one writer, many readers):

* A writer holds SQLite's write lock (``BEGIN IMMEDIATE``) for its whole run, so a
  second writer fails clearly instead of interleaving; readers (WAL mode) keep
  seeing the last committed state meanwhile.
* Vectors for generation N+1 are written to ``vectors-<N+1>.faiss`` (temp file,
  fsync, rename) *before* the SQLite transaction that records ``generation = N+1``
  commits. A crash at any point leaves ``generation = N`` and its file intact;
  an orphaned newer file is overwritten by the next run.
* Readers compare the committed generation on each search and reload vectors
  when it moved, so a running server picks up new commits without restart.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from rag.core.access import stored_groups, visible_ids
from rag.core.records import Chunk, ChunkRecord, DocumentRecord, IndexInfo, candidate_display, candidate_ids
from rag.store.lexical import LEXICAL_ROW_BUDGET, choose_words
from rag.core.errors import (
    BadRequestError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    IndexBusyError,
    IndexLockedError,
)
from rag.core.files import LOCK_RETRIES, remove_tree, replace_file
from rag.core.names import index_not_found, validate_index_name
from rag.core.paths import fold_case
from rag.core.text import content_terms


def _faiss():
    """The faiss module, imported on first use: most ``rag`` commands never touch a vector index."""
    import faiss  # lazy: keeps rag --help fast (faiss: ~0.08 s of a CLI start)

    return faiss


DB_NAME = "store.sqlite"
# A deleted index is marked twice before its folder goes: this file (names and new readers skip it) and a
# ``deleted_at`` row in its database, which readers that already have it open (another process's server) see on
# their next look and close. Windows removes no folder while a process holds a file in it.
TOMBSTONE = "deleted"
ASIDE_PREFIX = ".deleted-"
RESTORE_PREFIX = ".restore-"  # a restore's staging folder (rag/store/backup.py)
RESTORE_STALE_S = 3600.0  # one untouched this long belongs to no running restore
# How long a delete waits for other processes' readers to let go (a server looks every 2 s).
RELEASE_WAIT_S = 6.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY, path TEXT NOT NULL UNIQUE, title TEXT NOT NULL, kind TEXT NOT NULL,
    sha256 TEXT NOT NULL, pages INTEGER, bytes INTEGER NOT NULL, chunks INTEGER NOT NULL,
    ingested_at TEXT NOT NULL, access_groups TEXT NOT NULL DEFAULT '', display_path TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, doc_id TEXT NOT NULL REFERENCES documents(id),
    ordinal INTEGER NOT NULL, text TEXT NOT NULL, page INTEGER, section TEXT,
    start INTEGER NOT NULL, "end" INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, content='chunks', content_rowid='id', tokenize='porter unicode61');
CREATE TABLE IF NOT EXISTS sources (id TEXT PRIMARY KEY, data TEXT NOT NULL);
"""


BM25_K1, BM25_B = 1.2, 0.75  # FTS5's bm25() constants, and those of the searched-set BM25


def _term_frequency(score: float, hits: int, rows: int, length: int, average: float) -> int:
    """A word's count in a row, from FTS5's ``bm25()`` of that one word there (``score``, made positive): its
    formula solved for the count, with the index-wide figures FTS5 used (``hits`` rows of ``rows`` hold the
    word; ``length`` tokens in this row, ``average`` in a row)."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    idf = idf if idf > 0 else 1e-6
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / average)
    top = idf * (BM25_K1 + 1)
    if score <= 0 or score >= top:
        return 1
    return max(1, round(score * norm / (top - score)))


def _varint(blob: bytes) -> int:
    """The first value of an FTS5 docsize record (SQLite's varint: big-endian, 7 bits a byte): a row's tokens."""
    value = 0
    for position, byte in enumerate(bytes(blob or b"")[:9]):
        if position == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    return value


def fts_query(text: str) -> str | None:
    """An FTS5 OR-query of the content words of ``text`` (None if there are none)."""
    terms = content_terms(text)
    return " OR ".join(f'"{w}"' for w in terms) if terms else None


def _connect(db_path: Path, timeout_s: float = 30.0) -> sqlite3.Connection:
    conn = sqlite3.connect(str(db_path), timeout=timeout_s, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _write_faiss(index, final: Path) -> None:
    """``index`` written to ``final`` through a temp file: fsync, then rename (retried while a scanner holds it).
    FAISS streams into a Python file object: given a path, FAISS opens it with C ``fopen``, which on Windows
    cannot open a path outside the ANSI code page (a home under ``C:\\Users\\Jürgen``, faiss #3073)."""
    faiss = _faiss()

    tmp = final.with_suffix(".faiss.tmp")
    with tmp.open("wb") as handle:
        faiss.write_index(index, faiss.PyCallbackIOWriter(handle.write))
        handle.flush()
        os.fsync(handle.fileno())
    replace_file(tmp, final)


def read_faiss(path: Path):
    """The FAISS index in ``path``, read by Python (see ``_write_faiss``)."""
    faiss = _faiss()

    with path.open("rb") as handle:
        return faiss.read_index(faiss.PyCallbackIOReader(handle.read))


def vectors_file(root: Path, generation: int) -> Path:
    return root / f"vectors-{generation}.faiss"


def _new_faiss(dimension: int):
    faiss = _faiss()

    return faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))


# --------------------------------------------------------------------------- vector index by size
# Exact search reads every vector for every query (linear in the corpus); past ANN_MIN_VECTORS the commit
# turns the index into IVF (k-means cells, a query scans NPROBE_FRACTION of them) with 8-bit scalar-quantised
# codes (a quarter of float32's memory). Measurements behind the numbers: docs/performance.md, "Growth".
ANN_MIN_VECTORS = 50_000
NLIST_PER_SQRT_N = 2  # cells ~ 2 sqrt(n), a power of two
TRAIN_PER_CELL = 40  # k-means sample: faiss warns under 39 points per centroid
# Probing 1/8 of the cells: dense recall@5 of the dev questions at 1M chunks 0.535 vs 0.565 probing all of them,
# p95 6.7 ms vs 40 ms (1/64: 0.370, 1.2 ms; 1/16: 0.485, 3.3 ms) -- docs/performance.md, "Growth".
NPROBE_FRACTION = 1 / 8
MIN_NPROBE = 32
FILTERED_EXACT_MAX = 100_000  # a document filter this small is scored exactly (all its vectors) on an IVF index


def ivf_cells(n: int) -> int:
    """Cells for an IVF index over ``n`` vectors: the power of two nearest 2 sqrt(n), at least 256 (fewer
    only for a tiny index, so that k-means has four points per cell)."""
    target = NLIST_PER_SQRT_N * n ** 0.5
    cells = max(256, 1 << max(0, round(np.log2(max(target, 1)))))
    while cells > 1 and cells * 4 > n:
        cells //= 2
    return cells


def vector_index_plan(n: int, current_cells: int | None) -> int | None:
    """What a commit should leave: None = exact (flat), else the IVF cell count. An IVF index is kept
    until its size calls for twice (or half) its cells, so growing a large index does not retrain it
    on every commit; below half the threshold it goes back to exact."""
    if current_cells is None:
        return ivf_cells(n) if n >= ANN_MIN_VECTORS else None
    if n < ANN_MIN_VECTORS // 2:
        return None
    wanted = ivf_cells(n)
    return wanted if wanted >= 2 * current_cells or 2 * wanted <= current_cells else current_cells


def _ivf_cells_of(index) -> int | None:
    faiss = _faiss()

    ivf = faiss.try_extract_index_ivf(index)
    return int(ivf.nlist) if ivf is not None else None


REBUILD_BATCH = 100_000  # vectors decoded at a time while rebuilding: memory stays flat at any index size


def _stored_ids(index) -> np.ndarray:
    """The ids of a flat (ID-mapped) or IVF index."""
    faiss = _faiss()

    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return faiss.vector_to_array(index.id_map).astype(np.int64)
    lists = ivf.invlists
    return np.concatenate([faiss.rev_swig_ptr(lists.get_ids(c), lists.list_size(c)).copy()
                           for c in range(ivf.nlist)] or [np.zeros(0, np.int64)]).astype(np.int64)


def _vectors_of(index, ids: np.ndarray) -> np.ndarray:
    """Vectors by id (an IVF index's come back decoded from their 8-bit codes)."""
    faiss = _faiss()

    ivf = faiss.try_extract_index_ivf(index)
    return np.ascontiguousarray((ivf or index).reconstruct_batch(ids), dtype=np.float32)


def _rebuild(source, target, ids: np.ndarray) -> None:
    for start in range(0, len(ids), REBUILD_BATCH):
        batch = ids[start:start + REBUILD_BATCH]
        target.add_with_ids(_vectors_of(source, batch), batch)


def build_ivf(source, cells: int, seed: int = 0):
    """An IVF (inner product) index with SQ8 codes holding ``source``'s vectors, k-means trained on a sample."""
    faiss = _faiss()

    dimension = source.d
    ids = _stored_ids(source)
    quantizer = faiss.IndexFlatIP(dimension)
    index = faiss.IndexIVFScalarQuantizer(quantizer, dimension, cells, faiss.ScalarQuantizer.QT_8bit,
                                          faiss.METRIC_INNER_PRODUCT)
    index.own_fields = True
    quantizer.this.disown()
    index.cp.niter = 10
    rng = np.random.default_rng(seed)
    sample = ids if len(ids) <= cells * TRAIN_PER_CELL else \
        np.sort(rng.choice(ids, cells * TRAIN_PER_CELL, replace=False))
    index.train(_vectors_of(source, sample))
    index.set_direct_map_type(faiss.DirectMap.Hashtable)  # reconstruct by id and remove_ids
    index.nprobe = min(cells, max(MIN_NPROBE, int(cells * NPROBE_FRACTION)))
    _rebuild(source, index, ids)
    return index


def fit_vector_index(index, dimension: int):
    """The index a commit writes: the same one, or rebuilt exact/IVF for its size (see ``vector_index_plan``)."""
    current = _ivf_cells_of(index)
    wanted = vector_index_plan(index.ntotal, current)
    if wanted == current:
        return index
    if wanted is None:
        exact = _new_faiss(dimension)
        _rebuild(index, exact, _stored_ids(index))
        return exact
    return build_ivf(index, wanted)


def describe_vector_index(index) -> str:
    """What ``rag index info`` shows: the kind of search and its parameters."""
    faiss = _faiss()

    if index is None:
        return "none (empty)"
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return f"flat: exact inner product (IVF from {ANN_MIN_VECTORS:,} vectors)"
    return f"ivf: {ivf.nlist} cells, nprobe {ivf.nprobe}, 8-bit scalar-quantised vectors (approximate)"


def _load_faiss(root: Path, generation: int, dimension: int):
    if generation == 0:
        return _new_faiss(dimension)
    return read_faiss(vectors_file(root, generation))


def _has_column(conn: sqlite3.Connection, column: str) -> bool:
    return any(row[1] == column for row in conn.execute("PRAGMA table_info(documents)"))


def _has_access_groups(conn: sqlite3.Connection) -> bool:
    return _has_column(conn, "access_groups")


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring an index made by an earlier version up to date (inside the writer's transaction)."""
    if not _has_access_groups(conn):  # an index made before documents had groups: all public
        conn.execute("ALTER TABLE documents ADD COLUMN access_groups TEXT NOT NULL DEFAULT ''")
    if not _has_column(conn, "display_path"):  # made before display paths: shown as their identity until seen again
        conn.execute("ALTER TABLE documents ADD COLUMN display_path TEXT NOT NULL DEFAULT ''")
        conn.execute("UPDATE documents SET display_path = path")


def committed_generation(root: Path) -> int:
    """The newest committed generation of the index in ``root`` (0: nothing committed)."""
    conn = _connect(root / DB_NAME)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    finally:
        conn.close()
    return int(row[0]) if row else 0


def disk_bytes(root: Path) -> int:
    """What the index in ``root`` holds on disk now: SQLite (with its WAL) and the committed generation's
    vectors (a previous generation's file, kept until no reader needs it, is not counted)."""
    files = [root / DB_NAME, root / f"{DB_NAME}-wal", vectors_file(root, committed_generation(root))]
    return sum(p.stat().st_size for p in files if p.is_file())


def exhaustive_dense_search(root: Path, vectors: np.ndarray, k: int) -> np.ndarray | None:
    """Chunk ids of the ``k`` nearest chunks per row of ``vectors`` with every IVF cell probed: the exact
    answer an approximate index stands for (what ``rag bench scale`` compares recall against). None when
    the index is exact already."""
    faiss = _faiss()

    generation = committed_generation(root)
    if generation == 0:
        return None
    index = read_faiss(vectors_file(root, generation))
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return None
    _, ids = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k,
                          params=faiss.SearchParametersIVF(nprobe=ivf.nlist))
    return ids


def _document(row: sqlite3.Row) -> DocumentRecord:
    return DocumentRecord(**{k: row[k] for k in row.keys()})


class EmbeddedWriter:
    """One ingest run: everything it does becomes visible at ``commit()`` or not at all."""

    def __init__(self, root: Path, embedder_identity: str, dimension: int, lock_timeout_s: float = 5.0) -> None:
        validate_index_name(root.name)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._conn = _connect(root / DB_NAME, timeout_s=lock_timeout_s)
        self._conn.executescript(SCHEMA)
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            _migrate(self._conn)
        except sqlite3.OperationalError as exc:
            self._conn.close()
            raise IndexLockedError(
                f"index {root.name!r} is being written by another process (an ingest is running); "
                "try again when it finishes") from exc
        meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        if "embedder" in meta and (meta["embedder"] != embedder_identity or int(meta["dimension"]) != dimension):
            self._conn.execute("ROLLBACK")
            self._conn.close()
            raise EmbedderMismatchError(
                f"index {root.name!r} was built with embedder {meta['embedder']} but the configured embedder is "
                f"{embedder_identity}; use the same embedder or ingest into a new index")
        self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('embedder', ?), ('dimension', ?), "
                           "('created_at', ?), ('generation', '0')",
                           (embedder_identity, str(dimension), time.strftime("%Y-%m-%dT%H:%M:%S")))
        self.generation = int(meta.get("generation", 0))
        self.dimension = dimension
        self._index = _load_faiss(root, self.generation, dimension)
        self._closed = False
        self._dirty = False
        # Sources and display paths change no vectors: committed without a new generation.
        self._metadata_changed = False

    @classmethod
    def existing(cls, root: Path, lock_timeout_s: float = 5.0) -> "EmbeddedWriter":
        """A writer on an index that must exist already, keeping its embedder (for deletes)."""
        reader = EmbeddedReader(root)
        info = reader.info()
        reader.close()
        return cls(root, info.embedder, info.dimension, lock_timeout_s)

    def __enter__(self) -> "EmbeddedWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._closed:
            self.rollback()

    def document(self, doc_id: str) -> DocumentRecord | None:
        row = self._conn.execute("SELECT * FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return _document(row) if row else None

    def find_document(self, id_or_path: str) -> DocumentRecord:
        record = next(filter(None, map(self.document, candidate_ids(id_or_path))), None)
        if record is None and (spelled := candidate_display(id_or_path)) is not None \
                and _has_column(self._conn, "display_path"):
            row = self._conn.execute("SELECT * FROM documents WHERE display_path = ? LIMIT 1", (spelled,)).fetchone()
            record = _document(row) if row else None
        if record is None:
            raise DocumentNotFoundError(f"no document {id_or_path!r} in index {self.root.name!r}")
        return record

    def delete_document(self, doc_id: str) -> int:
        ids = [r[0] for r in self._conn.execute("SELECT id FROM chunks WHERE doc_id = ?", (doc_id,))]
        if ids:
            self._index.remove_ids(np.asarray(ids, dtype=np.int64))
            self._conn.execute(
                "INSERT INTO chunks_fts(chunks_fts, rowid, text) "
                "SELECT 'delete', id, text FROM chunks WHERE doc_id = ?", (doc_id,))
            self._conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
        self._conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
        self._dirty = True
        return len(ids)

    def sources(self) -> list[str]:
        """The index's watched folders (``ingest.sources``), each as its JSON, with the last sync's state."""
        return [r[0] for r in self._conn.execute("SELECT data FROM sources ORDER BY id")]

    def put_source(self, source_id: str, data: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO sources VALUES (?, ?)", (source_id, data))
        self._metadata_changed = True

    def delete_source(self, source_id: str) -> bool:
        self._metadata_changed = True
        return self._conn.execute("DELETE FROM sources WHERE id = ?", (source_id,)).rowcount > 0

    def set_display_path(self, doc_id: str, display_path: str) -> None:
        """Show a document under another spelling of its path (its identity, chunks and vectors stay)."""
        self._conn.execute("UPDATE documents SET display_path = ? WHERE id = ?", (display_path, doc_id))
        self._metadata_changed = True

    def documents_under(self, path_prefix: str) -> list[DocumentRecord]:
        """Documents whose stored path starts with ``path_prefix`` (a mail's attachments: ``<mail>#``)."""
        rows = self._conn.execute("SELECT * FROM documents WHERE substr(path, 1, ?) = ?",
                                  (len(path_prefix), path_prefix)).fetchall()
        return [_document(r) for r in rows]

    def put_document(self, record: DocumentRecord, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Insert or replace a document with its chunks and their vectors."""
        if len(chunks) != len(vectors):
            raise ValueError("one vector per chunk")
        self.delete_document(record.id)
        self._conn.execute(
            "INSERT INTO documents (id, path, title, kind, sha256, pages, bytes, chunks, ingested_at, access_groups, "
            "display_path) VALUES (:id, :path, :title, :kind, :sha256, :pages, :bytes, :chunks, :ingested_at, "
            ":access_groups, :display_path)", record.__dict__)
        ids = []
        for chunk in chunks:
            cur = self._conn.execute(
                'INSERT INTO chunks (doc_id, ordinal, text, page, section, start, "end") VALUES (?, ?, ?, ?, ?, ?, ?)',
                (record.id, chunk.ordinal, chunk.text, chunk.page, chunk.section, chunk.start, chunk.end))
            ids.append(cur.lastrowid)
            self._conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (?, ?)", (cur.lastrowid, chunk.text))
        if ids:
            self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))

    def commit(self) -> int:
        """Publish everything done in this run atomically; returns the committed generation."""
        if not self._dirty and self.generation > 0:
            if self._metadata_changed:
                self._conn.execute("COMMIT")
                self._closed = True
                self._conn.close()
            else:
                self.rollback()  # nothing changed: keep the current generation
            return self.generation
        new_generation = self.generation + 1
        final = vectors_file(self.root, new_generation)
        self._index = fit_vector_index(self._index, self.dimension)
        _write_faiss(self._index, final)
        self._conn.execute("UPDATE meta SET value = ? WHERE key = 'generation'", (str(new_generation),))
        self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('vector_index', ?)",
                           (describe_vector_index(self._index),))
        self._conn.execute("COMMIT")
        self._closed = True
        self._conn.close()
        self._remove_stale(keep={new_generation, self.generation})
        self.generation = new_generation
        return new_generation

    def rollback(self) -> None:
        if self._closed:
            return
        try:
            self._conn.execute("ROLLBACK")
        finally:
            self._closed = True
            self._conn.close()

    def _remove_stale(self, keep: set[int]) -> None:
        # The previous generation stays one more round for readers that are loading it right now.
        for path in self.root.glob("vectors-*.faiss*"):
            match = re.fullmatch(r"vectors-(\d+)\.faiss", path.name)
            if match is None or int(match.group(1)) not in keep:
                try:
                    path.unlink()
                except OSError:
                    pass  # a reader on Windows may still hold it; the next commit retries


class EmbeddedReader:
    """Read side: searches the last committed state and follows new commits."""

    def __init__(self, root: Path) -> None:
        validate_index_name(root.name)
        if not (root / DB_NAME).is_file() or (root / TOMBSTONE).exists():
            raise index_not_found(root.name, EmbeddedStore(root.parent).names())
        self.root = root
        self.name = root.name
        self._conn = _connect(root / DB_NAME)
        if not self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'documents'").fetchone():
            # Its first writer has made the file and not yet its tables (a fuzzing run read one in that moment,
            # an async upload's job into a new index): not an index yet.
            self._conn.close()
            raise index_not_found(root.name, EmbeddedStore(root.parent).names())
        # One connection shared by the server's worker threads: serialise its use.
        self._lock = threading.RLock()
        self._generation = -1
        self._index = None  # vectors load on first search, so metadata reads stay cheap
        self._display_column = False  # seen once, it stays: an index made before display paths gets it when written

    def close(self) -> None:
        self._conn.close()

    def gone(self) -> bool:
        try:
            return bool(self._query("SELECT 1 FROM meta WHERE key = 'deleted_at'"))
        except sqlite3.Error:  # closed, or its files gone
            return True

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def _meta(self) -> dict[str, str]:
        return dict(self._query("SELECT key, value FROM meta"))

    @property
    def embedder_identity(self) -> str:
        return self._meta().get("embedder", "")

    def refresh(self) -> bool:
        """Reload vectors if a newer generation was committed. Returns True if it reloaded."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> bool:
        meta = self._meta()
        generation = int(meta.get("generation", 0))
        if generation == self._generation:
            return False
        dimension = int(meta.get("dimension", 0) or 0)
        for attempt in range(3):
            try:
                self._index = _load_faiss(self.root, generation, dimension) if dimension else None
                break
            except RuntimeError:  # replaced under us: read the newest generation again
                if attempt == 2:
                    raise
                generation = int(self._meta().get("generation", 0))
        self._generation = generation
        return True

    def check_embedder(self, identity: str) -> None:
        stored = self.embedder_identity
        if stored and stored != identity:
            raise EmbedderMismatchError(
                f"index {self.name!r} was built with embedder {stored}, not the configured {identity}")

    def info(self) -> IndexInfo:
        try:
            meta = self._meta()
            docs, chunks = self._query("SELECT (SELECT COUNT(*) FROM documents), (SELECT COUNT(*) FROM chunks)")[0]
            size = sum(p.stat().st_size for p in self.root.iterdir() if p.is_file())
        except (sqlite3.OperationalError, FileNotFoundError):  # deleted while it was opened (rag index delete)
            raise index_not_found(self.name, EmbeddedStore(self.root.parent).names()) from None
        return IndexInfo(self.name, str(self.root), meta.get("embedder", ""), int(meta.get("dimension", 0) or 0),
                         int(meta.get("generation", 0)), docs, chunks, size,
                         meta.get("vector_index", describe_vector_index(None) if not chunks else "flat: exact inner product"))

    def documents(self) -> list[DocumentRecord]:
        return [_document(r) for r in self._query("SELECT * FROM documents ORDER BY path")]

    def visible_documents(self, groups: frozenset[str] | None) -> list[str] | None:
        """Ids of the documents a reader with document ``groups`` may see (``rag.core.access.visible``); None when
        that is every document (no filter needed)."""
        with self._lock:
            if groups is None or not _has_access_groups(self._conn):
                return None
            if not self._conn.execute("SELECT 1 FROM documents WHERE access_groups != '' LIMIT 1").fetchone():
                return None
            rows = self._conn.execute("SELECT id, access_groups FROM documents").fetchall()
        return visible_ids(((r["id"], stored_groups(r["access_groups"])) for r in rows), groups)

    def find_document(self, id_or_path: str) -> DocumentRecord | None:
        ids = candidate_ids(id_or_path)
        rows = self._query("SELECT * FROM documents WHERE id = ? OR id = ?", ids) if ids else []
        spelled = candidate_display(id_or_path)
        if not rows and spelled is not None and self._shown_path() == "d.display_path":
            rows = self._query("SELECT * FROM documents WHERE display_path = ? LIMIT 1", (spelled,))
        return _document(rows[0]) if rows else None

    def _shown_path(self) -> str:
        """The documents' column to show: their display path (their identity in an index not written since
        display paths came)."""
        if not self._display_column:
            with self._lock:
                self._display_column = _has_column(self._conn, "display_path")
        return "d.display_path" if self._display_column else "d.path"

    def chunks(self, ids: Iterable[int]) -> dict[int, ChunkRecord]:
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._query(
            f'SELECT c.id, c.doc_id, c.ordinal, c.text, c.page, c.section, c.start, c."end", d.title, '
            f"{self._shown_path()} FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE c.id IN ({marks})", ids)
        return {r["id"]: ChunkRecord(*r) for r in rows}

    def sources(self) -> list[str]:
        try:
            return [r[0] for r in self._query("SELECT data FROM sources ORDER BY id")]
        except sqlite3.OperationalError:  # an index made before sources existed (and never written since)
            return []

    def document_chunks(self, doc_id: str) -> tuple[list[ChunkRecord], np.ndarray]:
        """A document's chunks in order with their vectors (for copying an index without re-embedding)."""
        rows = self._query(
            f'SELECT c.id, c.doc_id, c.ordinal, c.text, c.page, c.section, c.start, c."end", d.title, '
            f"{self._shown_path()} FROM chunks c JOIN documents d ON d.id = c.doc_id WHERE c.doc_id = ? "
            "ORDER BY c.ordinal, c.id", (doc_id,))
        with self._lock:
            self._refresh()
            dimension = int(self._meta().get("dimension", 0) or 0)
            vectors = np.zeros((len(rows), dimension), dtype=np.float32)
            for row, r in enumerate(rows):
                vectors[row] = self._index.reconstruct(int(r["id"]))
        return [ChunkRecord(*r) for r in rows], vectors

    def dense_search(self, vector: np.ndarray, k: int, doc_ids: Sequence[str] | None = None) -> list[tuple[int, float]]:
        self.refresh()
        if self._index is None or self._index.ntotal == 0:
            return []
        faiss = _faiss()

        query = np.ascontiguousarray(vector.reshape(1, -1), dtype=np.float32)
        params = None
        if doc_ids:
            allowed = self._chunk_ids_of(doc_ids)
            if not allowed:
                return []
            ivf = faiss.try_extract_index_ivf(self._index)
            if ivf is not None and len(allowed) <= FILTERED_EXACT_MAX:
                # The allowed vectors may sit in any cell: score them all exactly instead of probing cells.
                keys = np.asarray(allowed, dtype=np.int64)
                scores = ivf.reconstruct_batch(keys) @ query[0]
                top = np.argsort(-scores, kind="stable")[:k]
                return [(int(keys[i]), float(scores[i])) for i in top]
            params = faiss.SearchParametersIVF(nprobe=ivf.nlist) if ivf is not None else faiss.SearchParameters()
            params.sel = faiss.IDSelectorBatch(np.asarray(allowed, dtype=np.int64))
        scores, ids = self._index.search(query, min(k, self._index.ntotal), params=params)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def _count_matches(self, words: Sequence[str], cap: int | None) -> dict[str, int]:
        """Chunks holding each word (FTS5 tokenises it as it does the chunks); counting stops at ``cap``."""
        limit = f" LIMIT {int(cap)}" if cap else ""
        sql = f"SELECT count(*) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?{limit})"
        return {word: int(self._query(sql, (f'"{word}"',))[0][0]) for word in words}

    def lexical_search(self, text: str, k: int, doc_ids: Sequence[str] | None = None,
                       searched_stats: bool = False) -> list[tuple[int, float]]:
        """BM25 via SQLite FTS5 over the query's words (on a large index, the rarest ones: ``choose_words``);
        scores are positive (higher is better). ``searched_stats``: BM25's statistics (chunk count, average
        length, each word's chunk count) over the searched documents only (``doc_ids``, or all), never the
        whole index: what a principal who sees only some documents gets (``_searched_bm25``)."""
        words = content_terms(text)
        if not words:
            return []
        if searched_stats:
            return self._searched_bm25(words, k, doc_ids)
        query = fts_query(text)
        if self._chunk_count() > LEXICAL_ROW_BUDGET:
            chosen, _ = choose_words(words, self._count_matches, LEXICAL_ROW_BUDGET)
            if not chosen:
                return []
            query = " OR ".join(f'"{w}"' for w in chosen)
        sql = "SELECT f.rowid, -bm25(chunks_fts) AS score FROM chunks_fts f"
        args: list[object] = [query]
        where = " WHERE chunks_fts MATCH ?"
        if doc_ids:
            sql += " JOIN chunks c ON c.id = f.rowid"
            where += f" AND c.doc_id IN ({','.join('?' * len(doc_ids))})"
            args += list(doc_ids)
        rows = self._query(sql + where + " ORDER BY bm25(chunks_fts) LIMIT ?", args + [k])
        return [(int(r[0]), float(r[1])) for r in rows]

    def _searched_bm25(self, words: Sequence[str], k: int, doc_ids: Sequence[str] | None) -> list[tuple[int, float]]:
        """BM25 (k1 1.2, b 0.75, idf log(1 + (N - df + 0.5) / (df + 0.5))) with every statistic taken over the
        chunks of ``doc_ids`` (None: all): FTS5 finds the rows of each word in the searched documents and its
        own ``bm25()`` of that one word gives back the word's count in each row (``_term_frequency``: no row is
        tokenised again); its docsize table gives each row's length. Nothing in a score, and so in the ranking,
        depends on a chunk outside the searched documents."""
        sizes = self._document_sizes()
        docs = list(sizes) if doc_ids is None else [d for d in dict.fromkeys(doc_ids) if d in sizes]
        count = sum(sizes[d][0] for d in docs)
        if not count:
            return []
        average = max(sum(sizes[d][1] for d in docs) / count, 1e-9)
        index_rows = sum(c for c, _ in sizes.values())
        index_average = max(sum(t for _, t in sizes.values()) / max(index_rows, 1), 1e-9)
        join, filter_args = "", []
        if doc_ids is not None:
            join = f" JOIN chunks c ON c.id = f.rowid AND c.doc_id IN ({','.join('?' * len(docs))})"
            filter_args = docs

        def matches(batch: Sequence[str], cap: int | None) -> dict[str, int]:
            limit = f" LIMIT {int(cap)}" if cap else ""
            sql = f"SELECT count(*) FROM (SELECT f.rowid FROM chunks_fts f{join} WHERE chunks_fts MATCH ?{limit})"
            return {w: int(self._query(sql, [*filter_args, f'"{w}"'])[0][0]) for w in batch}

        chosen = list(dict.fromkeys(words))
        if count > LEXICAL_ROW_BUDGET:
            chosen, _ = choose_words(chosen, matches, LEXICAL_ROW_BUDGET)
        frequencies: dict[str, int] = {}
        occurrences: dict[int, dict[str, int]] = {}
        lengths: dict[int, int] = {}
        for word in chosen:
            everywhere = self._count_matches([word], None)[word]  # what FTS5's bm25() counts the word in
            rows = self._query(f"SELECT f.rowid, -bm25(chunks_fts), s.sz FROM chunks_fts f{join} "
                               "JOIN chunks_fts_docsize s ON s.id = f.rowid WHERE chunks_fts MATCH ?",
                               [*filter_args, f'"{word}"'])
            frequencies[word] = len(rows)
            for rowid, score, size in rows:
                length = lengths.setdefault(int(rowid), _varint(size))
                occurrences.setdefault(int(rowid), {})[word] = _term_frequency(
                    float(score), everywhere, index_rows, length, index_average)
        if not occurrences:
            return []
        k1, b = BM25_K1, BM25_B
        idf = {w: math.log(1 + (count - df + 0.5) / (df + 0.5)) for w, df in frequencies.items()}
        scored = []
        for rowid, found in occurrences.items():
            norm = k1 * (1 - b + b * lengths[rowid] / average)
            scored.append((rowid, sum(idf[w] * tf * (k1 + 1) / (tf + norm) for w, tf in found.items())))
        scored.sort(key=lambda pair: (-pair[1], pair[0]))
        return scored[:k]

    def _document_sizes(self) -> dict[str, tuple[int, int]]:
        """Each document's (chunks, tokens as FTS5 counts them), read once per committed generation."""
        with self._lock:
            generation = int(self._meta().get("generation", 0))
            if getattr(self, "_sizes_generation", None) != generation:
                sizes: dict[str, list[int]] = {}
                for doc_id, size in self._conn.execute(
                        "SELECT c.doc_id, d.sz FROM chunks c JOIN chunks_fts_docsize d ON d.id = c.id"):
                    entry = sizes.setdefault(doc_id, [0, 0])
                    entry[0] += 1
                    entry[1] += _varint(size)
                self._sizes = {d: (c, t) for d, (c, t) in sizes.items()}
                self._sizes_generation = generation
            return self._sizes

    def _chunk_count(self) -> int:
        """Chunks in the index (the vector count, once vectors are loaded: no query per search)."""
        self.refresh()
        if self._index is not None:
            return int(self._index.ntotal)
        return int(self._query("SELECT count(*) FROM chunks")[0][0])

    def _chunk_ids_of(self, doc_ids: Sequence[str]) -> list[int]:
        marks = ",".join("?" * len(doc_ids))
        return [r[0] for r in self._query(f"SELECT id FROM chunks WHERE doc_id IN ({marks})", list(doc_ids))]


class EmbeddedIndex:
    """One index of the embedded store: the folder ``indexes/<name>/``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = validate_index_name(root.name)

    @staticmethod
    def is_index_folder(path: Path) -> bool:
        """Whether ``path``'s name is an index name (not a folder left by a delete or a restore)."""
        try:
            validate_index_name(path.name)
        except BadRequestError:
            return False
        return True

    @property
    def location(self) -> str:
        return str(self.root)

    def exists(self) -> bool:
        return (self.root / DB_NAME).is_file() and not (self.root / TOMBSTONE).exists()

    def reader(self) -> EmbeddedReader:
        return EmbeddedReader(self.root)

    def writer(self, embedder_identity: str, dimension: int, lock_timeout_s: float = 5.0) -> EmbeddedWriter:
        if (self.root / TOMBSTONE).exists():  # deleted, still held elsewhere: its removal has to finish first
            remove_index_folder(self.root, wait_s=0.0)
        return EmbeddedWriter(self.root, embedder_identity, dimension, lock_timeout_s)

    def existing_writer(self, lock_timeout_s: float = 5.0) -> EmbeddedWriter:
        return EmbeddedWriter.existing(self.root, lock_timeout_s)

    @contextmanager
    def source_lock(self, source_id: str) -> Iterator[None]:
        """Nothing to hold: a sync's writer (SQLite's write lock) already keeps a second one out of the index."""
        yield


class EmbeddedStore:
    """FAISS + SQLite indexes, one folder each under ``indexes_dir``."""

    def __init__(self, indexes_dir: Path) -> None:
        self.indexes_dir = indexes_dir

    def index(self, name: str) -> EmbeddedIndex:
        """The index ``name``; an existing index whose name differs only in letter case is that index ("Docs" and
        "docs" are one folder on Windows, so they are one index everywhere)."""
        name = validate_index_name(name)
        try:  # the spelling on disk: where names ignore case (Windows), is_dir("docs") is true of "Docs" too
            on_disk = [entry.name for entry in os.scandir(self.indexes_dir) if entry.is_dir()]
        except OSError:
            on_disk = []
        if name not in on_disk:
            name = next((n for n in on_disk if fold_case(n) == fold_case(name)), name)
        return EmbeddedIndex(self.indexes_dir / name)

    def close(self) -> None:
        """Nothing held: each reader and writer owns its files."""

    def names(self) -> list[str]:
        if not self.indexes_dir.is_dir():
            return []
        return sorted(p.name for p in self.indexes_dir.iterdir() if EmbeddedIndex.is_index_folder(p)
                      and EmbeddedIndex(p).exists())

    def sweep(self) -> list[str]:
        """Remove what deletes and restores left behind (a file held by a scanner kept them): folders renamed
        aside, indexes deleted while another process held them, restores that stopped an hour ago. What is
        still held stays for the next sweep. The names of what went."""
        if not self.indexes_dir.is_dir():
            return []
        removed = []
        for path in self.indexes_dir.iterdir():
            try:
                if path.name.startswith(ASIDE_PREFIX) or (path.name.startswith(RESTORE_PREFIX)
                                                          and time.time() - _newest_mtime(path) > RESTORE_STALE_S):
                    remove_tree(path)
                elif EmbeddedIndex.is_index_folder(path) and (path / TOMBSTONE).exists():
                    remove_index_folder(path, wait_s=0.0)
                else:
                    continue
            except (OSError, IndexBusyError):
                continue
            removed.append(path.name)
        return removed

    def delete(self, name: str) -> None:
        """Remove an index: marked deleted (readers anywhere let go of it), then its folder renamed aside (so a
        failure midway leaves no half index under its name) and removed. IndexBusyError when another process
        still holds it after ``RELEASE_WAIT_S``: it stays deleted, and its folder goes at the next ``sweep``."""
        index = self.index(name)
        if not index.exists():
            raise index_not_found(index.name, self.names())
        mark_deleted(index.root)
        remove_index_folder(index.root)


def _newest_mtime(folder: Path) -> float:
    return max([folder.stat().st_mtime, *(p.stat().st_mtime for p in folder.iterdir())])


def mark_deleted(root: Path) -> None:
    """The tombstone of the index in ``root``: its file, then its row (under the write lock: not while an
    ingest runs)."""
    (root / TOMBSTONE).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"), encoding="utf-8")
    conn = _connect(root / DB_NAME, timeout_s=5.0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('deleted_at', ?)", (time.strftime("%Y-%m-%dT%H:%M:%S"),))
        conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        (root / TOMBSTONE).unlink()
        raise IndexLockedError(f"index {root.name!r} is being written (an ingest or a sync is running): try again "
                               "when it finishes") from exc
    finally:
        conn.close()


def remove_index_folder(root: Path, wait_s: float = RELEASE_WAIT_S) -> None:
    """Rename the (deleted) index folder ``root`` aside and remove it, waiting up to ``wait_s`` for other
    processes to let go of it; IndexBusyError if they do not."""
    aside = root.with_name(f"{ASIDE_PREFIX}{uuid.uuid4().hex[:8]}")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            replace_file(root, aside, LOCK_RETRIES)  # this loop waits for the holder
            break
        except FileNotFoundError:
            return
        except PermissionError as exc:
            if time.monotonic() >= deadline:
                raise IndexBusyError(
                    f"index {root.name!r} is deleted, but another process (a `rag serve`, `rag ask`, a backup or a "
                    "virus scanner) still has its files open: it no longer answers, and its folder is removed "
                    "when that process lets go (at the next delete, ingest or server start)") from exc
            time.sleep(0.25)
    try:
        remove_tree(aside)
    except OSError:  # a scanner holding one file: the folder is swept later
        pass
