"""Who may: a principal's role on an index, or on every index. Refusals say as little as possible: a role
missing on an index is the same 403 whether or not the index exists."""

from __future__ import annotations

from rag.core.access import ALL_INDEXES, RequestContext
from rag.core.errors import ForbiddenError
from rag.core.names import IndexName

ROLE_VERBS = {"reader": "read", "editor": "change", "admin": "administer"}


def require_role(context: RequestContext, resolved: IndexName, role: str, requested: IndexName) -> None:
    """``role`` on ``resolved`` (the name the store resolves ``requested`` to: the embedded store's "HR" is an
    existing "hr", so a grant for "HR" never opens "hr"); the refusal names the index as requested."""
    if not context.principal.may(resolved.value, role):
        raise ForbiddenError(f"this key may not {ROLE_VERBS[role]} index {requested.value!r}")


def require_everywhere(context: RequestContext, role: str) -> None:
    """For what spans every index (keys, the audit trail): ``role`` on ``*``."""
    if not context.principal.may(ALL_INDEXES, role):
        raise ForbiddenError(f"this needs the {role} role on every index (*)")
