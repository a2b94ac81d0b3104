"""Rotating files that several server processes write at once (logs, telemetry)."""

from __future__ import annotations

import logging
import logging.handlers
import os

from rag.core.files import try_replace


class SharedRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file that several server processes (``rag serve --workers N``) write at once.

    On Windows a file another worker holds open cannot be renamed: the rotation is put off (the record is
    written, to the current file) and tried again with the next record. So that it does not wait for ever,
    a worker lets go of a file that is due for rotation after each record it writes there (below the bound,
    it keeps the file open). When another worker has rotated the file, this one follows it to the new file
    instead of writing on into the renamed one."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if self.stream is not None and self.maxBytes > 0:
            try:
                due = os.fstat(self.stream.fileno()).st_size >= self.maxBytes
            except (OSError, ValueError):
                due = True
            if due:  # whichever worker writes next can rename it
                self.stream.close()
                self.stream = None  # type: ignore[assignment]

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        if self.stream is not None:
            try:
                moved = not os.path.samestat(os.fstat(self.stream.fileno()), os.stat(self.baseFilename))
            except OSError:
                moved = True
            if moved:
                self.stream.close()
                self.stream = self._open()
        return bool(super().shouldRollover(record))

    def doRollover(self) -> None:
        """The current file is moved aside first: when that fails (held), nothing else has moved yet."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None  # type: ignore[assignment]
        base = self.baseFilename
        aside = f"{base}.{os.getpid()}.rotating"
        if not try_replace(base, aside):  # held by another process: keep appending; the next record tries again
            self.stream = self._open()
            return
        for i in range(self.backupCount - 1, 0, -1):
            if os.path.exists(f"{base}.{i}"):
                try_replace(f"{base}.{i}", f"{base}.{i + 1}")  # a reader holds an old backup: overwritten next time
        try_replace(aside, f"{base}.1" if self.backupCount else aside)
        if not self.backupCount:
            os.remove(aside)
        self.stream = self._open()
