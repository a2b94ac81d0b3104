"""Logits processing before the next token is picked: pure numpy, no model.

``SpanConstraint`` is the answer path's step: the reply is copied from candidate spans of the evidence.
``LogitBias`` (a constant added to some token ids' logits) is what ``rag bench engine --copy-bias`` times: the
cost per token of reading, changing and writing back the logits. Answers no longer use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

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


# Added to the end-of-answer logit where a span may stop: without it the small model copies on to the end of
# the sentence (tuned on dev F1: docs/benchmark-notes.md).
END_BONUS = 3.0


@dataclass(frozen=True)
class TokenSpan:
    """A token sequence the reply may copy a prefix of, and the prefix lengths at which it may stop."""

    tokens: tuple[int, ...]
    ends: frozenset[int]
    # Added to the logit of the span's first token: how much more likely the words around it make it the
    # answer than the model alone thinks (answer type, closeness to the question's words).
    prior: float = 0.0
    # With a search (``best_span``): added to the score of the phrase that stops after so many tokens, for what
    # the phrase itself is (a technical token where one is asked for, its length). Pairs (length, bonus).
    bonus: tuple[tuple[int, float], ...] = ()

    def bonus_at(self, length: int) -> float:
        return next((value for at, value in self.bonus if at == length), 0.0)


@dataclass(frozen=True)
class SpanSearch:
    """How ``best_span`` scores whole phrases: the ``width`` likeliest first tokens are followed (1: no search,
    token by token); a phrase's score is its log-probability, plus ``start_weight`` times its start's prior, its
    end's bonus, and ``lead_bonus`` where it begins with the likeliest first token."""

    width: int = 1
    start_weight: float = 1.0
    lead_bonus: float = 0.0
    branches: int = 0  # how many other ways, where the spans followed part, are followed too (all starts together)


class SpanConstraint:
    """Constrained decoding: the reply is a prefix of one of ``spans`` that stops at one of its ends.

    At each step only the next token of a span still matching the reply so far may be picked, and the
    end-of-sequence ids only where such a span allows a stop (their logit is the larger of EOS and
    ``stop_ids``' — a model ending a phrase with "." — plus ``END_BONUS``). When no span can go on, the
    reply ends. The model still chooses, by its own logits, where in the passages its answer starts and
    how long it runs; it cannot write a word the passages do not hold, nor stop mid-word."""

    def __init__(self, spans: Sequence[TokenSpan], eos_ids: Iterable[int], stop_ids: Iterable[int] = (),
                 decline: Sequence[int] = ()) -> None:
        self.spans = list(spans)
        self.eos = np.asarray(sorted(eos_ids), dtype=np.int64)
        self.stops = np.asarray(sorted({*eos_ids, *stop_ids}), dtype=np.int64)
        self.live = list(range(len(self.spans)))
        self.step = 0
        # The first token of the reply the prompt offers for a question the context does not answer: never
        # picked, only measured. ``decline_margin`` is its logit minus the best allowed first token's (priors
        # included): how much more the model would rather decline than answer.
        self.decline = int(decline[0]) if len(decline) else None
        self.decline_margin: float | None = None

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` (``[..., vocab]``) masked to what may come next."""
        # Only spans that can still reach one of their ends: a reply never stops at a cut.
        allowed = np.asarray(sorted({self.spans[i].tokens[self.step] for i in self.live
                                     if self.step < len(self.spans[i].tokens)
                                     and max(self.spans[i].ends, default=0) > self.step}), dtype=np.int64)
        can_end = self.step > 0 and any(self.step in self.spans[i].ends for i in self.live)
        masked = np.full_like(logits, -np.inf)
        if len(allowed):
            masked[..., allowed] = logits[..., allowed]
        if self.step == 0:
            priors: dict[int, float] = {}
            for span in self.spans:
                if span.tokens:
                    priors[span.tokens[0]] = max(priors.get(span.tokens[0], -np.inf), span.prior)
            for token, prior in priors.items():
                if prior:
                    masked[..., token] += np.float32(prior)
        if can_end or not len(allowed):
            end = logits[..., self.stops].max(axis=-1, keepdims=True) + np.float32(END_BONUS)
            masked[..., self.eos] = end if len(allowed) else 0.0
        if self.step == 0 and self.decline is not None and len(allowed):
            self.decline_margin = float(logits.reshape(-1, logits.shape[-1])[0, self.decline]
                                        - masked.reshape(-1, masked.shape[-1])[0, allowed].max())
        return masked

    def advance(self, token: int) -> None:
        self.live = [i for i in self.live
                     if self.step < len(self.spans[i].tokens) and self.spans[i].tokens[self.step] == token]
        self.step += 1

    def fork(self) -> "SpanConstraint":
        """A copy that advances on its own (the spans are shared, never changed)."""
        twin = object.__new__(SpanConstraint)
        twin.__dict__.update(self.__dict__, live=list(self.live))
        return twin


def log_softmax(logits: np.ndarray) -> np.ndarray:
    flat = logits.reshape(-1).astype(np.float64)
    top = flat.max()
    return flat - top - np.log(np.exp(flat - top).sum())


def best_span(first_logits: np.ndarray, constraint: SpanConstraint, extend: Callable[[Sequence[int], bool], np.ndarray],
              search: SpanSearch, limit: int, seen: list[tuple[list[int], float, float, bool]] | None = None,
              slack: float = 0.0) -> list[int]:
    """The tokens of the phrase that scores best as a whole (``SpanSearch``), among those starting with the
    ``search.width`` best first tokens: each start is followed greedily, at most ``limit`` tokens, and every end
    along the way is scored; where the spans followed part ways ("/etc/" of "/etc/nsswitch.conf" and
    "/etc/resolv.conf"), up to ``search.branches`` other ways are followed too, each phrase scored with the prior
    of its own span's start (not the larger one its first token carries).
    Greedy decoding instead commits to its first token: "The command-line" (the start of the sentence the model
    meant to copy whole) for where psql keeps its history, the sentence holding "~/.psql_history".
    ``extend(tokens, restart)`` feeds ``tokens`` to the model, after rewinding it to the prompt when ``restart``,
    and returns the logits that follow. A log-probability only falls as a phrase grows, so a path that cannot
    reach the best score with the largest bonus still ahead is dropped unread (``slack`` more: for ``seen``,
    which gets every phrase scored as (tokens, log-probability, start prior, leads)).
    ``constraint`` is used at its first step (it measures ``decline_margin`` there); it is not advanced."""
    flat = first_logits.reshape(-1)
    raw = log_softmax(flat)
    masked = constraint.apply(first_logits.copy()).reshape(-1)
    eos = {int(t) for t in constraint.eos}
    starts = [int(t) for t in np.argsort(-masked, kind="stable")[:search.width + len(eos)]
              if np.isfinite(masked[t]) and int(t) not in eos][:search.width]
    best_score, best_tokens = -np.inf, []
    branches = search.branches
    for rank, first in enumerate(starts):
        lead = search.lead_bonus if rank == 0 else 0.0
        # The phrases to follow from this start: (tokens so far, log-probability, the best score they can reach).
        ways = [([first], float(raw[first]), np.inf)]
        while ways:
            tokens, logprob, reach = ways.pop(0)
            if reach <= best_score:  # a way made before a better phrase was found: not worth feeding its tokens
                continue
            path = constraint.fork()
            for token in tokens:
                path.advance(token)
            logits = extend(tokens, True).reshape(-1)
            while True:
                step = log_softmax(logits)
                live = [path.spans[i] for i in path.live]
                ending = [span for span in live if path.step in span.ends]
                if ending:
                    ended = logprob + float(step[path.stops].max())
                    span = max(ending, key=lambda s: search.start_weight * s.prior + s.bonus_at(path.step))
                    if seen is not None:
                        seen.append((list(tokens), ended, span.prior, rank == 0))
                    score = ended + lead + search.start_weight * span.prior + span.bonus_at(path.step)
                    if score > best_score:
                        best_score, best_tokens = score, list(tokens)
                allowed = path.apply(logits.copy()).reshape(-1)
                allowed[list(eos)] = -np.inf
                if len(tokens) >= limit:
                    break
                ranked = [int(t) for t in np.argsort(-allowed, kind="stable")[:1 + branches] if np.isfinite(allowed[t])]
                if not ranked:
                    break

                def reachable(token: int) -> float:
                    """The best score a phrase going on with ``token`` could still reach."""
                    spans = [s for s in live if path.step < len(s.tokens) and s.tokens[path.step] == token]
                    ahead = max((search.start_weight * s.prior + max((v for at, v in s.bonus if at > path.step),
                                                                     default=0.0) for s in spans), default=0.0)
                    return logprob + float(step[token]) + lead + ahead + slack

                for other in ranked[1:]:
                    if branches > 0 and reachable(other) > best_score:
                        ways.append(([*tokens, other], logprob + float(step[other]), reachable(other)))
                        branches -= 1
                token = ranked[0]
                if reachable(token) <= best_score:
                    break
                logprob += float(step[token])
                tokens = [*tokens, token]
                path.advance(token)
                logits = extend([token], False).reshape(-1)
    return best_tokens


def pick_token(logits: np.ndarray, temperature: float, top_p: float = 1.0, top_k: int = 0,
               rng: np.random.Generator | None = None) -> int:
    """The next token from ``logits`` (``[vocab]``): the likeliest at temperature 0, else drawn from the softmax at
    ``temperature``, among the ``top_k`` likeliest (0: all) and the fewest whose probabilities reach ``top_p``.
    The batched decoder's pick (ORT GenAI picks for itself elsewhere)."""
    flat = logits.reshape(-1)
    if temperature <= 0.0:
        return int(np.argmax(flat))
    values = flat.astype(np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        # Shifted before dividing: a temperature as small as 5e-324 then sends the others to -inf, not to NaN.
        scaled = (values - values.max()) / temperature
    order = np.argsort(-scaled, kind="stable")
    if top_k > 0:
        order = order[:top_k]
    weights = np.exp(scaled[order])
    weights /= weights.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(weights), top_p)) + 1
        order, weights = order[:keep], weights[:keep] / weights[:keep].sum()
    return int(order[(rng or np.random.default_rng()).choice(len(order), p=weights)])
