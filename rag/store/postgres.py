"""The PostgreSQL store: indexes in a PostgreSQL database with pgvector (setting ``store_url``).

Layout. Schema ``rag`` holds ``rag.schema_version`` and the registry ``rag.indexes`` (name, embedder
identity, dimension); each index lives in a schema of its own, ``rag_index_<id>``, with ``documents`` and
``chunks`` (text, a generated ``tsvector`` with a GIN index, ``vector(dim)`` with an HNSW index on inner
product). One schema per index rather than an ``index`` column: each index gets a typed ``vector(dim)``
column (an HNSW index needs a fixed dimension, and two indexes may use embedders of different sizes) and a
graph of its own, so a search never walks another index's vectors and then filters them out; dropping an
index is one ``DROP SCHEMA``.

Writes. Every document write (put or delete) is one transaction, taken under a transaction-scoped advisory
lock on (index, document id). Several ingest processes, on one machine or several, write to one index at
once; two that ingest the same file serialise on its lock, and the later one replaces the earlier one's
chunks: one document, no duplicate chunks. A reader sees a document whole or not at all. A run that dies
(even ``kill -9``) leaves each document as it was or fully new, and a re-run skips the unchanged ones.
The generation is a per-index sequence that every document write advances; ``commit()`` reports it.

Reads. Plain READ COMMITTED queries through a connection pool: every search sees the latest committed
documents, so a server follows other processes' writes with no reload.

Syncs. A sync of a watched folder (``ingest.sources``) holds a session-level advisory lock on (index, source)
for its whole run, on a connection of its own (``PostgresIndex.source_lock``): with several replicas on one
database only one syncs a source at a time; another is refused at once (SourceBusyError), and the lock goes
with the session if the process dies.

Schema creation and migration happen on first use, under an advisory lock, recorded in
``rag.schema_version``.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from rag.core.access import stored_groups, visible_ids
from rag.core.records import Chunk, ChunkRecord, DocumentRecord, IndexInfo, candidate_display, candidate_ids
from rag.store.lexical import choose_words
from rag.store.shared import MIGRATION_LOCK, redact
from rag.core.errors import (
    ConfigError,
    ConflictError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    IndexLockedError,
    IndexNotFoundError,
    SourceBusyError,
    StoreUnavailableError,
)
from rag.core.names import index_not_found, validate_index_name
from rag.core.text import content_terms

SCHEMA_VERSION = 4
TEXT_SEARCH_CONFIG = "english"  # stemming + stop words, like FTS5's porter tokenizer in the embedded store
# HNSW candidate list per search (pgvector's default is 40). Retrieval asks for 20 per side; 100 keeps the
# approximate search's results equal to the exact ones on the dev corpus at a small cost (docs/scaling.md, Scaling out).
HNSW_EF_SEARCH = 100
# PostgreSQL's share of ``rag.store.lexical``'s rule: counting a word's rows visits the heap and ts_rank
# reads each matching row's tsvector, so its budget is smaller than FTS5's. 100,000 synthetic chunks, 40
# questions, lexical search p50 / p95: budget 20,000 319 / 830 ms, 5,000 87 / 139 ms, 2,000 51 / 74 ms.
LEXICAL_ROW_BUDGET = 2_000
DOCUMENT_LOCK_WAIT_S = 120.0  # a writer's longest wait for one document's lock (or the index registry's)


@dataclass(frozen=True)
class Migration:
    """One schema version: statements on the ``rag`` schema, then statements run once per index schema
    (``{schema}`` and ``{dimension}`` filled in). A new index runs the per-index part of every version."""

    version: int
    shared: tuple[str, ...]
    per_index: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, shared=(
        """CREATE TABLE IF NOT EXISTS rag.indexes (
            id serial PRIMARY KEY, name text NOT NULL UNIQUE, embedder text NOT NULL,
            dimension integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now())""",
    ), per_index=(
        "CREATE SEQUENCE {schema}.generation",
        """CREATE TABLE {schema}.documents (
            id text PRIMARY KEY, path text NOT NULL UNIQUE, title text NOT NULL, kind text NOT NULL,
            sha256 text NOT NULL, pages integer, bytes bigint NOT NULL, chunks integer NOT NULL,
            ingested_at text NOT NULL)""",
        """CREATE TABLE {schema}.chunks (
            id bigserial PRIMARY KEY,
            doc_id text NOT NULL REFERENCES {schema}.documents(id) ON DELETE CASCADE,
            ordinal integer NOT NULL, text text NOT NULL, page integer, section text,
            start integer NOT NULL, "end" integer NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('""" + TEXT_SEARCH_CONFIG + """', text)) STORED,
            embedding vector({dimension}) NOT NULL)""",
        "CREATE INDEX ON {schema}.chunks (doc_id)",
        "CREATE INDEX ON {schema}.chunks USING gin (tsv)",
        "CREATE INDEX ON {schema}.chunks USING hnsw (embedding vector_ip_ops)",
    )),
    # Documents carry access groups ("" = public); an existing index's documents stay public.
    Migration(2, shared=(), per_index=(
        "ALTER TABLE {schema}.documents ADD COLUMN IF NOT EXISTS access_groups text NOT NULL DEFAULT ''",
    )),
    # Watched folders live with their index (ingest.sources): one JSON document each.
    Migration(3, shared=(), per_index=(
        "CREATE TABLE IF NOT EXISTS {schema}.sources (id text PRIMARY KEY, data text NOT NULL)",
    )),
    # Documents keep their path as the user spelled it, for display, beside its identity (``path``); an
    # existing index's documents are shown as their identity until they are seen again.
    Migration(4, shared=(), per_index=(
        "ALTER TABLE {schema}.documents ADD COLUMN IF NOT EXISTS display_path text",
        "UPDATE {schema}.documents SET display_path = path WHERE display_path IS NULL",
        "ALTER TABLE {schema}.documents ALTER COLUMN display_path SET NOT NULL",
    )),
)
assert MIGRATIONS[-1].version == SCHEMA_VERSION


def source_lock_key(index: str, source_id: str) -> int:
    """The advisory lock a sync of ``source_id`` in ``index`` holds: one bigint, a key space apart from the
    per-document locks' (int, int) keys (PostgreSQL tells them apart), and from MIGRATION_LOCK but by a 2^-64 chance."""
    digest = hashlib.sha256(f"rag-source\0{index}\0{source_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _document(row: Sequence[Any]) -> DocumentRecord:
    return DocumentRecord(*row)


def _array(value: Any) -> np.ndarray:
    """A vector column's value as float32 (pgvector's adapter returns its ``Vector`` or a numpy array)."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


DOCUMENT_COLUMNS = "id, path, title, kind, sha256, pages, bytes, chunks, ingested_at, access_groups, display_path"


class PostgresStore:
    """Indexes in one PostgreSQL database. Thread-safe: readers share one connection pool."""

    def __init__(self, url: str, pool_size: int = 8) -> None:
        self.url = url
        self.pool_size = pool_size
        self._pool = None
        self._ready = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ connections
    def connect(self, autocommit: bool = True):
        """A new connection of its own (writers), the schema made current first."""
        self._ensure_schema()
        conn = self._raw_connect(autocommit)
        from pgvector.psycopg import register_vector  # lazy: optional dependency (the postgres extra)

        register_vector(conn)
        return conn

    def _raw_connect(self, autocommit: bool = True):
        import psycopg  # lazy: optional dependency (the postgres extra)

        try:
            return psycopg.connect(self.url, autocommit=autocommit, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"cannot connect to the store at {redact(self.url)}: "
                                        f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}") from exc

    @property
    def pool(self):
        with self._lock:
            if self._pool is None:
                self._ensure_schema()
                from pgvector.psycopg import register_vector  # lazy: optional dependency (the postgres extra)
                from psycopg_pool import ConnectionPool  # lazy: optional dependency (the postgres extra)

                self._pool = ConnectionPool(self.url, min_size=1, max_size=self.pool_size, open=True,
                                            kwargs={"autocommit": True}, configure=register_vector,
                                            name="rag-store", timeout=30)
            return self._pool

    def query(self, sql: str, args: Sequence[Any] | dict | None = None, settings: Sequence[str] = ()) -> list[tuple]:
        """Rows of one read; ``settings`` are ``SET LOCAL`` statements for it (one transaction)."""
        import psycopg  # lazy: optional dependency (the postgres extra)

        try:
            with self.pool.connection() as conn:
                if settings:
                    with conn.transaction():
                        for statement in settings:
                            conn.execute(statement)
                        return conn.execute(sql, args).fetchall()
                return conn.execute(sql, args).fetchall()
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"the store at {redact(self.url)} is unavailable: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    # ------------------------------------------------------------------ schema
    def _ensure_schema(self) -> None:
        if self._ready:
            return
        import psycopg  # lazy: optional dependency (the postgres extra)

        with self._raw_connect() as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                    try:
                        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    except psycopg.Error as exc:
                        raise ConfigError(
                            f"the database at {redact(self.url)} lacks the pgvector extension and this user cannot "
                            f"create it ({exc}); run CREATE EXTENSION vector as its owner") from exc
                conn.execute("CREATE SCHEMA IF NOT EXISTS rag")
                conn.execute("CREATE TABLE IF NOT EXISTS rag.schema_version "
                             "(version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
                current = conn.execute("SELECT max(version) FROM rag.schema_version").fetchone()[0] or 0
                if current > SCHEMA_VERSION:
                    raise ConfigError(f"the store at {redact(self.url)} has schema version {current}, newer than "
                                      f"this program's {SCHEMA_VERSION}; upgrade the program")
                for migration in MIGRATIONS:
                    if migration.version <= current:
                        continue
                    for statement in migration.shared:
                        conn.execute(statement)
                    if current > 0:  # existing indexes move along; new ones run every version's part
                        for schema, dimension in conn.execute(
                                "SELECT 'rag_index_' || id, dimension FROM rag.indexes").fetchall():
                            _run_per_index(conn, migration, schema, dimension)
                    conn.execute("INSERT INTO rag.schema_version (version) VALUES (%s)", (migration.version,))
        self._ready = True

    def _lookup(self, conn, name: str) -> tuple[int, str, int] | None:
        row = conn.execute("SELECT id, embedder, dimension FROM rag.indexes WHERE name = %s", (name,)).fetchone()
        return (int(row[0]), str(row[1]), int(row[2])) if row else None

    def lookup(self, name: str) -> tuple[int, str, int] | None:
        """(id, embedder identity, dimension) of an index, None if it does not exist."""
        rows = self.query("SELECT id, embedder, dimension FROM rag.indexes WHERE name = %s", (name,))
        return (int(rows[0][0]), str(rows[0][1]), int(rows[0][2])) if rows else None

    def create(self, conn, name: str, embedder_identity: str, dimension: int) -> tuple[int, str, int]:
        """The index ``name``, created (with its schema) if missing; one transaction on ``conn``."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            found = self._lookup(conn, name)
            if found is not None:
                return found
            if conn.execute("SELECT 1 FROM rag.indexes WHERE lower(name) = lower(%s)", (name,)).fetchone():
                # Names that differ only in letter case are one index (one folder on the embedded store, and
                # a grant names one spelling): the other one is not named, a caller may not hold it.
                raise ConflictError(f"index {name!r} cannot be made: an index whose name differs from it only in "
                                    "letter case exists already")
            index_id = conn.execute("INSERT INTO rag.indexes (name, embedder, dimension) VALUES (%s, %s, %s) "
                                    "RETURNING id", (name, embedder_identity, dimension)).fetchone()[0]
            conn.execute(f"CREATE SCHEMA rag_index_{int(index_id)}")
            for migration in MIGRATIONS:
                _run_per_index(conn, migration, f"rag_index_{int(index_id)}", dimension)
            return int(index_id), embedder_identity, dimension

    # ------------------------------------------------------------------ the Store interface
    def index(self, name: str) -> "PostgresIndex":
        """The index ``name``; an existing index whose name differs only in letter case is that index, as on the
        embedded store (so a grant is checked against the name that is used)."""
        name = validate_index_name(name)
        spellings = [r[0] for r in self.query("SELECT name FROM rag.indexes WHERE lower(name) = lower(%s) "
                                              "ORDER BY name", (name,))]
        return PostgresIndex(self, name if name in spellings or not spellings else spellings[0])

    def names(self) -> list[str]:
        return [r[0] for r in self.query("SELECT name FROM rag.indexes ORDER BY name")]

    def sweep(self) -> list[str]:
        """Nothing is left behind: a delete is one transaction."""
        return []

    def delete(self, name: str) -> None:
        name = self.index(name).name  # as spelled in the store (see ``index``)
        if not self.drop(name):
            raise index_not_found(name, self.names())

    def drop(self, name: str) -> bool:
        """Remove an index and everything in it; False if there was none."""
        with self.connect() as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                found = self._lookup(conn, name)
                if found is None:
                    return False
                conn.execute(f"DROP SCHEMA rag_index_{found[0]} CASCADE")
                conn.execute("DELETE FROM rag.indexes WHERE id = %s", (found[0],))
                return True


def _run_per_index(conn, migration: Migration, schema: str, dimension: int) -> None:
    for statement in migration.per_index:
        conn.execute(statement.format(schema=schema, dimension=int(dimension)))


class PostgresIndex:
    """One index of the PostgreSQL store."""

    def __init__(self, store: PostgresStore, name: str) -> None:
        self.store = store
        self.name = name

    @property
    def location(self) -> str:
        return f"{redact(self.store.url)}#{self.name}"

    def exists(self) -> bool:
        return self.store.lookup(self.name) is not None

    def reader(self) -> "PostgresReader":
        found = self.store.lookup(self.name)
        if found is None:
            raise index_not_found(self.name, self.store.names())
        return PostgresReader(self.store, self.name, *found)

    def writer(self, embedder_identity: str, dimension: int, lock_timeout_s: float = 5.0) -> "PostgresWriter":
        return PostgresWriter(self.store, self.name, embedder_identity, dimension, lock_timeout_s)

    def existing_writer(self, lock_timeout_s: float = 5.0) -> "PostgresWriter":
        found = self.store.lookup(self.name)
        if found is None:
            raise IndexNotFoundError(f"index {self.name!r} does not exist")
        return PostgresWriter(self.store, self.name, found[1], found[2], lock_timeout_s)

    @contextmanager
    def source_lock(self, source_id: str) -> Iterator[None]:
        """Held for a whole sync of ``source_id``: a session-level advisory lock on a connection of its own, taken
        without waiting (SourceBusyError when another session holds it), released at the end, and by PostgreSQL
        itself when the process dies (its session ends)."""
        import psycopg  # lazy: optional dependency (the postgres extra)

        conn = self.store._raw_connect()
        key = source_lock_key(self.name, source_id)
        try:
            if not conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                raise SourceBusyError(f"source {source_id} of index {self.name!r} is being synced by another process "
                                      "right now; try again when it finishes")
            try:
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                except psycopg.Error:
                    pass  # the session is gone, and its lock with it
        finally:
            conn.close()


class PostgresReader:
    """Search and metadata; every call reads the latest committed state."""

    def __init__(self, store: PostgresStore, name: str, index_id: int, embedder: str, dimension: int) -> None:
        self.store = store
        self.name = name
        self.index_id = index_id
        self.embedder_identity = embedder
        self.dimension = dimension
        self.schema = f"rag_index_{index_id}"

    def close(self) -> None:
        """Nothing to release: connections go back to the store's pool after each query."""

    def gone(self) -> bool:
        return not self.store.query("SELECT 1 FROM rag.indexes WHERE id = %s", (self.index_id,))

    def check_embedder(self, identity: str) -> None:
        if self.embedder_identity and self.embedder_identity != identity:
            raise EmbedderMismatchError(
                f"index {self.name!r} was built with embedder {self.embedder_identity}, not the configured {identity}")

    def info(self) -> IndexInfo:
        s = self.schema
        docs, chunks, generation, size = self.store.query(
            f"SELECT (SELECT count(*) FROM {s}.documents), (SELECT count(*) FROM {s}.chunks), "
            f"(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {s}.generation), "
            f"pg_total_relation_size('{s}.documents') + pg_total_relation_size('{s}.chunks')")[0]
        return IndexInfo(self.name, f"{redact(self.store.url)}#{self.name}", self.embedder_identity, self.dimension,
                         int(generation), int(docs), int(chunks), int(size),
                         f"pgvector hnsw (approximate, inner product): ef_search {HNSW_EF_SEARCH} or k if larger")

    def documents(self) -> list[DocumentRecord]:
        return [_document(r) for r in self.store.query(
            f"SELECT {DOCUMENT_COLUMNS} FROM {self.schema}.documents ORDER BY path")]

    def visible_documents(self, groups: frozenset[str] | None) -> list[str] | None:
        """Ids of the documents a reader with document ``groups`` may see (``rag.core.access.visible``); None when
        that is every document."""
        if groups is None or not self.store.query(
                f"SELECT 1 FROM {self.schema}.documents WHERE access_groups <> '' LIMIT 1"):
            return None
        rows = self.store.query(f"SELECT id, access_groups FROM {self.schema}.documents")
        return visible_ids(((str(r[0]), stored_groups(r[1])) for r in rows), groups)

    def find_document(self, id_or_path: str) -> DocumentRecord | None:
        ids = list(candidate_ids(id_or_path))
        if not ids:
            return None
        rows = self.store.query(f"SELECT {DOCUMENT_COLUMNS} FROM {self.schema}.documents WHERE id = ANY(%s)",
                                (ids,))
        spelled = candidate_display(id_or_path)
        if not rows and spelled is not None:
            rows = self.store.query(f"SELECT {DOCUMENT_COLUMNS} FROM {self.schema}.documents "
                                    "WHERE display_path = %s LIMIT 1", (spelled,))
        return _document(rows[0]) if rows else None

    def chunks(self, ids: Iterable[int]) -> dict[int, ChunkRecord]:
        ids = [int(i) for i in ids]
        if not ids:
            return {}
        rows = self.store.query(
            f'SELECT c.id, c.doc_id, c.ordinal, c.text, c.page, c.section, c.start, c."end", d.title, d.display_path '
            f"FROM {self.schema}.chunks c JOIN {self.schema}.documents d ON d.id = c.doc_id WHERE c.id = ANY(%s)",
            (ids,))
        return {int(r[0]): ChunkRecord(*r) for r in rows}

    def sources(self) -> list[str]:
        return [r[0] for r in self.store.query(f"SELECT data FROM {self.schema}.sources ORDER BY id")]

    def document_chunks(self, doc_id: str) -> tuple[list[ChunkRecord], np.ndarray]:
        """A document's chunks in order with their vectors (for copying an index without re-embedding)."""
        rows = self.store.query(
            f'SELECT c.id, c.doc_id, c.ordinal, c.text, c.page, c.section, c.start, c."end", d.title, d.display_path, '
            f"c.embedding FROM {self.schema}.chunks c JOIN {self.schema}.documents d ON d.id = c.doc_id "
            f"WHERE c.doc_id = %s ORDER BY c.ordinal, c.id", (doc_id,))
        vectors = np.asarray([_array(r[10]) for r in rows], dtype=np.float32)
        return [ChunkRecord(*r[:10]) for r in rows], vectors.reshape(len(rows), self.dimension)

    def dense_search(self, vector: np.ndarray, k: int, doc_ids: Sequence[str] | None = None) -> list[tuple[int, float]]:
        """Nearest chunks by inner product (cosine on normalised vectors), through the HNSW index."""
        query = np.ascontiguousarray(vector.reshape(-1), dtype=np.float32)
        settings = [f"SET LOCAL hnsw.ef_search = {max(HNSW_EF_SEARCH, int(k))}"]
        where, args = "", {"q": query, "k": int(k)}
        if doc_ids:
            # A filter drops graph candidates after the search: scan on until k rows pass it, in exact order.
            settings.append("SET LOCAL hnsw.iterative_scan = strict_order")
            where, args["docs"] = "WHERE doc_id = ANY(%(docs)s)", list(doc_ids)
        rows = self.store.query(f"SELECT id, -(embedding <#> %(q)s) FROM {self.schema}.chunks {where} "
                                f"ORDER BY embedding <#> %(q)s LIMIT %(k)s", args, settings)
        return [(int(i), float(s)) for i, s in rows]

    def _count_matches(self, words: Sequence[str], cap: int | None,
                       doc_ids: Sequence[str] | None = None) -> dict[str, int]:
        """Chunks holding each word (of ``doc_ids`` only, when given), counted through the GIN index in one
        query; counting stops at ``cap``."""
        limit = "LIMIT %(cap)s" if cap else ""
        among = "AND doc_id = ANY(%(docs)s)" if doc_ids is not None else ""
        rows = self.store.query(
            f"SELECT t, (SELECT count(*) FROM (SELECT 1 FROM {self.schema}.chunks "
            f"WHERE tsv @@ plainto_tsquery('{TEXT_SEARCH_CONFIG}', t) {among} {limit}) hits) "
            f"FROM unnest(%(words)s::text[]) AS t",
            {"words": list(words), "cap": cap, "docs": list(doc_ids) if doc_ids is not None else None})
        return {word: int(count) for word, count in rows}

    def _chunk_count_of(self, doc_ids: Sequence[str] | None) -> float:
        """The exact number of chunks of ``doc_ids`` (None: of every document)."""
        if doc_ids is None:
            return float(self.store.query(f"SELECT count(*) FROM {self.schema}.chunks")[0][0])
        return float(self.store.query(f"SELECT count(*) FROM {self.schema}.chunks WHERE doc_id = ANY(%s)",
                                      (list(doc_ids),))[0][0])

    def _chunk_estimate(self) -> float:
        """The planner's row count of the chunks table (exact count once it was never analysed): idf needs
        the corpus size, and counting a million rows per query would cost more than the search."""
        estimate = self.store.query(f"SELECT reltuples FROM pg_class WHERE oid = '{self.schema}.chunks'::regclass")
        if estimate and estimate[0][0] is not None and float(estimate[0][0]) > 0:
            return float(estimate[0][0])
        return float(self.store.query(f"SELECT count(*) FROM {self.schema}.chunks")[0][0])

    def lexical_search(self, text: str, k: int, doc_ids: Sequence[str] | None = None,
                       searched_stats: bool = False) -> list[tuple[int, float]]:
        """PostgreSQL full-text search (GIN) with BM25's idf over the query's words (on a large index, the
        rarest ones: ``choose_words``): the score of a chunk is the sum, over the query's
        words it contains, of idf(word) x ``ts_rank(chunk, word, 1)`` (a saturating term frequency divided by
        1 + log(length)). Positive, higher is better. ``ts_rank_cd`` alone knows no word rarity: lexical
        recall@5 on squad2-dev was 0.913 with it, 0.979 with this, 0.983 for FTS5's BM25 (docs/scaling.md)."""
        terms = content_terms(text)
        if not terms:
            return []
        s = self.schema
        # ``searched_stats``: the corpus size and each word's chunk count over the searched documents only (a
        # principal who sees only some documents: nothing it gets depends on a chunk it cannot see).
        scope = (doc_ids if doc_ids is not None else None) if searched_stats else None
        total = self._chunk_count_of(scope) if searched_stats else self._chunk_estimate()

        def count(words: Sequence[str], cap: int | None) -> dict[str, int]:
            return self._count_matches(words, cap, scope)

        if total <= LEXICAL_ROW_BUDGET:
            frequencies = count(list(dict.fromkeys(terms)), None)
            chosen = [w for w, df in frequencies.items() if df > 0]
        else:
            chosen, frequencies = choose_words(terms, count, LEXICAL_ROW_BUDGET)
        if not chosen:
            return []
        weights = [float(np.log(1 + (total - frequencies[w] + 0.5) / (frequencies[w] + 0.5))) for w in chosen]
        where, args = "", {"terms": chosen, "idf": weights, "k": int(k), "any": " or ".join(chosen)}
        if doc_ids:
            where, args["docs"] = "AND c.doc_id = ANY(%(docs)s)", list(doc_ids)
        rows = self.store.query(f"""
            WITH weights AS (SELECT plainto_tsquery('{TEXT_SEARCH_CONFIG}', t) AS q, idf
                             FROM unnest(%(terms)s::text[], %(idf)s::float8[]) AS w(t, idf))
            SELECT c.id, sum(w.idf * ts_rank(c.tsv, w.q, 1)) AS score
            FROM {s}.chunks c JOIN weights w ON c.tsv @@ w.q
            WHERE c.tsv @@ websearch_to_tsquery('{TEXT_SEARCH_CONFIG}', %(any)s) {where}
            GROUP BY c.id ORDER BY score DESC, c.id LIMIT %(k)s""", args)
        return [(int(i), float(score)) for i, score in rows]


class PostgresWriter:
    """One ingest run's writes: each document commits on its own (see the module notes)."""

    def __init__(self, store: PostgresStore, name: str, embedder_identity: str, dimension: int,
                 lock_timeout_s: float = 5.0) -> None:
        self.store = store
        self.name = name
        self._conn = store.connect()
        try:
            # Waiting for another process's write of the same document is normal here (it is one short
            # transaction, but several may queue): wait long before calling the document busy.
            wait_s = max(lock_timeout_s, DOCUMENT_LOCK_WAIT_S)
            self._conn.execute(f"SET lock_timeout = '{int(wait_s * 1000)}ms'")
            index_id, stored, stored_dimension = store.create(self._conn, name, embedder_identity, dimension)
            if stored != embedder_identity or stored_dimension != dimension:
                raise EmbedderMismatchError(
                    f"index {name!r} was built with embedder {stored} but the configured embedder is "
                    f"{embedder_identity}; use the same embedder or ingest into a new index")
        except BaseException:
            self._conn.close()
            raise
        self.index_id = index_id
        self.dimension = dimension
        self.schema = f"rag_index_{index_id}"
        self._closed = False

    def __enter__(self) -> "PostgresWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.rollback()

    def document(self, doc_id: str) -> DocumentRecord | None:
        row = self._conn.execute(f"SELECT {DOCUMENT_COLUMNS} FROM {self.schema}.documents WHERE id = %s",
                                 (doc_id,)).fetchone()
        return _document(row) if row else None

    def find_document(self, id_or_path: str) -> DocumentRecord:
        record = next(filter(None, map(self.document, candidate_ids(id_or_path))), None)
        if record is None and (spelled := candidate_display(id_or_path)) is not None:
            row = self._conn.execute(f"SELECT {DOCUMENT_COLUMNS} FROM {self.schema}.documents "
                                     "WHERE display_path = %s LIMIT 1", (spelled,)).fetchone()
            record = _document(row) if row else None
        if record is None:
            raise DocumentNotFoundError(f"no document {id_or_path!r} in index {self.name!r}")
        return record

    def set_display_path(self, doc_id: str, display_path: str) -> None:
        """Show a document under another spelling of its path (its identity, chunks and vectors stay)."""
        with self._conn.transaction():
            self._locked(doc_id)
            self._conn.execute(f"UPDATE {self.schema}.documents SET display_path = %s WHERE id = %s",
                               (display_path, doc_id))

    def documents_under(self, path_prefix: str) -> list[DocumentRecord]:
        """Documents whose stored path starts with ``path_prefix`` (a mail's attachments: ``<mail>#``)."""
        rows = self._conn.execute(f"SELECT {DOCUMENT_COLUMNS} FROM {self.schema}.documents "
                                  "WHERE left(path, %s) = %s", (len(path_prefix), path_prefix)).fetchall()
        return [_document(r) for r in rows]

    def sources(self) -> list[str]:
        return [r[0] for r in self._conn.execute(f"SELECT data FROM {self.schema}.sources ORDER BY id")]

    def put_source(self, source_id: str, data: str) -> None:
        self._conn.execute(f"INSERT INTO {self.schema}.sources VALUES (%s, %s) "
                           "ON CONFLICT (id) DO UPDATE SET data = excluded.data", (source_id, data))

    def delete_source(self, source_id: str) -> bool:
        return self._conn.execute(f"DELETE FROM {self.schema}.sources WHERE id = %s", (source_id,)).rowcount > 0

    def _locked(self, doc_id: str) -> None:
        """Within a transaction: wait for (and hold until its end) the lock on this document."""
        import psycopg  # lazy: optional dependency (the postgres extra)

        try:
            self._conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (self.index_id, doc_id))
        except psycopg.errors.LockNotAvailable as exc:
            raise IndexLockedError(f"document {doc_id} of index {self.name!r} is being written by another "
                                   "process; try again when it finishes") from exc

    def delete_document(self, doc_id: str) -> int:
        with self._conn.transaction():
            self._locked(doc_id)
            removed = self._delete(doc_id)
            self._conn.execute(f"SELECT nextval('{self.schema}.generation')")
        return removed

    def _delete(self, doc_id: str) -> int:
        removed = self._conn.execute(f"DELETE FROM {self.schema}.chunks WHERE doc_id = %s", (doc_id,)).rowcount
        self._conn.execute(f"DELETE FROM {self.schema}.documents WHERE id = %s", (doc_id,))
        return removed

    def put_document(self, record: DocumentRecord, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Insert or replace a document with its chunks and their vectors, in one transaction."""
        if len(chunks) != len(vectors):
            raise ValueError("one vector per chunk")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self._conn.transaction():
            self._locked(record.id)
            self._delete(record.id)
            self._conn.execute(
                f"INSERT INTO {self.schema}.documents ({DOCUMENT_COLUMNS}) VALUES "
                "(%(id)s, %(path)s, %(title)s, %(kind)s, %(sha256)s, %(pages)s, %(bytes)s, %(chunks)s, %(ingested_at)s, "
                "%(access_groups)s, %(display_path)s)",
                record.__dict__)
            if chunks:
                with self._conn.cursor() as cur:
                    cur.executemany(
                        f'INSERT INTO {self.schema}.chunks (doc_id, ordinal, text, page, section, start, "end", '
                        "embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                        [(record.id, c.ordinal, c.text, c.page, c.section, c.start, c.end, vectors[i])
                         for i, c in enumerate(chunks)])
            self._conn.execute(f"SELECT nextval('{self.schema}.generation')")

    def _generation(self) -> int:
        return int(self._conn.execute(
            f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {self.schema}.generation").fetchone()[0])

    def commit(self) -> int:
        """Every document is already committed; returns the index's generation and releases the connection."""
        if self._closed:
            raise RuntimeError("writer already closed")
        try:
            return self._generation()
        finally:
            self.rollback()

    def rollback(self) -> None:
        """Documents committed so far stay (each is whole); nothing else is pending."""
        if not self._closed:
            self._closed = True
            self._conn.close()
