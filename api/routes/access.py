"""/v1/me (who the caller is: the web app shows it and hides what the role may not do) and /v1/keys (admins
on every index create, list and revoke API keys; the secret is in the create response only)."""

from __future__ import annotations

import time

import anyio.to_thread
from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath

from api.auth import Context
from api.openapi import errors, operation
from api.protocol import KeyCreated, KeyCreateRequest, KeyInfo, KeyList, Me, RoleGrant
from api.requests import json_body
from api.state import ServerDep, ServicesDep
from app.services.access import require_everywhere
from rag.core.access import describe_groups
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
    async def me(self, server: ServerDep, context: Context) -> Me:
        principal = context.principal
        required = await anyio.to_thread.run_sync(server.auth.required)
        return Me(name=principal.name, roles=[RoleGrant(i, r) for i, r in principal.roles],
                  groups=sorted(principal.groups), sees=describe_groups(principal.groups), authenticated=required)

    @get("/keys", summary="API keys (admin on every index); an admin with groups sees those holding no more than it",
         responses=errors())
    async def list_keys(self, services: ServicesDep, context: Context) -> KeyList:
        require_everywhere(context, "admin")
        # An admin with groups sees the keys it could have made, no wider ones (nor the groups they name).
        records = await anyio.to_thread.run_sync(services.keys.visible, context)
        return KeyList(keys=[key_info(r) for r in records])

    @post("/keys", status_code=201, summary="Create an API key; the response holds it (shown once)",
          responses=errors(400, 409), operation_class=operation(json_body=KeyCreateRequest))
    async def create_key(self, services: ServicesDep, request: Request, context: Context) -> KeyCreated:
        require_everywhere(context, "admin")
        data = await json_body(request, KeyCreateRequest)
        expires = time.time() + parse_duration(data.expires) if data.expires else None
        record, token = new_key(data.name, parse_grants(data.role, data.indexes), validate_key_groups(data.groups),
                                expires)
        await anyio.to_thread.run_sync(services.keys.create, context, record, "/v1/keys")
        info = key_info(record)
        return KeyCreated(**{f: getattr(info, f) for f in info.__struct_fields__}, key=token)

    @delete("/keys/{name:str}", status_code=200, summary="Revoke an API key (refused from the next request on)",
            responses=errors(400, 404))
    async def revoke_key(self, services: ServicesDep, context: Context, name: FromPath[str]) -> KeyInfo:
        require_everywhere(context, "admin")
        record = await anyio.to_thread.run_sync(services.keys.revoke, context, name, "/v1/keys/{name}")
        return key_info(record)
