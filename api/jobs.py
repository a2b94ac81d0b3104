"""Jobs on the wire: a job record as ``JobStatus``, waiting a little for a job, and the 202 that hands one over."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import anyio.to_thread
from litestar import Response

from api.protocol import ErrorBody, JobFileResult, JobStatus
from app.services import Jobs
from ingest.jobs import Job, Running


def _iso(when: float | None) -> str | None:
    return None if when is None else datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")


def job_status(job: Job, jobs: Jobs) -> JobStatus:
    now = time.time()
    return JobStatus(
        id=job.id, kind=job.kind, index=job.index, state=job.state, progress=job.progress,
        files_total=job.files_total, files_done=job.files_done, chunks=job.chunks, ocr_pages_done=job.ocr_pages_done,
        current_file=job.current_file, current_file_page=job.current_file_page,
        current_file_pages=job.current_file_pages, created_at=_iso(job.created_at) or "",
        started_at=_iso(job.started_at), finished_at=_iso(job.finished_at), elapsed_s=round(job.elapsed_s(now), 2),
        eta_s=job.eta_s(now),
        files=[JobFileResult.of(f) for f in job.files],
        summary=job.summary, error=ErrorBody(type=job.error_type, message=job.error or "") if job.error_type else None,
        names=job.names, source=job.source, retry_of=job.retry_of, can_retry=jobs.can_retry(job))


async def finished(running: Running, wait_s: float) -> bool:
    """Whether ``running`` finishes within ``wait_s`` (waited for off the event loop)."""
    if wait_s <= 0:
        return running.done.is_set()
    return await anyio.to_thread.run_sync(running.done.wait, wait_s)


def accepted(job: Job, jobs: Jobs) -> Response[JobStatus]:
    """202: the work goes on as ``job``; follow it at Location."""
    return Response(job_status(job, jobs), status_code=202, headers={"Location": f"/v1/jobs/{job.id}"})
