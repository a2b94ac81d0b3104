"""Who is asking and what they may see.

One ``RequestContext`` is made at the edge (the API from the request's key or token, the CLI from the
local user) and travels explicitly to the stages that use it: retrieval filters documents by
``principal.groups`` inside the search, routes check ``principal.may(index, role)``, the audit trail
records ``principal.name``. Nothing below the edge re-derives it.

Least privilege by default: a principal holds no role and sees public documents only unless it is given
more; every document is an explicit grant (the group ``*``). A context made without a principal sees public
documents only; the unrestricted one (``RequestContext.local()``) is built on purpose by the CLI and by an
open server on loopback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

ROLES = ("reader", "editor", "admin")  # each includes what the ones before it may do
ALL_INDEXES = "*"
ALL_GROUPS = "*"  # a grant of every document group (no document group may be spelled so)
EVERY_DOCUMENT = frozenset({ALL_GROUPS})
PUBLIC_ONLY: frozenset[str] = frozenset()


def visible(document_groups: Iterable[str], groups: frozenset[str] | None) -> bool:
    """The visibility rule, the one place it is written: a document with no groups is public, and every reader
    sees it; otherwise a reader with document ``groups`` sees it when they share a group. ``groups`` None (no
    filter) or holding ``*``: every document. Retrieval, both stores and the API's listings all ask this."""
    if groups is None or ALL_GROUPS in groups:
        return True
    names = frozenset(document_groups)
    return not names or not groups.isdisjoint(names)


def stored_groups(stored: str) -> frozenset[str]:
    """A document's groups from their stored form (``rag.core.names.access_groups``: "" is a public document)."""
    return frozenset(g for g in stored.split(",") if g)


def visible_ids(documents: Iterable[tuple[str, frozenset[str]]], groups: frozenset[str] | None) -> list[str] | None:
    """The ids of the (id, groups) ``documents`` a reader with ``groups`` sees (``visible``); None when that is
    every one of them (the search needs no filter)."""
    every = list(documents)
    seen = [doc_id for doc_id, document_groups in every if visible(document_groups, groups)]
    return None if len(seen) == len(every) else seen


def held_groups(groups: Iterable[str]) -> frozenset[str]:
    """A grant's groups as held: ``*`` among them is every document (the rest adds nothing)."""
    names = frozenset(groups)
    return EVERY_DOCUMENT if ALL_GROUPS in names else names


def describe_groups(groups: frozenset[str]) -> str:
    """What a grant sees, in words: "all groups", "public only", or the groups (and public documents)."""
    if ALL_GROUPS in groups:
        return "all groups"
    return "public only" if not groups else "public + " + ", ".join(sorted(groups))


@dataclass(frozen=True)
class Principal:
    name: str
    roles: tuple[tuple[str, str], ...] = ()  # (index name or "*", role)
    groups: frozenset[str] = PUBLIC_ONLY  # document groups it may see besides public ones; {"*"}: every document
    kind: str = "key"  # key | jwt | env | local | anonymous | system: names of two kinds never meet

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", held_groups(self.groups))

    @property
    def key(self) -> str:
        """Who it is, kind included ("key:alice" is not the signed-in "jwt:alice")."""
        return f"{self.kind}:{self.name}"

    @property
    def unrestricted(self) -> bool:
        """Whether it sees every document."""
        return ALL_GROUPS in self.groups

    @property
    def document_filter(self) -> frozenset[str] | None:
        """The groups retrieval and listings filter by (None: no filter, every document)."""
        return None if self.unrestricted else self.groups

    def role_for(self, index: str) -> str | None:
        """The strongest role this principal holds on ``index`` (an exact grant or ``*``)."""
        held = [role for name, role in self.roles if name in (index, ALL_INDEXES) and role in ROLES]
        return max(held, key=ROLES.index, default=None)

    def may(self, index: str, role: str) -> bool:
        held = self.role_for(index)
        return held is not None and ROLES.index(held) >= ROLES.index(role)

    def sees(self, document_groups: frozenset[str] | tuple[str, ...] | None) -> bool:
        """Whether it may see a document of ``document_groups`` (``visible``)."""
        return visible(document_groups or (), self.groups)

    def may_assign(self, groups: Iterable[str]) -> bool:
        """Whether it may give a document (or a key) ``groups``: only groups it holds itself."""
        return self.unrestricted or held_groups(groups) <= self.groups

    def may_grant(self, roles: Iterable[tuple[str, str]], groups: Iterable[str]) -> str | None:
        """Why it may not make a key (or token grant) of ``roles`` and ``groups`` (None: it may): a principal
        grants at most what it holds — each role on each index, and groups it sees."""
        for index, role in roles:
            if not self.may(index, role):
                where = "every index (*)" if index == ALL_INDEXES else f"index {index!r}"
                return f"it may not grant {role} on {where}: it does not hold that itself"
        if not self.may_assign(groups):
            return (f"it may not grant the document groups {describe_groups(held_groups(groups))}: it sees "
                    f"{describe_groups(self.groups)}")
        return None


LOCAL_ADMIN = Principal("local", ((ALL_INDEXES, "admin"),), EVERY_DOCUMENT, kind="local")  # the CLI, an open server
PUBLIC = Principal("public", (), PUBLIC_ONLY, kind="anonymous")  # a context made without a principal


@dataclass(frozen=True)
class RequestContext:
    principal: Principal = PUBLIC
    request_id: str | None = None

    @classmethod
    def local(cls, request_id: str | None = None) -> "RequestContext":
        """The unrestricted context of the machine's own user (the CLI, a server open on loopback)."""
        return cls(LOCAL_ADMIN, request_id)

    @property
    def groups(self) -> frozenset[str] | None:
        """The document-group filter retrieval applies inside the search (None: no filter)."""
        return self.principal.document_filter
