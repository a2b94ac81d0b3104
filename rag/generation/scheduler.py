"""Concurrent generation for the server: one generation thread shares the local generator.

Requests come in through a thread-safe queue and their text goes out to asyncio queues on the
caller's loop, so generation never blocks the event loop. The scheduler implements the same
``Generator`` interface as the local generator it wraps. Two strategies, picked at start-up:

* ``EngineStrategy``: ORT GenAI's continuous-batching ``Engine`` steps all requests together.
* ``InterleavedStrategy``: one ``og.Generator`` per request, advanced round-robin a token at a
  time (no batching). Used when the engine cannot serve the model: onnxruntime-genai 0.18's engine
  fails on models built with ``prune_lm_head`` (our default: faster prefill), and on 2 CPU cores the
  engine's batching gained only ~15% aggregate throughput at 10 clients while costing 40% TTFT for
  a single client (measured). The engine picks tokens itself, so it ignores a span constraint (see
  ``rag.generation.logits``); the interleaved path applies it.

A request whose client goes away is cancelled at the next token step. Beyond ``max_queue``
unfinished requests, ``stream`` refuses with ``OverloadedError`` (HTTP 503 + Retry-After).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Sequence

import numpy as np

from rag.core.errors import BadRequestError, ModelError, OverloadedError
from rag.generation.base import GenerationStats, Message, Prompt, SamplingOptions
from rag.generation.ort import BatchingEngine, EngineEvent, GenerationSession, LocalGenerator
from rag.generation.recorder import TokenRecorder

log = logging.getLogger(__name__)
_DONE = object()


@dataclass(eq=False)  # identity: jobs hold numpy arrays, and two requests are never "equal"
class Job:
    tokens: np.ndarray
    options: SamplingOptions
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue
    stats: GenerationStats = field(default_factory=GenerationStats)
    submitted: float = field(default_factory=time.perf_counter)
    cancelled: threading.Event = field(default_factory=threading.Event)
    request: object = None  # engine path: the engine's request and turn
    turn_id: int = 0
    recorder: TokenRecorder | None = None
    ended: str | None = None  # engine path: the reply ended by a loop or stop string; its turn is being cancelled

    def emit(self, item: object) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


Finish = Callable[[Job, str, "BaseException | None"], None]


class InterleavedStrategy:
    """Round-robin: each round admits (prefills) at most one waiting request, then advances every
    active request by one token, so a new request's first token never waits for whole answers."""

    name = "interleaved"

    def __init__(self, generator: LocalGenerator, finish: Finish) -> None:
        self.generator = generator
        self._finish = finish
        self._active: list[tuple[Job, GenerationSession]] = []

    @property
    def idle(self) -> bool:
        return not self._active

    def admit(self, job: Job) -> None:
        try:
            self._active.append((job, self.generator.start(job.tokens, job.options, job.stats, job.submitted)))
        except Exception as exc:  # noqa: BLE001 - fail this request, keep serving others
            self._finish(job, "error", exc)

    def round(self) -> None:
        finished = []
        for job, session in self._active:
            try:
                if job.cancelled.is_set():
                    session.cancel()
                else:
                    piece = session.step()
                    if piece:
                        job.emit(piece)
            except Exception as exc:  # noqa: BLE001
                session.cancel()
                self._finish(job, "error", exc)
                finished.append((job, session))
                continue
            if session.done:
                self._finish(job, job.stats.finish_reason, None)
                finished.append((job, session))
        for item in finished:
            self._active.remove(item)

    def fail_all(self, exc: BaseException) -> None:
        for job, session in self._active:
            session.cancel()
            self._finish(job, "error", exc)
        self._active.clear()


class EngineStrategy:
    """ORT GenAI's ``og.Engine`` batches every active request in each step."""

    name = "engine"

    def __init__(self, engine: BatchingEngine, finish: Finish) -> None:
        self.engine = engine
        self._finish = finish
        self._active: dict[int, Job] = {}

    @property
    def idle(self) -> bool:
        return not self._active

    def admit(self, job: Job) -> None:
        try:
            job.request, job.turn_id = self.engine.begin(job.tokens, job.options)
        except Exception as exc:  # noqa: BLE001 - fail this request, keep serving others
            self._finish(job, "error", exc)
            return
        job.recorder = self.engine.generator.recorder(job.stats, job.submitted, job.options.stop)
        self._active[id(job.request)] = job

    def round(self) -> None:
        for job in [j for j in self._active.values() if j.cancelled.is_set()]:
            job.request.cancel_turn(job.turn_id)
        if not self._active:
            return
        for event in self.engine.run():
            job = self._active.get(id(event.request))
            if job is not None:
                self._handle(job, event)

    def _handle(self, job: Job, event: EngineEvent) -> None:
        if event.token is not None and job.ended is None and not job.cancelled.is_set():
            piece = job.recorder.add(event.token)
            if piece:
                job.emit(piece)
            if job.recorder.finished:
                # Like a client's cancel: the request stays active until the engine reports the turn finished.
                job.ended = "stop"
                if not event.turn_finished:
                    job.request.cancel_turn(job.turn_id)
        if event.failed:
            self._end(job, "error", ModelError(f"generation failed ({event.failed})"))
        elif event.turn_finished:
            self._end(job, job.ended or event.finish_reason, None)

    def _end(self, job: Job, reason: str, error: BaseException | None) -> None:
        self._active.pop(id(job.request), None)
        try:
            job.request.close()
        except Exception:  # closing a finished request may fail; nothing to recover
            pass
        self._finish(job, reason, error)

    def fail_all(self, exc: BaseException) -> None:
        for job in list(self._active.values()):
            self._end(job, "error", exc)


class GenerationScheduler:
    """The ``Generator`` the server uses: the local generator, shared by concurrent requests."""

    def __init__(self, generator: LocalGenerator, max_queue: int = 32, mode: str = "auto") -> None:
        if mode not in ("auto", "engine", "interleaved"):
            raise ValueError(f"unknown scheduler mode {mode!r}")
        self.generator = generator
        self.max_queue = max_queue
        self._requested_mode = mode
        self._inbox: queue.Queue[Job] = queue.Queue()
        self._unfinished = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = threading.Event()
        self._start_error: Exception | None = None
        self._strategy: InterleavedStrategy | EngineStrategy | None = None
        # The engine may only be used from the thread that created it, so that thread builds it.
        self._thread = threading.Thread(target=self._run, name="generation-engine", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise ModelError(f"continuous batching is not available for {generator.model_id}: "
                             f"{self._start_error}") from self._start_error

    # ------------------------------------------------------------------ the Generator interface
    @property
    def model_id(self) -> str:
        return self.generator.model_id

    @property
    def device(self) -> str:
        return self.generator.device

    @property
    def context_length(self) -> int:
        return self.generator.context_length

    @property
    def mode(self) -> str:
        return self._strategy.name if self._strategy is not None else self._requested_mode

    def count_tokens(self, text: str) -> int:
        return self.generator.count_tokens(text)

    def encode(self, text: str) -> np.ndarray:
        return self.generator.encode(text)

    def prompt(self, messages: Sequence[Message]) -> Prompt:
        return self.generator.prompt(messages)

    async def stream(self, prompt: Prompt, options: SamplingOptions, stats: GenerationStats) -> AsyncIterator[str]:
        """Text pieces for one request; closing the iterator (a client that left) cancels the generation."""
        with self._lock:
            if self._unfinished >= self.max_queue:
                raise OverloadedError(f"{self._unfinished} generations in progress; try again shortly",
                                      retry_after_s=2)
            self._unfinished += 1
        job = Job(prompt.tokens, options, asyncio.get_running_loop(), asyncio.Queue(), stats)
        job.stats.prompt_tokens = prompt.length
        self._inbox.put(job)
        try:
            while True:
                item = await job.out.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.cancelled.set()  # no-op if it already finished

    @property
    def depth(self) -> int:
        """Requests submitted and not yet finished (queued or generating)."""
        return self._unfinished

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ generation thread
    def _run(self) -> None:
        try:
            self._strategy = self._choose_strategy()
        except Exception as exc:  # noqa: BLE001
            self._start_error = exc
            return
        finally:
            self._started.set()
        while not self._stop.is_set():
            try:
                self._admit(block=self._strategy.idle)
                self._strategy.round()
            except Exception as exc:  # never let the generation thread die: fail what is in flight, go on
                log.exception("generation round failed")
                self._strategy.fail_all(ModelError(f"generation failed: {exc}"))

    def _choose_strategy(self) -> InterleavedStrategy | EngineStrategy:
        if self._requested_mode != "interleaved":
            try:
                engine = self.generator.batching_engine()
                engine.probe()
                return EngineStrategy(engine, self._finish)
            except Exception as exc:  # noqa: BLE001 - any failure means: interleave instead
                if self._requested_mode == "engine":
                    raise RuntimeError(f"the continuous-batching engine cannot run this model ({exc})") from exc
                # The normal path for the default (pruned) model build, not a fault: say what it means.
                log.info("%s answers concurrent questions by taking turns, a few words each (this model build "
                         "cannot use the batching engine)", self.generator.model_id)
                log.debug("batching engine probe for %s: %s", self.generator.model_id, exc)
        return InterleavedStrategy(self.generator, self._finish)

    def _admit(self, block: bool) -> None:
        """Take waiting requests: the interleaved strategy one per round (its prefill delays the others),
        the engine all of them."""
        while True:
            try:
                job = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            if job.cancelled.is_set():
                self._finish(job, "cancelled", None)
            else:
                self._strategy.admit(job)
                if isinstance(self._strategy, InterleavedStrategy):
                    return

    def _finish(self, job: Job, reason: str, error: BaseException | None) -> None:
        if error is not None:
            log.error("generation failed: %s", error)
            if not isinstance(error, (ModelError, BadRequestError)):
                error = ModelError(f"generation failed: {error}")
        if job.cancelled.is_set() and error is None:
            reason = "cancelled"  # the client left: nothing more goes out, whatever ended the turn
        if job.recorder is not None and error is None and reason != "cancelled":
            tail = job.recorder.flush()  # engine path: text held back as a possible stop string's start
            if tail:
                job.emit(tail)
        job.stats.finish_reason = reason
        job.stats.total_s = time.perf_counter() - job.submitted
        with self._lock:
            self._unfinished -= 1
        job.emit(error if error is not None else _DONE)
