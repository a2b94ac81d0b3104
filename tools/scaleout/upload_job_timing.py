"""A long scanned upload as a job, timed against a real `rag serve` (the default job_wait_s): how long the
202 takes, how long the job runs to done, and how long a cancel takes to stop it.

    .venv/bin/python tools/scaleout/upload_job_timing.py [--pages 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from format_fixtures import make_long_scan  # noqa: E402
from helpers import free_port  # noqa: E402


def wait_done(base: str, job_id: str) -> dict:
    while True:
        job = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()
        if job["state"] not in ("queued", "running"):
            return job
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        (home / "models").symlink_to(ROOT / "models")  # the project's models, a scratch index
        scan = make_long_scan(Path(scratch) / "scan.pdf", args.pages).read_bytes()
        port = free_port()
        log = open(Path(scratch) / "serve.log", "wb")
        server = subprocess.Popen([sys.executable, "-m", "app.cli", "--home", str(home), "serve", "--port", str(port)],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start:\n{(Path(scratch) / 'serve.log').read_text()}")
                try:
                    if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.25)
            accepted, done, cancels = [], [], []
            for run in range(args.runs):
                started = time.perf_counter()
                response = httpx.post(f"{base}/v1/documents", files=[("data", (f"scan-{run}.pdf", scan))], timeout=60)
                accepted.append(time.perf_counter() - started)
                assert response.status_code == 202, response.text
                job = wait_done(base, response.json()["id"])
                done.append(time.perf_counter() - started)
                assert job["state"] == "done" and job["ocr_pages_done"] == args.pages, job
                response = httpx.post(f"{base}/v1/documents", params={"async": "true"},
                                      files=[("data", (f"cancelled-{run}.pdf", scan))], timeout=60)
                job_id = response.json()["id"]
                while httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()["ocr_pages_done"] < args.pages // 4:
                    time.sleep(0.05)
                started = time.perf_counter()
                cancelled = httpx.delete(f"{base}/v1/jobs/{job_id}", timeout=60).json()
                cancels.append(time.perf_counter() - started)
                assert cancelled["state"] == "cancelled", cancelled
            print(f"{args.pages}-page scanned PDF, {args.runs} runs: 202 after "
                  f"{', '.join(f'{s * 1000:.0f}' for s in accepted)} ms; done after "
                  f"{', '.join(f'{s:.1f}' for s in done)} s (median {statistics.median(done):.1f} s, "
                  f"{args.pages / statistics.median(done):.1f} pages/s); cancel answered after "
                  f"{', '.join(f'{s * 1000:.0f}' for s in cancels)} ms")
        finally:
            server.terminate()
            server.wait(15)


if __name__ == "__main__":
    main()
