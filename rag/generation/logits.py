"""Logits processing before the next token is picked: pure numpy, no model.

Copy bias: the small default model often knows where the answer is in its context but words around it.
Adding a constant to the logits of every token id that occurs in the passages it was given (then picking
as usual: argmax, or ORT GenAI's temperature / top-p / top-k sampling over the biased logits) makes it
copy the evidence instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np


@dataclass(frozen=True)
class LogitBias:
    """``delta`` added to the logits of ``ids`` (unique token ids, an index array precomputed once per request)."""

    ids: np.ndarray
    delta: float

    @classmethod
    def of(cls, tokens: Sequence[int], delta: float, also: Iterable[int] = ()) -> "LogitBias | None":
        """The bias for ``tokens`` (any order, repeats allowed) and the ids ``also``; None when it would
        change nothing (no delta or no tokens)."""
        if not delta or not len(tokens):
            return None
        return cls(np.unique(np.asarray([*tokens, *also], dtype=np.int64)), float(delta))

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """Adds the bias to ``logits`` (``[..., vocab]``) in place and returns them."""
        logits[..., self.ids] += np.float32(self.delta)
        return logits
