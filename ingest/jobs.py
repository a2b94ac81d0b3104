"""Long ingest work (an upload, a source sync) as a job that anyone can follow: its record under
``home/jobs/<id>/job.json`` is rewritten as it runs (files done, OCR pages, chunks, ETA, per-file outcomes),
so a reloaded web page, another worker process or a replica sharing the home reads the same progress.

A job whose process is gone (a restart, a crash) reads as ``interrupted``: known at once on the same
machine (the process id and its start time), and on another (a replica sharing the home) when its record,
touched every ``HEARTBEAT_S`` while it runs, is older than ``STALE_S``. An upload keeps its files under
``home/jobs/<id>/input`` until it ends, so an interrupted one can be run again; a finished job's files go.
Jobs of one index run one at a time in a process (the index has one writer); cancelling raises
``JobCancelled`` from the work's next progress report, the writer rolls back what was not committed, and the
job's record goes (``DELETE /v1/jobs/{id}``; deleting an ended job forgets it).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import msgspec
import psutil

from ingest.pipeline import FileOutcome
from ingest.progress import OcrPage, ProgressEvent, Started
from rag.core.records import DocumentRecord
from rag.core import observe
from rag.core.access import ALL_GROUPS, Principal
from rag.core.errors import JobCancelled, JobNotFoundError, JobStateError, RagError
from rag.core.files import LOCK_RETRIES, MOVE_RETRIES, remove_tree, replace_file, retry_locked, unlink_file
from rag.core.paths import fold_case

log = logging.getLogger(__name__)
HEARTBEAT_S = 2.0
# A running job's record older than this was left by a process that is gone. Well above HEARTBEAT_S: a
# heartbeat thread can be late by seconds on a loaded 2-core machine.
STALE_S = 20.0
KEEP_FINISHED_S = 7 * 24 * 3600
SAVE_EVERY_S = 0.25  # progress is written at most this often (and at each file's end)
CANCEL_WAIT_S = 30.0  # a file stops at its next page; a batch being embedded finishes first
QUEUED, RUNNING, DONE, FAILED, CANCELLED, INTERRUPTED = "queued", "running", "done", "failed", "cancelled", "interrupted"
ACTIVE = (QUEUED, RUNNING)
RERUNNABLE = (FAILED, CANCELLED, INTERRUPTED)
JOB_FILE, INPUT_DIR, CANCEL_FILE = "job.json", "input", "cancel"
STOPPED = "the server stopped while this job ran; what it had committed stays, and it can be run again"
CANCELLED_MESSAGE = "cancelled: nothing it had not committed was kept"


class Job(msgspec.Struct, omit_defaults=True):
    id: str
    kind: str  # upload | sync
    index: str
    state: str = QUEUED
    principal: str | None = None
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    updated_at: float = 0.0  # the heartbeat
    files_total: int = 0
    files_done: int = 0
    chunks: int = 0
    ocr_pages_done: int = 0  # over the whole job
    current_file: str | None = None
    current_file_page: int = 0  # OCR progress inside the file being read
    current_file_pages: int = 0
    progress: float = 0.0  # 0..1, never decreasing
    files: list[FileOutcome] = msgspec.field(default_factory=list)
    summary: dict[str, int] = msgspec.field(default_factory=dict)
    error_type: str | None = None
    error: str | None = None
    # What the job was asked, to run it again: the files' names as sent, the groups, the source.
    names: list[str] = msgspec.field(default_factory=list)
    groups: list[str] | None = None
    source: str | None = None
    retry_of: str | None = None
    owner: str = ""  # host:pid:process start time of the process running it
    # Who started it (``Principal.key``: kind and name) and the document groups it saw ("*": every document;
    # none: public documents only, what a record without them means): a re-run stores its files as that
    # uploader would, and only the starter or one who sees everything it touched may follow or change it.
    starter: str = ""
    scope: list[str] = msgspec.field(default_factory=list)

    def scope_groups(self) -> frozenset[str] | None:
        """The groups its uploader saw (None: every document)."""
        return None if ALL_GROUPS in self.scope else frozenset(self.scope)

    def elapsed_s(self, now: float) -> float:
        if self.started_at is None:
            return 0.0
        return max(0.0, (self.finished_at or now) - self.started_at)

    def eta_s(self, now: float) -> float | None:
        """Seconds left, from the pace so far (None before there is a pace to go by, or once finished)."""
        if self.state != RUNNING or self.progress < 0.02:
            return None
        elapsed = self.elapsed_s(now)
        return round(elapsed * (1 - self.progress) / self.progress, 1)


def job_visible_to(principal: Principal, job: Job, documents: dict[str, DocumentRecord],
                   source_visible: bool = True) -> bool:
    """Whether ``principal`` may follow and control ``job``: its starter, one who sees every document, or one
    who sees everything the ended job touched — each file's document as it is now (``documents`` by id), the
    groups an upload gave, and (a sync) its source (``source_visible``). A job still running touches what it
    will: only its starter and those who see everything follow it."""
    if principal.unrestricted or (job.starter and job.starter == principal.key):
        return True
    if job.state in ACTIVE or not source_visible:
        return False
    given = frozenset(job.groups or ())
    if job.groups is not None and not principal.sees(given):
        return False
    for result in job.files:
        record = documents.get(result.document_id or "")
        if record is not None:
            if not principal.sees(record.groups):
                return False
        elif job.groups is None:
            return False  # no document now (failed, removed, deleted since): its groups are not known
    return True


def process_identity(pid: int | None = None) -> str:
    """host:pid:start time, which tells this process from a later one given the same pid."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{psutil.Process(pid).create_time():.3f}"


def owner_state(owner: str) -> str | None:
    """"alive" or "gone" for ``owner``, a process of this host; None for a process of another host (a replica
    sharing the home), which is judged by its heartbeat instead."""
    host, pid, started = (owner.rsplit(":", 2) + ["", ""])[:3] if owner.count(":") >= 2 else ("", "", "")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        return "alive" if f"{psutil.Process(int(pid)).create_time():.3f}" == started else "gone"
    except psutil.AccessDenied:  # another account's live process (a service): it exists
        return "alive"
    except (psutil.NoSuchProcess, ValueError):
        return "gone"


class JobStore:
    """The job records of a home (shared by the worker processes of a server)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _dir(self, job_id: str) -> Path:
        if not job_id or not all(c in "0123456789abcdef" for c in job_id) or len(job_id) != 32:
            raise JobNotFoundError(f"no job {job_id!r}")
        return self.folder / job_id

    def create(self, kind: str, index: str, principal: str | None, inputs: Sequence[tuple[str, bytes]] = (),
               groups: Sequence[str] | None = None, source: str | None = None, retry_of: str | None = None,
               starter: str = "", scope: frozenset[str] | None = frozenset()) -> Job:
        """``scope``: the document groups the starter sees (None: every document)."""
        now = time.time()
        job = Job(uuid.uuid4().hex, kind, index, principal=principal, created_at=now, updated_at=now,
                  owner=process_identity(),
                  names=[name for name, _ in inputs], groups=list(groups) if groups is not None else None,
                  source=source, retry_of=retry_of, starter=starter,
                  scope=[ALL_GROUPS] if scope is None else sorted(scope))
        folder = self.folder / job.id / INPUT_DIR
        (folder if kind == "upload" else folder.parent).mkdir(parents=True)
        for position, (_, content) in enumerate(inputs):
            (folder / str(position)).write_bytes(content)
        self.save(job)
        return job

    def save(self, job: Job, retries: int = MOVE_RETRIES) -> None:
        target = self.folder / job.id / JOB_FILE
        scratch = target.with_name(f".{JOB_FILE}.{uuid.uuid4().hex[:8]}")
        scratch.write_bytes(msgspec.json.encode(job))
        try:
            replace_file(scratch, target, retries)
        except OSError:
            unlink_file(scratch)
            raise

    def get(self, job_id: str) -> Job:
        path = self._dir(job_id) / JOB_FILE
        try:
            job = msgspec.json.decode(retry_locked(path.read_bytes), type=Job)
        except (FileNotFoundError, msgspec.DecodeError):
            raise JobNotFoundError(f"no job {job_id!r}") from None
        return self._settled(job)

    def _settled(self, job: Job, now: float | None = None) -> Job:
        """``job``, marked interrupted (and saved so) when the process running it is gone."""
        now = time.time() if now is None else now
        # A stale heartbeat alone does not end a job of a live process here: a laptop that slept leaves one.
        state = owner_state(job.owner) if job.state in ACTIVE else None
        if job.state in ACTIVE and (state == "gone" or (state is None and now - job.updated_at > STALE_S)):
            job = msgspec.structs.replace(job, state=INTERRUPTED, finished_at=job.updated_at,
                                          error_type="interrupted", current_file=None, error=STOPPED)
            self.save(job)
        return job

    def list(self, index: str | None = None, limit: int = 50) -> list[Job]:
        """Jobs, newest first (of ``index`` only, when given)."""
        if not self.folder.is_dir():
            return []
        jobs = []
        for folder in self.folder.iterdir():
            try:
                job = self.get(folder.name)
            except JobNotFoundError:
                continue
            if index is None or fold_case(job.index) == fold_case(index):
                jobs.append(job)
        return sorted(jobs, key=lambda j: j.created_at, reverse=True)[:limit]

    def inputs(self, job: Job) -> list[tuple[str, bytes]]:
        folder = self.folder / job.id / INPUT_DIR
        try:
            return [(name, (folder / str(position)).read_bytes()) for position, name in enumerate(job.names)]
        except FileNotFoundError:
            raise JobStateError(f"job {job.id} no longer has its uploaded files; upload them again") from None

    def can_retry(self, job: Job) -> bool:
        """A job that ended without finishing, and (an upload) still has its files."""
        if job.state not in RERUNNABLE:
            return False
        return job.kind != "upload" or (self.folder / job.id / INPUT_DIR).is_dir()

    def take_inputs(self, old: Job, new: Job) -> None:
        """Hand ``old``'s uploaded files over to ``new`` (a re-run)."""
        target = self.folder / new.id / INPUT_DIR
        remove_tree(target)
        replace_file(self.folder / old.id / INPUT_DIR, target)

    def discard(self, job: Job) -> None:
        """Forget a job and its kept files (a cancelled or an ended one, or a scheduled sync another replica
        was running)."""
        remove_tree(self.folder / job.id)

    def drop_inputs(self, job: Job) -> None:
        remove_tree(self.folder / job.id / INPUT_DIR)

    def request_cancel(self, job: Job) -> None:
        """Ask the process running ``job`` (this one or another) to stop it."""
        (self.folder / job.id / CANCEL_FILE).touch()

    def cancel_requested(self, job_id: str) -> bool:
        return (self.folder / job_id / CANCEL_FILE).exists()

    def prune(self, now: float | None = None) -> list[str]:
        """Remove finished jobs older than KEEP_FINISHED_S; their ids."""
        now = time.time() if now is None else now
        removed = []
        for job in self.list(limit=10**9):
            if job.state not in ACTIVE and now - (job.finished_at or job.created_at) > KEEP_FINISHED_S:
                try:
                    remove_tree(self.folder / job.id)
                except OSError as exc:  # a scanner or a backup holds one of its files: next time
                    log.warning("old job %s was not removed: %s", job.id, exc)
                    continue
                removed.append(job.id)
        return removed


class Tracker:
    """A running job's progress: the ingest pipeline's ``Progress`` callback, which also raises
    ``JobCancelled`` once the job is cancelled."""

    def __init__(self, store: JobStore, job: Job, cancelled: threading.Event) -> None:
        self.store, self.job, self.cancelled = store, job, cancelled
        self.lock = threading.Lock()
        self._saved_at = 0.0
        self._files_before = 0  # files done before the current one (for OCR pages: done, not the current)
        self._ocr_before = 0

    def __call__(self, event: ProgressEvent) -> None:
        if self.cancelled.is_set():
            raise JobCancelled("cancelled")
        with self.lock:
            job = self.job
            if isinstance(event, Started):
                job.files_total = event.files
            elif isinstance(event, OcrPage):
                job.current_file = Path(event.path).name
                job.current_file_page, job.current_file_pages = event.page, event.pages
                job.ocr_pages_done = self._ocr_before + event.page
            else:
                self._ocr_before = job.ocr_pages_done
                job.current_file, job.current_file_page, job.current_file_pages = None, 0, 0
            files_done = event.files_done
            job.files_done, job.chunks = files_done, event.chunks_done
            within = 0.95 * job.current_file_page / job.current_file_pages if job.current_file_pages else 0.0
            if job.files_total:  # the last 1% is the embedding and the commit after the last file
                job.progress = max(job.progress, round(min(0.99, (files_done + within) / job.files_total), 4))
            final = not isinstance(event, OcrPage)
        self.save(force=final)

    def save(self, force: bool = False) -> None:
        """Progress, written best-effort: a write a reader or a scanner refuses is skipped (the next one
        carries it), never the end of the job."""
        now = time.time()
        with self.lock:
            if not force and now - self._saved_at < SAVE_EVERY_S:
                return
            self.job.updated_at, self._saved_at = now, now
            try:
                self.store.save(self.job, LOCK_RETRIES)
            except OSError as exc:
                log.debug("progress of job %s not written this time: %s", self.job.id, exc)


@dataclass
class Running:
    """A job this process runs: what a request waiting for it (``done``) gets back, beside the record."""

    job: Job
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None  # what the work left for an in-process waiter (e.g. the upload report)
    error: RagError | None = None  # why it failed, for an in-process waiter
    tracker: Tracker | None = None
    thread: threading.Thread | None = None
    trace_context: Any = None  # the trace of the request that started it


@dataclass
class Outcome:
    """What a job's work ended with: per-file outcomes, summary counts, and an error when it failed as a
    whole (an upload none of whose files could be used)."""

    files: list[FileOutcome]
    summary: dict[str, int]
    error_type: str | None = None
    error: str | None = None


# A job's work: reports progress to the tracker (which raises JobCancelled once cancelled), may leave a
# result on ``Running.result`` for an in-process waiter, and returns its outcome.
Work = Callable[[Tracker, Running], Outcome]


class JobRunner:
    """Runs jobs in background threads of this process, one at a time per index, with a heartbeat."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._running: dict[str, Running] = {}
        self._index_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._heart = threading.Thread(target=self._beat, name="job-heartbeat", daemon=True)
        self._heart.start()

    def start(self, job: Job, work: Work) -> Running:
        running = Running(job, trace_context=observe.carried())
        running.tracker = Tracker(self.store, job, running.cancelled)
        running.thread = threading.Thread(target=self._run, args=(running, work), name=f"job-{job.id[:8]}",
                                          daemon=True)
        with self._guard:
            self._running[job.id] = running
        running.thread.start()
        return running

    def running(self, job_id: str) -> Running | None:
        with self._guard:
            return self._running.get(job_id)

    def active_on(self, index: str) -> list[Job]:
        """The jobs of ``index`` this process is running or has queued."""
        with self._guard:
            return [r.job for r in self._running.values() if fold_case(r.job.index) == fold_case(index)]

    def cancel(self, job: Job) -> None:
        self.store.request_cancel(job)
        if (running := self.running(job.id)) is not None:
            running.cancelled.set()

    def cancel_or_forget(self, job: Job, wait_s: float = CANCEL_WAIT_S) -> Job:
        """Cancel a queued or running job and forget it (what it committed stays), or forget an ended one; the
        job as it ended. One that ends on its own while the cancel reaches it is forgotten all the same: a DELETE
        answered 200 leaves no record behind (schemathesis found one that did, 2026-12-02)."""
        if job.state not in ACTIVE:
            self.store.discard(job)
            return job
        running = self.running(job.id)
        self.cancel(job)
        if running is not None:  # this process runs it: it stops at its next page or file
            running.done.wait(wait_s)
            job = running.job
        else:  # another worker or replica runs it: it sees the request within a heartbeat
            job = self._stopped_elsewhere(job, wait_s)
        if job.state not in ACTIVE and job.state != CANCELLED:  # it ended before it saw the request
            self.store.discard(job)
        return job

    def _stopped_elsewhere(self, job: Job, wait_s: float) -> Job:
        """``job`` as its process left it once it stopped (its record gone: cancelled), or as it is after
        ``wait_s`` (still stopping)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                job = self.store.get(job.id)
            except JobNotFoundError:
                return msgspec.structs.replace(job, state=CANCELLED, error_type="cancelled", error=CANCELLED_MESSAGE)
            if job.state not in ACTIVE:
                return job
            time.sleep(0.2)
        return job

    def _lock(self, index: str) -> threading.Lock:
        with self._guard:
            return self._index_locks.setdefault(fold_case(index), threading.Lock())

    def _run(self, running: Running, work: Work) -> None:
        job, tracker = running.job, running.tracker
        assert tracker is not None
        try:
            with observe.continued(running.trace_context), self._lock(job.index):
                if running.cancelled.is_set():
                    raise JobCancelled("cancelled before it started")
                with tracker.lock:
                    job.state, job.started_at = RUNNING, time.time()
                tracker.save(force=True)
                outcome = work(tracker, running)
            files, summary, error_type, error = outcome.files, outcome.summary, outcome.error_type, outcome.error
            state = FAILED if error_type else DONE
        except JobCancelled:
            files, summary = [], {}
            if self._stopping.is_set():  # a server shutting down: the job can be run again after the restart
                state, error_type, error = INTERRUPTED, "interrupted", STOPPED
            else:
                state, error_type, error = CANCELLED, "cancelled", CANCELLED_MESSAGE
        except RagError as exc:
            running.error = exc
            files, summary, state, error_type, error = [], {}, FAILED, exc.error_type, exc.message
        except Exception as exc:  # noqa: BLE001 - a background thread: the job reports it, the log has the trace
            log.exception("job %s failed", job.id)
            files, summary, state, error_type, error = [], {}, FAILED, "internal_error", f"{type(exc).__name__}: {exc}"
        with tracker.lock:
            job.state, job.finished_at, job.error_type, job.error = state, time.time(), error_type, error
            job.files, job.summary, job.current_file = files or job.files, summary, None
            job.current_file_page = job.current_file_pages = 0
            if state == DONE:
                job.progress = 1.0
        try:
            if state == CANCELLED:  # DELETE /v1/jobs/{id}: the job goes, with its files
                self.store.discard(job)
            else:
                if state == DONE or (state == FAILED and files):
                    self.store.drop_inputs(job)  # kept where running it again could go otherwise
                with tracker.lock:
                    job.updated_at = time.time()
                self.store.save(job)  # the outcome: waited for, unlike progress
        finally:
            with self._guard:
                self._running.pop(job.id, None)
            running.done.set()

    def _beat(self) -> None:
        while not self._stopping.wait(HEARTBEAT_S):
            with self._guard:
                active = list(self._running.values())
            for running in active:
                try:
                    if self.store.cancel_requested(running.job.id):
                        running.cancelled.set()
                    if running.tracker is not None and running.job.state in ACTIVE:
                        running.tracker.save(force=True)
                except OSError as exc:  # a full disk: the job goes on, its record catches up later
                    log.warning("could not update job %s: %s", running.job.id, exc)

    def close(self, wait_s: float = 15.0) -> None:
        """Stop: running jobs roll back what they have not committed and read as interrupted."""
        self._stopping.set()
        with self._guard:
            active = list(self._running.values())
        for running in active:
            running.cancelled.set()
        deadline = time.monotonic() + wait_s
        for running in active:
            if running.thread is not None:
                running.thread.join(max(0.0, deadline - time.monotonic()))
