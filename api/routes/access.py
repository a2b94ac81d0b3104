"""/v1/me (who the caller is: the web app shows it and hides what the role may not do) and /v1/keys (admins
on every index create, list and revoke API keys; the secret is in the create response only)."""

from __future__ import annotations

import time

import anyio.to_thread
from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.params import FromPath

from api.auth import Context, authorize_all
from api.openapi import errors, operation
from api.protocol import KeyCreated, KeyCreateRequest, KeyInfo, KeyList, Me, RoleGrant
from api.requests import json_body
from api.state import AppState
from rag.core.access import describe_groups
from rag.store.keys import unknown_key
from rag.core.errors import ForbiddenError
from rag.core.durations import parse_duration
from rag.core.keys import ApiKey, new_key, parse_grants, validate_key_groups


def key_info(record: ApiKey) -> KeyInfo:
    return KeyInfo(name=record.name, roles=[RoleGrant(i, r) for i, r in record.roles], groups=sorted(record.groups),
                   sees=describe_groups(record.groups), created=record.created, expires=record.expires,
                   state=record.state())


class AccessController(Controller):
    path = "/v1"
    tags = ["access"]

    @get("/me", summary="The caller: name, roles per index, document groups", responses=errors())
    async def me(self, state: State, context: Context) -> Me:
        app: AppState = state.app
        principal = context.principal
        required = await anyio.to_thread.run_sync(app.auth.required)
        return Me(name=principal.name, roles=[RoleGrant(i, r) for i, r in principal.roles],
                  groups=sorted(principal.groups), sees=describe_groups(principal.groups), authenticated=required)

    @get("/keys", summary="API keys (admin on every index); an admin with groups sees those holding no more than it",
         responses=errors())
    async def list_keys(self, state: State, context: Context) -> KeyList:
        authorize_all(context, "admin")
        records = await anyio.to_thread.run_sync(state.app.keys.list)
        # An admin with groups sees the keys it could have made, no wider ones (nor the groups they name).
        held = context.principal
        return KeyList(keys=[key_info(r) for r in records if held.may_grant(r.roles, r.groups) is None])

    @post("/keys", status_code=201, summary="Create an API key; the response holds it (shown once)",
          responses=errors(400, 409), operation_class=operation(json_body=KeyCreateRequest))
    async def create_key(self, state: State, request: Request, context: Context) -> KeyCreated:
        authorize_all(context, "admin")
        data = await json_body(request, KeyCreateRequest)
        app: AppState = state.app
        expires = time.time() + parse_duration(data.expires) if data.expires else None
        record, token = new_key(data.name, parse_grants(data.role, data.indexes), validate_key_groups(data.groups),
                                expires)
        why_not = context.principal.may_grant(record.roles, record.groups)
        if why_not is not None:  # a principal grants at most what it holds
            app.record(context, "key.create", route="/v1/keys", key=record.name, outcome="refused",
                       roles=[list(g) for g in record.roles], groups=sorted(record.groups))
            raise ForbiddenError(f"this key may not create that key: {why_not}")
        await anyio.to_thread.run_sync(app.keys.add, record)
        app.record(context, "key.create", route="/v1/keys", key=record.name, outcome="created",
                   roles=[list(g) for g in record.roles], groups=sorted(record.groups), expires=expires)
        info = key_info(record)
        return KeyCreated(**{f: getattr(info, f) for f in info.__struct_fields__}, key=token)

    @delete("/keys/{name:str}", status_code=200, summary="Revoke an API key (refused from the next request on)",
            responses=errors(400, 404))
    async def revoke_key(self, state: State, context: Context, name: FromPath[str]) -> KeyInfo:
        authorize_all(context, "admin")
        app: AppState = state.app
        held = next((r for r in await anyio.to_thread.run_sync(app.keys.list) if r.name == name), None)
        why_not = None if held is None else context.principal.may_grant(held.roles, held.groups)
        if why_not is not None:  # changing a key is granting: only one that holds no more than the caller,
            # and a wider key is not listed to it, so it is the same "not found" as a key that never was
            app.record(context, "key.revoke", route="/v1/keys/{name}", key=name, outcome="refused")
            raise unknown_key(name)
        record = await anyio.to_thread.run_sync(app.keys.revoke, name)
        app.record(context, "key.revoke", route="/v1/keys/{name}", key=name, outcome="revoked")
        return key_info(record)
