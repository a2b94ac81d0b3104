"""Who is asking and what they may see.

One ``RequestContext`` is made at the edge (the API from the request's key or token, the CLI from the
local user) and travels explicitly to the stages that use it: retrieval filters documents by
``principal.groups`` inside the search, routes check ``principal.may(index, role)``, the audit trail
records ``principal.name``. Nothing below the edge re-derives it.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("reader", "editor", "admin")  # each includes what the ones before it may do
ALL_INDEXES = "*"
ALL_GROUPS = "*"  # a grant of every document group (no document group may be spelled so)


@dataclass(frozen=True)
class Principal:
    name: str
    roles: tuple[tuple[str, str], ...] = ((ALL_INDEXES, "admin"),)  # (index name or "*", role)
    groups: frozenset[str] | None = None  # document groups it may see; None: every document
    kind: str = "key"  # key | jwt | env | local | anonymous | system: names of two kinds never meet

    @property
    def key(self) -> str:
        """Who it is, kind included ("key:alice" is not the signed-in "jwt:alice")."""
        return f"{self.kind}:{self.name}"

    def role_for(self, index: str) -> str | None:
        """The strongest role this principal holds on ``index`` (an exact grant or ``*``)."""
        held = [role for name, role in self.roles if name in (index, ALL_INDEXES) and role in ROLES]
        return max(held, key=ROLES.index, default=None)

    def may(self, index: str, role: str) -> bool:
        held = self.role_for(index)
        return held is not None and ROLES.index(held) >= ROLES.index(role)

    def sees(self, document_groups: frozenset[str] | tuple[str, ...] | None) -> bool:
        """A document with no groups is public; otherwise it needs a group in common."""
        if self.groups is None or not document_groups:
            return True
        return bool(self.groups.intersection(document_groups))

    def may_assign(self, groups: frozenset[str] | tuple[str, ...] | list[str]) -> bool:
        """Whether it may give a document (or a key) ``groups``: only groups it holds itself."""
        return self.groups is None or set(groups) <= self.groups


LOCAL_ADMIN = Principal("local", kind="local")  # no key configured (open service on 127.0.0.1) and the CLI


@dataclass(frozen=True)
class RequestContext:
    principal: Principal = LOCAL_ADMIN
    request_id: str | None = None

    @property
    def groups(self) -> frozenset[str] | None:
        """The document-group filter retrieval applies inside the search (None: no filter)."""
        return self.principal.groups
