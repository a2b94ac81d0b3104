"""/v1/jobs: uploads and syncs that run in the background — follow (JSON or Server-Sent Events), cancel, re-run."""

from __future__ import annotations

from typing import AsyncIterator

import anyio
import anyio.to_thread
import msgspec
from litestar import Controller, Response, delete, get, post
from litestar.datastructures import State
from litestar.openapi import ResponseSpec
from litestar.params import FromPath

from api.auth import Context
from api.jobs import accepted, job_status
from api.openapi import errors, event_stream_only
from api.protocol import JobList, JobStatus
from api.routes.documents import IndexQuery
from api.sse import sse, sse_response
from api.state import AppState
from ingest.jobs import ACTIVE
from rag.core.errors import JobStateError

EVENTS_POLL_S = 0.25
KEEPALIVE_S = 15.0
JOB_EVENTS = """Server-Sent Events, one JSON `JobStatus` per `data:` line (as GET /v1/jobs/{id} answers), sent
whenever the job moves on; the stream ends after the event of its final state (done, failed, cancelled or
interrupted). A `: keep-alive` comment comes every 15 s while nothing changes."""


class JobsController(Controller):
    path = "/v1/jobs"
    tags = ["documents"]

    @get("", summary="Recent upload and sync jobs of an index, newest first (editors)", responses=errors(400, 404))
    async def list_jobs(self, state: State, context: Context, index: IndexQuery = None) -> JobList:
        app: AppState = state.app
        target = app.index(app.authorize(context, index, "editor", "/v1/jobs"))
        assert app.jobs is not None
        jobs = await anyio.to_thread.run_sync(lambda: app.jobs.list(target.name))
        return JobList(index=target.name, jobs=[job_status(j, app) for j in jobs])

    @get("/{job_id:str}", summary="A job's state and progress: files done of total, OCR pages, chunks, elapsed "
                                  "and ETA, each file's outcome", responses=errors(404))
    async def get_job(self, state: State, context: Context, job_id: FromPath[str]) -> JobStatus:
        app: AppState = state.app
        job = await anyio.to_thread.run_sync(app.visible_job, context, job_id, "/v1/jobs/{job_id}")
        return job_status(job, app)

    @get("/{job_id:str}/events", summary="A job's progress as Server-Sent Events, until it ends",
         responses={**errors(404), **event_stream_only(JOB_EVENTS)})
    async def job_events(self, state: State, context: Context, job_id: FromPath[str]) -> Response:
        app: AppState = state.app
        job = await anyio.to_thread.run_sync(app.visible_job, context, job_id, "/v1/jobs/{job_id}/events")
        assert app.jobs is not None
        jobs = app.jobs

        async def frames() -> AsyncIterator[bytes]:
            current, last, quiet = job, None, 0.0
            while True:
                shown = msgspec.structs.replace(current, updated_at=0.0)
                if shown != last:
                    last, quiet = shown, 0.0
                    yield sse(job_status(current, app))
                    if current.state not in ACTIVE:
                        return
                elif quiet >= KEEPALIVE_S:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
                await anyio.sleep(EVENTS_POLL_S)
                quiet += EVENTS_POLL_S
                current = await anyio.to_thread.run_sync(jobs.get, job_id)

        return sse_response(frames())

    @delete("/{job_id:str}", status_code=202, summary="Cancel a queued or running job: what it committed stays, "
            "nothing half-written (409 when it has already ended)", responses=errors(404, 409))
    async def cancel_job(self, state: State, context: Context, job_id: FromPath[str]) -> JobStatus:
        app: AppState = state.app
        job = await anyio.to_thread.run_sync(app.visible_job, context, job_id, "/v1/jobs/{job_id}")
        if job.state not in ACTIVE:
            raise JobStateError(f"job {job.id} has already ended ({job.state})")
        assert app.runner is not None
        app.runner.cancel(job)
        app.record(context, "cancel", route="/v1/jobs/{job_id}", index=job.index, job=job.id, outcome="requested")
        running = app.runner.running(job.id)
        if running is not None:  # this process runs it: answer once it has stopped (a second, at most a page)
            await anyio.to_thread.run_sync(running.done.wait, 30)
        return job_status(await anyio.to_thread.run_sync(app.jobs.get, job.id), app)

    @post("/{job_id:str}/retry", status_code=202, summary="Run an interrupted, failed or cancelled job again (a new "
          "job; an upload re-uses the files it kept)",
          responses={**errors(404, 409, 503), 202: ResponseSpec(JobStatus, description="the new job",
                                                                 generate_examples=False)})
    async def retry_job(self, state: State, context: Context, job_id: FromPath[str]) -> Response[JobStatus]:
        app: AppState = state.app
        job = await anyio.to_thread.run_sync(app.visible_job, context, job_id, "/v1/jobs/{job_id}/retry")
        running = await anyio.to_thread.run_sync(app.retry, job, context)
        return accepted(running.job, app)
