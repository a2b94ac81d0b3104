"""/v1/ask and /v1/retrieve."""

from __future__ import annotations

import anyio.to_thread
from litestar import Controller, Request, post
from litestar.types import Receive

from api.auth import Context
from api.openapi import ANSWER_ERRORS, operation
from api.protocol import (AskDoneEvent, AskRequest, AskResponse, RetrieveMetrics, RetrieveRequest, RetrieveResponse,
                          TokenEvent)
from api.requests import cancel_on_disconnect, json_body
from api.state import ServicesDep
from app.services import Services
from api.sse import event, primed, sse, sse_error, sse_response
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, final_result, options_from, sources
from rag.core.access import RequestContext
from rag.core.errors import RagError


class AnswersController(Controller):
    path = "/v1"
    tags = ["answers"]

    # Annotated with the JSON answer only (the schema's 200); with "stream" the handler returns an SSE
    # Stream, documented by ``operation`` (Litestar serves a returned Response as it is).
    @post("/ask", status_code=200, summary="Answer a question from the indexed documents",
          responses=ANSWER_ERRORS, operation_class=operation(json_body=AskRequest))
    async def ask(self, services: ServicesDep, request: Request, context: Context) -> AskResponse:
        data = await json_body(request, AskRequest)
        index = services.documents.authorized(context, data.index, "reader", "/v1/ask")
        options = options_from(services.settings, top_k=data.top_k, max_tokens=data.max_tokens,
                               temperature=data.temperature, top_p=data.top_p,
                               top_k_sampling=data.top_k_sampling, documents=data.documents)
        answer_request = AnswerRequest(question=data.question, index=index, options=options)
        if not data.stream:
            return await answer(services, answer_request, request.receive, context, "/v1/ask")
        return sse_response(ask_sse(await primed(services.answers.events(answer_request, context, "/v1/ask"))))  # type: ignore[return-value]

    @post("/retrieve", status_code=200, summary="Retrieve chunks without generating", responses=ANSWER_ERRORS,
          operation_class=operation(json_body=RetrieveRequest))
    async def retrieve(self, services: ServicesDep, request: Request, context: Context) -> RetrieveResponse:
        data = await json_body(request, RetrieveRequest)
        index = services.documents.authorized(context, data.index, "reader", "/v1/retrieve")
        services.answers.ready()  # a 503 at once while the models load
        retrieval = await anyio.to_thread.run_sync(services.answers.retrieve, context, data.query, index, data.top_k,
                                                   data.documents, "/v1/retrieve")
        return RetrieveResponse(query=data.query.strip(), chunks=sources(retrieval),
                                metrics=RetrieveMetrics(embed_ms=round(retrieval.embed_ms, 2),
                                                        search_ms=round(retrieval.search_ms, 2)))


async def answer(services: Services, request: AnswerRequest, receive: Receive, context: RequestContext,
                 route: str) -> AnswerResult:
    """The whole answer; a client that disconnects (the request's ASGI ``receive``) cancels it."""
    return await cancel_on_disconnect(receive, final_result(services.answers.events(request, context, route)))


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
