"""The seed backend's chat endpoints: /v1/chat and /v1/chat/stream."""

from __future__ import annotations

from litestar import Controller, post
from litestar.datastructures import State
from litestar.params import JSONBody
from litestar.response import Stream

from api.answering import answer_events, answer_once
from api.protocol import ChatMessage, ChatRequest
from api.sse import primed, sse, sse_error, sse_response
from rag.answer import answer_options_from
from rag.errors import BadRequestError, RagError
from rag.result import AnswerResult


def message_text(message: ChatMessage) -> str:
    """A message's text; list content (OpenAI's content parts) is joined, and must be text only."""
    if not isinstance(message.content, list):
        return message.content or ""
    unsupported = sorted({part.type for part in message.content if part.type != "text"})
    if unsupported:
        raise BadRequestError(f"only text content parts are supported, not {', '.join(unsupported)}")
    return "\n".join(part.text or "" for part in message.content)


def last_user_message(messages: list[ChatMessage]) -> str:
    for message in reversed(messages):
        text = message_text(message) if message.role == "user" else ""
        if text.strip():
            return text
    raise BadRequestError("messages contain no non-empty user message")


def as_dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": "system" if m.role == "developer" else m.role, "content": message_text(m)} for m in messages]


def seed_metrics(result: AnswerResult) -> dict:
    m = result.metrics
    return {"ttft": m.ttft_ms / 1000, "total_latency": m.total_ms / 1000, "tokens_per_second": m.tokens_per_s,
            "output_tokens_per_second": round(1000 / m.tpot_ms, 1) if m.tpot_ms else 0.0,
            "input_tokens": m.prompt_tokens, "output_tokens": m.output_tokens, "tpot": m.tpot_ms / 1000,
            "model": result.model}


class ChatController(Controller):
    path = "/v1/chat"
    tags = ["chat (seed-compatible)"]

    @post("", status_code=200, summary="Chat turn; the last user message is the question")
    async def chat(self, data: JSONBody[ChatRequest], state: State) -> dict:
        result = await answer_once(state.app, *self._args(data, state))
        return {"content": result.answer, "metrics": seed_metrics(result), "sources": result.to_dict()["sources"],
                "citations": result.citations, "abstained": result.abstained}

    @post("/stream", status_code=200, summary="Streaming chat turn (SSE)")
    async def chat_stream(self, data: JSONBody[ChatRequest], state: State) -> Stream:
        events = await primed(answer_events(state.app, *self._args(data, state)))
        return sse_response(seed_sse(events))

    @staticmethod
    def _args(data: ChatRequest, state: State) -> tuple:
        question = last_user_message(data.messages)
        options = answer_options_from(state.app.settings, max_tokens=data.max_tokens, temperature=data.temperature,
                                      top_p=data.top_p, top_k_sampling=data.top_k, documents=data.documents)
        return options, data.index, question, as_dicts(data.messages), data.use_context


async def seed_sse(events):
    try:
        async for item in events:
            if isinstance(item, AnswerResult):
                yield sse({"done": True, "token": "[DONE]", "metrics": seed_metrics(item),
                           "sources": item.to_dict()["sources"], "abstained": item.abstained,
                           "answer": item.answer, "citations": item.citations,
                           **({"content": item.answer} if item.abstained else {})})
            else:
                yield sse({"token": item})
    except RagError as exc:
        yield sse_error(exc)
