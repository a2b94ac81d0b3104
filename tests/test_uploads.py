"""Uploads as an ingest operation: the same store/replace/delete rules for the API and the CLI (real embedder)."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import cli_env
from rag.store.embedded import EmbeddedStore
from ingest.parameters import IngestParameters
from ingest.uploads import IncomingFile, Uploads
from rag.core.errors import BadRequestError
from rag.core.settings import PROJECT_ROOT, Settings

WOMBAT = b"Wombats are short-legged marsupials that dig burrows in south-eastern Australia.\n"
QUOKKA = b"Quokkas are small wallabies that live on Rottnest Island near Perth.\n"


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def add(uploads: Uploads, store: EmbeddedStore, embedder, *files: tuple[str, bytes], max_bytes: int = 10_000):
    parameters = dataclasses.replace(IngestParameters.defaults(embedder), max_file_bytes=max_bytes)
    return uploads.add(store.index("default"), [IncomingFile(n, c) for n, c in files], parameters)


def test_add_replace_refuse_and_delete(home: Path, embedder):
    store, uploads = EmbeddedStore(home / "indexes"), Uploads(home / "uploads")
    report = add(uploads, store, embedder, ("wombat.txt", WOMBAT), ("empty.pdf", b"%PDF-1.4 broken"),
                 ("big.txt", b"x" * 20_000))
    assert [(o.path, o.status) for o in report.outcomes] == [  # in the order given
        ("wombat.txt", "added"), ("empty.pdf", "failed"), ("big.txt", "failed")]
    assert report.outcomes[2].reason_type == "payload_too_large" and report.accepted
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


def test_a_file_the_loader_cannot_use_is_refused_and_never_stored(home: Path, embedder):
    """Uploads are parsed once, by the loader process; what it refuses (broken, unsupported) is not kept."""
    store, uploads = EmbeddedStore(home / "indexes"), Uploads(home / "uploads")
    report = add(uploads, store, embedder, ("tool.exe", b"MZ\x90\x00"), ("notes.txt", WOMBAT))
    assert [(o.path, o.status) for o in report.outcomes] == [("tool.exe", "failed"), ("notes.txt", "added")]
    assert report.outcomes[0].reason_type == "unsupported_file_type", report.outcomes[0]
    assert sorted(p.name for p in (home / "uploads" / "default").iterdir()) == ["notes.txt"]


def test_staged_files_left_by_a_killed_upload_are_removed_at_start(home: Path, embedder, caplog):
    folder = home / "uploads" / "default"
    folder.mkdir(parents=True)
    stale, fresh, kept = folder / ".incoming-0123456789ab", folder / ".incoming-ba9876543210", folder / "a.txt"
    for path in (stale, fresh, kept):
        path.write_bytes(WOMBAT)
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    with caplog.at_level(logging.INFO, logger="ingest.uploads"):
        removed = Uploads(home / "uploads").remove_stale_staged()
    assert removed == [stale] and not stale.exists()
    assert fresh.exists() and kept.exists()  # a replica sharing the folder may be staging it right now
    assert "removed 1 staged upload file(s) left by an interrupted upload" in caplog.text


def test_cli_delete_removes_the_stored_upload_too(home: Path, settings: Settings, embedder):
    store, uploads = EmbeddedStore(home / "indexes"), Uploads(home / "uploads")
    report = add(uploads, store, embedder, ("wombat.txt", WOMBAT))
    stored = home / "uploads" / "default" / "wombat.txt"
    assert stored.is_file()
    user_file = home / "notes.txt"
    user_file.write_bytes(QUOKKA)
    proc = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), "ingest", str(user_file)],
                          capture_output=True, text=True, env=cli_env(settings), cwd=PROJECT_ROOT)
    assert proc.returncode == 0, proc.stderr
    for target in (report.outcomes[0].document_id, str(user_file)):
        proc = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), "documents", "delete", target],
                              capture_output=True, text=True, env=cli_env(settings), cwd=PROJECT_ROOT)
        assert proc.returncode == 0, proc.stderr
    assert not stored.exists()  # our copy of the upload goes with its document
    assert user_file.read_bytes() == QUOKKA  # a user's own file is never deleted
