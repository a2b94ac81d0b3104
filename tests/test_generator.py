"""The generator with the real model: streaming, max_tokens, and the prompt-prefix cache."""

from __future__ import annotations

import numpy as np
import pytest

from rag.generation.base import GenerationStats, SamplingOptions
from rag.generation.ort import LocalGenerator
from rag.generation.prefix_cache import common_prefix_length
from rag.generation.recorder import ends_in_loop
from rag.answering.prompt import drop_repeated_tail
from rag.core.settings import Settings
from helpers import looping_prompt
from rag.generation.stopping import StopMatcher

SYSTEM = "You answer questions using only the numbered context. Give a short answer."
QUESTIONS = [
    ("Who wrote the Republic?",
     "[1] The Republic is a Socratic dialogue authored by Plato around 375 BC, concerning justice."),
    ("When was the Eiffel Tower built?",
     "[1] The Eiffel Tower is a wrought-iron lattice tower in Paris, constructed from 1887 to 1889."),
]


def prompt(generator: LocalGenerator, question: str, context: str) -> np.ndarray:
    return generator.encode(generator.chat_prompt([
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Question: {question}\n\nContext:\n{context}"}]))


@pytest.fixture(scope="module")
def uncached(settings: Settings) -> LocalGenerator:
    return LocalGenerator(settings.generator_path, settings.device, settings.threads, prefix_cache_slots=0)


@pytest.fixture()
def cached(settings: Settings) -> LocalGenerator:
    return LocalGenerator(settings.generator_path, settings.device, settings.threads,
                          prefix_cache_slots=2, prefix_cache_tokens=512)


def test_common_prefix_length():
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    assert common_prefix_length(a, np.array([1, 2, 9], dtype=np.int32)) == 2
    assert common_prefix_length(a, a[:3]) == 3
    assert common_prefix_length(a, np.array([7], dtype=np.int32)) == 0
    assert common_prefix_length(a, np.array([], dtype=np.int32)) == 0


def test_stream_is_incremental_and_respects_max_tokens(uncached: LocalGenerator):
    stats = GenerationStats()
    pieces = list(uncached.run(prompt(uncached, *QUESTIONS[0]), SamplingOptions(max_tokens=5), stats))
    assert 1 < len(pieces) <= 5
    assert stats.output_tokens <= 5 and stats.ttft_s > 0 and stats.cached_tokens == 0


def test_prefix_cache_reuses_shared_prompt_and_keeps_answers_identical(cached, uncached):
    options = SamplingOptions(max_tokens=24)
    first, second = (prompt(cached, *q) for q in QUESTIONS)
    shared = common_prefix_length(first, second)
    assert shared > 20  # the chat template and the system prompt

    runs = []
    for tokens in (first, second, first, first):
        stats = GenerationStats()
        text = "".join(cached.run(tokens, options, stats))
        runs.append((text, stats))
    expected = [uncached.generate(tokens, options)[0] for tokens in (first, second)]

    assert [text for text, _ in runs] == [expected[0], expected[1], expected[0], expected[0]]
    # Serial requests reuse one generator, rewound to what the new prompt shares with its last one.
    assert [stats.cached_tokens for _, stats in runs] == [0, shared, shared, len(first) - 1]
    assert all(stats.prompt_tokens == len(tokens) for (_, stats), tokens in zip(runs, (first, second, first, first)))


def test_prefix_cache_respects_max_tokens(cached: LocalGenerator):
    tokens = prompt(cached, *QUESTIONS[0])
    for max_tokens in (3, 7):
        stats = GenerationStats()
        list(cached.run(tokens, SamplingOptions(max_tokens=max_tokens), stats))
        assert stats.output_tokens <= max_tokens
    assert stats.cached_tokens == len(tokens) - 1
    assert stats.output_tokens == 7 or stats.finish_reason == "stop"


def test_sampling_and_oversized_requests_bypass_the_cache(cached: LocalGenerator):
    tokens = prompt(cached, *QUESTIONS[0])
    cached.generate(tokens, SamplingOptions(max_tokens=4))  # fills the cache
    stats = GenerationStats()
    list(cached.run(tokens, SamplingOptions(max_tokens=4, temperature=0.7, top_p=0.9), stats))
    assert stats.cached_tokens == 0 and stats.output_tokens > 0
    stats = GenerationStats()
    list(cached.run(tokens, SamplingOptions(max_tokens=512), stats))  # prompt + 512 > the 512 window
    assert stats.cached_tokens == 0


def test_prefix_cache_keeps_at_most_its_slots(cached: LocalGenerator):
    sessions = [cached.start(prompt(cached, question, context), SamplingOptions(max_tokens=2))
                for question, context in QUESTIONS * 2]  # four at once: four generators
    for session in sessions:
        while not session.done:
            session.step()
    assert len(cached.prefix_cache._idle) == cached.prefix_cache.slots == 2


def test_cancelled_generation_returns_its_generator_to_the_cache(cached: LocalGenerator):
    tokens = prompt(cached, *QUESTIONS[1])
    session = cached.start(tokens, SamplingOptions(max_tokens=30))
    session.step()
    session.cancel()
    assert session.stats.finish_reason == "cancelled"
    stats = GenerationStats()
    text = "".join(cached.run(tokens, SamplingOptions(max_tokens=24), stats))
    assert stats.cached_tokens == len(tokens) - 1 and text


def test_ends_in_loop():
    block = list(range(100, 110))
    assert ends_in_loop([1, 2] + block + block) == 10
    assert ends_in_loop([1, 2] + block) == 0
    assert ends_in_loop([5] * 6 + [5] * 6) == 0  # shorter than the minimum block
    assert ends_in_loop(list(range(40))) == 0


def test_generation_stops_when_the_model_loops(uncached: LocalGenerator):
    tokens = looping_prompt(uncached)
    stats = GenerationStats()
    text = "".join(uncached.run(tokens, SamplingOptions(max_tokens=120), stats))
    assert stats.finish_reason == "stop" and stats.output_tokens < 60
    block = text[: len(text) // 2]
    assert text == block * 2 and drop_repeated_tail(text) == block


def streamed_through(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    text = "".join(matcher.feed(piece) for piece in pieces)
    return (text if matcher.stopped else text + matcher.flush()), matcher.stopped


def test_stop_matcher_cuts_at_the_first_stop_string_across_pieces():
    assert streamed_through([","], ["Paris", ", the", " capital"]) == ("Paris", True)
    assert streamed_through(["END"], ["abc E", "N", "D more"]) == ("abc ", True)  # split over three pieces
    assert streamed_through(["END"], ["abc E", "N", "x more"]) == ("abc ENx more", False)  # held back, then let go
    assert streamed_through(["\n\n", "Q:"], ["one\n", "\ntwo Q:"]) == ("one", True)  # the earliest one wins


def test_generation_ends_at_a_stop_string(uncached: LocalGenerator):
    tokens = prompt(uncached, *QUESTIONS[0])
    full = uncached.generate(tokens, SamplingOptions(max_tokens=24))[0]
    stop = full.split()[2]
    stats = GenerationStats()
    text = "".join(uncached.run(tokens, SamplingOptions(max_tokens=24, stop=(stop,)), stats))
    assert text == full[:full.index(stop)] and stats.finish_reason == "stop"


def test_warm_up_leaves_the_short_answer_prompt_cached(settings: Settings, embedder, cached: LocalGenerator):
    # The first factoid answer after start reuses the instruction and worked examples the warm-up prefilled.
    from rag.answering.evidence import short_answer_messages
    from app.runtime import Models

    Models(embedder, cached).warm_up(settings.answer_examples)
    question, sentence = QUESTIONS[1][0], QUESTIONS[1][1].removeprefix("[1] ")
    messages = [short_answer_messages(asked, context, settings.answer_examples)
                for asked, context in ((question, sentence), ("Who?", "Nobody."))]
    tokens, other = (cached.prompt(m).tokens for m in messages)
    fixed = common_prefix_length(tokens, other)
    _, stats = cached.generate(tokens, SamplingOptions(max_tokens=2))
    assert fixed > 100 and stats.cached_tokens >= fixed
