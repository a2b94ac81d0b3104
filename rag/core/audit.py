"""The audit trail: one JSON Lines record per answer, retrieval, upload, delete and key change, append-only,
fsync'd in batches, rotated by size and hash-chained.

Layout: ``<audit_dir>/<chain>/000001.jsonl, 000002.jsonl, …``. Each process that writes (a server, a worker,
one ``rag keys`` command) keeps a chain of its own, named after its start time, host and process id, so
replicas and workers sharing the folder never interleave within one chain and need no file lock.

Each record carries ``seq`` (1, 2, … along the chain), ``prev`` (the ``hash`` of the record before it; 64 zeros
for the first) and ``hash`` (the sha256 of the record's canonical JSON without ``hash``). ``verify`` walks every
chain and names the first line that was edited (its hash), deleted or moved (``seq``/``prev`` break).

With ``store_url`` the same records go to one table of the PostgreSQL store instead, one chain for every
replica (``ingest.store.audit``); both trails are an ``AuditLog``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

GENESIS = "0" * 64
FSYNC_EVERY_RECORDS = 32
FSYNC_EVERY_S = 1.0
QUESTION_MODES = ("full", "sha256", "none")


def canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def record_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(body)).hexdigest()


def question_fields(question: str, mode: str) -> dict[str, str]:
    """How a question is recorded: in full, as its sha256 (to match a known question later), or not at all."""
    if mode == "full":
        return {"question": question}
    if mode == "sha256":
        return {"question_sha256": hashlib.sha256(question.encode()).hexdigest()}
    return {}


def timestamp(seconds: float) -> str:
    """UTC, millisecond precision: ``2025-01-31T12:00:00.123Z`` (sorts as text)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}Z"


def chain_name() -> str:
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname())[:40] or "host"
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{host}-{os.getpid()}"


class AuditLog(Protocol):
    """Where audit records go and are read back: files (``AuditTrail``) or a PostgreSQL table."""

    @property
    def location(self) -> str: ...
    def append(self, event: str, **fields: Any) -> dict[str, Any]: ...
    def verify(self) -> tuple[int, Sequence[object]]: ...
    def records(self, since_ts: str | None = None, principal: str | None = None,
                index: str | None = None) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


@dataclass
class AuditTrail:
    """The writer of one chain of files (and the reader of all of them). Thread-safe; ``close()`` fsyncs what
    is pending."""

    folder: Path
    max_bytes: int = 64 * 1024 * 1024
    question_mode: str = "sha256"
    chain: str = field(default_factory=chain_name)
    _seq: int = 0
    _prev: str = GENESIS
    _file_number: int = 0
    _handle: Any = None
    _pending: int = 0
    _synced_at: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record (``event`` plus ``fields``; None values are left out); returns it."""
        with self._lock:
            body = {k: v for k, v in fields.items() if v is not None}
            body.update(event=event, ts=timestamp(time.time()), seq=self._seq + 1, prev=self._prev)
            body["hash"] = record_hash(body)
            line = canonical(body) + b"\n"
            handle = self._file_for(len(line))
            handle.write(line)
            handle.flush()
            self._seq, self._prev = body["seq"], body["hash"]
            self._pending += 1
            if self._pending >= FSYNC_EVERY_RECORDS or time.monotonic() - self._synced_at >= FSYNC_EVERY_S:
                self._sync()
            return body

    def _file_for(self, size: int) -> Any:
        if self._handle is not None and self._handle.tell() + size > self.max_bytes and self._handle.tell() > 0:
            self._sync()
            self._handle.close()
            self._handle = None
        if self._handle is None:
            self._file_number += 1
            path = self.folder / self.chain / f"{self._file_number:06d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "ab")
        return self._handle

    def _sync(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        self._pending, self._synced_at = 0, time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._sync()
                self._handle.close()
                self._handle = None

    @property
    def location(self) -> str:
        return str(self.folder)

    def verify(self) -> tuple[int, list["Problem"]]:
        return verify(self.folder)

    def records(self, since_ts: str | None = None, principal: str | None = None,
                index: str | None = None) -> list[dict[str, Any]]:
        return read_records(self.folder, since_ts, principal, index)


# --------------------------------------------------------------------------- reading and verifying
def chain_files(folder: Path) -> dict[str, list[Path]]:
    """Every chain under ``folder`` and its files in order."""
    if not folder.is_dir():
        return {}
    return {chain.name: sorted(chain.glob("*.jsonl")) for chain in sorted(folder.iterdir()) if chain.is_dir()}


def lines_of(files: list[Path]) -> Iterator[tuple[Path, int, bytes]]:
    for path in files:
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                yield path, number, line


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def verify(folder: Path) -> tuple[int, list[Problem]]:
    """``(records checked, problems)``: at most one problem per chain, its first bad line."""
    checked, problems = 0, []
    for chain, files in chain_files(folder).items():
        seq, prev = 0, GENESIS
        for path, number, raw in lines_of(files):
            problem = check_record(raw, seq, prev)
            if problem is not None:
                problems.append(Problem(path, number, problem))
                break
            record = json.loads(raw)
            seq, prev = record["seq"], record["hash"]
            checked += 1
    return checked, problems


def check_record(raw: bytes, seq: int, prev: str, unit: str = "line") -> str | None:
    """What is wrong with ``raw`` as the record after record ``seq`` (whose hash is ``prev``); None: nothing.
    ``unit``: what holds one record, for the message (a line of a file, a record of a table)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return "not a JSON record (edited or cut)"
    if not isinstance(record, dict) or not isinstance(record.get("hash"), str):
        return "not an audit record"
    body = {k: v for k, v in record.items() if k != "hash"}
    if record_hash(body) != record["hash"]:
        return "the record was edited (its hash does not match its content)"
    if record.get("seq") != seq + 1 or record.get("prev") != prev:
        return (f"the chain breaks here: expected record {seq + 1} after record {seq}, found record "
                f"{record.get('seq')} (a {unit} before it was deleted, or {unit}s were reordered)")
    return None


def read_records(folder: Path, since_ts: str | None = None, principal: str | None = None,
                 index: str | None = None) -> list[dict[str, Any]]:
    """Every readable record of every chain, oldest first, filtered."""
    records = []
    for files in chain_files(folder).values():
        for _, _, raw in lines_of(files):
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if since_ts and str(record.get("ts", "")) < since_ts:
                continue
            if principal and record.get("principal") != principal:
                continue
            if index and record.get("index") != index:
                continue
            records.append(record)
    return sorted(records, key=lambda r: str(r.get("ts", "")))
