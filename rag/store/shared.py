"""What the store's PostgreSQL tables share (the indexes, the API keys, the conversations, the audit trail), kept
apart from the index store: the key and conversation modules hold a SQLite backend beside their PostgreSQL one,
and the SQLite path imports nothing of PostgreSQL's."""

from __future__ import annotations

import re

MIGRATION_LOCK = 0x7261_6731  # advisory lock key held while the schema is created or migrated ("rag1")


def redact(url: str) -> str:
    """``url`` without its password, for messages and ``IndexInfo.path``."""
    return re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", url)
