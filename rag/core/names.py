"""Naming rules for things users name: indexes."""

from __future__ import annotations

import re

from rag.core.errors import BadRequestError

INDEX_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_INDEX_NAME = re.compile(INDEX_NAME_PATTERN)


def validate_index_name(name: str) -> str:
    if not _INDEX_NAME.match(name or ""):
        raise BadRequestError(f"invalid index name {name!r}: use letters, digits, '.', '_' or '-' (max 64)")
    return name
