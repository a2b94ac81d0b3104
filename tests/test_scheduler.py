"""The server's generation scheduler on real models (no HTTP): the default model's requests share decode steps
(``batched``) or take turns (``interleaved``); a build without ``prune_lm_head`` runs through ORT GenAI's
batching ``og.Engine``."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from helpers import looping_prompt
from rag.generation.base import GenerationStats, Prompt, SamplingOptions
from rag.generation.batched import PREFILL_CHUNK
from rag.generation.logits import SpanSearch, TokenSpan, pick_token
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
    scheduler = GenerationScheduler(generator, max_queue=8, mode="interleaved")
    assert scheduler.mode == "interleaved"
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


def test_the_default_model_shares_decode_steps_and_says_nothing_at_warning(generator, caplog) -> None:
    """og.Engine cannot run the default (pruned lm_head) build; the batched decoder can, checked at start."""
    import logging

    with caplog.at_level(logging.DEBUG, logger="rag.generation.scheduler"):
        scheduler = GenerationScheduler(generator, max_queue=2)
    try:
        assert scheduler.mode == "batched"
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        scheduler.close()


def test_an_unknown_scheduler_mode_is_refused(generator) -> None:
    with pytest.raises(ValueError, match="unknown scheduler mode"):
        GenerationScheduler(generator, max_queue=2, mode="fastest")


def prompts_of_many_lengths(generator: LocalGenerator) -> list[np.ndarray]:
    """Four prompts, the last longer than a prefill chunk (it goes in over several rounds)."""
    asks = ["Say hi.", "Tell me a long story.", "Name three colours of the rainbow, one per line.",
            "Summarise: " + " ".join(["The river floods every spring and the farmers move their sheep uphill."] * 30)]
    prompts = [generator.encode(generator.chat_prompt([{"role": "user", "content": ask}])) for ask in asks]
    assert len(prompts[-1]) > PREFILL_CHUNK
    return prompts


def test_batched_requests_get_the_replies_they_get_alone_and_share_steps(generator) -> None:
    """Greedy replies generated side by side, of prompts of different lengths, are token for token the ones
    each gets alone; the model was called with several rows at once; requests that end early (a length cap,
    a stop string, a client that leaves) free their rows while the others go on."""
    prompts = prompts_of_many_lengths(generator)
    # Without a prefix cache: a prompt continued from a cached one (here the first test's story) may differ from
    # a whole prefill in its last digits, and so in a near tie ("There was" / "There's").
    # (and no reuse of another row's prefix in the batch: ``prefix_cache_slots`` 0 turns both off).
    uncached = LocalGenerator(generator.info.path, threads=generator.threads)
    alone = [uncached.generate(tokens, SamplingOptions(max_tokens=24))[0] for tokens in prompts]
    stop = alone[1].split()[3]
    scheduler = GenerationScheduler(uncached, max_queue=8)

    async def cancel_after_two_pieces() -> GenerationStats:
        stats = GenerationStats()
        stream = scheduler.stream(Prompt((), prompts[1]), SamplingOptions(max_tokens=200), stats)
        for _ in range(2):
            await stream.__anext__()
        await stream.aclose()
        return stats

    async def run():
        return await asyncio.gather(*[collect(scheduler, tokens, 24) for tokens in prompts],
                                    collect(scheduler, prompts[0], 3), collect(scheduler, prompts[1], 24, (stop,)),
                                    cancel_after_two_pieces())

    try:
        assert scheduler.mode == "batched"
        *replies, capped, stopped, cancelled = asyncio.run(asyncio.wait_for(run(), 120))
        deadline = time.monotonic() + 10
        while scheduler.depth and time.monotonic() < deadline:
            time.sleep(0.05)
        decoder = scheduler._strategy.decoder
    finally:
        scheduler.close()
    assert [text for text, _ in replies] == alone
    assert capped[1].output_tokens == 3 and capped[0] and capped[1].finish_reason == "length"
    assert stopped[0] == alone[1][:alone[1].index(stop)] and stopped[1].finish_reason == "stop"
    assert cancelled.finish_reason == "cancelled" and cancelled.output_tokens < 200
    assert all(stats.ttft_s > 0 for _, stats in replies)
    assert decoder.rows_stepped > 2 * decoder.steps  # most steps advanced three or more requests at once
    assert decoder.active == 0 and scheduler.depth == 0


def test_batched_requests_follow_their_span_constraint_and_stop_a_loop(generator) -> None:
    """A constrained reply token by token (a yes/no answer) is constrained in a row as alone; a searched span
    (whole phrases scored) is generated alone, in the same rounds; a looping reply is stopped."""
    prompt = generator.encode(generator.chat_prompt([{"role": "user", "content": "Is the sky green? Yes or no."}]))
    spans = tuple(TokenSpan(tuple(int(t) for t in generator.encode(word)), frozenset({1}))
                  for word in (" No", " Yes"))
    token_by_token = SamplingOptions(max_tokens=4, spans=spans)
    searched = SamplingOptions(max_tokens=4, spans=spans, span_search=SpanSearch(width=2))
    uncached = LocalGenerator(generator.info.path, threads=generator.threads)
    expected = [uncached.generate(prompt, options)[0] for options in (token_by_token, searched)]
    scheduler = GenerationScheduler(uncached, max_queue=8)

    async def constrained(options: SamplingOptions) -> str:
        stats = GenerationStats()
        return "".join([piece async for piece in scheduler.stream(Prompt((), prompt), options, stats)])

    async def run():
        return await asyncio.gather(constrained(token_by_token), constrained(searched),
                                    collect(scheduler, looping_prompt(generator), 120))

    try:
        one, other, (text, stats) = asyncio.run(asyncio.wait_for(run(), 120))
    finally:
        scheduler.close()
    assert [one, other] == expected and all(reply.strip() in ("Yes", "No") for reply in expected)
    assert stats.finish_reason == "stop" and stats.output_tokens < 60
    block = text[: len(text) // 2]
    assert text == block * 2 and drop_repeated_tail(text) == block


def test_batched_prompts_reuse_a_held_prefix_within_the_limits_of_their_scope(generator) -> None:
    """In the batch, a prompt starting like a finished request's (an earlier chat turn) prefills only the rest;
    another asker's prompt reuses no more than the fixed shared prefix, whatever else it has in common."""
    first = [{"role": "user", "content": "Tell me a long story."}]
    turn = generator.encode(generator.chat_prompt(first))
    reply, _ = generator.generate(turn, SamplingOptions(max_tokens=12))
    follow = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    follow_up = generator.encode(generator.chat_prompt(follow))
    shared = 5  # as if the warm-up had found a fixed prefix of five tokens
    scheduler = GenerationScheduler(generator, max_queue=4)

    async def ask(tokens: np.ndarray, scope: str) -> GenerationStats:
        stats = GenerationStats()
        options = SamplingOptions(max_tokens=12, cache_scope=scope)
        assert "".join([piece async for piece in scheduler.stream(Prompt((), tokens), options, stats)]).strip()
        return stats

    async def run() -> list[GenerationStats]:
        # A long reply generated meanwhile: the asks share its decode steps.
        background = scheduler.stream(Prompt((), story_prompt(generator)), SamplingOptions(max_tokens=400),
                                      GenerationStats())
        await background.__anext__()
        try:
            return [await ask(turn, "alice"), await ask(follow_up, "alice"), await ask(follow_up, "bob")]
        finally:
            await background.aclose()

    saved = generator.prefix_cache.shared_tokens
    generator.prefix_cache.shared_tokens = shared
    try:
        first_turn, same_asker, other_asker = asyncio.run(asyncio.wait_for(run(), 60))
    finally:
        generator.prefix_cache.shared_tokens = saved
        scheduler.close()
    assert scheduler.mode == "batched" and scheduler._strategy.decoder.steps > 0
    assert same_asker.cached_tokens >= len(turn) - 1  # the first turn's prompt and more were held
    assert other_asker.cached_tokens == shared
    assert first_turn.prompt_tokens == len(turn) and same_asker.prompt_tokens == len(follow_up)


def test_pick_token_greedy_top_k_top_p_and_temperature() -> None:
    logits = np.log(np.asarray([0.1, 0.6, 0.3], dtype=np.float32))
    rng = np.random.default_rng(7)
    assert pick_token(logits, 0.0) == 1
    assert {pick_token(logits, 1.0, top_k=1, rng=rng) for _ in range(20)} == {1}
    assert {pick_token(logits, 1.0, top_p=0.5, rng=rng) for _ in range(20)} == {1}  # 0.6 alone reaches 0.5
    assert {pick_token(logits, 1.0, top_p=0.8, rng=rng) for _ in range(50)} == {1, 2}  # 0.6 + 0.3
    assert {pick_token(logits, 5e-324, rng=rng) for _ in range(20)} == {1}  # a fuzzer's temperature: no NaN
    assert pick_token(np.asarray([-np.inf, 2.0, -np.inf], dtype=np.float32), 0.7, rng=rng) == 1  # a constraint's mask
    drawn = [pick_token(logits, 1.0, rng=rng) for _ in range(3000)]
    assert abs(drawn.count(1) / 3000 - 0.6) < 0.05 and abs(drawn.count(0) / 3000 - 0.1) < 0.03
