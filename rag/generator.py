"""Streaming text generation with ONNX Runtime GenAI.

``LocalGenerator`` owns the model and tokenizer (load once per process). A single
request streams through ``og.Generator``; the API's scheduler (``rag/scheduler.py``)
shares the model, tokenizer and sampling options defined here. ``PrefixCache`` keeps
idle greedy generators with their KV cache so a prompt that starts like an earlier
one (the fixed system prompt, an earlier chat turn) only prefills what is new.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from rag.errors import BadRequestError, ModelError
from rag.settings import resolve_threads
from rag.stopping import StopMatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingOptions:
    max_tokens: int = 96
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    stop: tuple[str, ...] = ()  # generation ends where one of these strings appears; it is not returned

    def validate(self) -> "SamplingOptions":
        if not 1 <= self.max_tokens <= 4096:
            raise BadRequestError("max_tokens must be between 1 and 4096")
        if not 0.0 <= self.temperature <= 2.0:
            raise BadRequestError("temperature must be between 0 and 2")
        if not 0.0 < self.top_p <= 1.0:
            raise BadRequestError("top_p must be in (0, 1]")
        if not 0 <= self.top_k <= 1000:
            raise BadRequestError("top_k must be between 0 and 1000")
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
    finish_reason: str = "length"  # "stop" (EOS) | "length" | "cancelled"

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
class GeneratorInfo:
    path: Path
    model_id: str
    model_file: Path
    context_length: int


def validate_generator_dir(path: Path) -> GeneratorInfo:
    """Check an ORT GenAI model dir and name what is missing."""
    if not path.is_dir():
        raise ModelError(f"generator dir {path} does not exist; run `rag models prepare` or set RAG_GENERATOR_DIR")
    config_path = path / "genai_config.json"
    if not config_path.is_file():
        raise ModelError(f"generator dir {path} is missing genai_config.json (not an ONNX Runtime GenAI model dir)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        model_file = path / config["model"]["decoder"]["filename"]
        context_length = int(config["model"].get("context_length", 2048))
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{config_path} is invalid: {exc}") from exc
    if not model_file.is_file():
        raise ModelError(f"generator dir {path} is missing {model_file.name} (named in genai_config.json)")
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer.model").is_file():
        raise ModelError(f"generator dir {path} is missing tokenizer.json")
    return GeneratorInfo(path=path, model_id=path.name, model_file=model_file, context_length=context_length)


def resolve_provider(device: str) -> str:
    """The provider actually used: the configured one if available, else CPU with a warning."""
    import onnxruntime_genai as og

    available = {"cpu": True, "cuda": og.is_cuda_available(), "dml": og.is_dml_available()}
    if available.get(device):
        return device
    log.warning("execution provider %r is not available in this onnxruntime-genai build; using cpu", device)
    return "cpu"


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
    """Accounts one request's generated tokens: the rule every generation path (``GenerationSession``,
    the scheduler's ``og.Engine`` path) shares for EOS, output count, TTFT, total time, loops and stop
    strings."""

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


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    mismatch = np.flatnonzero(a[:n] != b[:n])
    return int(mismatch[0]) if len(mismatch) else n


@dataclass
class _CachedGenerator:
    generator: object  # og.Generator whose KV cache holds ``tokens``
    tokens: np.ndarray


class PrefixCache:
    """Idle greedy ``og.Generator``s, each keeping the KV cache of the prompt it last ran.

    A new greedy request takes the idle generator sharing the longest prompt prefix,
    rewinds it to that prefix (``rewind_to``) and prefills only the rest. Every
    generator here has the same fixed window (``window`` tokens of KV cache); requests
    that would not fit it, or that sample, use a fresh generator instead.
    """

    def __init__(self, model: object, slots: int, window: int) -> None:
        self.model = model
        self.slots = slots
        self.window = window
        self._idle: list[_CachedGenerator] = []
        self._lock = threading.Lock()

    def fits(self, prompt_tokens: np.ndarray, options: SamplingOptions) -> bool:
        return self.slots > 0 and not options.sampling and len(prompt_tokens) + options.max_tokens <= self.window

    def acquire(self, prompt_tokens: np.ndarray) -> tuple[object, int]:
        """A generator ready for ``prompt_tokens[reused:]``, and ``reused``."""
        with self._lock:
            best = max(self._idle, key=lambda c: common_prefix_length(c.tokens, prompt_tokens), default=None)
            if best is not None:
                self._idle.remove(best)
        if best is None:
            import onnxruntime_genai as og

            params = og.GeneratorParams(self.model)
            params.set_search_options(max_length=self.window, do_sample=False)
            return og.Generator(self.model, params), 0
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


class LocalGenerator:
    def __init__(self, path: Path, device: str = "cpu", threads: int = 0,
                 prefix_cache_slots: int = 0, prefix_cache_tokens: int = 1024) -> None:
        import onnxruntime_genai as og

        self.info = validate_generator_dir(path)
        self.device = resolve_provider(device)
        start = time.perf_counter()
        try:
            config = og.Config(str(path))
            config.clear_providers()
            if self.device != "cpu":
                config.append_provider(self.device)
            # onnxruntime-genai runs one intra-op thread unless told otherwise; prefill and decode
            # both scale with cores (measured 2.2x TTFT on 2 cores), so always say how many.
            config.overlay(json.dumps({"model": {"decoder": {"session_options": {
                "intra_op_num_threads": resolve_threads(threads)}}}}))
            self.model = og.Model(config)
            self.tokenizer = og.Tokenizer(self.model)
        except Exception as exc:  # onnxruntime-genai raises plain RuntimeError
            raise ModelError(f"cannot load generator from {path}: {exc}") from exc
        self.load_s = time.perf_counter() - start
        self._og = og
        self._eos = frozenset(int(t) for t in np.atleast_1d(self.tokenizer.eos_token_ids))
        self.prefix_cache = PrefixCache(self.model, prefix_cache_slots,
                                        min(prefix_cache_tokens, self.info.context_length))

    @property
    def model_id(self) -> str:
        return self.info.model_id

    @property
    def context_length(self) -> int:
        return self.info.context_length

    def chat_prompt(self, messages: Sequence[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(json.dumps(list(messages)), add_generation_prompt=True)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text), dtype=np.int32)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(np.asarray(tokens, dtype=np.int32))

    def start(self, prompt_tokens: np.ndarray, options: SamplingOptions,
              stats: GenerationStats | None = None, started: float | None = None) -> "GenerationSession":
        """Prefill ``prompt_tokens`` and return a session that yields one token per ``step()``."""
        return GenerationSession(self, prompt_tokens, options, stats or GenerationStats(), started)

    def stream(
        self,
        prompt_tokens: np.ndarray,
        options: SamplingOptions,
        stats: GenerationStats | None = None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Iterator[str]:
        """Yield decoded text pieces as tokens are generated; fills ``stats`` as it goes."""
        session = self.start(prompt_tokens, options, stats)
        while not session.done:
            if cancelled():
                session.cancel()
                break
            piece = session.step()
            if piece:
                yield piece

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos

    def generate(self, prompt_tokens: np.ndarray, options: SamplingOptions) -> tuple[str, GenerationStats]:
        stats = GenerationStats()
        text = "".join(self.stream(prompt_tokens, options, stats))
        return text, stats


class GenerationSession:
    """One request's generation, advanced a token at a time (lets a scheduler interleave requests)."""

    def __init__(self, owner: LocalGenerator, prompt_tokens: np.ndarray, options: SamplingOptions,
                 stats: GenerationStats, started: float | None) -> None:
        og = owner._og
        self._owner = owner
        self.stats = stats
        self.started = started if started is not None else time.perf_counter()
        stats.prompt_tokens = int(len(prompt_tokens))
        if stats.prompt_tokens + 1 > owner.context_length:
            raise BadRequestError(
                f"prompt of {stats.prompt_tokens} tokens does not fit the {owner.context_length}-token context")
        self._options = options
        self._prompt_tokens = prompt_tokens
        self._cache = owner.prefix_cache if owner.prefix_cache.fits(prompt_tokens, options) else None
        self._healthy = False  # a generator goes back to the cache only if no call on it failed
        if self._cache is not None:
            self._generator, stats.cached_tokens = self._cache.acquire(prompt_tokens)
        else:
            params = og.GeneratorParams(owner.model)
            search: dict[str, float | int | bool] = {
                "max_length": min(owner.context_length, stats.prompt_tokens + options.max_tokens),
                "do_sample": options.sampling,
            }
            if options.sampling:
                search.update(temperature=options.temperature, top_p=options.top_p)
                if options.top_k:
                    search["top_k"] = options.top_k
            params.set_search_options(**search)
            self._generator = og.Generator(owner.model, params)
        self._recorder = TokenRecorder(stats, owner.tokenizer.create_stream(), owner.eos_token_ids, self.started,
                                       options.stop)
        self._generator.append_tokens(prompt_tokens[stats.cached_tokens:])
        self._healthy = True
        stats.finish_reason = "length"
        self.done = False

    def step(self) -> str:
        """Generate one token; returns its text (may be empty mid-character)."""
        generator, stats = self._generator, self.stats
        if self.done or generator.is_done():
            return self._close()
        self._healthy = False
        generator.generate_next_token()
        token = int(generator.get_next_tokens()[0])
        self._healthy = True
        piece = self._recorder.add(token)
        if piece is None:
            return self._close()
        if self._recorder.finished or generator.is_done() or stats.output_tokens >= self._options.max_tokens:
            return piece + self._close()
        return piece

    def cancel(self) -> None:
        self.stats.finish_reason = "cancelled"
        self._close()

    def _close(self) -> str:
        """Ends the session; returns the text still held back (see ``TokenRecorder.flush``)."""
        if not self.done:
            self.done = True
            self.stats.total_s = time.perf_counter() - self.started
            if self._cache is not None and self._healthy:
                self._cache.release(self._generator, self._prompt_tokens)
            self._generator = None  # an uncached generator's KV cache is freed now, not at garbage collection
            return self._recorder.flush() if self.stats.finish_reason != "cancelled" else ""
        return ""
