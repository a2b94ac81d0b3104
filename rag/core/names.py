"""Naming rules for things users name: indexes and document access groups."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from rag.core.errors import BadRequestError, IndexNotFoundError

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


@dataclass(frozen=True)
class IndexName:
    """An index name resolved once, at the edge (a route, a CLI command): the request's name or the settings'
    default, validated, and on the API as the store spells it and authorized for the caller. What takes one
    neither validates nor defaults it again; ``value`` is what goes to a store, a record or the wire."""

    value: str

    def __str__(self) -> str:
        return self.value


def index_name(requested: str | IndexName | None, default: str) -> IndexName:
    """The one place an index name is made: ``requested`` (a name already made passes as it is), else
    ``default`` (the ``index`` setting), validated."""
    if isinstance(requested, IndexName):
        return requested
    return IndexName(validate_index_name(requested or default))


GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


def access_groups(groups: Iterable[str] | None) -> str:
    """The stored form of a document's groups: sorted, comma-separated, "" for a public document."""
    names = {g.strip() for g in groups or () if g.strip()}
    bad = sorted(g for g in names if not GROUP_NAME.fullmatch(g))
    if bad:
        raise BadRequestError(f"invalid document group {bad[0]!r}: use letters, digits and _ . @ - (at most 64, "
                              "starting with a letter or digit)")
    return ",".join(sorted(names))


def missing_index_message(name: str, existing: Sequence[str]) -> str:
    """What to say of an index that does not exist, to a reader who may know of ``existing``: a "did you mean"
    for a near name and the list of them, or, with none at all, how to make one."""
    if not existing:
        return f"index {name!r} does not exist yet: add documents to it first (`rag ingest` or POST /v1/documents)"
    near = difflib.get_close_matches(name, existing, n=1, cutoff=0.6) or \
        [n for n in existing if n.lower() == name.lower()]
    hint = f"did you mean {near[0]!r}? " if near else ""
    return (f"index {name!r} does not exist: {hint}existing indexes: {', '.join(existing)} "
            "(adding documents to a new name creates it)")


def index_not_found(name: str, existing: Sequence[str]) -> IndexNotFoundError:
    """The error for an index that does not exist. Its message names no other index: it may reach anyone (an API
    reply, a job record, a stream). The CLI says all of ``existing`` (its user holds every index); the API only
    those the caller holds a grant on, so that an index it may not use is one that does not exist (issue 34)."""
    return IndexNotFoundError(missing_index_message(name, ()), name, tuple(existing))
