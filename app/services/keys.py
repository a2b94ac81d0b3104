"""API keys: created, listed and revoked by those who may, each change in the audit trail. A principal grants
at most what it holds, and a key wider than the caller is neither listed to it nor changed by it."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.audit import Auditor
from rag.core.access import RequestContext
from rag.core.errors import ForbiddenError
from rag.core.keys import ApiKey
from rag.store.keys import KeyStore, unknown_key


@dataclass
class Keys:
    store: KeyStore
    audit: Auditor

    def visible(self, context: RequestContext) -> list[ApiKey]:
        """The keys ``context``'s principal could have made (an admin with groups sees no wider ones)."""
        held = context.principal
        return [r for r in self.store.list() if held.may_grant(r.roles, r.groups) is None]

    def create(self, context: RequestContext, record: ApiKey, route: str) -> None:
        why_not = context.principal.may_grant(record.roles, record.groups)
        if why_not is not None:  # a principal grants at most what it holds
            self.audit.record(context, "key.create", route=route, key=record.name, outcome="refused",
                              roles=[list(g) for g in record.roles], groups=sorted(record.groups))
            raise ForbiddenError(f"this key may not create that key: {why_not}")
        self.store.add(record)
        self.audit.record(context, "key.create", route=route, key=record.name, roles=[list(g) for g in record.roles],
                          groups=sorted(record.groups), expires=record.expires, outcome="created")

    def revoke(self, context: RequestContext, name: str, route: str) -> ApiKey:
        held = next((r for r in self.store.list() if r.name == name), None)
        why_not = None if held is None else context.principal.may_grant(held.roles, held.groups)
        if why_not is not None:  # changing a key is granting: only one that holds no more than the caller,
            # and a wider key is not listed to it, so it is the same "not found" as a key that never was
            self.audit.record(context, "key.revoke", route=route, key=name, outcome="refused")
            raise unknown_key(name)
        record = self.store.revoke(name)
        self.audit.record(context, "key.revoke", route=route, key=name, outcome="revoked")
        return record

    def close(self) -> None:
        self.store.close()
