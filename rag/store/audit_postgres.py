"""The audit trail in the PostgreSQL store (``store_url``): every replica appends to one hash-chained trail.

``rag.audit`` holds one row per record: its sequence number, the columns ``rag audit show`` filters on, and the
record itself as the canonical JSON that ``rag.store.audit_files`` writes to files (``seq``, ``prev``, ``hash``
included). ``rag.audit_head`` is one row, the last record's ``seq`` and ``hash`` and their ``mac`` under the
audit key. An append locks that row (``SELECT … FOR UPDATE``), so appenders in any number of processes take
turns: each reads the head, inserts the next record and moves the head in one transaction, and the chain never
forks. The head also shows records cut from the end of the trail, which a chain alone cannot; its MAC, that
whoever cut them could not move it (without the key).
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag.store.shared import ensure_tables, redact
from rag.store.audit_files import (GENESIS, MAC, AuditKey, Verified, canonical, chain_name, check_record, load_key,
                            missing_key_error, sign, timestamp, write_key)
from rag.core.errors import StoreUnavailableError

TABLE = "rag.audit"
HEAD = "rag.audit_head"
SCHEMA = (
    "CREATE SCHEMA IF NOT EXISTS rag",
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        seq bigint PRIMARY KEY, ts text NOT NULL, principal text, index_name text, record text NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS audit_ts ON {TABLE} (ts)",
    f"""CREATE TABLE IF NOT EXISTS {HEAD} (
        one boolean PRIMARY KEY DEFAULT true CHECK (one), seq bigint NOT NULL, hash text NOT NULL)""",
    f"INSERT INTO {HEAD} (seq, hash) VALUES (0, '{GENESIS}') ON CONFLICT DO NOTHING",
    f"ALTER TABLE {HEAD} ADD COLUMN IF NOT EXISTS mac text",
)
# Whether SCHEMA ran to its end: its index and its last column exist.
PRESENT = ("SELECT to_regclass('rag.audit_ts') IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute "
           f"WHERE attrelid = to_regclass('{HEAD}') AND attname = 'mac' AND NOT attisdropped)")


def head_mac(key: AuditKey, seq: int, hash_: str) -> str:
    return key.mac(b"rag.audit head", f"{seq}:{hash_}".encode())


@dataclass(frozen=True)
class RecordProblem:
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"{TABLE} record {self.seq}: {self.reason}"


class PostgresAuditTrail:
    """Appends and reads ``rag.audit`` over one connection of its own (appends are one short transaction each,
    committed before ``append`` returns). Thread-safe."""

    def __init__(self, url: str, key: AuditKey | None = None) -> None:
        import psycopg  # lazy: optional dependency (the postgres extra)

        self._psycopg = psycopg
        self.url = url
        self.key = key
        self.writer = chain_name()  # which process wrote a record: start time, host, pid
        self._conn: Any = None
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return f"{TABLE} of {redact(self.url)}"

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = self._psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            try:
                ensure_tables(conn, SCHEMA, PRESENT)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        return StoreUnavailableError(f"the audit trail ({self.location}) cannot be written or read: {exc}")

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record (``event`` plus ``fields``; None values are left out) after the trail's last one,
        whichever process wrote that; returns it."""
        with self._lock:
            try:
                conn = self._connection()
                with conn.transaction():
                    head = conn.execute(f"SELECT seq, hash, mac FROM {HEAD} FOR UPDATE").fetchone()
                    if head is None:
                        raise StoreUnavailableError(f"the audit trail's head row ({HEAD}) is gone: the trail was "
                                                    "tampered with; `rag audit verify` shows where")
                    seq, prev = int(head[0]), str(head[1])
                    body = {k: v for k, v in fields.items() if v is not None}
                    self._insert(conn, seq, prev, event, body)
            except self._psycopg.OperationalError as exc:
                raise self._unavailable(exc) from exc
            return body

    def open_key(self, path: Path) -> AuditKey:
        """The audit key for a writer: the one in ``path``, else a new one, made only over a table that never
        had one (empty, or written before keys: the upgrade). Under the head row's lock, before the key file is
        moved into place, its first record (``audit.keyed``) anchors the unkeyed records before it: whoever sees
        the key sees them anchored. Raises ConfigError where the table was keyed and the key is gone."""
        candidate = AuditKey(secrets.token_bytes(32))
        with self._lock:
            try:
                conn = self._connection()
                with conn.transaction():
                    head = conn.execute(f"SELECT seq, hash, mac FROM {HEAD} FOR UPDATE").fetchone()
                    key = load_key(path)  # made by another process while this one waited for the row
                    if key is not None:
                        self.key = key
                        return key
                    where = f"{self.location}: rename the tables rag.audit and rag.audit_head"
                    if head is not None and head[2] is not None:
                        raise missing_key_error(path, f"the head row of {self.location} carries a MAC under it", where)
                    if conn.execute(f"SELECT 1 FROM {TABLE} WHERE record LIKE %s LIMIT 1",
                                    (f'%"mac":"{MAC}"%',)).fetchone() is not None:
                        raise missing_key_error(path, f"{self.location} holds records written with it", where)
                    self.key = candidate
                    if head is not None and int(head[0]) > 0:
                        self._insert(conn, int(head[0]), str(head[1]), "audit.keyed",
                                     {"unkeyed_before": int(head[0]) + 1})
                    write_key(path, candidate)  # before the commit: a crash now leaves the row unmoved
            except self._psycopg.OperationalError as exc:
                self.key = None
                raise self._unavailable(exc) from exc
            except BaseException:
                self.key = None
                raise
        return candidate

    def _insert(self, conn: Any, seq: int, prev: str, event: str, body: dict[str, Any]) -> tuple[int, str]:
        """Insert the record after ``(seq, prev)`` and move the head to it (in the caller's transaction)."""
        body.update(event=event, ts=timestamp(time.time()), seq=seq + 1, prev=prev, writer=self.writer)
        sign(body, self.key)
        conn.execute(f"INSERT INTO {TABLE} (seq, ts, principal, index_name, record) VALUES (%s, %s, %s, %s, %s)",
                     (body["seq"], body["ts"], _text(body.get("principal")), _text(body.get("index")),
                      canonical(body).decode()))
        conn.execute(f"UPDATE {HEAD} SET seq = %s, hash = %s, mac = %s",
                     (body["seq"], body["hash"], head_mac(self.key, body["seq"], body["hash"]) if self.key else None))
        return body["seq"], body["hash"]

    def verify(self) -> Verified:
        """``(records checked, problems)``: the first record that was edited, deleted or moved (named by its
        sequence number), or records cut from the end; at most one problem, the trail being one chain."""
        with self._lock:
            try:
                conn = self._connection()
                with conn.transaction():
                    # One snapshot for the head and the records: appends meanwhile are simply not seen.
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    head = conn.execute(f"SELECT seq, hash, mac FROM {HEAD}").fetchone()
                    cursor = conn.cursor("audit_verify")
                    cursor.itersize = 2000
                    cursor.execute(f"SELECT seq, ts, principal, index_name, record FROM {TABLE} ORDER BY seq")
                    checked, unkeyed, problem = _walk(cursor, head, self.key)
                    cursor.close()
            except self._psycopg.OperationalError as exc:
                raise self._unavailable(exc) from exc
        notes = [f"{unkeyed} record(s) were written without the audit key (before it existed)"
                 + (": anchored by the head's MAC" if self.key else "")] if unkeyed else []
        return Verified(checked, [problem] if problem else [], notes)

    def records(self, since_ts: str | None = None, principal: str | None = None,
                index: str | None = None) -> list[dict[str, Any]]:
        """Every readable record, oldest first, filtered."""
        where, args = [], []
        for column, value in (("ts >=", since_ts), ("principal =", principal), ("index_name =", index)):
            if value:
                where.append(f"{column} %s")
                args.append(value)
        sql = f"SELECT record FROM {TABLE}{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY seq"
        with self._lock:
            try:
                rows = self._connection().execute(sql, args).fetchall()
            except self._psycopg.OperationalError as exc:
                raise self._unavailable(exc) from exc
        records = []
        for (text,) in rows:
            try:
                record = json.loads(text)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _walk(rows: Any, head: tuple | None, key: AuditKey | None) -> tuple[int, int, RecordProblem | None]:
    checked, unkeyed, seq, prev, keyed = 0, 0, 0, GENESIS, False
    for row_seq, ts, principal, index, text in rows:
        problem = check_record(text.encode(), seq, prev, "record", key=key, after_keyed=keyed)
        if problem is None:
            record = json.loads(text)
            # The columns `rag audit show` filters on must say what the hashed record says.
            if (row_seq, ts, principal, index) != (record["seq"], record.get("ts"), _text(record.get("principal")),
                                                   _text(record.get("index"))):
                problem = "its columns (seq, ts, principal, index_name) do not match its content"
            elif record.get("mac") != MAC and record.get("event") == "audit.keyed":
                problem = ("an audit.keyed record without the key's MAC (the trail was rewritten without the audit "
                           "key)")
            elif (key is not None and unkeyed and not keyed and record.get("mac") == MAC
                  and record.get("event") != "audit.keyed"):
                problem = ("keyed records follow unkeyed ones that no audit.keyed record anchors (the records "
                           "before it were rewritten without the audit key)")
        if problem is not None:
            return checked, unkeyed, RecordProblem(row_seq, problem)
        seq, prev = record["seq"], record["hash"]
        keyed = keyed or record.get("mac") == MAC
        unkeyed += record.get("mac") != MAC
        checked += 1
    if head is None:
        return checked, unkeyed, RecordProblem(seq + 1, f"the head row ({HEAD}) is gone")
    if head[0] > seq:
        return checked, unkeyed, RecordProblem(seq + 1, f"missing: the trail ends at record {seq}, but {head[0]} "
                                                        "were written (records were cut from the end)")
    if (head[0], head[1]) != (seq, prev):
        return checked, unkeyed, RecordProblem(seq, f"the head row ({HEAD}) does not name the last record (it says "
                                                    f"record {head[0]})")
    if key is not None and seq > 0 and head[2] is None and not keyed:
        # Not "moved": no record was written with the key. A key made now anchors the table at once (audit.keyed,
        # before its file is in place), so only a key made without that (an earlier version) or a rewrite leaves it.
        return checked, unkeyed, RecordProblem(seq, f"no record was written with the audit key and the head row "
                                                    f"({HEAD}) has no MAC: the key was made without anchoring the "
                                                    "trail, or the trail was rewritten without the key")
    if key is not None and seq > 0 and not (head[2] and hmac.compare_digest(head[2], head_mac(key, seq, prev))):
        return checked, unkeyed, RecordProblem(seq, f"the head row ({HEAD}) was moved: its MAC does not match "
                                                    "(records were cut from the end, or the trail was rewritten)")
    return checked, unkeyed, None
