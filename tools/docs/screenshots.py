"""Refresh the manual's screenshots in docs/ from the browser tests' own: a real `rag serve`, headless Chromium.

    python tools/docs/screenshots.py [--no-run]

Runs the tests that take them (tests/test_web.py: the layout test of every page state at 1280x900 and 390x844,
the conversation list, the API docs with a key), which save them under test-artifacts/ only once their
geometry checks passed, then copies the manual's ones to docs/. --no-run copies what the last run left.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
TESTS = ("test_layout_of_every_page_state or test_two_people_on_one_browser or "
         "test_api_docs_ask_for_the_key or test_documents_say_where_they_come_from")
# docs/ name <- test-artifacts/ name
SHOTS = {
    "screenshot-chat.png": "layout-desktop-chat-answer.png",
    "screenshot-chat-source.png": "layout-desktop-chat-source-open.png",
    "screenshot-chat-phone.png": "layout-phone-chat-source-open.png",
    "screenshot-chat-refusal.png": "layout-desktop-chat-refusal.png",
    "screenshot-chat-empty.png": "layout-desktop-chat-empty.png",
    "screenshot-conversations.png": "conversations-list.png",
    "screenshot-documents.png": "layout-desktop-documents.png",
    "screenshot-reader.png": "layout-phone-reader-documents.png",
    "screenshot-keys.png": "layout-desktop-keys.png",
    "screenshot-api-docs.png": "api-docs-keyed.png",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true", help="only copy what test-artifacts/ holds")
    args = parser.parse_args()
    if not args.no_run:
        subprocess.run([sys.executable, "-m", "pytest", "tests/test_web.py", "-q", "-k", TESTS], cwd=ROOT,
                       check=True)
    missing = [source for source in SHOTS.values() if not (ARTIFACTS / source).is_file()]
    if missing:
        sys.exit(f"not in {ARTIFACTS}: {', '.join(missing)} (run without --no-run)")
    for name, source in SHOTS.items():
        shutil.copyfile(ARTIFACTS / source, ROOT / "docs" / name)
        print(f"docs/{name} <- test-artifacts/{source}")


if __name__ == "__main__":
    main()
