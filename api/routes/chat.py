"""The seed backend's chat endpoints: /v1/chat and /v1/chat/stream."""

from __future__ import annotations

import msgspec
from litestar import Controller, Request, post
from litestar.response import Stream

from api.auth import Context
from api.openapi import ANSWER_ERRORS, SEED_EVENTS, event_stream_only, operation
from api.protocol import ChatMessage, ChatRequest, ChatResponse, SeedDoneEvent, SeedMetrics, TokenEvent
from api.requests import json_body
from api.routes.answers import answer
from api.state import ServicesDep
from app.services import Services
from api.sse import event, primed, sse, sse_error, sse_response
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, options_from
from rag.core.errors import BadRequestError, RagError
from rag.core.names import IndexName


def message_text(message: ChatMessage) -> str:
    """A message's text; list content (OpenAI's content parts) is joined, and must be text only."""
    if not isinstance(message.content, list):
        return message.content or ""
    unsupported = sorted({part.type for part in message.content if part.type != "text"})
    if unsupported:
        raise BadRequestError(f"only text content parts are supported, not {', '.join(unsupported)}")
    return "\n".join(part.text or "" for part in message.content)


def as_dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": "system" if m.role == "developer" else m.role, "content": message_text(m)} for m in messages]


def seed_metrics(result: AnswerResult) -> SeedMetrics:
    m = result.metrics
    return SeedMetrics(ttft=m.ttft_ms / 1000, total_latency=m.total_ms / 1000, tokens_per_second=m.tokens_per_s,
                       output_tokens_per_second=round(1000 / m.tpot_ms, 1) if m.tpot_ms else 0.0,
                       input_tokens=m.prompt_tokens, output_tokens=m.output_tokens, tpot=m.tpot_ms / 1000,
                       model=result.model)


class ChatController(Controller):
    path = "/v1/chat"
    tags = ["chat (seed-compatible)"]

    @post("", status_code=200, summary="Chat turn; the last user message is the question", responses=ANSWER_ERRORS,
          operation_class=operation(json_body=ChatRequest))
    async def chat(self, services: ServicesDep, request: Request, context: Context) -> ChatResponse:
        data = await json_body(request, ChatRequest)
        index = services.documents.authorized(context, data.index, "reader", "/v1/chat")
        result = await answer(services, self._request(data, index, services), request.receive, context, "/v1/chat")
        return ChatResponse(content=result.answer, metrics=seed_metrics(result), sources=result.sources,
                            citations=result.citations, abstained=result.abstained, evidence=result.evidence)

    @post("/stream", status_code=200, summary="Streaming chat turn (SSE)",
          responses={**ANSWER_ERRORS, **event_stream_only(SEED_EVENTS)},
          operation_class=operation(json_body=ChatRequest))
    async def chat_stream(self, services: ServicesDep, request: Request, context: Context) -> Stream:
        data = await json_body(request, ChatRequest)
        index = services.documents.authorized(context, data.index, "reader", "/v1/chat/stream")
        return sse_response(seed_sse(await primed(services.answers.events(self._request(data, index, services),
                                                                          context, "/v1/chat/stream"))))

    @staticmethod
    def _request(data: ChatRequest, index: IndexName, services: Services) -> AnswerRequest:
        options = options_from(services.settings, max_tokens=data.max_tokens, temperature=data.temperature,
                               top_p=data.top_p, top_k_sampling=data.top_k, documents=data.documents)
        return AnswerRequest.conversation(as_dicts(data.messages), index=index, use_context=data.use_context,
                                          options=options)


async def seed_sse(events):
    try:
        async for item in events:
            if isinstance(item, AnswerResult):
                body = item.to_dict()
                yield sse(event(SeedDoneEvent, done=True, token="[DONE]", answer=item.answer,
                                metrics=msgspec.to_builtins(seed_metrics(item)), sources=body["sources"],
                                abstained=item.abstained, abstain_reason=item.abstain_reason,
                                citations=item.citations, evidence=body["evidence"],
                                content=item.answer if item.abstained else None, answer_kind=item.answer_kind,
                                language=item.language))
            else:
                yield sse(TokenEvent(token=item))
    except RagError as exc:
        yield sse_error(exc)
