"""/v1/ask and /v1/retrieve."""

from __future__ import annotations

import anyio.to_thread
from litestar import Controller, Request, post
from litestar.datastructures import State

from api.auth import Context
from api.openapi import ANSWER_ERRORS, operation
from api.protocol import (AskDoneEvent, AskRequest, AskResponse, RetrieveMetrics, RetrieveRequest, RetrieveResponse,
                          TokenEvent)
from api.requests import json_body
from api.sse import event, primed, sse, sse_error, sse_response
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, options_from, sources
from rag.core.errors import RagError


class AnswersController(Controller):
    path = "/v1"
    tags = ["answers"]

    # Annotated with the JSON answer only (the schema's 200); with "stream" the handler returns an SSE
    # Stream, documented by ``operation`` (Litestar serves a returned Response as it is).
    @post("/ask", status_code=200, summary="Answer a question from the indexed documents",
          responses=ANSWER_ERRORS, operation_class=operation(json_body=AskRequest))
    async def ask(self, state: State, request: Request, context: Context) -> AskResponse:
        data = await json_body(request, AskRequest)
        app = state.app
        app.authorize(context, data.index, "reader", "/v1/ask")
        options = options_from(app.settings, top_k=data.top_k, max_tokens=data.max_tokens,
                               temperature=data.temperature, top_p=data.top_p,
                               top_k_sampling=data.top_k_sampling, documents=data.documents)
        answer_request = AnswerRequest(question=data.question, index=data.index, options=options)
        if not data.stream:
            return await app.answer(answer_request, request.receive, context, "/v1/ask")
        return sse_response(ask_sse(await primed(app.events(answer_request, context, "/v1/ask"))))  # type: ignore[return-value]

    @post("/retrieve", status_code=200, summary="Retrieve chunks without generating", responses=ANSWER_ERRORS,
          operation_class=operation(json_body=RetrieveRequest))
    async def retrieve(self, state: State, request: Request, context: Context) -> RetrieveResponse:
        data = await json_body(request, RetrieveRequest)
        app = state.app
        index = app.authorize(context, data.index, "reader", "/v1/retrieve")
        service = app.service()
        retrieval = await anyio.to_thread.run_sync(service.retrieve, data.query, data.index, data.top_k,
                                                   data.documents, context)
        app.record(context, "retrieve", route="/v1/retrieve", index=index, **app.record_question(data.query),
                   retrieved=[{"chunk_id": h.chunk.id, "document_id": h.chunk.doc_id, "score": round(h.score, 5)}
                              for h in retrieval.hits], outcome="retrieved")
        return RetrieveResponse(query=data.query.strip(), chunks=sources(retrieval),
                                metrics=RetrieveMetrics(embed_ms=round(retrieval.embed_ms, 2),
                                                        search_ms=round(retrieval.search_ms, 2)))


async def ask_sse(events):
    try:
        async for item in events:
            if isinstance(item, AnswerResult):
                body = item.to_dict()
                yield sse(event(AskDoneEvent, done=True, **{name: body[name] for name in AskDoneEvent.__struct_fields__
                                                            if name != "done"}))
            else:
                yield sse(TokenEvent(token=item))
    except RagError as exc:
        yield sse_error(exc)
