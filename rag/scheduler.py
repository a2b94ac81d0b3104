"""Concurrent generation for the server.

One background thread owns generation; requests come in through a thread-safe
queue and their tokens go out to asyncio queues on the caller's loop, so
generation never blocks the event loop. Two modes:

* ``engine``: ORT GenAI's continuous-batching ``Engine`` steps all requests together.
* ``interleaved``: one ``og.Generator`` per request, advanced round-robin a token at a
  time (no batching). Used when the engine cannot serve the model: onnxruntime-genai
  0.18's engine fails on models built with ``prune_lm_head`` (our default: faster
  prefill), and on 2 CPU cores the engine's batching gained only ~15% aggregate
  throughput at 10 clients while costing 40% TTFT for a single client (measured).

A request whose client goes away is cancelled at the next token step. Beyond
``max_queue`` unfinished requests, ``stream`` refuses with ``OverloadedError``
(HTTP 503 + Retry-After).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

import numpy as np

from rag.errors import BadRequestError, ModelError, OverloadedError
from rag.generator import GenerationSession, GenerationStats, LocalGenerator, SamplingOptions, TokenRecorder

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
    request: object = None
    turn_id: int = 0
    recorder: TokenRecorder | None = None
    ended: str | None = None  # engine path: the reply ended by a loop or stop string; its turn is being cancelled

    def emit(self, item: object) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


class GenerationScheduler:
    def __init__(self, generator: LocalGenerator, max_queue: int = 32, mode: str = "auto") -> None:
        import onnxruntime_genai as og

        self._og = og
        self.generator = generator
        self.max_queue = max_queue
        self._inbox: queue.Queue[Job] = queue.Queue()
        self._active: dict[int, Job] = {}
        self._unfinished = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = threading.Event()
        self._start_error: Exception | None = None
        self.mode = mode  # auto | engine | interleaved; "auto" settles on one at start-up
        # The engine may only be used from the thread that created it, so that thread builds it.
        self._thread = threading.Thread(target=self._run, name="generation-engine", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise ModelError(f"continuous batching is not available for {generator.model_id}: "
                             f"{self._start_error}") from self._start_error

    @property
    def depth(self) -> int:
        """Requests submitted and not yet finished (queued or generating)."""
        return self._unfinished

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    async def stream(self, tokens: np.ndarray, options: SamplingOptions,
                     stats: GenerationStats | None = None) -> AsyncIterator[str]:
        """Text pieces for one request; cancelling the consumer cancels the generation."""
        with self._lock:
            if self._unfinished >= self.max_queue:
                raise OverloadedError(f"{self._unfinished} generations in progress; try again shortly",
                                      retry_after_s=2)
            self._unfinished += 1
        job = Job(tokens, options, asyncio.get_running_loop(), asyncio.Queue())
        if stats is not None:
            job.stats = stats
        job.stats.prompt_tokens = int(len(tokens))
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

    # ------------------------------------------------------------------ engine thread
    def _run(self) -> None:
        try:
            if self.mode != "interleaved" and self._engine_works():
                self.mode = "engine"
            elif self.mode == "engine":
                raise RuntimeError("the continuous-batching engine cannot run this model")
            else:
                self.mode = "interleaved"
        except Exception as exc:
            self._start_error = exc
            return
        finally:
            self._started.set()
        if self.mode == "interleaved":
            self._run_interleaved()
        else:
            self._run_engine()

    def _engine_works(self) -> bool:
        """Build the engine and run one short generation through it."""
        try:
            self._engine = self._og.Engine(self.generator.model)
            self._buffer = self._engine.create_event_buffer(64)
            request = self._engine.create_request()
            opts = self._og.TurnOptions(request)
            opts.set_max_generated_tokens(2)
            request.begin_turn(self.generator.encode(self.generator.chat_prompt(
                [{"role": "user", "content": "Say hi."}])), opts)
            while self._engine.has_pending_requests():
                for event in self._engine.run(self._buffer):
                    if int(event.flags.value) & int(self._og.EngineEventFlags.FAILED.value):
                        raise RuntimeError(str(event.error_code))
            request.close()
            return True
        except Exception as exc:  # noqa: BLE001 - any failure means: interleave instead
            log.warning("continuous batching unavailable for %s (%s); interleaving requests round-robin",
                        self.generator.model_id, exc)
            self._engine = None
            return False

    def _run_interleaved(self) -> None:
        """Round-robin: each round admits (prefills) at most one waiting request, then advances every
        active request by one token, so a new request's first token never waits for whole answers."""
        active: list[tuple[Job, GenerationSession]] = []
        while not self._stop.is_set():
            try:
                self._interleave_round(active)
            except Exception:  # never let the generation thread die: fail what is in flight, go on
                log.exception("generation round failed")
                for job, session in active:
                    session.cancel()
                    self._fail(job, ModelError("generation failed"))
                active.clear()

    def _interleave_round(self, active: list[tuple[Job, GenerationSession]]) -> None:
        try:
            job = self._inbox.get(timeout=0.05) if not active else self._inbox.get_nowait()
        except queue.Empty:
            job = None
        if job is not None:
            if job.cancelled.is_set():
                self._finish(job, "cancelled")
            else:
                try:
                    active.append((job, self.generator.start(job.tokens, job.options, job.stats, job.submitted)))
                except Exception as exc:  # noqa: BLE001 - fail this request, keep serving others
                    self._fail(job, exc)
        finished: list[tuple[Job, GenerationSession]] = []
        for job, session in active:
            try:
                if job.cancelled.is_set():
                    session.cancel()
                else:
                    piece = session.step()
                    if piece:
                        job.emit(piece)
            except Exception as exc:  # noqa: BLE001
                session.cancel()
                self._fail(job, exc)
                finished.append((job, session))
                continue
            if session.done:
                self._finish(job, job.stats.finish_reason)
                finished.append((job, session))
        for item in finished:
            active.remove(item)

    def _fail(self, job: Job, exc: BaseException) -> None:
        log.error("generation failed: %s", exc)
        self._finish(job, "error", exc if isinstance(exc, (ModelError, BadRequestError)) else
                     ModelError(f"generation failed: {exc}"))

    def _run_engine(self) -> None:
        while not self._stop.is_set():
            try:
                self._engine_round()
            except Exception as exc:  # noqa: BLE001 - engine failure: fail everyone in flight, keep serving
                log.exception("engine step failed")
                for job in list(self._active.values()):
                    self._fail(job, exc)

    def _engine_round(self) -> None:
        self._admit(block=not self._active)
        for job in [j for j in self._active.values() if j.cancelled.is_set()]:
            job.request.cancel_turn(job.turn_id)
        if not self._active:
            return
        for event in self._engine.run(self._buffer):
            job = self._active.get(id(event.request))
            if job is not None:
                self._handle(job, event)

    def _admit(self, block: bool) -> None:
        try:
            job = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._begin(job)
            try:
                job = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _begin(self, job: Job) -> None:
        og = self._og
        if job.cancelled.is_set():
            self._finish(job, "cancelled")
            return
        try:
            request = self._engine.create_request()
            opts = og.TurnOptions(request)
            opts.set_max_generated_tokens(job.options.max_tokens)
            opts.set_do_sample(job.options.sampling)
            if job.options.sampling:
                opts.set_temperature(job.options.temperature)
                opts.set_top_p(job.options.top_p)
                if job.options.top_k:
                    opts.set_top_k(job.options.top_k)
            job.turn_id = request.begin_turn(job.tokens, opts)
        except Exception as exc:  # noqa: BLE001 - fail this request, keep serving others
            self._fail(job, exc)
            return
        job.request = request
        job.recorder = TokenRecorder(job.stats, self.generator.tokenizer.create_stream(),
                                     self.generator.eos_token_ids, job.submitted, job.options.stop)
        self._active[id(request)] = job

    def _handle(self, job: Job, event) -> None:
        flags = self._og.EngineEventFlags
        value = int(event.flags.value) if hasattr(event.flags, "value") else int(event.flags)
        finished = bool(value & int(flags.TURN_FINISHED.value))
        if value & int(flags.TOKEN.value) and event.token is not None and job.ended is None \
                and not job.cancelled.is_set():
            piece = job.recorder.add(int(event.token))
            if piece:
                job.emit(piece)
            if job.recorder.finished:
                # Like a client's cancel: the request stays active until the engine reports the turn finished.
                job.ended = "stop"
                if not finished:
                    job.request.cancel_turn(job.turn_id)
        if value & int(flags.FAILED.value):
            self._finish(job, "error", ModelError(f"generation failed ({event.error_code})"))
        elif finished:
            reason = event.finish_reason
            self._finish(job, job.ended or {"EOS": "stop", "STOP_STRING": "stop", "CANCELLED": "cancelled"}.get(
                getattr(reason, "name", ""), "length"))

    def _finish(self, job: Job, reason: str, error: BaseException | None = None) -> None:
        if job.cancelled.is_set() and error is None:
            reason = "cancelled"  # the client left: nothing more goes out, whatever ended the turn
        if job.recorder is not None and error is None and reason != "cancelled":
            tail = job.recorder.flush()  # engine path: text held back as a possible stop string's start
            if tail:
                job.emit(tail)
        job.stats.finish_reason = reason
        job.stats.total_s = time.perf_counter() - job.submitted
        if job.request is not None:
            self._active.pop(id(job.request), None)
            try:
                job.request.close()
            except Exception:  # closing a finished request may fail; nothing to recover
                pass
        with self._lock:
            self._unfinished -= 1
        job.emit(error if error is not None else _DONE)
