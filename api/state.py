"""What the app holds for its lifetime: settings, metrics, and once loaded, the models, the generation
scheduler and the one answer service (all built by the composition root, ``app.runtime``)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from litestar.types import Receive

from api.telemetry import IndexFigures, ServiceMetrics, every_source
from api.requests import cancel_on_disconnect
from api.auth import Authenticator, authorize
from ingest.jobs import INTERRUPTED, Job, JobRunner, JobStore, Outcome, Running, Tracker, Work, job_visible_to
from rag.core.records import DocumentRecord, FolderGroups
from ingest.sources import Source, due_sources, index_sources, source_visible_to
from rag.store import Store, StoredIndex
from rag.store.conversations import ConversationStore
from rag.store.keys import KeyStore
from ingest.uploads import IncomingFile, Uploads
from ingest.parameters import IngestParameters
from ingest.work import sync_work, upload_work
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, AnswerService, final_result
from rag.core.access import ALL_INDEXES, EVERY_DOCUMENT, Principal, RequestContext
from rag.store.audit_files import AuditLog, RefusalLimiter, question_fields
from rag.core.errors import (DocumentNotFoundError, ForbiddenError, JobNotFoundError, JobStateError, ModelError,
                             RagError, SourceBusyError, SourceUnavailableError)
from rag.core.names import validate_index_name
from rag.core.settings import Settings, parse_folder_groups
from rag.generation.scheduler import GenerationScheduler
from app.runtime import (Models, answer_service, delete_index, generation_backend, open_audit, open_conversations,
                         open_jobs,
                         open_keys, open_store, open_uploads)

log = logging.getLogger("rag.api")
BUSY_BACKOFF_S = 30.0
# A scheduled sync that failed without being recorded on its source (an index built with another embedder, an
# index locked by a CLI ingest) is tried again after its interval, at least this long: not every 2 s.
FAILED_BACKOFF_S = 60.0  # a source another replica is syncing is looked at again after this
PRUNE_EVERY_S = 3600.0  # finished jobs older than a week are removed at start and then hourly
# The server's own scheduled syncs: they run what an operator set up (`rag sources add --every`).
SCHEDULE = Principal("schedule", ((ALL_INDEXES, "editor"),), EVERY_DOCUMENT, kind="system")
SOURCE_POLL_S = 2.0  # how often the server looks for a source whose scheduled sync is due (a few SQLite reads)


@dataclass
class AppState:
    settings: Settings
    metrics: ServiceMetrics
    status: str = "loading"  # loading | ready | failed
    error: str | None = None
    models: Models | None = None
    scheduler: GenerationScheduler | None = None
    answers: AnswerService | None = None
    store: Store | None = None
    uploads: Uploads | None = None
    keys: KeyStore | None = None
    auth: Authenticator | None = None
    audit: AuditLog | None = None
    refusals: RefusalLimiter = field(default_factory=RefusalLimiter)
    jobs: JobStore | None = None
    conversations: ConversationStore | None = None
    runner: JobRunner | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    busy_until: dict[str, float] = field(default_factory=dict)  # source id -> when to try a busy source again

    def __post_init__(self) -> None:
        self.store = open_store(self.settings)
        if swept := self.store.sweep():
            log.info("removed what deletes and restores left in the store: %s", ", ".join(swept))
        self.uploads = open_uploads(self.settings)
        self.uploads.remove_stale_staged()
        self.jobs = open_jobs(self.settings)
        self.jobs.prune()
        interrupted = [j for j in self.jobs.list(limit=1000) if j.state == INTERRUPTED and j.finished_at
                       and time.time() - j.finished_at < 24 * 3600]
        if interrupted:
            log.warning("%d job(s) were interrupted by a stop of the server: %s; see them with GET /v1/jobs and "
                        "run them again with POST /v1/jobs/{id}/retry (or the documents page)", len(interrupted),
                        ", ".join(f"{j.kind} {j.id} on {j.index}" for j in interrupted))
        self.runner = JobRunner(self.jobs)
        self.keys = open_keys(self.settings)
        self.auth = Authenticator.from_settings(self.settings, self.keys)
        self.audit = open_audit(self.settings)
        self.conversations = open_conversations(self.settings)
        self.metrics.watch(self.index_figures)

    def index_figures(self) -> IndexFigures:
        """What the index and source gauges report (blocking reads): the default index's totals as an operator
        sees them (metrics need a key), and every source of every index; what cannot be read now is left out."""
        assert self.store is not None
        try:
            summary: tuple[str, int, int] | None = self.summary(None, RequestContext.local())
        except RagError:
            summary = None
        return IndexFigures(summary, every_source(self.store))

    def load(self) -> None:
        """Load models once (called from the lifespan, off the event loop)."""
        try:
            self.models = Models.load(self.settings)
            generator, self.scheduler = self.models.serving_generator(self.settings.max_queue)
            self.models.warm_up(self.settings.answer_examples)
            self.answers = answer_service(self.settings, self.models, generator=generator, store=self.store,
                                          instruments=self.metrics.instruments)
            self.status = "ready"
            threading.Thread(target=self.sync_on_schedule, name="source-sync", daemon=True).start()
        except ModelError as exc:
            self.status, self.error = "failed", exc.message
        except Exception as exc:  # noqa: BLE001 - it runs in a background thread: report it on /healthz
            log.exception("loading the models failed")
            self.status, self.error = "failed", f"loading the models failed: {exc}"

    def sync_on_schedule(self) -> None:
        """Sync each source with an interval (`rag sources add --every`) when it is due, one at a time. A sync
        another process is running holds the index's writer: this one waits for the next round."""
        pruned_at = time.monotonic()
        while not self.stopping.wait(SOURCE_POLL_S):
            try:
                if self.answers is not None:
                    self.answers.forget(None)  # an index another process deleted: let go of its files
                if time.monotonic() - pruned_at > PRUNE_EVERY_S:
                    pruned_at = time.monotonic()
                    assert self.jobs is not None and self.store is not None
                    self.jobs.prune()
                    self.store.sweep()
                names = self.store.names()
            except Exception:  # noqa: BLE001 - a background loop: log, and try again next round
                log.exception("looking after jobs and indexes failed")
                continue
            for name in names:  # one index that cannot be read stops no other's syncs
                try:
                    target = self.index(name)
                    for source in due_sources(index_sources(target), time.time()):
                        if self.stopping.is_set():
                            return
                        if self.busy_until.get(source.id, 0.0) <= time.time():
                            self._scheduled_sync(target, source)
                except Exception:  # noqa: BLE001 - a background loop: log, and try again next round
                    log.exception("scheduled source sync of index %s failed", name)

    def _scheduled_sync(self, target: StoredIndex, source) -> None:
        running = self.start_sync(target, source.id, RequestContext(SCHEDULE), principal="schedule")
        while not running.done.wait(1.0):
            if self.stopping.is_set():
                return
        summary, exc = running.result, running.error
        if isinstance(exc, SourceBusyError):  # another replica syncs it: no job to show, look again later
            assert self.jobs is not None
            self.jobs.discard(running.job)
            self.busy_until[source.id] = time.time() + BUSY_BACKOFF_S
            log.debug("scheduled sync of %s: %s", source.display_path, exc.message)
            return
        if exc is not None or summary is None:
            if not isinstance(exc, SourceUnavailableError):  # that one is recorded on the source (not due again)
                self.busy_until[source.id] = time.time() + max(FAILED_BACKOFF_S, source.every_s or 0)
            message, error = (exc.message, exc.error_type) if exc else (running.job.error, running.job.error_type)
            log.warning("scheduled sync of %s: %s", source.display_path, message,
                        extra={"fields": {"source": source.id, "index": target.name, "error": error,
                                          "job": running.job.id}})
            return
        last = summary.source.last
        if last is not None and last.status == "ok" and not (last.added or last.updated or last.renamed
                                                               or last.removed):
            assert self.jobs is not None  # nothing happened: the source's record says so, no job to keep
            self.jobs.discard(running.job)
        log.info("scheduled sync of %s", source.display_path, extra={"fields": {
            "source": source.id, "index": target.name, "status": last.status if last else "ok",
            "added": summary.ingest.count("added"), "updated": summary.ingest.count("updated"),
            "renamed": len(summary.renamed), "removed": len(summary.removed), "seconds": round(summary.seconds, 3)}})

    # ------------------------------------------------------------------ jobs: uploads and syncs
    def ingest_parameters(self) -> IngestParameters:
        return IngestParameters.from_settings(self.settings, self.require_ready().embedder)

    def start_upload(self, target: StoredIndex, context: RequestContext, files: list[IncomingFile],
                     groups: list[str] | None) -> Running:
        """Queue an upload as a job (its names checked first: a bad upload is refused before any work). An
        uploader gives documents only groups it holds, and stores where a document it cannot see is never met
        (``ingest.uploads.placement``)."""
        assert self.jobs is not None and self.runner is not None and self.uploads is not None
        if groups is not None and not context.principal.may_assign(groups):
            self.record(context, "refused", route="/v1/documents", index=target.name, outcome="refused",
                        groups_needed=sorted(set(groups)))
            raise ForbiddenError("this key may give documents only the groups it holds")
        parameters = self.ingest_parameters()
        scope = context.groups
        self.uploads.check(target, files, scope)
        job = self.jobs.create("upload", target.name, context.principal.name, [(f.name, f.content) for f in files],
                               groups, starter=context.principal.key, scope=scope)
        return self._start(job, upload_work(self.jobs, self.uploads, target, parameters, groups, scope), context)

    def start_sync(self, target: StoredIndex, source_id: str, context: RequestContext,
                   principal: str | None = None) -> Running:
        assert self.jobs is not None
        parameters = self.ingest_parameters()
        job = self.jobs.create("sync", target.name, principal or context.principal.name, source=source_id,
                               starter=context.principal.key, scope=context.groups)
        return self._start(job, sync_work(target, source_id, parameters), context)

    def retry(self, job: Job, context: RequestContext) -> Running:
        """Run an interrupted, failed or cancelled job again, as a new job (an upload takes over its files)."""
        assert self.jobs is not None
        if not self.jobs.can_retry(job):
            raise JobStateError(f"job {job.id} is {job.state}" + (
                "" if job.state not in ("failed", "cancelled", "interrupted") else
                " and no longer has its uploaded files; upload them again"))
        target = self.index(job.index)
        parameters = self.ingest_parameters()
        if job.kind == "sync":
            new = self.jobs.create("sync", job.index, context.principal.name, source=job.source, retry_of=job.id,
                                   starter=job.starter, scope=job.scope_groups())
            return self._start(new, sync_work(target, job.source or "", parameters), context)
        new = self.jobs.create("upload", job.index, context.principal.name, groups=job.groups, retry_of=job.id,
                               starter=job.starter, scope=job.scope_groups())
        new.names = job.names
        self.jobs.take_inputs(job, new)
        self.jobs.save(new)
        # As its first uploader would have stored it: where it goes never depends on who runs it again.
        return self._start(new, upload_work(self.jobs, self.uploads, target, parameters, job.groups,
                                            job.scope_groups()), context)

    def visible_job(self, context: RequestContext, job_id: str, route: str) -> Job:
        """A job the principal may follow and control (editors of its index: its starter, or one who sees
        everything it touched); any other is "not found", like a missing one."""
        assert self.jobs is not None
        job = self.jobs.get(job_id)
        try:
            authorize(context, job.index, "editor", self.settings.index)
        except ForbiddenError:
            self.record(context, "refused", route=route, index=job.index, outcome="refused", role_needed="editor")
            raise JobNotFoundError(f"no job {job_id!r}") from None
        if not self.visible_jobs(context, job.index, [job]):
            raise JobNotFoundError(f"no job {job_id!r}")
        return job

    def visible_jobs(self, context: RequestContext, index: str, jobs: list[Job]) -> list[Job]:
        """``jobs`` of ``index`` that ``context``'s principal may follow (``ingest.jobs.job_visible_to``)."""
        if context.principal.unrestricted:
            return jobs
        target = self.index(index)
        documents = {d.id: d for d in self._all_documents(target)}
        sources = {s.id: s for s in self.visible_sources(target, context, list(documents.values()))}
        return [j for j in jobs if job_visible_to(context.principal, j, documents,
                                                  j.kind != "sync" or (j.source or "") in sources)]

    def visible_sources(self, target: StoredIndex, context: RequestContext,
                        documents: list[DocumentRecord] | None = None) -> list[Source]:
        """The sources of ``target`` its principal may see (``ingest.sources.source_visible_to``)."""
        sources = index_sources(target)
        if context.principal.unrestricted:
            return sources
        documents = self._all_documents(target) if documents is None else documents
        folder_groups = FolderGroups.of(parse_folder_groups(self.settings.folder_groups))
        return [s for s in sources if source_visible_to(context.principal, s, documents, folder_groups)]

    @staticmethod
    def _all_documents(target: StoredIndex) -> list[DocumentRecord]:
        if not target.exists():
            return []
        reader = target.reader()
        try:
            return reader.documents()
        finally:
            reader.close()

    def _start(self, job: Job, work: Work, context: RequestContext) -> Running:
        """Start ``job`` with one audit record when it ends (what an upload or a sync did, or why not)."""
        assert self.runner is not None
        event, route = ("upload", "/v1/documents") if job.kind == "upload" else ("sync", "/v1/sources/{id}/sync")

        def audited(tracker: Tracker, running: Running) -> Outcome:
            fields: dict[str, Any] = {"route": route, "index": job.index, "job": job.id}
            if job.source:
                fields["source"] = job.source
            try:
                outcome = work(tracker, running)
            except RagError as exc:
                self.record(context, event, **fields, outcome="error", error=exc.error_type)
                raise
            self.record(context, event, **fields, outcome="refused" if outcome.error_type else "accepted",
                        **outcome.summary, files=[{"path": f.path, "status": f.status, "document_id": f.document_id,
                                                   "chunks": f.chunks} for f in outcome.files[:100]])
            return outcome

        return self.runner.start(job, audited)

    def close(self) -> None:
        self.stopping.set()
        self.metrics.freeze()  # the metrics exported at shutdown, after the store closed, have the last reading
        if self.runner is not None:
            self.runner.close()
        if self.scheduler is not None:
            self.scheduler.close()
        if self.answers is not None:
            self.answers.close()
        if self.store is not None:
            self.store.close()
        if self.keys is not None:
            self.keys.close()
        if self.conversations is not None:
            self.conversations.close()
        if self.audit is not None:
            for summary in self.refusals.flush():
                self._record_refusal_summary(summary)
            self.audit.close()

    def service(self) -> AnswerService:
        if self.status != "ready" or self.answers is None:
            raise ModelError(self.error or "models are still loading")
        return self.answers

    def require_ready(self) -> Models:
        self.service()
        assert self.models is not None
        return self.models

    def delete_index(self, name: str) -> None:
        """Delete an index, its own retriever closed first (Windows removes no file a process holds)."""
        assert self.store is not None
        if self.answers is not None:
            self.answers.forget(name)
        delete_index(self.settings, self.store, name)

    def index(self, name: str | None) -> StoredIndex:
        assert self.store is not None
        return self.store.index(validate_index_name(name or self.settings.index))

    def visible_documents(self, target: StoredIndex, context: RequestContext) -> list[DocumentRecord]:
        """The documents of ``target`` that ``context``'s principal may see (all of them without groups)."""
        if not target.exists():
            return []
        reader = target.reader()
        try:
            return [d for d in reader.documents() if context.principal.sees(d.groups)]
        finally:
            reader.close()

    def visible_document(self, target: StoredIndex, context: RequestContext, id_or_path: str) -> DocumentRecord:
        """One document by id or path; one the principal may not see is "not found", like a missing one."""
        reader = target.reader()
        try:
            record = reader.find_document(id_or_path)
        finally:
            reader.close()
        if record is None or not context.principal.sees(record.groups):
            raise DocumentNotFoundError(f"no document {id_or_path!r} in index {target.name!r}")
        return record

    def summary(self, name: str | None, context: RequestContext) -> tuple[str, int, int]:
        """(index, documents, chunks) as ``context``'s principal sees them: a document outside their groups
        is not counted (for /healthz and /v1/indexes alike)."""
        target = self.index(name)
        if not target.exists():
            return target.name, 0, 0
        if context.groups is None:
            reader = target.reader()
            try:
                info = reader.info()
            finally:
                reader.close()
            return info.name, info.documents, info.chunks
        documents = self.visible_documents(target, context)
        return target.name, len(documents), sum(d.chunks for d in documents)

    # ------------------------------------------------------------------ who may, and what happened
    def authorize(self, context: RequestContext, index: str | None, role: str, route: str) -> str:
        """The index a request acts on, once ``context`` may act there as ``role`` (a refusal is audited)."""
        try:
            return authorize(context, index, role, self.settings.index,
                             resolve=lambda name: self.index(name).name if self.store is not None else name)
        except ForbiddenError:
            self.record(context, "refused", route=route, index=index or self.settings.index, outcome="refused",
                        role_needed=role)
            raise

    def record(self, context: RequestContext, event: str, **fields: Any) -> None:
        """One audit record (nothing without an audit trail)."""
        if self.audit is not None:
            # The kind keeps names of two kinds apart: the key "dana" is not the signed-in "dana" (jwt).
            self.audit.append(event, principal=context.principal.name, principal_kind=context.principal.kind,
                              request_id=context.request_id, **fields)

    def record_refusal(self, reason: str, status: int, method: str, path: str, client: str,
                       **fields: str | None) -> None:
        """A refusal before authentication (401, ``forbidden_host``, ``cross_origin``): one ``refused`` record,
        rate-limited (``RefusalLimiter``). Never the token presented; header values cut to 200 characters."""
        if self.audit is None:
            return
        admitted, due = self.refusals.admit(reason, client)
        for summary in due:
            self._record_refusal_summary(summary)
        if admitted:
            self.audit.append("refused", principal_kind="none", route=path[:200], method=method, outcome="refused",
                              reason=reason, status=status, client=client,
                              **{k: v[:200] for k, v in fields.items() if v is not None})

    def _record_refusal_summary(self, summary: dict[str, Any]) -> None:
        if self.audit is not None:
            self.audit.append("refused", principal_kind="none", outcome="refused", reason=summary["reason"],
                              client=summary["client"], suppressed=summary["suppressed"],
                              window_s=self.refusals.window_s)

    def record_question(self, question: str) -> dict[str, str]:
        return question_fields(question, self.settings.audit_questions)

    def _record_answer(self, context: RequestContext | None, route: str, request: AnswerRequest,
                       result: AnswerResult | None, error: RagError | None, started: float) -> None:
        if context is None:
            return
        fields: dict[str, Any] = {"route": route, "index": request.index or self.settings.index,
                                  **self.record_question(request.question),
                                  "latency_ms": round((time.perf_counter() - started) * 1000, 1)}
        if result is not None:
            fields.update(outcome="abstained" if result.abstained else "answered", model=result.model,
                          retrieved=[{"chunk_id": s.chunk_id, "document_id": s.document_id, "score": s.score}
                                     for s in result.sources],
                          cited=[{"number": s.number, "chunk_id": s.chunk_id, "document_id": s.document_id,
                                  "path": s.path} for s in result.sources if s.number in result.citations],
                          prompt_tokens=result.metrics.prompt_tokens, output_tokens=result.metrics.output_tokens,
                          abstain_reason=result.abstain_reason)
        else:
            fields.update(outcome="error", error=error.error_type if error is not None else "client_left")
        self.record(context, "answer", **fields)

    # ------------------------------------------------------------------ answers, observed
    async def events(self, request: AnswerRequest, context: RequestContext | None = None,
                     route: str = "") -> AsyncIterator[str | AnswerResult]:
        """The answer service's stream, with the server's metrics recorded (the tokens of a stream closed
        early too) and, with a ``context``, one audit record."""
        started = time.perf_counter()
        result: AnswerResult | None = None
        error: RagError | None = None
        if context is not None:  # the asker travels with the request to retrieval (their document groups)
            request = dataclasses.replace(request, context=context)
        try:
            async for item in self._observed(request):
                if isinstance(item, AnswerResult):
                    result = item
                yield item
        except RagError as exc:
            error = exc
            if exc.status_code == 503:
                self.metrics.rejected(exc.error_type)
            raise
        finally:
            self._record_answer(context, route, request, result, error, started)

    async def _observed(self, request: AnswerRequest) -> AsyncIterator[str | AnswerResult]:
        service = self.service()
        depth = (lambda: self.scheduler.depth) if self.scheduler is not None else (lambda: 0)
        self.metrics.queue(depth() + 1)
        stream = service.stream(request)  # its tokens, a stream closed early's too, go to gen_ai.client.token.usage
        try:
            async for item in stream:
                if isinstance(item, AnswerResult):
                    self.metrics.observe_answer(item.metrics.ttft_ms, item.metrics.total_ms,
                                                item.metrics.output_tokens)
                yield item
        finally:
            await stream.aclose()
            self.metrics.queue(depth())

    @property
    def backend(self) -> tuple[str, str | None]:
        """The generation backend's name, and the host of a remote one."""
        return generation_backend(self.settings)

    async def answer(self, request: AnswerRequest, receive: Receive | None = None,
                     context: RequestContext | None = None, route: str = "") -> AnswerResult:
        """The whole answer; with the request's ASGI ``receive``, a client that disconnects cancels it."""
        work = final_result(self.events(request, context, route))
        return await (work if receive is None else cancel_on_disconnect(receive, work))
