"""Idle greedy ``og.Generator``s kept with their KV cache, so a prompt that starts like an earlier one
(the fixed system prompt, an earlier chat turn) only prefills what is new."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    mismatch = np.flatnonzero(a[:n] != b[:n])
    return int(mismatch[0]) if len(mismatch) else n


@dataclass
class _CachedGenerator:
    generator: object  # og.Generator whose KV cache holds ``tokens``
    tokens: np.ndarray


class PrefixCache:
    """A new greedy request takes the idle generator sharing the longest prompt prefix, rewinds it to
    that prefix (``rewind_to``) and prefills only the rest. Every generator here has the same fixed
    window (``window`` tokens of KV cache); requests that would not fit it, or that sample, use a fresh
    generator instead."""

    def __init__(self, new_generator: Callable[[int], object], slots: int, window: int) -> None:
        self._new_generator = new_generator  # window -> a fresh greedy og.Generator
        self.slots = slots
        self.window = window
        self._idle: list[_CachedGenerator] = []
        self._lock = threading.Lock()

    def fits(self, prompt_tokens: np.ndarray, max_tokens: int, sampling: bool) -> bool:
        return self.slots > 0 and not sampling and len(prompt_tokens) + max_tokens <= self.window

    def acquire(self, prompt_tokens: np.ndarray) -> tuple[object, int]:
        """A generator ready for ``prompt_tokens[reused:]``, and ``reused``."""
        with self._lock:
            best = max(self._idle, key=lambda c: common_prefix_length(c.tokens, prompt_tokens), default=None)
            if best is not None:
                self._idle.remove(best)
        if best is None:
            return self._new_generator(self.window), 0
        # At least one prompt token must be fed so the model produces logits for it.
        reused = min(common_prefix_length(best.tokens, prompt_tokens), len(prompt_tokens) - 1)
        best.generator.rewind_to(reused)
        return best.generator, reused

    def release(self, generator: object, prompt_tokens: np.ndarray) -> None:
        """Keep ``generator`` (its cache holds at least ``prompt_tokens``); the least recently used goes."""
        with self._lock:
            self._idle.append(_CachedGenerator(generator, prompt_tokens))
            while len(self._idle) > self.slots:
                self._idle.pop(0)
