"""/v1/ask and /v1/retrieve."""

from __future__ import annotations

import anyio.to_thread
import msgspec
from litestar import Controller, post
from litestar.datastructures import State
from litestar.params import JSONBody
from litestar.response import Stream

from api.answering import answer_events, answer_once
from api.protocol import AskRequest, RetrieveRequest
from api.sse import primed, sse, sse_error, sse_response
from rag.answer import AnswerService, answer_options_from
from rag.errors import RagError
from rag.result import AnswerResult


class AnswersController(Controller):
    path = "/v1"
    tags = ["answers"]

    @post("/ask", status_code=200, summary="Answer a question from the indexed documents")
    async def ask(self, data: JSONBody[AskRequest], state: State) -> dict | Stream:
        app = state.app
        options = answer_options_from(app.settings, top_k=data.top_k, max_tokens=data.max_tokens,
                                      temperature=data.temperature, top_p=data.top_p,
                                      top_k_sampling=data.top_k_sampling, documents=data.documents)
        if not data.stream:
            return (await answer_once(app, options, data.index, question=data.question)).to_dict()
        events = await primed(answer_events(app, options, data.index, question=data.question))
        return sse_response(ask_sse(events))

    @post("/retrieve", status_code=200, summary="Retrieve chunks without generating")
    async def retrieve(self, data: JSONBody[RetrieveRequest], state: State) -> dict:
        app = state.app
        service = app.service(data.index)
        question = service.validate_question(data.query)
        retrieval = await anyio.to_thread.run_sync(
            lambda: service.retriever.retrieve(question, data.top_k or app.settings.top_k, data.documents))
        return {"query": question, "chunks": [
            {**msgspec.to_builtins(s), "text": h.chunk.text}
            for s, h in zip(AnswerService.sources(retrieval), retrieval.hits)],
            "metrics": {"embed_ms": round(retrieval.embed_ms, 2), "search_ms": round(retrieval.search_ms, 2)}}


async def ask_sse(events):
    try:
        async for item in events:
            if isinstance(item, AnswerResult):
                body = item.to_dict()
                yield sse({"done": True, "answer": body["answer"], "abstained": body["abstained"],
                           "citations": body["citations"], "sources": body["sources"], "metrics": body["metrics"]})
            else:
                yield sse({"token": item})
    except RagError as exc:
        yield sse_error(exc)
