"""OTLP JSON Lines files that never grow without bound and never fail a request."""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

from rag.core.logfiles import SharedRotatingFileHandler

log = logging.getLogger("rag.telemetry")


class RotatingLines(io.TextIOBase):
    """The text stream an OpenTelemetry file exporter writes its JSON lines to: appended to ``path``, rotated at
    ``max_bytes`` into ``path.1`` … ``path.N`` (several server processes may share it), and a write that fails
    (a full disk, a folder removed) is dropped, logged once per file, never raised to the exporter."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        super().__init__()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dropped = 0
        self._handler = SharedRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8",
                                                  delay=True)
        self._handler.terminator = ""
        self._handler.handleError = self._failed  # type: ignore[method-assign]

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        # One line is one record, so rotation never splits a line and each line is one write to the file.
        self._handler.handle(logging.makeLogRecord({"msg": text, "levelno": logging.INFO}))
        return len(text)

    def flush(self) -> None:  # every record is flushed as it is written
        pass

    def close(self) -> None:
        try:
            self._handler.close()  # flushes: on a full disk that fails too, and is dropped the same way
        except OSError:
            self._failed(logging.makeLogRecord({}))
        super().close()

    def _failed(self, record: logging.LogRecord) -> None:
        # Drop what the file could not take: a stream whose flush failed keeps its buffer, which would grow.
        stream, self._handler.stream = self._handler.stream, None  # type: ignore[assignment]
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
        self.dropped += 1
        if self.dropped == 1:
            error = sys.exc_info()[1]
            log.warning("telemetry: cannot write %s (%s); dropping telemetry until it can", self.path, error,
                        extra={"fields": {"path": str(self.path), "error": str(error)}})
