"""The server's generation scheduler on the real default model (no HTTP)."""

from __future__ import annotations

import asyncio

from rag.generator import GenerationStats, SamplingOptions
from rag.scheduler import GenerationScheduler


def test_interleaved_requests_finishing_out_of_order_all_complete(generator) -> None:
    """Short requests submitted after long ones finish first; the scheduler must keep serving."""
    scheduler = GenerationScheduler(generator, max_queue=8)
    prompt = generator.encode(generator.chat_prompt([{"role": "user", "content": "Tell me a long story."}]))

    async def one(max_tokens: int) -> GenerationStats:
        stats = GenerationStats()
        async for _ in scheduler.stream(prompt, SamplingOptions(max_tokens=max_tokens), stats):
            pass
        return stats

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
