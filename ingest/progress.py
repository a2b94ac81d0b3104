"""What an ingest reports while it runs: small typed events, made by the pipeline and a sync, rendered by the
front ends (the CLI's progress bar, a job's record and so the API's job progress). Every event carries the
files done so far and the chunks made so far; a ``Progress`` callback may raise to stop the ingest (a cancelled
job): nothing it had not committed is kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Started:
    """The files are listed: ``files`` to go through."""

    files: int
    files_done: int = 0
    chunks_done: int = 0


@dataclass(frozen=True)
class OcrPage:
    """Page ``page`` of ``pages`` of the file being read (``path``, as shown) has been OCR'd."""

    path: str
    page: int
    pages: int
    files_done: int  # before this file
    chunks_done: int


@dataclass(frozen=True)
class FileDone:
    """A file (``path``, as shown) is done: ingested, unchanged, skipped or failed."""

    path: str
    files_done: int
    chunks_done: int


@dataclass(frozen=True)
class UnchangedCounted:
    """A sync has counted the files it need not read (unchanged, renamed) as done."""

    files_done: int
    chunks_done: int = 0


ProgressEvent = Started | OcrPage | FileDone | UnchangedCounted
Progress = Callable[[ProgressEvent], None]


def ignore(event: ProgressEvent) -> None:
    """The progress callback of an ingest nobody follows."""
