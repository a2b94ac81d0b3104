"""Uploads and syncs as jobs: started, run again, followed by those who may, each with one audit record when
it ends (what it did, or why not)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from app.services.access import require_role
from app.services.audit import Auditor
from app.services.documents import Documents
from app.services.sources import Sources
from ingest.jobs import INTERRUPTED, Job, JobRunner, JobStore, Outcome, Running, Tracker, Work, job_visible_to
from ingest.parameters import IngestParameters
from ingest.uploads import IncomingFile
from ingest.work import sync_work, upload_work
from rag.core.access import RequestContext
from rag.core.errors import ForbiddenError, JobNotFoundError, JobStateError, RagError
from rag.core.names import IndexName, index_name
from rag.core.settings import Settings
from rag.embedder import Embedder
from rag.store import StoredIndex


def interrupted_jobs(store: JobStore, within_s: float = 24 * 3600) -> list[Job]:
    """Jobs a stop of the server interrupted within ``within_s``."""
    return [j for j in store.list(limit=1000) if j.state == INTERRUPTED and j.finished_at
            and time.time() - j.finished_at < within_s]


@dataclass
class Jobs:
    settings: Settings
    store: JobStore
    runner: JobRunner
    documents: Documents
    sources: Sources
    audit: Auditor
    embedder: Callable[[], Embedder]  # the loaded embedder (ModelError while the models load)

    def parameters(self) -> IngestParameters:
        return IngestParameters.from_settings(self.settings, self.embedder())

    # ------------------------------------------------------------------ starting
    def start_upload(self, target: StoredIndex, context: RequestContext, files: list[IncomingFile],
                     groups: list[str] | None) -> Running:
        """Queue an upload as a job (its names checked first: a bad upload is refused before any work). An
        uploader gives documents only groups it holds, and stores where a document it cannot see is never met
        (``ingest.uploads.placement``)."""
        if groups is not None and not context.principal.may_assign(groups):
            self.audit.record(context, "refused", route="/v1/documents", index=target.name, outcome="refused",
                              groups_needed=sorted(set(groups)))
            raise ForbiddenError("this key may give documents only the groups it holds")
        parameters = self.parameters()
        scope = context.groups
        uploads = self.documents.uploads
        uploads.check(target, files, scope)
        job = self.store.create("upload", target.name, context.principal.name, [(f.name, f.content) for f in files],
                                groups, starter=context.principal.key, scope=scope)
        return self._start(job, upload_work(self.store, uploads, target, parameters, groups, scope), context)

    def start_sync(self, target: StoredIndex, source_id: str, context: RequestContext,
                   principal: str | None = None) -> Running:
        parameters = self.parameters()
        job = self.store.create("sync", target.name, principal or context.principal.name, source=source_id,
                                starter=context.principal.key, scope=context.groups)
        return self._start(job, sync_work(target, source_id, parameters), context)

    def retry(self, job: Job, context: RequestContext) -> Running:
        """Run an interrupted, failed or cancelled job again, as a new job (an upload takes over its files)."""
        if not self.store.can_retry(job):
            raise JobStateError(f"job {job.id} is {job.state}" + (
                "" if job.state not in ("failed", "cancelled", "interrupted") else
                " and no longer has its uploaded files; upload them again"))
        target = self.documents.index(index_name(job.index, self.settings.index))
        parameters = self.parameters()
        if job.kind == "sync":
            new = self.store.create("sync", job.index, context.principal.name, source=job.source, retry_of=job.id,
                                    starter=job.starter, scope=job.scope_groups())
            return self._start(new, sync_work(target, job.source or "", parameters), context)
        new = self.store.create("upload", job.index, context.principal.name, groups=job.groups, retry_of=job.id,
                                starter=job.starter, scope=job.scope_groups())
        new.names = job.names
        self.store.take_inputs(job, new)
        self.store.save(new)
        # As its first uploader would have stored it: where it goes never depends on who runs it again.
        return self._start(new, upload_work(self.store, self.documents.uploads, target, parameters, job.groups,
                                            job.scope_groups()), context)

    def _start(self, job: Job, work: Work, context: RequestContext) -> Running:
        """Start ``job`` with one audit record when it ends (what an upload or a sync did, or why not)."""
        event, route = ("upload", "/v1/documents") if job.kind == "upload" else ("sync", "/v1/sources/{id}/sync")
        audit = self.audit

        def audited(tracker: Tracker, running: Running) -> Outcome:
            fields: dict[str, Any] = {"route": route, "index": job.index, "job": job.id}
            if job.source:
                fields["source"] = job.source
            try:
                outcome = work(tracker, running)
            except RagError as exc:
                audit.record(context, event, **fields, outcome="error", error=exc.error_type)
                raise
            audit.record(context, event, **fields, outcome="refused" if outcome.error_type else "accepted",
                         **outcome.summary, files=[{"path": f.path, "status": f.status, "document_id": f.document_id,
                                                    "chunks": f.chunks} for f in outcome.files[:100]])
            return outcome

        return self.runner.start(job, audited)

    # ------------------------------------------------------------------ following
    def visible_job(self, context: RequestContext, job_id: str, route: str) -> Job:
        """A job the principal may follow and control (editors of its index: its starter, or one who sees
        everything it touched); any other is "not found", like a missing one."""
        job = self.store.get(job_id)
        name = index_name(job.index, self.settings.index)
        try:
            require_role(context, name, "editor", name)
        except ForbiddenError:
            self.audit.record(context, "refused", route=route, index=job.index, outcome="refused",
                              role_needed="editor")
            raise JobNotFoundError(f"no job {job_id!r}") from None
        if not self.visible_jobs(context, name, [job]):
            raise JobNotFoundError(f"no job {job_id!r}")
        return job

    def visible_jobs(self, context: RequestContext, index: IndexName, jobs: list[Job]) -> list[Job]:
        """``jobs`` of ``index`` that ``context``'s principal may follow (``ingest.jobs.job_visible_to``)."""
        if context.principal.unrestricted:
            return jobs
        target = self.documents.index(index)
        documents = {d.id: d for d in Documents.all_documents(target)}
        sources = {s.id: s for s in self.sources.visible(target, context, list(documents.values()))}
        return [j for j in jobs if job_visible_to(context.principal, j, documents,
                                                  j.kind != "sync" or (j.source or "") in sources)]

    def of_index(self, context: RequestContext, index: IndexName) -> list[Job]:
        """The recent jobs of ``index`` the principal may follow, newest first."""
        return self.visible_jobs(context, index, self.store.list(index.value))

    def can_retry(self, job: Job) -> bool:
        return self.store.can_retry(job)

    def cancel_or_forget(self, job: Job) -> Job:
        """DELETE /v1/jobs/{id}: ``ingest.jobs.JobRunner.cancel_or_forget``."""
        return self.runner.cancel_or_forget(job)

    def active_on(self, index: str) -> list[Job]:
        return self.runner.active_on(index)

    def close(self) -> None:
        self.runner.close()
