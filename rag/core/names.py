"""Naming rules for things users name: indexes."""

from __future__ import annotations

import re

from rag.core.errors import BadRequestError

# An index name is a folder name on every platform: no Windows device name ("CON", "nul", "com1", also before a
# dot: "aux.docs") and no trailing dot, which Windows drops ("abc." would be the folder "abc").
_DEVICE = "|".join("".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)
                   for word in ("con", "prn", "aux", "nul", "com[0-9]", "lpt[0-9]"))
INDEX_NAME_PATTERN = rf"^(?!(?:{_DEVICE})(?:\.|$))[A-Za-z0-9](?:[A-Za-z0-9_.-]{{0,62}}[A-Za-z0-9_-])?$"
_INDEX_NAME = re.compile(INDEX_NAME_PATTERN)


def validate_index_name(name: str) -> str:
    if not _INDEX_NAME.match(name or ""):
        raise BadRequestError(f"invalid index name {name!r}: use letters, digits, '.', '_' or '-' (max 64), "
                              "not ending in '.', not a Windows device name (CON, NUL, COM1...)")
    return name
