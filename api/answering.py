"""The one async answer flow every generation endpoint uses.

CPU-bound preparation (embedding, search, compression) runs in a worker thread;
generation goes through the batching scheduler; the result is finished in the loop.
"""

from __future__ import annotations

from typing import AsyncIterator, Sequence

import anyio.to_thread

from api.state import AppState
from rag.answer import AnswerOptions
from rag.generator import GenerationStats
from rag.result import AnswerResult


async def answer_events(state: AppState, options: AnswerOptions, index: str | None, question: str | None = None,
                        messages: Sequence[dict[str, str]] | None = None,
                        use_context: bool = True) -> AsyncIterator[str | AnswerResult]:
    """Text pieces as they are generated, then the ``AnswerResult``."""
    if use_context:
        service = state.service(index)
        prepared = await anyio.to_thread.run_sync(service.prepare, question or "", options)
    else:
        service = state.plain_service()
        prepared = await anyio.to_thread.run_sync(service.prepare_plain, list(messages or []), options)
    stats = GenerationStats()
    pieces: list[str] = []
    if not prepared.abstain_early:
        assert state.scheduler is not None
        state.metrics.queue_depth.set(state.scheduler.depth + 1)
        async for piece in state.scheduler.stream(prepared.prompt_tokens, options.sampling, stats):
            pieces.append(piece)
            yield piece
        state.metrics.queue_depth.set(state.scheduler.depth)
    result = service.finish(prepared, "".join(pieces), stats)
    state.metrics.observe_answer(result.metrics.ttft_ms, result.metrics.total_ms, result.metrics.output_tokens)
    yield result


async def answer_once(state: AppState, options: AnswerOptions, index: str | None, question: str | None = None,
                      messages: Sequence[dict[str, str]] | None = None, use_context: bool = True) -> AnswerResult:
    result = None
    async for item in answer_events(state, options, index, question, messages, use_context):
        if isinstance(item, AnswerResult):
            result = item
    assert result is not None
    return result
