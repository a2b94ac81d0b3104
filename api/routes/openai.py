"""OpenAI-compatible endpoints: /v1/models and /v1/chat/completions (retrieval on by default)."""

from __future__ import annotations

import time
import uuid

from litestar import Controller, Request, get, post

from api.auth import Context
from api.openapi import ANSWER_ERRORS, errors, operation
from api.protocol import (AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, Choice, ModelCard,
                          ModelList, PromptTokensDetails, Usage)
from api.routes.answers import answer
from api.routes.chat import as_dicts
from api.requests import json_body
from api.state import ServicesDep
from api.sse import event, primed, sse, sse_error, sse_response
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, options_from
from rag.core.errors import RagError

ROUTE = "/v1/chat/completions"


def finish_reason(result: AnswerResult) -> str:
    return "length" if result.finish_reason == "length" else "stop"


def usage(result: AnswerResult) -> Usage:
    m = result.metrics
    return Usage(prompt_tokens=m.prompt_tokens, completion_tokens=m.output_tokens,
                 total_tokens=m.prompt_tokens + m.output_tokens,
                 prompt_tokens_details=PromptTokensDetails(cached_tokens=m.cached_prompt_tokens))


class OpenAIController(Controller):
    path = "/v1"
    tags = ["openai-compatible"]

    @get("/models", summary="Models served (OpenAI list format)", responses=errors(503))
    async def models(self, services: ServicesDep) -> ModelList:
        model_id = services.answers.ready().service.generator.model_id
        return ModelList(object="list", data=[ModelCard(id=model_id, object="model", created=0, owned_by="local")])

    # Annotated with the JSON completion (the schema's 200); streams are documented by ``operation``.
    @post("/chat/completions", status_code=200, summary="Chat completion grounded in the documents",
          responses=ANSWER_ERRORS, operation_class=operation(json_body=ChatCompletionRequest))
    async def chat_completions(self, services: ServicesDep, request: Request, context: Context) -> ChatCompletion:
        data = await json_body(request, ChatCompletionRequest)
        index = services.documents.authorized(context, data.index, "reader", ROUTE)
        options = options_from(services.settings, max_tokens=data.max_completion_tokens or data.max_tokens,
                               temperature=data.temperature, top_p=data.top_p, documents=data.documents,
                               stop=[data.stop] if isinstance(data.stop, str) else data.stop)
        answer_request = AnswerRequest.conversation(as_dicts(data.messages), index=index,
                                                    use_context=data.use_context, options=options)
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        if not data.stream:
            result = await answer(services, answer_request, request.receive, context, ROUTE)
            return ChatCompletion(
                id=completion_id, object="chat.completion", created=created, model=result.model,
                choices=[Choice(index=0, message=AssistantMessage(
                    role="assistant", content=result.answer + result.quotes_text()),
                    finish_reason=finish_reason(result))],
                usage=usage(result), sources=result.sources, citations=result.citations, abstained=result.abstained,
                answer=result.answer, evidence=result.evidence)
        events = await primed(services.answers.events(answer_request, context, ROUTE))
        include_usage = bool(data.stream_options and data.stream_options.include_usage)
        return sse_response(openai_sse(events, completion_id, created,  # type: ignore[return-value]
                                       services.answers.ready().service.generator.model_id, include_usage))


async def openai_sse(events, completion_id: str, created: int, model: str, include_usage: bool):
    def chunk(delta: dict, reason: str | None = None, **extra) -> bytes:
        return sse(event(ChatCompletionChunk, id=completion_id, object="chat.completion.chunk", created=created,
                         model=model, choices=[{"index": 0, "delta": delta, "finish_reason": reason}], **extra))

    yield chunk({"role": "assistant", "content": ""})
    try:
        async for item in events:
            if isinstance(item, AnswerResult):
                if item.abstained:
                    yield chunk({"content": item.answer})
                elif item.evidence:
                    yield chunk({"content": item.quotes_text()})
                body = item.to_dict()
                yield chunk({}, finish_reason(item), sources=body["sources"], citations=item.citations,
                            abstained=item.abstained, answer=item.answer, evidence=body["evidence"])
                if include_usage:
                    yield sse(ChatCompletionChunk(id=completion_id, object="chat.completion.chunk", created=created,
                                                  model=model, choices=[], usage=usage(item)))
            else:
                yield chunk({"content": item})
    except RagError as exc:
        yield sse_error(exc)
    yield sse("[DONE]")
