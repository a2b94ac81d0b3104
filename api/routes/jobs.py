"""/v1/jobs: uploads and syncs that run in the background — follow (JSON or Server-Sent Events), cancel, re-run."""

from __future__ import annotations

from typing import AsyncIterator

import anyio
import anyio.to_thread
import msgspec
from litestar import Controller, Response, delete, get, post
from litestar.openapi import ResponseSpec
from litestar.params import FromPath

from api.auth import Context
from api.jobs import accepted, job_status
from api.openapi import JOB_EVENTS, errors, event_stream_only
from api.protocol import JobList, JobStatus
from api.routes.documents import IndexQuery
from api.sse import sse, sse_response
from api.state import ServicesDep
from ingest.jobs import ACTIVE, CANCELLED, CANCELLED_MESSAGE
from rag.core.errors import JobNotFoundError

EVENTS_POLL_S = 0.25
KEEPALIVE_S = 15.0


class JobsController(Controller):
    path = "/v1/jobs"
    tags = ["documents"]

    @get("", summary="Recent upload and sync jobs of an index, newest first (editors)", responses=errors(400, 404))
    async def list_jobs(self, services: ServicesDep, context: Context, index: IndexQuery = None) -> JobList:
        name = services.documents.authorized(context, index, "editor", "/v1/jobs")
        jobs = await anyio.to_thread.run_sync(services.jobs.of_index, context, name)
        return JobList(index=name.value, jobs=[job_status(j, services.jobs) for j in jobs])

    @get("/{job_id:str}", summary="A job's state and progress: files done of total, OCR pages, chunks, elapsed "
                                  "and ETA, each file's outcome", responses=errors(400, 404))
    async def get_job(self, services: ServicesDep, context: Context, job_id: FromPath[str]) -> JobStatus:
        job = await anyio.to_thread.run_sync(services.jobs.visible_job, context, job_id, "/v1/jobs/{job_id}")
        return job_status(job, services.jobs)

    @get("/{job_id:str}/events", summary="A job's progress as Server-Sent Events, until it ends",
         responses={**errors(400, 404), **event_stream_only(JOB_EVENTS)})
    async def job_events(self, services: ServicesDep, context: Context, job_id: FromPath[str]) -> Response:
        job = await anyio.to_thread.run_sync(services.jobs.visible_job, context, job_id, "/v1/jobs/{job_id}/events")
        service, jobs = services.jobs, services.jobs.store

        async def frames() -> AsyncIterator[bytes]:
            current, last, quiet = job, None, 0.0
            while True:
                shown = msgspec.structs.replace(current, updated_at=0.0)
                if shown != last:
                    last, quiet = shown, 0.0
                    yield sse(job_status(current, service))
                    if current.state not in ACTIVE:
                        return
                elif quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
                await anyio.sleep(EVENTS_POLL_S)
                quiet += EVENTS_POLL_S
                try:
                    current = await anyio.to_thread.run_sync(jobs.get, job_id)
                except JobNotFoundError:  # deleted meanwhile: it was cancelled
                    yield sse(job_status(msgspec.structs.replace(
                        current, state=CANCELLED, error_type="cancelled", error=CANCELLED_MESSAGE), service))
                    return

        return sse_response(frames())

    @delete("/{job_id:str}", status_code=200, summary="Cancel a queued or running job and forget it: what it "
            "committed stays, nothing half-written; an ended job (an interrupted one with its kept files) is "
            "forgotten", responses=errors(400, 404))
    async def delete_job(self, services: ServicesDep, context: Context, job_id: FromPath[str]) -> JobStatus:
        job = await anyio.to_thread.run_sync(services.jobs.visible_job, context, job_id, "/v1/jobs/{job_id}")
        job = await anyio.to_thread.run_sync(services.jobs.cancel_or_forget, job)
        services.audit.record(context, "cancel" if job.state == CANCELLED else "forget", route="/v1/jobs/{job_id}",
                              index=job.index, job=job.id, outcome=job.state)
        return job_status(job, services.jobs)

    @post("/{job_id:str}/retry", status_code=202, summary="Run an interrupted, failed or cancelled job again (a new "
          "job; an upload re-uses the files it kept)",
          responses={**errors(400, 404, 409, 503), 202: ResponseSpec(JobStatus, description="the new job",
                                                                 generate_examples=False)})
    async def retry_job(self, services: ServicesDep, context: Context, job_id: FromPath[str]) -> Response[JobStatus]:
        job = await anyio.to_thread.run_sync(services.jobs.visible_job, context, job_id, "/v1/jobs/{job_id}/retry")
        running = await anyio.to_thread.run_sync(services.jobs.retry, job, context)
        return accepted(running.job, services.jobs)
