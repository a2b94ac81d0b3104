"""The server's generation scheduler on real models (no HTTP): the default model interleaves requests;
a build without ``prune_lm_head`` runs through ORT GenAI's batching ``og.Engine``."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from helpers import looping_prompt
from rag.generation.base import GenerationStats, Prompt, SamplingOptions
from rag.generation.ort import LocalGenerator
from rag.answering.prompt import drop_repeated_tail
from rag.generation.scheduler import GenerationScheduler


async def collect(scheduler: GenerationScheduler, tokens: np.ndarray, max_tokens: int,
                  stop: tuple[str, ...] = ()) -> tuple[str, GenerationStats]:
    stats = GenerationStats()
    options = SamplingOptions(max_tokens=max_tokens, stop=stop)
    pieces = [piece async for piece in scheduler.stream(Prompt((), tokens), options, stats)]
    return "".join(pieces), stats


def story_prompt(generator: LocalGenerator) -> np.ndarray:
    return generator.encode(generator.chat_prompt([{"role": "user", "content": "Tell me a long story."}]))


def test_interleaved_requests_finishing_out_of_order_all_complete(generator) -> None:
    """Short requests submitted after long ones finish first; the scheduler must keep serving."""
    scheduler = GenerationScheduler(generator, max_queue=8)
    assert scheduler.mode == "interleaved"  # og.Engine cannot run the default (pruned lm_head) build
    prompt = story_prompt(generator)

    async def one(max_tokens: int) -> GenerationStats:
        return (await collect(scheduler, prompt, max_tokens))[1]

    async def run() -> list[GenerationStats]:
        first = await asyncio.wait_for(asyncio.gather(one(24), one(24), one(2), one(4)), 60)
        second = await asyncio.wait_for(asyncio.gather(one(3), one(3)), 60)  # still alive afterwards
        return first + second

    try:
        results = asyncio.run(run())
    finally:
        scheduler.close()
    long_ones, short_ones = results[:2], results[2:]
    assert [s.output_tokens for s in short_ones] == [2, 4, 3, 3]
    assert all(4 < s.output_tokens <= 24 for s in long_ones)  # may stop at EOS before the cap
    assert all(s.finish_reason in ("stop", "length") and s.ttft_s > 0 for s in results)
    assert max(s.total_s for s in short_ones[:2]) < min(s.total_s for s in long_ones)  # out of order
    assert scheduler.depth == 0


def test_engine_mode_serves_concurrent_requests_and_cancels(engine_generator: LocalGenerator) -> None:
    scheduler = GenerationScheduler(engine_generator, max_queue=8)
    prompt = story_prompt(engine_generator)
    alone_reference = engine_generator.generate(prompt, SamplingOptions(max_tokens=16))[0]

    async def cancel_after_two_pieces() -> GenerationStats:
        stats = GenerationStats()
        stream = scheduler.stream(Prompt((), prompt), SamplingOptions(max_tokens=200), stats)
        for _ in range(2):
            await stream.__anext__()
        await stream.aclose()  # what the server does when the client goes away
        return stats

    stop = alone_reference.split()[3]

    async def run():
        alone = await collect(scheduler, prompt, 16)
        stopped = await collect(scheduler, prompt, 16, stop=(stop,))
        together = await asyncio.gather(collect(scheduler, prompt, 16), collect(scheduler, prompt, 3),
                                        collect(scheduler, prompt, 8), cancel_after_two_pieces())
        return alone, stopped, together

    try:
        assert scheduler.mode == "engine"
        alone, stopped, together = asyncio.run(asyncio.wait_for(run(), 120))
        deadline = time.monotonic() + 10
        while scheduler.depth and time.monotonic() < deadline:  # the cancelled turn is dropped at its next step
            time.sleep(0.05)
    finally:
        scheduler.close()
    assert alone[0] == alone_reference  # one request through the engine = the plain generator, token for token
    assert stopped[0] == alone_reference[:alone_reference.index(stop)] and stopped[1].finish_reason == "stop"
    (_, long_stats), (short_text, short_stats), (_, mid_stats), cancelled = together
    assert short_stats.output_tokens == 3 and short_stats.finish_reason == "length" and short_text
    assert mid_stats.output_tokens == 8 and 8 <= long_stats.output_tokens <= 16
    assert all(s.ttft_s > 0 for s in (long_stats, short_stats, mid_stats))
    assert cancelled.finish_reason == "cancelled" and cancelled.output_tokens < 200
    assert scheduler.depth == 0


def test_engine_mode_stops_a_looping_reply(engine_generator: LocalGenerator) -> None:
    scheduler = GenerationScheduler(engine_generator, max_queue=8)
    try:
        text, stats = asyncio.run(asyncio.wait_for(
            collect(scheduler, looping_prompt(engine_generator), 120), 60))
    finally:
        scheduler.close()
    assert stats.finish_reason == "stop" and stats.output_tokens < 60
    block = text[: len(text) // 2]
    assert text == block * 2 and drop_repeated_tail(text) == block


def test_taking_turns_is_said_at_info_level_in_plain_words(generator, caplog) -> None:
    """The default model cannot use the batching engine: the normal path, so no WARNING at every start."""
    import logging

    with caplog.at_level(logging.DEBUG, logger="rag.generation.scheduler"):
        scheduler = GenerationScheduler(generator, max_queue=2)
    try:
        assert scheduler.mode == "interleaved"
        said = [r for r in caplog.records if "taking turns" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.INFO
        assert "ENGINE_EXECUTION_FAILURE" not in said[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        scheduler.close()
