"""What the store's PostgreSQL tables share (the indexes, the API keys, the conversations, the audit trail), kept
apart from the index store: the key and conversation modules hold a SQLite backend beside their PostgreSQL one,
and the SQLite path imports nothing of PostgreSQL's."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

MIGRATION_LOCK = 0x7261_6731  # advisory lock key held while the schema is created or migrated ("rag1")


def redact(url: str) -> str:
    """``url`` without its password, for messages and ``IndexInfo.path``."""
    return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", url)


def ensure_tables(conn: Any, statements: Sequence[str], present: str) -> None:
    """Run the DDL ``statements`` (idempotent: IF NOT EXISTS) under the migration lock, unless the query
    ``present`` (one boolean) says an earlier run made everything they make. DDL takes its table locks even where
    IF NOT EXISTS finds nothing to do (ALTER TABLE: ACCESS EXCLUSIVE, CREATE INDEX: SHARE), so a replica opening
    its connection while another appends to the table deadlocked with it (CI at f360be2: the audit trail's
    ALTER TABLE behind an append's row lock, that append's INSERT behind the CREATE INDEX's share lock)."""
    if conn.execute(present).fetchone()[0]:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        if conn.execute(present).fetchone()[0]:  # made by another process while this one waited for the lock
            return
        for statement in statements:
            conn.execute(statement)
