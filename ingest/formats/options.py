"""What a loader may spend on one file, and the per-load context it gets."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from rag.core.errors import UnprocessableDocumentError

PageProgress = Callable[[int, int], None]  # (pages done, pages to do) while OCR runs


class TooLarge(UnprocessableDocumentError):
    error_type = "too_large"


class LoadTimeout(UnprocessableDocumentError):
    error_type = "load_timeout"


@dataclass(frozen=True)
class LoadOptions:
    """Per-file limits and OCR settings; ``from_settings`` copies the matching Settings fields."""

    ocr_languages: str = "eng"
    tesseract_cmd: str | None = None
    max_pages_per_file: int = 2000  # PDF pages, slides, image frames, sheets
    max_rows_per_file: int = 200_000  # spreadsheet and CSV rows, all sheets together
    max_unzipped_mb: int = 512  # an Office file's declared uncompressed size
    max_zip_entries: int = 10_000
    load_timeout_s: float = 600.0  # 0 = no limit

    @classmethod
    def from_settings(cls, settings: Any) -> "LoadOptions":
        values = {f.name: getattr(settings, f.name) for f in fields(cls) if hasattr(settings, f.name)}
        if values.get("tesseract_cmd") is not None:
            values["tesseract_cmd"] = str(values["tesseract_cmd"])
        return cls(**values)


@dataclass
class LoadContext:
    """One load: the options, its deadline, OCR bookkeeping and page progress."""

    options: LoadOptions
    progress: PageProgress | None = None
    started: float = field(default_factory=time.monotonic)
    ocr_pages: int = 0
    ocr_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def deadline(self) -> float:
        limit = self.options.load_timeout_s
        return self.started + limit if limit and limit > 0 else float("inf")

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check_time(self) -> None:
        """Raise LoadTimeout once the file has used up ``load_timeout_s``; loaders call it in their loops."""
        if time.monotonic() > self.deadline:
            raise LoadTimeout(timeout_message(self.options.load_timeout_s))

    def check_pages(self, count: int, what: str = "pages") -> None:
        limit = self.options.max_pages_per_file
        if limit > 0 and count > limit:
            raise TooLarge(f"too large: {count} {what}, more than max_pages_per_file ({limit})")


def timeout_message(seconds: float) -> str:
    return f"took longer than {seconds:g} s to load (load_timeout_s); a pathological or very large file?"
