"""Text generation with ONNX Runtime GenAI, in process.

``LocalGenerator`` owns the model and tokenizer (loaded once per process) and implements the
``Generator`` interface one request at a time; ``GenerationSession`` advances one request a token
at a time (so the scheduler can interleave requests); ``BatchingEngine`` wraps ORT GenAI's
continuous-batching ``og.Engine`` for the scheduler. Everything that speaks ORT GenAI lives here.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator, Sequence

import anyio.to_thread
import numpy as np

from rag.core.errors import BadRequestError, ModelError
from rag.core.files import inside_folder, path_for_native_library
from rag.core.settings import resolve_threads
from rag.generation.base import GenerationStats, Message, Prompt, SamplingOptions
from rag.generation.batched import BatchedDecoder
from rag.generation.logits import LogitBias, SpanConstraint, SpanSearch, best_span
from rag.generation.prefix_cache import PrefixCache
from rag.generation.recorder import TokenRecorder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GeneratorInfo:
    path: Path
    model_id: str
    model_file: Path
    context_length: int
    # A sliding-window model (Gemma 2/3) needs a KV cache of at least its window, whatever the request's
    # length: ORT GenAI refuses a generator with max_length below it ("KV cache capacity (34) must be at
    # least local_window_size (512)", measured on a Gemma 2 import).
    sliding_window: int = 0

    def kv_length(self, wanted: int) -> int:
        """The ``max_length`` to give a generator for ``wanted`` tokens (prompt + output)."""
        return min(self.context_length, max(wanted, self.sliding_window))


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
        sliding_window = int((config["model"]["decoder"].get("sliding_window") or {}).get("window_size") or 0)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{config_path} is invalid: {exc}") from exc
    if not model_file.is_file():
        raise ModelError(f"generator dir {path} is missing {model_file.name} (named in genai_config.json)")
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer.model").is_file():
        raise ModelError(f"generator dir {path} is missing tokenizer.json")
    return GeneratorInfo(path=path, model_id=path.name, model_file=model_file, context_length=context_length,
                         sliding_window=sliding_window)


# Preference of ``device = "auto"``: the first that this onnxruntime-genai build has and a device backs.
AUTO_ORDER = ("cuda", "dml", "cpu")
ORT_PROVIDER_NAMES = {"cuda": "CUDAExecutionProvider", "dml": "DmlExecutionProvider", "cpu": "CPUExecutionProvider"}


def provider_facts() -> dict[str, object]:
    """What this install can run on: ONNX Runtime's providers and ORT GenAI's (usable = both have it)."""
    import onnxruntime  # lazy: keeps rag --help fast (onnxruntime with numpy: ~0.35 s)
    import onnxruntime_genai as og  # lazy: keeps rag --help fast

    ort_providers = list(onnxruntime.get_available_providers())
    genai = {"cpu": True, "cuda": bool(og.is_cuda_available()), "dml": bool(og.is_dml_available())}
    usable = [d for d in AUTO_ORDER if genai[d] and ORT_PROVIDER_NAMES[d] in ort_providers]
    return {"onnxruntime": ort_providers, "genai": genai, "usable": usable or ["cpu"]}


def choose_provider(device: str, facts: dict[str, object]) -> tuple[str, str]:
    """(provider, why): ``auto`` takes CUDA > DirectML > CPU among the usable ones; an unusable
    explicit choice falls back to CPU. Pure, so ``rag info`` can explain the choice."""
    usable = list(facts["usable"])  # type: ignore[arg-type]
    if device == "auto":
        chosen = next(d for d in AUTO_ORDER if d in usable or d == "cpu")
        skipped = list(AUTO_ORDER[:AUTO_ORDER.index(chosen)])
        why = "auto: " + (f"{', '.join(skipped)} not usable in this install; " if skipped else "") + f"using {chosen}"
        return chosen, why
    if device in usable:
        return device, f"{device} as configured"
    return "cpu", f"{device} is not usable in this install (usable: {', '.join(usable)}); using cpu"


def resolve_provider(device: str) -> str:
    """The provider actually used (see ``choose_provider``); a fallback is logged with its reason."""
    chosen, why = choose_provider(device, provider_facts())
    if device not in ("auto", chosen):
        log.warning("execution provider: %s", why)
    else:
        log.info("execution provider: %s", why)
    return chosen


def completion_prompt(messages: Sequence[Message]) -> str:
    """Messages as plain text ending in "Answer:", for base models that have no chat template."""
    parts = [m["content"].strip() if m["role"] != "assistant" else f"Answer: {m['content'].strip()}"
             for m in messages]
    return "\n\n".join(parts) + "\n\nAnswer:"


def merge_system(messages: Sequence[Message]) -> list[Message]:
    """The system message folded into the first user turn, for chat templates without a system role
    (Gemma's raise on it or drop it)."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    for message in rest:
        if message["role"] == "user":
            message["content"] = f"{system}\n\n{message['content']}" if system else message["content"]
            return rest  # type: ignore[return-value]
    return [{"role": "user", "content": system}, *rest]  # type: ignore[list-item]


def search_settings(options: SamplingOptions) -> dict[str, float | int | bool]:
    """The one mapping of sampling options to ORT GenAI's search options (generator and engine alike)."""
    settings: dict[str, float | int | bool] = {"do_sample": options.sampling}
    if options.sampling:
        settings.update(temperature=options.temperature, top_p=options.top_p)
        if options.top_k_sampling:
            settings["top_k"] = options.top_k_sampling
    return settings


def next_token(generator: object, bias: LogitBias | None = None, constraint: SpanConstraint | None = None) -> int:
    """Advance an ``og.Generator`` by one token and return it. With a bias or a constraint, the logits are read,
    changed and written back before ORT GenAI picks (argmax, or its temperature / top-p / top-k sampling), so
    the pick follows the generator's own search options; without either this is exactly ``generate_next_token``."""
    if bias is not None or constraint is not None:
        logits = generator.get_logits()
        if bias is not None:
            logits = bias.apply(logits)
        if constraint is not None:
            logits = constraint.apply(logits)
        generator.set_logits(logits)
    generator.generate_next_token()
    token = int(generator.get_next_tokens()[0])
    if constraint is not None:
        constraint.advance(token)
    return token


def search_after_prompt(generator: object, length: int, constraint: SpanConstraint, search: SpanSearch,
                        limit: int, seen: list | None = None, slack: float = 0.0) -> list[int]:
    """``logits.best_span`` on an ``og.Generator`` holding a prompt of ``length`` tokens and room for ``limit``
    more: each phrase followed is fed after rewinding to the prompt (its KV cache is kept)."""

    def extend(tokens: Sequence[int], restart: bool) -> np.ndarray:
        if restart:
            generator.rewind_to(length)
        generator.append_tokens(np.asarray(tokens, dtype=np.int32))
        return generator.get_logits()

    return best_span(generator.get_logits(), constraint, extend, search, limit, seen, slack)


MAX_SEARCHED_TOKENS = 64  # room after the prompt for the phrases ``scored_phrases`` follows
PROBE_TOKENS = 6  # how far the batched decoder must match this generator before the server uses it


class LocalGenerator:
    remote = False  # the ``Generator`` generates in this process
    url = ""

    def __init__(self, path: Path, device: str = "cpu", threads: int = 0,
                 prefix_cache_slots: int = 0, prefix_cache_tokens: int = 1024) -> None:
        import onnxruntime_genai as og  # lazy: keeps rag --help fast

        self.info = validate_generator_dir(path)
        self.device = resolve_provider(device)
        self.threads = resolve_threads(threads)
        native = path_for_native_library(path)
        start = time.perf_counter()
        # ONNX Runtime GenAI cannot open a non-ASCII path on Windows: then it opens "." inside the model folder
        try:
            with nullcontext(native) if native is not None else inside_folder(path) as spelled:
                config = og.Config(spelled)
                config.clear_providers()
                if self.device != "cpu":
                    config.append_provider(self.device)
                # onnxruntime-genai runs one intra-op thread unless told otherwise; prefill and decode
                # both scale with cores (measured 2.2x TTFT on 2 cores), so always say how many.
                config.overlay(json.dumps({"model": {"decoder": {"session_options": {
                    "intra_op_num_threads": self.threads}}}}))
                self.model = og.Model(config)
                self.tokenizer = og.Tokenizer(self.model)
        except Exception as exc:  # onnxruntime-genai raises plain RuntimeError
            raise ModelError(f"cannot load generator from {path}: {exc}") from exc
        self.load_s = time.perf_counter() - start
        self._og = og
        self.eos_token_ids = frozenset(int(t) for t in np.atleast_1d(self.tokenizer.eos_token_ids))
        self.period_ids = frozenset(int(t) for t in self.encode(".")[-1:])  # a phrase ended with "." (spans)
        self.prefix_cache = PrefixCache(self._greedy_generator, prefix_cache_slots,
                                        min(prefix_cache_tokens, self.info.context_length))

    @property
    def model_id(self) -> str:
        return self.info.model_id

    @property
    def context_length(self) -> int:
        return self.info.context_length

    # ------------------------------------------------------------------ tokens
    @functools.cached_property
    def has_chat_template(self) -> bool:
        """Whether the model folder carries a chat template (base models often have none)."""
        if (self.info.path / "chat_template.jinja").is_file():
            return True
        config = self.info.path / "tokenizer_config.json"
        try:
            return bool(config.is_file() and json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
        except ValueError:
            return False

    @functools.cached_property
    def _bos_text(self) -> str:
        """The BOS token as text, for prompts without a template: a chat template writes it itself, and
        ORT GenAI's encode adds none (Gemma without <bos> is a different model). Empty where BOS is also
        an EOS id (Qwen's <|endoftext|>) or unknown."""
        try:
            config = json.loads((self.info.path / "genai_config.json").read_text(encoding="utf-8"))["model"]
            bos = int(config["bos_token_id"])
            added = json.loads((self.info.path / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
        except (OSError, ValueError, KeyError, TypeError):
            return ""
        if bos in self.eos_token_ids:
            return ""
        return next((t["content"] for t in added if t.get("id") == bos and t.get("special")), "")

    def chat_prompt(self, messages: Sequence[Message]) -> str:
        """The model's own chat template. Where it rejects the system role or renders without the system
        text (Gemma), the instructions go into the first user turn instead: the one place this is handled.
        A model without a template (a base model) gets a plain completion prompt."""
        if not self.has_chat_template:
            return self._bos_text + completion_prompt(messages)
        system = [m["content"] for m in messages if m["role"] == "system" and m["content"].strip()]
        try:
            text = self._render(messages)
        except Exception as exc:  # onnxruntime-genai raises plain RuntimeError for template errors
            if not system:
                raise ModelError(f"the chat template of {self.info.path} failed: {exc}") from exc
            text = None
        if system and (text is None or any(part.strip() not in text for part in system)):
            return self._render(merge_system(messages))
        return text

    def _render(self, messages: Sequence[Message]) -> str:
        return self.tokenizer.apply_chat_template(json.dumps(list(messages)), add_generation_prompt=True)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text), dtype=np.int32)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(np.asarray(tokens, dtype=np.int32))

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        tokens = self.encode(self.chat_prompt(messages))
        if len(tokens) >= self.context_length:
            raise BadRequestError(f"the prompt ({len(tokens)} tokens) does not fit the model's "
                                  f"{self.context_length}-token context")
        return Prompt(tuple(messages), tokens)

    def span_constraint(self, options: SamplingOptions) -> SpanConstraint | None:
        """The constraint a request's ``spans`` put on its reply, token by token (None without spans)."""
        return SpanConstraint(options.spans, self.eos_token_ids, self.period_ids, options.decline) \
            if options.spans else None

    def recorder(self, stats: GenerationStats, started: float, stop: Sequence[str] = ()) -> TokenRecorder:
        return TokenRecorder(stats, self.tokenizer.create_stream(), self.eos_token_ids, started, stop)

    # ------------------------------------------------------------------ generation
    def _greedy_generator(self, window: int) -> object:
        params = self._og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.info.kv_length(window), do_sample=False)
        return self._og.Generator(self.model, params)

    def _new_generator(self, max_length: int, options: SamplingOptions) -> object:
        params = self._og.GeneratorParams(self.model)
        params.set_search_options(max_length=self.info.kv_length(max_length), **search_settings(options))
        return self._og.Generator(self.model, params)

    def start(self, prompt_tokens: np.ndarray, options: SamplingOptions,
              stats: GenerationStats | None = None, started: float | None = None) -> "GenerationSession":
        """Prefill ``prompt_tokens`` and return a session that yields one token per ``step()``."""
        return GenerationSession(self, prompt_tokens, options, stats or GenerationStats(), started)

    def run(self, prompt_tokens: np.ndarray, options: SamplingOptions,
            stats: GenerationStats | None = None) -> Iterator[str]:
        """Text pieces as tokens are generated, in the calling thread; closing the iterator cancels."""
        session = self.start(prompt_tokens, options, stats)
        try:
            while not session.done:
                piece = session.step()
                if piece:
                    yield piece
        finally:
            if not session.done:
                session.cancel()

    async def stream(self, prompt: Prompt, options: SamplingOptions, stats: GenerationStats) -> AsyncIterator[str]:
        """The ``Generator`` interface: each step runs in a worker thread, off the event loop."""
        session = await anyio.to_thread.run_sync(self.start, prompt.tokens, options, stats)
        try:
            while not session.done:
                piece = await anyio.to_thread.run_sync(session.step)
                if piece:
                    yield piece
        finally:
            if not session.done:
                session.cancel()

    def generate(self, prompt_tokens: np.ndarray, options: SamplingOptions) -> tuple[str, GenerationStats]:
        stats = GenerationStats()
        text = "".join(self.run(prompt_tokens, options, stats))
        return text, stats

    def scored_phrases(self, prompt_tokens: np.ndarray, options: SamplingOptions,
                       slack: float) -> list[tuple[list[int], float, float, bool]]:
        """Every phrase a span search (``options.span_search``) scores for this prompt, the ones within ``slack``
        of the best too: (tokens, log-probability, start prior, leads). For fitting ``SpanWeights``."""
        generator = self._greedy_generator(len(prompt_tokens) + MAX_SEARCHED_TOKENS)
        generator.append_tokens(prompt_tokens)
        seen: list[tuple[list[int], float, float, bool]] = []
        search_after_prompt(generator, len(prompt_tokens), SpanConstraint(options.spans, self.eos_token_ids,
                                                                          self.period_ids), options.span_search,
                            MAX_SEARCHED_TOKENS, seen, slack)
        return seen

    def batching_engine(self) -> "BatchingEngine":
        return BatchingEngine(self)

    def batched_decoder(self, rows: int, window: int) -> BatchedDecoder:
        """The model's decoder driven directly, several requests a step (``batched``), once it has shown that it
        continues two prompts of different lengths, side by side, exactly as this generator does one at a time;
        ModelError when it cannot."""
        if self.device != "cpu":
            raise ModelError(f"batching drives the CPU decoder; this generator runs on {self.device}")
        decoder = BatchedDecoder(self.info.path, self.threads, rows, min(window, self.context_length),
                                 spares=self.prefix_cache.slots)
        prompts = [self.prompt([{"role": "user", "content": text}]).tokens
                   for text in ("Say hi.", "Name three colours of the rainbow, one per line.")]
        alone = [self._greedy_tokens(tokens, PROBE_TOKENS) for tokens in prompts]
        together: list[list[int]] = []
        for tokens in prompts:
            row = decoder.add(tokens, PROBE_TOKENS, reuse=False)
            while (logits := decoder.prefill(row, tokens)) is None:
                pass
            together.append([int(np.argmax(logits))])
        for _ in range(PROBE_TOKENS - 1):
            logits = decoder.step([reply[-1] for reply in together])
            for reply, row_logits in zip(together, logits):
                reply.append(int(np.argmax(row_logits)))
        while decoder.active:
            decoder.pop()
        for one, side_by_side in zip(alone, together):
            if side_by_side[:len(one)] != one:
                raise ModelError(f"batched decoding of {self.model_id} differs from one at a time: "
                                 f"{side_by_side} vs {one}")
        return decoder

    def _greedy_tokens(self, prompt_tokens: np.ndarray, count: int) -> list[int]:
        """Up to ``count`` greedy tokens after the prompt (the last may be EOS)."""
        generator = self._greedy_generator(len(prompt_tokens) + count)
        generator.append_tokens(prompt_tokens)
        tokens: list[int] = []
        while len(tokens) < count and not generator.is_done():
            tokens.append(next_token(generator))
        return tokens


class GenerationSession:
    """One request's generation, advanced a token at a time (lets a scheduler interleave requests)."""

    def __init__(self, owner: LocalGenerator, prompt_tokens: np.ndarray, options: SamplingOptions,
                 stats: GenerationStats, started: float | None) -> None:
        self.stats = stats
        self.started = started if started is not None else time.perf_counter()
        stats.prompt_tokens = int(len(prompt_tokens))
        if stats.prompt_tokens + 1 > owner.context_length:
            raise BadRequestError(
                f"prompt of {stats.prompt_tokens} tokens does not fit the {owner.context_length}-token context")
        self._options = options
        self._prompt_tokens = prompt_tokens
        self._constraint = owner.span_constraint(options)
        cache = owner.prefix_cache
        self._cache = cache if cache.fits(prompt_tokens, options.max_tokens, options.sampling) else None
        self._healthy = False  # a generator goes back to the cache only if no call on it failed
        if self._cache is not None:
            self._generator, stats.cached_tokens = self._cache.acquire(prompt_tokens, options.cache_scope)
        else:
            self._generator = owner._new_generator(
                min(owner.context_length, stats.prompt_tokens + options.max_tokens), options)
        self._recorder = owner.recorder(stats, self.started, options.stop)
        self._eos = min(owner.eos_token_ids)
        self._plan: list[int] | None = None  # the whole reply, where the spans are searched (``span_search``)
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
        if self._constraint is not None and self._options.span_search.width > 1 and not self._options.sampling:
            if self._plan is None:
                self._plan = self._search_spans()
            token = self._plan.pop(0) if self._plan else self._eos
        else:
            token = next_token(generator, constraint=self._constraint)
        self._healthy = True
        if self._constraint is not None and stats.output_tokens == 0:
            stats.decline_margin = self._constraint.decline_margin
        piece = self._recorder.add(token)
        if piece is None:
            return self._close()
        if self._recorder.finished or generator.is_done() or stats.output_tokens >= self._options.max_tokens:
            return piece + self._close()
        return piece

    def _search_spans(self) -> list[int]:
        # A phrase of up to ``max_tokens``: the generator's window holds the prompt and that many more.
        return search_after_prompt(self._generator, len(self._prompt_tokens), self._constraint,
                                   self._options.span_search, self._options.max_tokens)

    def cancel(self) -> None:
        self.stats.finish_reason = "cancelled"
        self._close()

    def _close(self) -> str:
        """Ends the session; returns the text still held back (see ``TokenRecorder.flush``)."""
        if not self.done:
            self.done = True
            self.stats.total_s = time.perf_counter() - self.started
            if self._cache is not None and self._healthy:
                self._cache.release(self._generator, self._prompt_tokens, self._options.cache_scope)
            self._generator = None  # an uncached generator's KV cache is freed now, not at garbage collection
            return self._recorder.flush() if self.stats.finish_reason != "cancelled" else ""
        return ""


@dataclass(frozen=True)
class EngineEvent:
    request: object
    token: int | None
    turn_finished: bool
    failed: str | None  # the engine's error code, when the turn failed
    finish_reason: str  # "stop" | "length" | "cancelled", meaningful when ``turn_finished``


class BatchingEngine:
    """ORT GenAI's continuous-batching ``og.Engine`` over the generator's model. It may only be used from
    the thread that created it. The engine picks tokens itself, with no logits hook: a span constraint
    is ignored on this path (the default model cannot run it and is served by ``GenerationSession``)."""

    def __init__(self, generator: LocalGenerator) -> None:
        og = generator._og
        self._og = og
        self.generator = generator
        self._engine = og.Engine(generator.model)
        self._buffer = self._engine.create_event_buffer(64)

    def probe(self) -> None:
        """Run one short generation; raises when the engine cannot serve this model."""
        request, _ = self.begin(self.generator.prompt([{"role": "user", "content": "Say hi."}]).tokens,
                                SamplingOptions(max_tokens=2))
        while self._engine.has_pending_requests():
            for event in self.run():
                if event.failed:
                    raise RuntimeError(event.failed)
        request.close()

    def begin(self, tokens: np.ndarray, options: SamplingOptions) -> tuple[object, int]:
        request = self._engine.create_request()
        turn = self._og.TurnOptions(request)
        turn.set_max_generated_tokens(options.max_tokens)
        setters = {"do_sample": turn.set_do_sample, "temperature": turn.set_temperature,
                   "top_p": turn.set_top_p, "top_k": turn.set_top_k}
        for name, value in search_settings(options).items():
            setters[name](value)
        return request, request.begin_turn(tokens, turn)

    def run(self) -> list[EngineEvent]:
        flags = self._og.EngineEventFlags
        events = []
        for event in self._engine.run(self._buffer):
            value = int(event.flags.value) if hasattr(event.flags, "value") else int(event.flags)
            reason = {"EOS": "stop", "STOP_STRING": "stop", "CANCELLED": "cancelled"}.get(
                getattr(event.finish_reason, "name", ""), "length")
            events.append(EngineEvent(
                request=event.request,
                token=int(event.token) if value & int(flags.TOKEN.value) and event.token is not None else None,
                turn_finished=bool(value & int(flags.TURN_FINISHED.value)),
                failed=str(event.error_code) if value & int(flags.FAILED.value) else None,
                finish_reason=reason))
        return events
