"""Where API keys are kept, so every replica sees the same keys: a table in the home's ``access.sqlite``
(embedded store) or ``rag.api_keys`` in the PostgreSQL store. Servers read the record on every request, so a
revocation or an expiry applies on the next request, on every replica sharing the store."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol, Sequence

from rag.store.shared import ensure_tables
from rag.core.errors import ConflictError, NotFoundError, StoreUnavailableError
from rag.core.access import EVERY_DOCUMENT
from rag.core.keys import ApiKey
from rag.core.files import make_private_folder

DB_NAME = "access.sqlite"
COLUMNS = "name, key_id, salt, digest, roles, groups, created, expires, revoked"


class KeyStore(Protocol):
    def add(self, record: ApiKey) -> None: ...
    def by_id(self, key_id: str) -> ApiKey | None: ...
    def list(self) -> list[ApiKey]: ...
    def revoke(self, name: str) -> ApiKey: ...
    def any(self) -> bool: ...
    def migrate_implicit_groups(self) -> list[str]: ...
    def close(self) -> None: ...


def _record(row: Sequence[Any]) -> ApiKey:
    name, key_id, salt, digest, roles, groups, created, expires, revoked = row
    # NULL groups: a key made before every document was an explicit grant, when no groups meant every
    # document; it keeps that meaning (``migrate_implicit_groups`` writes it out as "*").
    return ApiKey(name=name, key_id=key_id, salt=bytes(salt), digest=bytes(digest),
                  roles=tuple((i, r) for i, r in json.loads(roles)),
                  groups=frozenset(json.loads(groups)) if groups is not None else EVERY_DOCUMENT,
                  created=created, expires=expires, revoked=revoked)


def _values(record: ApiKey) -> tuple[Any, ...]:
    return (record.name, record.key_id, record.salt, record.digest, json.dumps([list(g) for g in record.roles]),
            json.dumps(sorted(record.groups)), record.created, record.expires, record.revoked)


LEGACY_GROUPS = json.dumps(sorted(EVERY_DOCUMENT))  # what a key without groups meant before: every document


def _exists(name: str) -> ConflictError:
    return ConflictError(f"a key named {name!r} exists and is active; revoke it first or choose another name")


def unknown_key(name: str) -> NotFoundError:
    return NotFoundError(f"no key named {name!r}")


class SqliteKeyStore:
    """Keys in ``<home>/access.sqlite``. A revoked key keeps its row (listed as revoked; its name may be reused)."""

    def __init__(self, home: Path) -> None:
        self.path = home / DB_NAME
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._seen = False  # this process has seen the file: its disappearance is a failure, not "no keys"
        self._identity: tuple[int, int] | None = None  # the file the open connection reads (device, inode)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            make_private_folder(self.path.parent)  # the home: its key store is no one else's to change
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"CREATE TABLE IF NOT EXISTS api_keys (name TEXT PRIMARY KEY, key_id TEXT NOT NULL "
                             "UNIQUE, salt BLOB NOT NULL, digest BLOB NOT NULL, roles TEXT NOT NULL, groups TEXT, "
                             "created REAL NOT NULL, expires REAL, revoked REAL)")
            except sqlite3.Error:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _present(self) -> bool:
        """Whether the key file exists; one this process saw and that is gone now (a restore, a "reset") is
        StoreUnavailableError: the keys cannot be read, which never means there are none. A file replaced
        under the open connection (a restore) is opened again: its keys are the ones that count."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            stat = None
        if stat is not None:
            self._seen = True
            identity = (stat.st_dev, stat.st_ino)
            with self._lock:
                if self._conn is not None and identity != self._identity:
                    self._conn.close()
                    self._conn = None
                self._identity = identity
            return True
        if self._seen:
            raise StoreUnavailableError(f"the key store {self.path} has disappeared; restore it (or restart the "
                                        "server on purpose) — requests are refused meanwhile")
        return False

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """Rows of a query; a file that is not a database or cannot be read is StoreUnavailableError (503)."""
        try:
            with self._lock:
                return self._db().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"the key store {self.path} cannot be read: {exc}") from exc

    def add(self, record: ApiKey) -> None:
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT revoked FROM api_keys WHERE name = ?", (record.name,)).fetchone()
                if row is not None and row[0] is None:
                    raise _exists(record.name)
                db.execute("DELETE FROM api_keys WHERE name = ?", (record.name,))
                db.execute(f"INSERT INTO api_keys ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _values(record))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def by_id(self, key_id: str) -> ApiKey | None:
        if not self._present():
            return None
        rows = self._read(f"SELECT {COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,))
        return _record(rows[0]) if rows else None

    def list(self) -> list[ApiKey]:
        if not self._present():
            return []
        return [_record(r) for r in self._read(f"SELECT {COLUMNS} FROM api_keys ORDER BY name")]

    def revoke(self, name: str) -> ApiKey:
        """Revoke key ``name`` (a key already revoked stays as it is: revoking is idempotent)."""
        with self._lock:
            db = self._db()
            db.execute("UPDATE api_keys SET revoked = ? WHERE name = ? AND revoked IS NULL", (time.time(), name))
            row = db.execute(f"SELECT {COLUMNS} FROM api_keys WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise unknown_key(name)
        return _record(row)

    def any(self) -> bool:
        """Whether any key was ever created (a revoked one included: revoking the last key never opens the
        service)."""
        if not self._present():
            return False
        return bool(self._read("SELECT 1 FROM api_keys LIMIT 1"))

    def migrate_implicit_groups(self) -> list[str]:
        """Give every key stored without groups (made when that meant every document) the explicit grant
        ``*``, which it keeps meaning; the names of the keys changed (none the next time)."""
        if not self._present():
            return []
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                names = [r[0] for r in db.execute("SELECT name FROM api_keys WHERE groups IS NULL ORDER BY name")]
                db.execute("UPDATE api_keys SET groups = ? WHERE groups IS NULL", (LEGACY_GROUPS,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return names

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


SCHEMA = (
    "CREATE SCHEMA IF NOT EXISTS rag",
    "CREATE TABLE IF NOT EXISTS rag.api_keys (name text PRIMARY KEY, key_id text NOT NULL UNIQUE, "
    "salt bytea NOT NULL, digest bytea NOT NULL, roles text NOT NULL, groups text, "
    "created double precision NOT NULL, expires double precision, revoked double precision)",
)


class PostgresKeyStore:
    """Keys in ``rag.api_keys`` of the PostgreSQL store (replicas share them)."""

    def __init__(self, url: str) -> None:
        import psycopg  # lazy: optional dependency (the postgres extra)

        self._psycopg = psycopg
        self.url = url
        self._ready = False

    def _run(self, sql: str, args: Sequence[Any] = (), fetch: bool = True) -> list[tuple[Any, ...]]:
        try:
            with self._psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                if not self._ready:
                    # Under the schema's migration lock: two replicas starting at once would otherwise race in
                    # CREATE ... IF NOT EXISTS (a duplicate key in PostgreSQL's catalogue for one of them).
                    ensure_tables(conn, SCHEMA, "SELECT to_regclass('rag.api_keys') IS NOT NULL")
                    self._ready = True
                cursor = conn.execute(sql, args)
                return cursor.fetchall() if fetch and cursor.description else []
        except self._psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"the key store (PostgreSQL) cannot be reached: {exc}") from exc
        except (self._psycopg.ProgrammingError, self._psycopg.InternalError, self._psycopg.DataError) as exc:
            # The table gone or damaged (a restore, a "reset"): the keys cannot be read, which never means none.
            self._ready = False
            raise StoreUnavailableError(f"the key store (PostgreSQL table rag.api_keys) cannot be read: {exc}") from exc

    def add(self, record: ApiKey) -> None:
        inserted = self._run(
            f"INSERT INTO rag.api_keys AS k ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET key_id = EXCLUDED.key_id, salt = EXCLUDED.salt, "
            "digest = EXCLUDED.digest, roles = EXCLUDED.roles, groups = EXCLUDED.groups, "
            "created = EXCLUDED.created, expires = EXCLUDED.expires, revoked = NULL "
            "WHERE k.revoked IS NOT NULL RETURNING name", _values(record))
        if not inserted:
            raise _exists(record.name)

    def by_id(self, key_id: str) -> ApiKey | None:
        rows = self._run(f"SELECT {COLUMNS} FROM rag.api_keys WHERE key_id = %s", (key_id,))
        return _record(rows[0]) if rows else None

    def list(self) -> list[ApiKey]:
        return [_record(r) for r in self._run(f"SELECT {COLUMNS} FROM rag.api_keys ORDER BY name")]

    def revoke(self, name: str) -> ApiKey:
        rows = self._run(f"UPDATE rag.api_keys SET revoked = %s WHERE name = %s AND revoked IS NULL "
                         f"RETURNING {COLUMNS}", (time.time(), name))
        rows = rows or self._run(f"SELECT {COLUMNS} FROM rag.api_keys WHERE name = %s", (name,))
        if rows:
            return _record(rows[0])
        raise unknown_key(name)

    def any(self) -> bool:
        return bool(self._run("SELECT 1 FROM rag.api_keys LIMIT 1"))

    def migrate_implicit_groups(self) -> list[str]:
        """As ``SqliteKeyStore.migrate_implicit_groups`` (one statement: replicas starting at once agree)."""
        rows = self._run("UPDATE rag.api_keys SET groups = %s WHERE groups IS NULL RETURNING name", (LEGACY_GROUPS,))
        return sorted(r[0] for r in rows)

    def close(self) -> None:
        pass
