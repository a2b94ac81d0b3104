"""Refresh the README screenshots in docs/: a real `rag serve` over examples/docs, a headless Chromium.

    python tools/docs/screenshots.py [--chromium /usr/bin/chromium] [--port 8765]

Ingests examples/docs into a scratch index ("screenshots"), asks one question on the chat page (desktop and
phone sizes), then shows the documents page and the offline API docs; deletes the scratch index at the end.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
INDEX = "screenshots"
QUESTION = "When did the Normans conquer England?"


def rag(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "rag.cli", *args], cwd=ROOT, env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    env = {**os.environ, "RAG_INDEX": INDEX, "RAG_PORT": str(args.port)}
    rag("ingest", str(ROOT / "examples" / "docs"), "--index", INDEX, env=env)
    server = subprocess.Popen([sys.executable, "-m", "rag.cli", "serve"], cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(240):
            try:
                if httpx.get(f"{base}/healthz", timeout=2).json().get("status") == "ready":
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium)
            for name, viewport in (("screenshot-chat.png", {"width": 1280, "height": 860}),
                                   ("screenshot-chat-phone.png", {"width": 390, "height": 844})):
                page = browser.new_page(viewport=viewport)
                page.goto(base + "/")
                expect(page.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)
                if name == "screenshot-chat.png":
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-chat-empty.png"))
                page.fill("#question", QUESTION)
                page.press("#question", "Enter")
                expect(page.locator(".turn").first).to_have_attribute("data-state", "done", timeout=60_000)
                page.screenshot(path=str(ROOT / "docs" / name))
                page.close()
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.goto(base + "/documents")
            expect(page.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(ROOT / "docs" / "screenshot-documents.png"))
            page.goto(base + "/schema/swagger")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ROOT / "docs" / "screenshot-api-docs.png"))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        rag("index", "delete", INDEX, "--yes", env=env)


if __name__ == "__main__":
    main()
