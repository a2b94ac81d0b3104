"""Generation behind one small interface: ``Generator`` turns a chat prompt into streamed text.

Implemented by the in-process ORT GenAI generator (``ort.LocalGenerator``, one request at a time), by the
batching scheduler that shares it between concurrent requests (``scheduler``), and by an OpenAI-compatible
server (``remote.RemoteGenerator``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterator, Protocol, Sequence

import numpy as np

from rag.core import bounds
from rag.core.errors import BadRequestError
from rag.core.settings import Settings
from rag.generation.logits import SpanSearch, TokenSpan

Message = dict[str, str]  # {"role": ..., "content": ...}


@dataclass(frozen=True)
class SamplingOptions:
    max_tokens: int = Settings.max_tokens
    temperature: float = Settings.temperature  # 0 = greedy
    top_p: float = 1.0
    top_k_sampling: int = 0  # sample among the k likeliest tokens; 0 = no cut
    stop: tuple[str, ...] = ()  # generation ends where one of these strings appears; it is not returned
    # Constrained decoding (``logits.SpanConstraint``): when set, the reply is a prefix of one of these spans
    # (the answering layer's candidate answers, copied from the passages). A generator without a logits step
    # (a remote server, the batching engine) ignores it; the answering layer verifies the reply either way.
    spans: tuple[TokenSpan, ...] = ()
    # The tokens of the reply the prompt offers for "the context does not say" (with ``spans``): measured at the
    # first step, never picked; the margin lands in ``GenerationStats.decline_margin``.
    decline: tuple[int, ...] = ()
    # With ``spans``, greedy: how whole phrases are scored (``logits.best_span``); width 1 picks token by token.
    span_search: SpanSearch = SpanSearch()
    # Whose prompt this is (the answering layer: the asker and the index). A cached prompt of another scope is
    # reused only as far as the fixed shared prefix (instruction and worked examples): how much of a prompt was
    # cached, and how fast it started, never tell one asker what another asked or was shown.
    cache_scope: str = ""

    def validate(self) -> "SamplingOptions":
        bounds.MAX_TOKENS.check(self.max_tokens)
        bounds.TEMPERATURE.check(self.temperature)
        bounds.TOP_P.check(self.top_p)
        bounds.TOP_K_SAMPLING.check(self.top_k_sampling)
        if len(self.stop) > 4 or not all(self.stop):
            raise BadRequestError("stop takes at most 4 non-empty strings")
        return self

    @property
    def sampling(self) -> bool:
        return self.temperature > 0.0


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float = 0.0
    total_s: float = 0.0
    cached_tokens: int = 0  # prompt tokens whose KV cache was reused, not prefilled
    finish_reason: str = "length"  # "stop" (EOS, stop string, loop) | "length" | "cancelled"
    # Constrained answers: the decline reply's first-token logit minus the best answer start's (None when the
    # generator has no logits step or no decline was offered).
    decline_margin: float | None = None

    @property
    def tpot_s(self) -> float:
        """Time per output token after the first."""
        return (self.total_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.total_s if self.total_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return 1.0 / self.tpot_s if self.tpot_s > 0 else 0.0


@dataclass(frozen=True)
class Prompt:
    """A chat prompt made ready for one generator: the messages, and the model's tokens when the
    generator tokenises locally."""

    messages: tuple[Message, ...]
    tokens: np.ndarray

    @property
    def length(self) -> int:
        return int(len(self.tokens))


class Generator(Protocol):
    model_id: str
    device: str  # where it runs, as reports show it: an ONNX Runtime execution provider ("cpu", ...) or "remote"
    remote: bool  # another server generates, over the network (at ``url``); False: this process does
    url: str  # that server's base URL ("" when this process generates)
    context_length: int

    def count_tokens(self, text: str) -> int: ...

    def encode(self, text: str) -> np.ndarray:
        """The model's token ids for ``text`` (no chat template)."""
        ...

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        """The prompt for ``messages``; BadRequestError when it does not fit the context."""
        ...

    def stream(self, prompt: Prompt, options: SamplingOptions, stats: GenerationStats) -> AsyncIterator[str]:
        """Text pieces as they are generated; fills ``stats``. Closing the iterator cancels generation."""
        ...
