"""Long uploads and syncs as jobs, against a real `rag serve` with the product's default job_wait_s: a
200-page scanned PDF answers 202 at once and its job reports monotone progress to completion (Server-Sent
Events); a cancelled one leaves no document and no stored file; a server killed mid-job shows the job as
interrupted after the restart, and it runs again to completion; a sync runs as a job too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from format_fixtures import make_long_scan
from helpers import cli_env, server_and_process
from rag.core.errors import JobNotFoundError
from rag.core.settings import PROJECT_ROOT, Settings

DEFAULT_JOB_WAIT_S = str(Settings.__dataclass_fields__["job_wait_s"].default)
SMALL_NOTE = b"# Owl notes\n\nThe Kestrel Club meets on Tuesdays in the old mill.\n"


@pytest.fixture(scope="module")
def scan200(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return make_long_scan(tmp_path_factory.mktemp("scans") / "survey.pdf", 200).read_bytes()


def upload(base: str, name: str, content: bytes, **params: str) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = httpx.post(f"{base}/v1/documents", params=params, files=[("data", (name, content))], timeout=60)
    return response, time.perf_counter() - started


def job_events(base: str, job_id: str) -> list[dict]:
    """Every event of the job's Server-Sent Events stream, until it ends."""
    events = []
    with httpx.stream("GET", f"{base}/v1/jobs/{job_id}/events", timeout=120) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
    return events


def wait_for(base: str, job_id: str, condition, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()
        if condition(job):
            return job
        time.sleep(0.1)
    pytest.fail(f"job {job_id} never got there: {job}")


def documents(base: str) -> dict[str, dict]:
    return {Path(d["path"]).name: d for d in httpx.get(f"{base}/v1/documents", timeout=10).json()["documents"]}


def assert_monotone(events: list[dict], *fields: str) -> None:
    for field in fields:
        values = [e[field] for e in events]
        assert values == sorted(values), (field, values)


def test_a_long_scan_is_a_job_with_progress_and_a_cancelled_one_leaves_nothing(settings: Settings, tmp_path: Path,
                                                                                scan200: bytes):
    home = tmp_path / "home"
    with server_and_process(settings, home, tmp_path / "server.log", RAG_JOB_WAIT_S=DEFAULT_JOB_WAIT_S) as (base, _):
        small, small_s = upload(base, "owls.md", SMALL_NOTE)
        assert small.status_code == 200, small.text  # small uploads finish inline, as before
        assert small.json()["files"][0]["status"] == "added" and small_s < 1.5

        response, seconds = upload(base, "survey.pdf", scan200)
        assert response.status_code == 202, response.text
        # job_wait_s (0.8 s) and the upload itself: a fresh clone's Windows-rules pass took 1.0035 s on 2 cores
        # while the scan's OCR began (2026-12-02); the work itself takes minutes
        assert seconds < float(DEFAULT_JOB_WAIT_S) + 0.7, f"the 202 took {seconds:.2f} s"
        job = response.json()
        assert response.headers["location"] == f"/v1/jobs/{job['id']}"
        assert job["kind"] == "upload" and job["state"] in ("queued", "running") and job["index"] == "default"

        events = job_events(base, job["id"])
        final = events[-1]
        assert final["state"] == "done", final
        assert final["progress"] == 1.0 and final["files_done"] == final["files_total"] == 1
        assert final["ocr_pages_done"] == 200 and final["eta_s"] is None and final["elapsed_s"] > 0
        [outcome] = final["files"]
        assert outcome["file"] == "survey.pdf" and outcome["status"] == "added" and outcome["chunks"] > 0
        assert final["summary"]["added"] == 1 and final["summary"]["chunks"] == outcome["chunks"]
        reading = [e for e in events if e["state"] == "running" and e["current_file_pages"] == 200]
        assert len(reading) >= 5, f"only {len(reading)} progress events while the scan was read"
        assert all(e["current_file"] == "survey.pdf" for e in reading)
        assert_monotone(events, "progress", "files_done", "ocr_pages_done")
        assert any(0 < e["progress"] < 1 and e["eta_s"] is not None for e in reading)
        assert documents(base)["survey.pdf"]["chunks"] == outcome["chunks"]
        hits = httpx.post(f"{base}/v1/retrieve", json={"query": "Which survey counted 1400 owls?", "top_k": 5},
                          timeout=30).json()["chunks"]  # the last page's line, read by OCR
        assert any("Page 200: the Kestrel survey counted 1400 owls" in h["text"] for h in hits), \
            [h["text"][:80] for h in hits]

        # Cancel the same scan under another name mid-way: no document, no stored file, nothing staged.
        before = documents(base)
        started = upload(base, "survey-copy.pdf", scan200, **{"async": "true"})[0]
        assert started.status_code == 202
        copy_id = started.json()["id"]
        wait_for(base, copy_id, lambda j: j["ocr_pages_done"] >= 20)
        cancelled = httpx.delete(f"{base}/v1/jobs/{copy_id}", timeout=60)
        assert cancelled.status_code == 200, cancelled.text
        body = cancelled.json()
        assert body["state"] == "cancelled" and body["error"]["type"] == "cancelled" and not body["can_retry"]
        assert 20 <= body["ocr_pages_done"] < 200
        assert documents(base).keys() == before.keys()
        stored = sorted(p.name for p in (home / "uploads" / "default").iterdir())
        assert stored == ["owls.md", "survey.pdf"], stored  # no copy, no .incoming-/.previous- leftovers
        assert httpx.get(f"{base}/v1/jobs/{copy_id}", timeout=10).status_code == 404  # a cancelled job is gone
        assert not (home / "jobs" / copy_id).exists()

        # Jobs listed newest first; deleting an ended job forgets it; unknown ids are 404.
        listed = [j["id"] for j in httpx.get(f"{base}/v1/jobs", timeout=10).json()["jobs"]]
        assert job["id"] in listed and copy_id not in listed
        forgotten = httpx.delete(f"{base}/v1/jobs/{job['id']}", timeout=10)
        assert forgotten.status_code == 200 and forgotten.json()["state"] == "done"
        left = httpx.get(f"{base}/v1/jobs", timeout=10).json()["jobs"]
        assert [(j["names"], j["state"]) for j in left] == [(["owls.md"], "done")]  # inline uploads are jobs too
        assert "survey.pdf" in documents(base)  # forgetting a job keeps what it did
        for unknown in ("0" * 32, "not-a-job", "..%5C..%5Cjobs"):
            missing = httpx.get(f"{base}/v1/jobs/{unknown}", timeout=10)
            assert missing.status_code == 404 and missing.json()["error"]["type"] == "job_not_found", unknown


def test_a_job_cut_by_a_killed_server_is_interrupted_and_runs_again(settings: Settings, tmp_path: Path):
    home = tmp_path / "home"
    scan = make_long_scan(tmp_path / "census.pdf", 80).read_bytes()
    with server_and_process(settings, home, tmp_path / "first.log", RAG_JOB_WAIT_S=DEFAULT_JOB_WAIT_S) \
            as (base, proc):
        response, _ = upload(base, "census.pdf", scan)
        assert response.status_code == 202
        job_id = response.json()["id"]
        wait_for(base, job_id, lambda j: j["ocr_pages_done"] >= 5)
        os.kill(proc.pid, signal.SIGKILL)  # no shutdown, no rollback: the process is gone
        proc.wait()

    with server_and_process(settings, home, tmp_path / "second.log", RAG_JOB_WAIT_S=DEFAULT_JOB_WAIT_S) \
            as (base, _):
        job = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()
        assert job["state"] == "interrupted" and job["can_retry"], job
        assert job["error"]["type"] == "interrupted" and "census.pdf" not in documents(base)
        assert "were interrupted" in (tmp_path / "second.log").read_text()
        retried = httpx.post(f"{base}/v1/jobs/{job_id}/retry", timeout=30)
        assert retried.status_code == 202, retried.text
        new = retried.json()
        assert new["retry_of"] == job_id and new["id"] != job_id
        final = job_events(base, new["id"])[-1]
        assert final["state"] == "done" and final["files"][0]["status"] == "added", final
        assert final["ocr_pages_done"] == 80 and "census.pdf" in documents(base)
        assert not httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()["can_retry"]  # its files moved on
        twice = httpx.post(f"{base}/v1/jobs/{new['id']}/retry", timeout=10)  # done: nothing to run again
        assert twice.status_code == 409 and twice.json()["error"]["type"] == "job_state"


def test_a_sync_is_a_job(settings: Settings, tmp_path: Path):
    home, folder = tmp_path / "home", tmp_path / "share"
    folder.mkdir()
    (folder / "owls.md").write_bytes(SMALL_NOTE)
    make_long_scan(folder / "census.pdf", 30)
    added = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), "sources", "add", str(folder),
                            "--json"], cwd=PROJECT_ROOT, env=cli_env(settings), capture_output=True, text=True,
                           timeout=120)
    assert added.returncode == 0, added.stderr
    source_id = json.loads(added.stdout)["id"]
    with server_and_process(settings, home, tmp_path / "server.log", RAG_JOB_WAIT_S=DEFAULT_JOB_WAIT_S) as (base, _):
        response = httpx.post(f"{base}/v1/sources/{source_id}/sync", params={"async": "true"}, timeout=30)
        assert response.status_code == 202, response.text
        job = response.json()
        assert job["kind"] == "sync" and job["source"] == source_id
        events = job_events(base, job["id"])
        assert_monotone(events, "progress", "files_done", "ocr_pages_done")
        final = events[-1]
        assert final["state"] == "done", final
        assert final["summary"]["added"] == 2 and final["ocr_pages_done"] == 30
        assert sorted(f["file"].rsplit("/", 1)[-1] for f in final["files"]) == ["census.pdf", "owls.md"]
        assert documents(base).keys() == {"census.pdf", "owls.md"}
        # Nothing changed: the sync is quick, answered inline with the source's state, as before.
        inline = httpx.post(f"{base}/v1/sources/{source_id}/sync", timeout=30)
        assert inline.status_code == 200, inline.text
        assert inline.json()["last"]["unchanged"] == 2 and inline.json()["last"]["added"] == 0


def test_a_job_record_follows_the_typed_progress_events(tmp_path: Path):
    """The tracker renders the ingest's events into the job record the API shows (files, OCR pages, chunks)."""
    import threading

    from ingest.jobs import JobStore, Tracker
    from ingest.progress import FileDone, OcrPage, Started, UnchangedCounted

    store = JobStore(tmp_path / "jobs")
    job = store.create("upload", "default", "admin", [("scan.pdf", b"%PDF"), ("notes.md", b"# Notes")])
    tracker = Tracker(store, job, threading.Event())
    tracker(Started(2))
    assert (job.files_total, job.files_done, job.progress) == (2, 0, 0.0)
    tracker(OcrPage("/up/scan.pdf", 1, 4, 0, 0))
    tracker(OcrPage("/up/scan.pdf", 2, 4, 0, 0))
    assert (job.current_file, job.current_file_page, job.current_file_pages, job.ocr_pages_done) == \
        ("scan.pdf", 2, 4, 2)
    assert job.progress == round(0.95 * 2 / 4 / 2, 4)
    tracker(FileDone("/up/scan.pdf", 1, 7))
    assert (job.current_file, job.current_file_page, job.files_done, job.chunks) == (None, 0, 1, 7)
    tracker(OcrPage("/up/notes.md", 1, 1, 1, 7))
    assert job.ocr_pages_done == 3  # counted on over the job
    tracker(UnchangedCounted(2))
    assert (job.files_done, job.chunks, job.current_file, job.progress) == (2, 0, None, 0.99)
    assert store.get(job.id).files_done == 2  # saved: a file's end is always written


@pytest.mark.parametrize("runs_here", [True, False], ids=["this-process", "another-process"])
def test_a_job_that_ends_while_it_is_deleted_is_forgotten(tmp_path: Path, runs_here: bool):
    """A DELETE that reaches a job in its last moments (its work done, the cancel never seen) still forgets it:
    the fuzzing pass found GET /v1/jobs/{id}/events answering 200 after such a DELETE had answered 200."""
    import threading

    from ingest.jobs import ACTIVE, JobRunner, JobStore, Outcome

    store = JobStore(tmp_path / "jobs")
    runner = JobRunner(store)
    asked, let_go = threading.Event(), threading.Event()
    original_cancel = runner.cancel

    def cancel(job):  # the request arrives; the work ends without reading it
        original_cancel(job)
        asked.set()

    runner.cancel = cancel  # type: ignore[method-assign]

    def work(tracker, running) -> Outcome:
        let_go.wait(10)
        return Outcome([], {}, error_type="no_text", error="no extractable text")

    try:
        job = store.create("upload", "default", "admin", [("data.jpg", b"\xff\xd8")])
        started = runner.start(job, work)
        while store.get(job.id).state not in ACTIVE or store.get(job.id).started_at is None:
            time.sleep(0.01)
        seen = store.get(job.id)
        if not runs_here:  # another worker's job: only its record is known here
            with runner._guard:
                runner._running.pop(job.id)
        threading.Thread(target=lambda: (asked.wait(10), let_go.set())).start()
        ended = runner.cancel_or_forget(seen, wait_s=10)
        started.done.wait(10)
        assert ended.state == "failed" and ended.error_type == "no_text"
        with pytest.raises(JobNotFoundError):
            store.get(job.id)
        assert not (tmp_path / "jobs" / job.id).exists()
        assert [j.id for j in store.list()] == []
    finally:
        runner.close()
