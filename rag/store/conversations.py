"""Where the web app's conversations are kept, per principal, so they follow the person to another browser and
never show on a shared one: a table in the home's ``conversations.sqlite`` (embedded store) or
``rag.conversations`` in the PostgreSQL store (replicas share it).

A conversation is its title and its turns (JSON, as the web app saves them). Every read and write names the
principal: a conversation of another principal is "not found", like a missing one.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from rag.store.shared import ensure_tables
from rag.core.errors import NotFoundError, StoreUnavailableError

DB_NAME = "conversations.sqlite"
COLUMNS = "id, principal, title, created, updated, turn_count, turns"
LISTED = "id, principal, title, created, updated, turn_count, ''"  # a listing does not read the turns


class ConversationNotFoundError(NotFoundError):
    error_type = "conversation_not_found"


@dataclass(frozen=True)
class StoredConversation:
    id: str
    principal: str
    title: str
    created: float
    updated: float
    turn_count: int
    turns: str  # JSON array ("" in listings, which do not read it)


class ConversationStore(Protocol):
    def list(self, principal: str) -> list[StoredConversation]: ...
    def get(self, principal: str, conversation_id: str) -> StoredConversation: ...
    def create(self, principal: str, title: str, turns: str, turn_count: int) -> StoredConversation: ...
    def update(self, principal: str, conversation_id: str, title: str | None = None, turns: str | None = None,
               turn_count: int | None = None) -> StoredConversation: ...
    def delete(self, principal: str, conversation_id: str) -> None: ...
    def delete_all(self, principal: str) -> int: ...
    def close(self) -> None: ...


def _record(row: Sequence[Any]) -> StoredConversation:
    id_, principal, title, created, updated, turn_count, turns = row
    return StoredConversation(id_, principal, title, created, updated, turn_count, turns or "")


def _missing(conversation_id: str) -> ConversationNotFoundError:
    return ConversationNotFoundError(f"no conversation {conversation_id!r}")


def _new_id() -> str:
    return uuid.uuid4().hex[:20]


class SqliteConversationStore:
    """Conversations in ``<home>/conversations.sqlite``."""

    def __init__(self, home: Path) -> None:
        self.path = home / DB_NAME
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, principal TEXT NOT NULL, "
                         "title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, "
                         "turn_count INTEGER NOT NULL, turns TEXT NOT NULL)")
            conn.execute("CREATE INDEX IF NOT EXISTS conversations_by_principal ON conversations (principal, updated)")
            self._conn = conn
        return self._conn

    def _one(self, principal: str, conversation_id: str, with_turns: bool = True) -> StoredConversation:
        columns = COLUMNS if with_turns else LISTED
        row = self._db().execute(f"SELECT {columns} FROM conversations WHERE id = ? AND principal = ?",
                                 (conversation_id, principal)).fetchone()
        if row is None:
            raise _missing(conversation_id)
        return _record(row)

    def list(self, principal: str) -> list[StoredConversation]:
        if not self.path.exists():
            return []
        with self._lock:
            rows = self._db().execute(f"SELECT {LISTED} FROM conversations "
                                      "WHERE principal = ? ORDER BY updated DESC", (principal,)).fetchall()
        return [_record(r) for r in rows]

    def get(self, principal: str, conversation_id: str) -> StoredConversation:
        if not self.path.exists():
            raise _missing(conversation_id)
        with self._lock:
            return self._one(principal, conversation_id)

    def create(self, principal: str, title: str, turns: str, turn_count: int) -> StoredConversation:
        now = time.time()
        record = StoredConversation(_new_id(), principal, title, now, now, turn_count, turns)
        with self._lock:
            self._db().execute(f"INSERT INTO conversations ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                               (record.id, principal, title, now, now, turn_count, turns))
        return record

    def update(self, principal: str, conversation_id: str, title: str | None = None, turns: str | None = None,
               turn_count: int | None = None) -> StoredConversation:
        with self._lock:
            db = self._db()
            changed = db.execute(
                "UPDATE conversations SET title = COALESCE(?, title), turns = COALESCE(?, turns), "
                "turn_count = COALESCE(?, turn_count), updated = ? WHERE id = ? AND principal = ?",
                (title, turns, turn_count, time.time(), conversation_id, principal)).rowcount
            if not changed:
                raise _missing(conversation_id)
            return self._one(principal, conversation_id, with_turns=False)

    def delete(self, principal: str, conversation_id: str) -> None:
        if not self.path.exists():
            raise _missing(conversation_id)
        with self._lock:
            deleted = self._db().execute("DELETE FROM conversations WHERE id = ? AND principal = ?",
                                         (conversation_id, principal)).rowcount
        if not deleted:
            raise _missing(conversation_id)

    def delete_all(self, principal: str) -> int:
        if not self.path.exists():
            return 0
        with self._lock:
            return self._db().execute("DELETE FROM conversations WHERE principal = ?", (principal,)).rowcount

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


SCHEMA = (
    "CREATE SCHEMA IF NOT EXISTS rag",
    "CREATE TABLE IF NOT EXISTS rag.conversations (id text PRIMARY KEY, principal text NOT NULL, "
    "title text NOT NULL, created double precision NOT NULL, updated double precision NOT NULL, "
    "turn_count integer NOT NULL, turns text NOT NULL)",
    "CREATE INDEX IF NOT EXISTS conversations_by_principal ON rag.conversations (principal, updated)",
)


class PostgresConversationStore:
    """Conversations in ``rag.conversations`` of the PostgreSQL store."""

    def __init__(self, url: str) -> None:
        import psycopg  # lazy: optional dependency (the postgres extra)

        self._psycopg = psycopg
        self.url = url
        self._ready = False

    def _run(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                if not self._ready:
                    ensure_tables(conn, SCHEMA, "SELECT to_regclass('rag.conversations_by_principal') IS NOT NULL")
                    self._ready = True
                cursor = conn.execute(sql, args)
                return cursor.fetchall() if cursor.description else []
        except self._psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"the conversation store (PostgreSQL) cannot be reached: {exc}") from exc

    def list(self, principal: str) -> list[StoredConversation]:
        rows = self._run(f"SELECT {LISTED} FROM rag.conversations "
                         "WHERE principal = %s ORDER BY updated DESC", (principal,))
        return [_record(r) for r in rows]

    def get(self, principal: str, conversation_id: str) -> StoredConversation:
        rows = self._run(f"SELECT {COLUMNS} FROM rag.conversations WHERE id = %s AND principal = %s",
                         (conversation_id, principal))
        if not rows:
            raise _missing(conversation_id)
        return _record(rows[0])

    def create(self, principal: str, title: str, turns: str, turn_count: int) -> StoredConversation:
        now = time.time()
        record = StoredConversation(_new_id(), principal, title, now, now, turn_count, turns)
        self._run(f"INSERT INTO rag.conversations ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                  (record.id, principal, title, now, now, turn_count, turns))
        return record

    def update(self, principal: str, conversation_id: str, title: str | None = None, turns: str | None = None,
               turn_count: int | None = None) -> StoredConversation:
        rows = self._run(
            "UPDATE rag.conversations SET title = COALESCE(%s, title), turns = COALESCE(%s, turns), "
            "turn_count = COALESCE(%s, turn_count), updated = %s WHERE id = %s AND principal = %s "
            f"RETURNING {LISTED}",
            (title, turns, turn_count, time.time(), conversation_id, principal))
        if not rows:
            raise _missing(conversation_id)
        return _record(rows[0])

    def delete(self, principal: str, conversation_id: str) -> None:
        if not self._run("DELETE FROM rag.conversations WHERE id = %s AND principal = %s RETURNING id",
                         (conversation_id, principal)):
            raise _missing(conversation_id)

    def delete_all(self, principal: str) -> int:
        return len(self._run("DELETE FROM rag.conversations WHERE principal = %s RETURNING id", (principal,)))

    def close(self) -> None:
        pass
