"""Uploads as an ingest operation: the same store/replace/delete rules for the API and the CLI (real embedder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env
from ingest.store.embedded import EmbeddedStore
from ingest.uploads import IncomingFile, Uploads
from rag.core.errors import BadRequestError
from rag.core.settings import PROJECT_ROOT, Settings

WOMBAT = b"Wombats are short-legged marsupials that dig burrows in south-eastern Australia.\n"
QUOKKA = b"Quokkas are small wallabies that live on Rottnest Island near Perth.\n"


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def add(uploads: Uploads, store: EmbeddedStore, embedder, *files: tuple[str, bytes], max_bytes: int = 10_000):
    return uploads.add(store.index("default"), [IncomingFile(n, c) for n, c in files], embedder, 200, 30, max_bytes)


def test_add_replace_refuse_and_delete(home: Path, embedder):
    store, uploads = EmbeddedStore(home / "indexes"), Uploads(home / "uploads")
    report = add(uploads, store, embedder, ("wombat.txt", WOMBAT), ("empty.pdf", b"%PDF-1.4 broken"),
                 ("big.txt", b"x" * 20_000))
    assert [(o.path, o.status) for o in report.outcomes] == [
        ("empty.pdf", "failed"), ("big.txt", "failed"), ("wombat.txt", "added")]
    assert report.outcomes[1].reason_type == "payload_too_large" and report.accepted
    stored = home / "uploads" / "default" / "wombat.txt"
    assert stored.read_bytes() == WOMBAT
    assert not (home / "uploads" / "default" / "empty.pdf").exists()  # a refused file is never stored

    replaced = add(uploads, store, embedder, ("wombat.txt", QUOKKA))
    assert [o.status for o in replaced.outcomes] == ["updated"] and stored.read_bytes() == QUOKKA

    refused = add(uploads, store, embedder, ("wombat.txt", b"\x00\x01binary"))
    assert refused.outcomes[0].status == "failed" and not refused.accepted
    assert stored.read_bytes() == QUOKKA  # the stored version stays

    with pytest.raises(BadRequestError, match="several files named wombat.txt"):
        add(uploads, store, embedder, ("wombat.txt", WOMBAT), ("a/wombat.txt", WOMBAT))
    with pytest.raises(BadRequestError, match="no files"):
        add(uploads, store, embedder)

    record = uploads.delete(store.index("default"), replaced.outcomes[0].document_id)
    assert record.path.endswith("wombat.txt") and not stored.exists()
    reader = store.index("default").reader()
    assert reader.documents() == []
    reader.close()


def test_cli_delete_removes_the_stored_upload_too(home: Path, settings: Settings, embedder):
    store, uploads = EmbeddedStore(home / "indexes"), Uploads(home / "uploads")
    report = add(uploads, store, embedder, ("wombat.txt", WOMBAT))
    stored = home / "uploads" / "default" / "wombat.txt"
    assert stored.is_file()
    user_file = home / "notes.txt"
    user_file.write_bytes(QUOKKA)
    proc = subprocess.run([sys.executable, "-m", "rag.cli", "--home", str(home), "ingest", str(user_file)],
                          capture_output=True, text=True, env=cli_env(settings), cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stderr
    for target in (report.outcomes[0].document_id, str(user_file)):
        proc = subprocess.run([sys.executable, "-m", "rag.cli", "--home", str(home), "documents", "delete", target],
                              capture_output=True, text=True, env=cli_env(settings), cwd=PROJECT_ROOT)
        assert proc.returncode == 0, proc.stderr
    assert not stored.exists()  # our copy of the upload goes with its document
    assert user_file.read_bytes() == QUOKKA  # a user's own file is never deleted
