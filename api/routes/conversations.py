"""/v1/conversations: the web app's conversations, kept on the server per principal (the caller's key or
signed-in user), so they follow the person to another browser and a shared browser keeps none of them.

Every route acts on the caller's own conversations only: another principal's is "not found", like a missing
one. A conversation read back says which of its sources' documents are gone from the index (deleted, or no
longer visible to the caller), without their passages.
"""

from __future__ import annotations

import anyio.to_thread
import msgspec
from litestar import Controller, Request, delete, get, patch, post, put
from litestar.params import FromPath

from api.auth import Context
from api.openapi import errors, operation
from api.protocol import (Conversation, ConversationList, ConversationRename, ConversationsDeleted,
                          ConversationSummary, ConversationWrite, SavedTurn)
from api.requests import json_body
from api.state import ServicesDep
from app.services import Services
from rag.store.conversations import StoredConversation
from rag.core.access import RequestContext
from rag.core.errors import BadRequestError, RagError
from rag.core.text import is_blank

ConversationId = FromPath[str]


def summary(record: StoredConversation) -> ConversationSummary:
    return ConversationSummary(id=record.id, title=record.title, created=record.created, updated=record.updated,
                               turns=record.turn_count)


def title_of(write: ConversationWrite) -> str:
    """The given title, else the first question's start."""
    if write.title.strip():
        return write.title.strip()
    return next((" ".join(t.question.split())[:80] for t in write.turns if t.question.strip()), "")


def still_there(services: Services, context: RequestContext,
                turns: list[SavedTurn]) -> set[tuple[str | None, str]]:
    """(index as the turn names it, document id) of the sources' documents the caller may still see (blocking
    reads); a turn that names no index was asked of the server's default."""
    seen: set[tuple[str | None, str]] = set()
    documents = services.documents
    for named in {t.index for t in turns if t.sources}:
        try:  # a saved name that is no valid one (the client wrote it) is an index that is gone
            name = services.index_name(named)
            if not context.principal.may(name.value, "reader"):
                continue
            target = documents.index(name)
            seen.update((named, d.id) for d in documents.visible_documents(target, context))
        except RagError:  # the index itself is gone: none of its documents is there
            continue
    return seen


def mark_deleted(services: Services, context: RequestContext, turns: list[SavedTurn]) -> list[SavedTurn]:
    present = still_there(services, context, turns)
    marked = []
    for turn in turns:
        sources = [source if (turn.index, source.document_id) in present else
                   msgspec.structs.replace(source, deleted=True, text="", snippet="", highlights=[])
                   for source in turn.sources]
        marked.append(msgspec.structs.replace(turn, sources=sources))
    return marked


class ConversationsController(Controller):
    path = "/v1/conversations"
    tags = ["conversations"]

    @get("", summary="The caller's conversations (the web app's history), the last changed first",
         responses=errors())
    async def list_conversations(self, services: ServicesDep, context: Context) -> ConversationList:
        records = await anyio.to_thread.run_sync(services.conversations.list, context.principal.name)
        return ConversationList(conversations=[summary(r) for r in records])

    @post("", status_code=201, summary="Save a new conversation of the caller's", responses=errors(400, 413),
          operation_class=operation(json_body=ConversationWrite))
    async def create_conversation(self, services: ServicesDep, request: Request, context: Context) -> ConversationSummary:
        data = await json_body(request, ConversationWrite)
        record = await anyio.to_thread.run_sync(
            services.conversations.create, context.principal.name, title_of(data),
            msgspec.json.encode(data.turns).decode(), len(data.turns))
        return summary(record)

    @get("/{conversation_id:str}", summary="One of the caller's conversations, with its turns; sources whose "
         "document is gone are marked `deleted` (without their passage)", responses=errors(400, 404))
    async def get_conversation(self, services: ServicesDep, context: Context, conversation_id: ConversationId) -> Conversation:
        record = await anyio.to_thread.run_sync(services.conversations.get, context.principal.name, conversation_id)
        turns = msgspec.json.decode(record.turns or "[]", type=list[SavedTurn])
        turns = await anyio.to_thread.run_sync(mark_deleted, services, context, turns)
        return Conversation(id=record.id, title=record.title, created=record.created, updated=record.updated,
                            turns=turns)

    @put("/{conversation_id:str}", summary="Replace one of the caller's conversations (its title and turns)",
         responses=errors(400, 404, 413), operation_class=operation(json_body=ConversationWrite))
    async def replace_conversation(self, services: ServicesDep, request: Request, context: Context,
                                   conversation_id: ConversationId) -> ConversationSummary:
        data = await json_body(request, ConversationWrite)
        # A source read back as deleted stays deleted (its passage is not sent again, nor saved again).
        record = await anyio.to_thread.run_sync(
            lambda: services.conversations.update(context.principal.name, conversation_id, title_of(data),
                                             msgspec.json.encode(data.turns).decode(), len(data.turns)))
        return summary(record)

    @patch("/{conversation_id:str}", summary="Rename one of the caller's conversations", responses=errors(400, 404),
           operation_class=operation(json_body=ConversationRename))
    async def rename_conversation(self, services: ServicesDep, request: Request, context: Context,
                                  conversation_id: ConversationId) -> ConversationSummary:
        data = await json_body(request, ConversationRename)
        if is_blank(data.title):
            raise BadRequestError("a conversation's title may not be blank: type a few words")
        record = await anyio.to_thread.run_sync(
            lambda: services.conversations.update(context.principal.name, conversation_id, title=data.title.strip()))
        return summary(record)

    @delete("/{conversation_id:str}", status_code=200, summary="Delete one of the caller's conversations",
            responses=errors(400, 404))
    async def delete_conversation(self, services: ServicesDep, context: Context,
                                  conversation_id: ConversationId) -> ConversationsDeleted:
        await anyio.to_thread.run_sync(services.conversations.delete, context.principal.name, conversation_id)
        return ConversationsDeleted(deleted=1)

    @delete("", status_code=200, summary="Delete all of the caller's conversations", responses=errors())
    async def delete_conversations(self, services: ServicesDep, context: Context) -> ConversationsDeleted:
        count = await anyio.to_thread.run_sync(services.conversations.delete_all, context.principal.name)
        return ConversationsDeleted(deleted=count)
