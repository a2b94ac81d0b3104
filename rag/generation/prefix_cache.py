"""Idle greedy ``og.Generator``s kept with their KV cache, so a prompt that starts like an earlier one
(the fixed system prompt, an earlier chat turn) only prefills what is new.

The cache is partitioned by scope (who asks, on which index): a prompt reuses another scope's cached tokens
only as far as the fixed prefix every answer prompt shares (``shared_tokens``: instruction and worked
examples), and only when both prompts hold all of it. How many tokens were reused — reported as
``cached_tokens``, and visible as time to first token — then never depends on another asker's prompt (their
question, or the evidence they were shown)."""

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
    scope: str = ""


def reusable(cached: np.ndarray, cached_scope: str, prompt: np.ndarray, scope: str, shared_tokens: int) -> int:
    """How many of ``prompt``'s tokens a cache holding ``cached`` (of ``cached_scope``) may serve: all they
    share within one scope; across scopes the shared prefix when both hold all of it, else none."""
    common = common_prefix_length(cached, prompt)
    if cached_scope == scope:
        return common
    return shared_tokens if shared_tokens and common >= shared_tokens else 0


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
        self.shared_tokens = 0  # the fixed prefix every answer prompt starts with (set by the warm-up)

    def fits(self, prompt_tokens: np.ndarray, max_tokens: int, sampling: bool) -> bool:
        return self.slots > 0 and not sampling and len(prompt_tokens) + max_tokens <= self.window

    def acquire(self, prompt_tokens: np.ndarray, scope: str = "") -> tuple[object, int]:
        """A generator ready for ``prompt_tokens[reused:]``, and ``reused`` (see ``reusable``)."""

        def served(cached: _CachedGenerator) -> int:
            return reusable(cached.tokens, cached.scope, prompt_tokens, scope, self.shared_tokens)

        with self._lock:
            best = max(self._idle, key=served, default=None)
            if best is not None:
                self._idle.remove(best)
        if best is None:
            return self._new_generator(self.window), 0
        # At least one prompt token must be fed so the model produces logits for it.
        reused = min(served(best), len(prompt_tokens) - 1)
        best.generator.rewind_to(reused)
        return best.generator, reused

    def release(self, generator: object, prompt_tokens: np.ndarray, scope: str = "") -> None:
        """Keep ``generator`` (its cache holds at least ``prompt_tokens``, of ``scope``); the least recently
        used goes."""
        with self._lock:
            self._idle.append(_CachedGenerator(generator, prompt_tokens, scope))
            while len(self._idle) > self.slots:
                self._idle.pop(0)
