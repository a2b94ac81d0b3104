"""One request's token accounting: EOS, output count, TTFT, total time, loops and stop strings."""

from __future__ import annotations

import time
from typing import Sequence

from rag.generation.base import GenerationStats
from rag.generation.stopping import StopMatcher

LOOP_MIN_TOKENS = 8  # a block this long generated twice in a row is a loop, not an answer
LOOP_MAX_TOKENS = 64


def ends_in_loop(tokens: Sequence[int], min_period: int = LOOP_MIN_TOKENS, max_period: int = LOOP_MAX_TOKENS) -> int:
    """Length of a block that ``tokens`` ends with twice in a row (0 if none). Small greedy models
    fall into such loops ("The answer is: [1]\n\nThe answer is: [1]\n\n..."); nothing new follows."""
    for period in range(min_period, min(max_period, len(tokens) // 2) + 1):
        if tokens[-period:] == tokens[-2 * period:-period]:
            return period
    return 0


class TokenRecorder:
    """The rule every generation path (``GenerationSession``, the scheduler's engine path) shares."""

    def __init__(self, stats: GenerationStats, decoder: object, eos_token_ids: frozenset[int],
                 started: float, stop: Sequence[str] = ()) -> None:
        self.stats = stats
        self._decoder = decoder
        self._eos = eos_token_ids
        self._started = started
        self._tokens: list[int] = []
        self._stop = StopMatcher(stop) if stop else None
        self.finished = False  # a loop or a stop string ended the reply: generate no more

    def add(self, token: int) -> str | None:
        """None for EOS (``finish_reason`` "stop"), else the text to emit for this token (may be empty
        mid-character or while it may begin a stop string). A token that closes a loop still returns its
        piece; one that completes a stop string returns only the text before it."""
        stats = self.stats
        now = time.perf_counter() - self._started
        stats.total_s = now
        if token in self._eos:
            stats.finish_reason = "stop"
            return None
        stats.output_tokens += 1
        if stats.output_tokens == 1:
            stats.ttft_s = now
        self._tokens.append(token)
        piece = self._decoder.decode(token)
        if self._stop is not None:
            piece = self._stop.feed(piece)
        if ends_in_loop(self._tokens) or (self._stop is not None and self._stop.stopped):
            self.finished = True
            stats.finish_reason = "stop"
        return piece

    def flush(self) -> str:
        """Text held back as a possible stop string's start, once generation has ended without one."""
        return self._stop.flush() if self._stop is not None else ""
