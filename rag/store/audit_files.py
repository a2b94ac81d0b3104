"""The audit trail: one JSON Lines record per answer, retrieval, upload, delete, key change and refusal,
append-only, fsync'd in batches, rotated by size and chained by MACs.

Layout: ``<audit_dir>/<chain>/000001.jsonl, 000002.jsonl, …``. Each serving process (a server, a worker) keeps
a chain of its own, named after its start time, host and process id, so replicas and workers sharing the folder
never interleave within one chain; ``rag keys`` commands share the chain ``keys`` (under the heads' lock).

Each record carries ``seq`` (1, 2, … along the chain), ``prev`` (the ``hash`` of the record before it; 64 zeros
for the first) and ``hash``: the HMAC-SHA256 of the record's canonical JSON without ``hash``, under the audit
key (``audit_key_file``, kept apart from the trail), marked ``"mac": "hmac-sha256"`` with the key's ``key_id``.
Records written before the key (no ``mac``) carry a plain sha256 and still verify, as unkeyed. ``verify`` walks
every chain and names the first line that was edited (its MAC), deleted or moved (``seq``/``prev`` break).

``<audit_dir>/heads.sqlite`` anchors every keyed chain: one row per chain (its last ``seq`` and ``hash`` at the
last fsync) and a seal, the HMAC of every row and an update counter. ``verify`` reports a chain that is gone or
ends before its head, and heads that were edited or removed. ``rag keys`` commands append to one long-lived
chain, ``keys``, taking turns under the heads database's write lock.

With ``store_url`` the same records go to one table of the PostgreSQL store instead, one chain for every
replica (``rag.store.audit_postgres``); both trails are an ``AuditLog``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence

from rag.core.errors import ConfigError, StoreUnavailableError
from rag.core.files import make_private_folder, replace_file

log = logging.getLogger("rag.audit")
GENESIS = "0" * 64
FSYNC_EVERY_RECORDS = 32
FSYNC_EVERY_S = 1.0
MAC = "hmac-sha256"
HEADS_FILE = "heads.sqlite"
KEYS_CHAIN = "keys"  # the one chain every `rag keys` command appends to
HEADS_SCHEMA = """
CREATE TABLE IF NOT EXISTS heads (chain TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS seal (one INTEGER PRIMARY KEY CHECK (one = 1), updates INTEGER NOT NULL, mac TEXT NOT NULL);
"""


def canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


@dataclass(frozen=True)
class AuditKey:
    """The secret that makes the trail's hashes MACs: whoever lacks it cannot rewrite a record, a chain or the
    heads so that they verify. Kept in a file apart from the trail (``audit_key_file``)."""

    secret: bytes

    @property
    def key_id(self) -> str:
        """Names the key in each record (not the key): which key a record was written with."""
        return hmac.new(self.secret, b"rag audit key id", hashlib.sha256).hexdigest()[:12]

    def mac(self, domain: bytes, data: bytes) -> str:
        return hmac.new(self.secret, domain + b"\0" + data, hashlib.sha256).hexdigest()


def load_key(path: Path, create: bool = False) -> AuditKey | None:
    """The audit key in ``path`` (64 hex digits); None: there is no such file. Keys are made only where the
    trail is known (``open_file_key``, ``PostgresAuditTrail.open_key``): never over a keyed trail."""
    if create:
        raise ValueError("an audit key is made with the trail (open_file_key), not on its own")
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the audit key file {path} cannot be read ({exc}): check its owner and permissions "
                          "(audit_key_file)") from exc
    if not text:
        raise ConfigError(f"the audit key file {path} is empty (cut by a crash while it was written?): restore "
                          "the key from its backup (audit_key_file); without it the trail cannot be written")
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise ConfigError(f"the audit key file {path} does not hold a key (64 hexadecimal digits)")
    return AuditKey(secret)


def missing_key_error(path: Path, why: str, where: str) -> ConfigError:
    """Why no new key is made: the trail (``where``) was written with one (``why``) and it is gone."""
    return ConfigError(
        f"the audit key is missing: {path} is gone, but {why}. Restore the key file from its backup "
        f"(audit_key_file), or, for another replica of a shared trail, copy the key file of the replica that made "
        f"it (every writer of one trail holds the same key); a new key would let whoever deleted it rewrite the "
        f"trail unnoticed. To start a new trail on purpose, move the old one away first ({where})")


def write_key(path: Path, key: AuditKey) -> None:
    """``key`` into ``path`` whole or not at all: written to a private name beside it, fsync'd, then moved into
    place (owner-only: 0600; on Windows it gets its folder's permissions, the home's owner-only ones)."""
    temp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        make_private_folder(path.parent)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key.secret.hex().encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        replace_file(temp, path)
    except OSError as exc:
        try:
            temp.unlink()
        except OSError:
            pass
        raise ConfigError(f"the audit key file {path} cannot be written ({exc}): check the permissions of its "
                          "folder (audit_key_file)") from exc


def keyed_chain(folder: Path) -> str | None:
    """A chain under ``folder`` that holds keyed records (the first or last line of one of its files), if any."""
    for chain, files in chain_files(folder).items():
        for path in files:
            try:
                with open(path, "rb") as handle:
                    first = handle.readline()
            except OSError:
                continue
            last = last_record(path)
            if b'"mac":"' + MAC.encode() + b'"' in first or (last is not None and last.get("mac") == MAC):
                return chain
    return None


def open_file_key(path: Path, folder: Path) -> AuditKey:
    """The audit key for a writer of the trail in ``folder``: the one in ``path``, else a new one, made only
    over a trail that never had one (none at all, or one written before keys: the upgrade). The new key anchors
    every chain there is where it ends, under the heads' lock, before its file is moved into place: whoever
    sees the key sees the chains anchored. Raises ConfigError where the trail was keyed (heads sealed, or keyed
    records) and the key is gone."""
    key = load_key(path)
    if key is not None:
        return key
    candidate = AuditKey(secrets.token_bytes(32))
    try:
        make_private_folder(folder)
        heads = Heads(folder / HEADS_FILE, candidate)
    except (sqlite3.Error, OSError) as exc:
        raise heads_error(folder / HEADS_FILE, exc) from exc
    try:
        with heads.locked():
            key = load_key(path)  # made by another process while this one waited for the lock
            if key is not None:
                return key
            if heads.sealed():
                raise missing_key_error(path, f"the trail's heads ({heads.path}) were sealed with it", str(folder))
            if (chain := keyed_chain(folder)) is not None:
                raise missing_key_error(path, f"the chain {folder / chain} holds records written with it",
                                        str(folder))
            heads.seal()
            for chain, files in chain_files(folder).items():  # the trail from before the key, where it ends
                if files and (last := last_record(files[-1])) is not None:
                    heads.update(chain, int(last["seq"]), str(last["hash"]))
            write_key(path, candidate)  # still under the lock: committed right after
        return candidate
    except sqlite3.Error as exc:
        raise heads_error(heads.path, exc) from exc
    finally:
        heads.close()


def heads_error(path: Path, exc: Exception) -> StoreUnavailableError:
    return StoreUnavailableError(f"the audit trail's heads ({path}) cannot be used: {exc}. Check that the audit "
                                 "folder is writable; a damaged file is reported by `rag audit verify`: move it "
                                 "away (the chains are then reported as not anchored)")


def record_hash(body: dict[str, Any], key: AuditKey | None = None) -> str:
    """A record's ``hash``: its MAC under ``key`` (a keyed record), or the sha256 of an unkeyed one."""
    if key is not None and body.get("mac") == MAC:
        return key.mac(b"rag audit record", canonical(body))
    return hashlib.sha256(canonical(body)).hexdigest()


def sign(body: dict[str, Any], key: AuditKey | None) -> dict[str, Any]:
    """``body`` marked as keyed (with ``key``) and given its ``hash``."""
    if key is not None:
        body.update(mac=MAC, key_id=key.key_id)
    body["hash"] = record_hash(body, key)
    return body


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
    def verify(self) -> tuple[int, Sequence[object]]: ...  # a Verified: with notes
    def records(self, since_ts: str | None = None, principal: str | None = None,
                index: str | None = None) -> list[dict[str, Any]]: ...
    def close(self) -> None: ...


@dataclass
class AuditTrail:
    """The writer of one chain of files (and the reader of all of them). Thread-safe; ``close()`` fsyncs what
    is pending. ``append`` writes and flushes its record and returns: it never waits for a disk or a lock of
    other processes. A syncer thread (started with the first record) fsyncs what was written within
    ``FSYNC_EVERY_S`` (at once past ``FSYNC_EVERY_RECORDS``) and then, with a ``key``, moves the chain's head in
    ``heads.sqlite`` to the last record fsync'd, without holding the append lock while it waits for SQLite.
    ``shared``: a chain that several processes append to (``keys``): each append takes the heads' write lock,
    continues the chain from where it ends and is fsync'd and anchored before the lock is let go."""

    folder: Path
    max_bytes: int = 64 * 1024 * 1024
    question_mode: str = "sha256"
    chain: str = field(default_factory=chain_name)
    key: AuditKey | None = None
    shared: bool = False
    _seq: int = 0
    _prev: str = GENESIS
    _file_number: int = 0
    _handle: Any = None
    _pending: int = 0
    _synced: tuple[int, str] = (0, GENESIS)  # the last record fsync'd
    _anchored: int = 0  # the seq the heads name for this chain
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _heads_lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stopping: bool = False
    _syncer: threading.Thread | None = None
    _heads: "Heads | None" = None

    def open_heads(self) -> None:
        """Open the heads now (a writer at its start): heads that cannot be used fail the start, not a request
        later (StoreUnavailableError)."""
        self._heads_db()

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record (``event`` plus ``fields``; None values are left out); returns it."""
        with self._lock:
            heads = self._heads_db()
            if self.shared and heads is not None:
                try:
                    with heads.locked():
                        self._continue_shared_chain(heads)
                        body = self._write(event, fields)
                        self._sync_file()
                        heads.update(self.chain, self._seq, self._prev)
                except sqlite3.Error as exc:
                    raise heads_error(heads.path, exc) from exc
                finally:
                    self._close_handle()
                return body
            body = self._write(event, fields)
            self._pending += 1
            if self._syncer is None:
                self._syncer = threading.Thread(target=self._sync_loop, name=f"audit-sync-{self.chain}",
                                                daemon=True)
                self._syncer.start()
            if self._pending >= FSYNC_EVERY_RECORDS or self._seq == 1:  # a chain is anchored from its start
                self._wake.set()
            return body

    def _write(self, event: str, fields: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in fields.items() if v is not None}
        body.update(event=event, ts=timestamp(time.time()), seq=self._seq + 1, prev=self._prev)
        sign(body, self.key)
        line = canonical(body) + b"\n"
        handle = self._file_for(len(line))
        handle.write(line)
        handle.flush()
        self._seq, self._prev = body["seq"], body["hash"]
        return body

    def _heads_db(self) -> "Heads | None":
        if self.key is not None and self._heads is None:
            path = self.folder / HEADS_FILE
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                heads = Heads(path, self.key)
                try:
                    with heads.locked():
                        heads.seal()
                except BaseException:
                    heads.close()
                    raise
            except (sqlite3.Error, OSError) as exc:
                raise heads_error(path, exc) from exc
            self._heads = heads
        return self._heads

    def _continue_shared_chain(self, heads: "Heads") -> None:
        """Where the shared chain ends now (another process may have appended since): its head, and past it the
        records that a command fsync'd but could not anchor (stopped before its heads were committed) as long
        as their MACs and ``prev`` follow on; with no head, its last line."""
        files = sorted((self.folder / self.chain).glob("*.jsonl"))
        self._close_handle()
        self._file_number = int(files[-1].stem) if files else 0
        head = heads.head(self.chain)
        if head is not None:
            self._seq, self._prev = head
            if files:
                self._seq, self._prev = self._records_past(files[-1], *head)
        elif files and (last := last_record(files[-1])) is not None:
            self._seq, self._prev = int(last["seq"]), str(last["hash"])
        if files and files[-1].stat().st_size < self.max_bytes:
            self._handle = open(files[-1], "ab")

    def _records_past(self, path: Path, seq: int, prev: str) -> tuple[int, str]:
        """``(seq, prev)`` moved over the keyed records at the end of ``path`` that follow on from it."""
        for raw in tail_lines(path):
            try:
                record = json.loads(raw)
            except ValueError:
                break
            if not isinstance(record, dict) or not isinstance(record.get("seq"), int) or record["seq"] <= seq:
                continue
            if check_record(raw, seq, prev, key=self.key, after_keyed=True) is not None:
                break
            seq, prev = record["seq"], record["hash"]
        return seq, prev

    def _file_for(self, size: int) -> Any:
        if self._handle is not None and self._handle.tell() + size > self.max_bytes and self._handle.tell() > 0:
            self._sync_file()
            self._handle.close()
            self._handle = None
        if self._handle is None:
            self._file_number += 1
            path = self.folder / self.chain / f"{self._file_number:06d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "ab")
        return self._handle

    def _sync_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(FSYNC_EVERY_S)
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._sync()
            except Exception as exc:  # noqa: BLE001 - the thread must go on; the next round tries again
                log.warning("the audit trail (%s) could not be fsync'd: %s", self.folder / self.chain, exc)

    def _sync_file(self) -> None:
        """fsync what was written (under ``_lock``)."""
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        self._pending = 0
        self._synced = (self._seq, self._prev)

    def _sync(self) -> None:
        """fsync what was written, then move this chain's head to its last record fsync'd: the append lock is
        let go before SQLite is waited for (appends go on meanwhile; the head follows at the next round)."""
        with self._lock:
            if self._pending:
                self._sync_file()
            seq, prev = self._synced
        heads = self._heads
        if heads is None or not seq:
            return
        with self._heads_lock:
            if seq <= self._anchored:
                return
            try:
                with heads.locked():
                    heads.update(self.chain, seq, prev)
                self._anchored = seq
            except sqlite3.Error as exc:  # the records are written; the next round anchors them
                log.warning("the audit trail's heads (%s) could not be updated: %s", heads.path, exc)

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def close(self) -> None:
        syncer, self._stopping = self._syncer, True
        self._wake.set()
        if syncer is not None and syncer is not threading.current_thread():
            syncer.join()
        self._sync()
        with self._lock:
            self._close_handle()
            self._syncer = None
            if self._heads is not None:
                with self._heads_lock:
                    self._heads.close()
                self._heads = None

    @property
    def location(self) -> str:
        return str(self.folder)

    def verify(self) -> "Verified":
        return verify(self.folder, self.key)

    def records(self, since_ts: str | None = None, principal: str | None = None,
                index: str | None = None) -> list[dict[str, Any]]:
        return read_records(self.folder, since_ts, principal, index)


class Heads:
    """``heads.sqlite``: every keyed chain's last ``seq`` and ``hash`` (as of its last fsync) and the seal, the
    HMAC of all of them and of an update counter. SQLite's write lock (``BEGIN IMMEDIATE``) is the one lock of
    the folder: processes on any system take turns through it."""

    def __init__(self, path: Path, key: AuditKey) -> None:
        self.path = path
        self.key = key
        self._conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            self._conn.executescript(HEADS_SCHEMA)
        except BaseException:
            self._conn.close()
            raise

    def sealed(self) -> bool:
        return self._conn.execute("SELECT 1 FROM seal").fetchone() is not None

    def seal(self) -> None:
        """Seal heads that have none yet (inside ``locked()``): made with the key (``open_file_key`` anchors the
        chains then), or made again after they were deleted (every chain is then unanchored)."""
        if not self.sealed():
            self._conn.execute("INSERT INTO seal VALUES (1, 0, ?)", (self._seal_mac(0, []),))

    class _Locked:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def __enter__(self) -> None:
            self.conn.execute("BEGIN IMMEDIATE")

        def __exit__(self, kind, *_: Any) -> None:
            self.conn.execute("COMMIT" if kind is None else "ROLLBACK")

    def locked(self) -> "Heads._Locked":
        return Heads._Locked(self._conn)

    def head(self, chain: str) -> tuple[int, str] | None:
        row = self._conn.execute("SELECT seq, hash FROM heads WHERE chain = ?", (chain,)).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    def update(self, chain: str, seq: int, hash_: str) -> None:
        """Move ``chain``'s head and seal the heads again (inside ``locked()``)."""
        self._conn.execute("INSERT INTO heads VALUES (?, ?, ?) ON CONFLICT (chain) DO UPDATE SET seq = excluded.seq, "
                           "hash = excluded.hash", (chain, seq, hash_))
        rows = self._conn.execute("SELECT chain, seq, hash FROM heads ORDER BY chain").fetchall()
        updates = int(self._conn.execute("SELECT updates FROM seal").fetchone()[0]) + 1
        self._conn.execute("UPDATE seal SET updates = ?, mac = ?", (updates, self._seal_mac(updates, rows)))

    def _seal_mac(self, updates: int, rows: list) -> str:
        return self.key.mac(b"rag audit heads", canonical({"updates": updates, "heads": [list(r) for r in rows]}))

    def close(self) -> None:
        self._conn.close()


def read_heads(path: Path, key: AuditKey | None) -> tuple[dict[str, tuple[int, str]], str | None]:
    """``(chain -> (seq, hash), problem)`` of a heads file, read without writing to it."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)  # only read (it exists: it is not made)
    try:
        conn.execute("BEGIN")  # one snapshot of the rows and the seal
        rows = conn.execute("SELECT chain, seq, hash FROM heads ORDER BY chain").fetchall()
        seal = conn.execute("SELECT updates, mac FROM seal").fetchone()
    except sqlite3.Error as exc:
        return {}, f"the heads cannot be read ({exc}): they were replaced or damaged"
    finally:
        conn.close()
    heads = {str(c): (int(s), str(h)) for c, s, h in rows}
    if key is None:
        return heads, "there is no audit key (audit_key_file) to check the heads with"
    expected = key.mac(b"rag audit heads", canonical({"updates": seal[0] if seal else 0,
                                                      "heads": [list(r) for r in rows]}))
    if seal is None or not hmac.compare_digest(str(seal[1]), expected):
        return heads, "the heads were edited (their seal does not match them, or another key sealed them)"
    return heads, None


def tail_lines(path: Path, size: int = 256 * 1024) -> list[bytes]:
    """The whole lines of the last ``size`` bytes of ``path``."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        end = handle.tell()
        handle.seek(max(0, end - size))
        lines = handle.read().splitlines()
    return lines[1:] if end > size else lines


def last_record(path: Path) -> dict[str, Any] | None:
    """The last line of a chain file as a record (None: empty or unreadable)."""
    lines = tail_lines(path)
    try:
        record = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and "seq" in record and "hash" in record else None


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
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"


class Verified(tuple):
    """``(records checked, problems)``, with ``notes``: what the check could not prove (unkeyed records)."""

    notes: list[str]

    def __new__(cls, checked: int, problems: Sequence[object], notes: list[str] | None = None) -> "Verified":
        self = super().__new__(cls, (checked, list(problems)))
        self.notes = notes or []
        return self


def verify(folder: Path, key: AuditKey | None = None) -> Verified:
    """``(records checked, problems)``: at most one problem per chain, its first bad line; then every chain the
    heads name that is gone or ends before its head, every chain they do not name (with a key), and heads that
    were edited or removed."""
    problems: list[Problem] = []
    counts = {"checked": 0, "unkeyed": 0}
    heads_path = folder / HEADS_FILE
    heads: dict[str, tuple[int, str]] = {}
    if heads_path.exists():  # before the chains: a head moves only once its records are written and fsync'd
        heads, problem = read_heads(heads_path, key)
        if problem:
            problems.append(Problem(heads_path, 0, problem))
    chains = chain_files(folder)
    for chain in sorted(heads.keys() - chains.keys()):
        problems.append(Problem(folder / chain, 0, f"missing: the chain is gone, but {heads[chain][0]} records of "
                                                   "it were written (its folder was deleted)"))

    def walk(chain: str, files: list[Path]) -> None:
        seq, prev, keyed, at_head = 0, GENESIS, False, None
        head_seq, head_hash = heads.get(chain, (0, GENESIS))
        for path, number, raw in lines_of(files):
            problem = check_record(raw, seq, prev, key=key, after_keyed=keyed)
            record = json.loads(raw) if problem is None else {}
            if problem is None and key is not None and record.get("mac") != MAC and seq >= head_seq:
                problem = ("an unkeyed record the heads do not anchor (written without the audit key after it "
                           "existed, or the chain was rewritten)")
            if problem is not None:
                problems.append(Problem(path, number, problem))
                return
            seq, prev = record["seq"], record["hash"]
            keyed = keyed or record.get("mac") == MAC
            counts["unkeyed"] += record.get("mac") != MAC
            if seq == head_seq:
                at_head = prev
            counts["checked"] += 1
        last = files[-1] if files else folder / chain
        if seq < head_seq:
            problems.append(Problem(last, 0, f"missing: the chain ends at record {seq}, but {head_seq} were "
                                             "written (records were cut from the end)"))
        elif chain in heads and at_head != head_hash:
            problems.append(Problem(last, 0, f"record {head_seq} is not the one the heads name (the chain was "
                                             "rewritten)"))

    unanchored = [chain for chain, files in chains.items()
                  if key is not None and heads_path.exists() and files and chain not in heads]
    for chain, files in chains.items():
        if chain not in unanchored:
            walk(chain, files)
    if unanchored and heads_path.exists():  # a writer that started after the heads were read anchors at once
        heads = read_heads(heads_path, key)[0]
    for chain in unanchored:
        if chain in heads:
            walk(chain, chains[chain])
        else:
            problems.append(Problem(folder / chain, 0, "the chain is not anchored in the heads (the heads were "
                                                       "deleted and made again, or it was added by hand)"))
    if key is not None and chains and not heads_path.exists():
        problems.append(Problem(heads_path, 0, f"missing: the heads are gone, but {len(chains)} chain(s) are "
                                               "there to anchor (the heads were deleted)"))
    unkeyed = counts["unkeyed"]
    notes = [f"{unkeyed} record(s) were written without the audit key (before it existed)"
             + (": anchored in the heads when the key was made" if key is not None else
                ": their chains show edits by hand, not a rewrite or a chain removed whole")] if unkeyed else []
    return Verified(counts["checked"], problems, notes)


def check_record(raw: bytes, seq: int, prev: str, unit: str = "line", key: AuditKey | None = None,
                 after_keyed: bool = False) -> str | None:
    """What is wrong with ``raw`` as the record after record ``seq`` (whose hash is ``prev``); None: nothing.
    ``unit``: what holds one record, for the message (a line of a file, a record of a table). A keyed record
    needs ``key``; an unkeyed one after keyed ones (``after_keyed``) is a rewrite."""
    try:
        record = json.loads(raw)
    except ValueError:
        return "not a JSON record (edited or cut)"
    if not isinstance(record, dict) or not isinstance(record.get("hash"), str):
        return "not an audit record"
    body = {k: v for k, v in record.items() if k != "hash"}
    if record.get("mac") == MAC:
        if key is None:
            return "a keyed record, but there is no audit key (audit_key_file) to check it with"
        if record.get("key_id") != key.key_id:
            return (f"written with another audit key (key id {record.get('key_id')}, this one is {key.key_id}): "
                    "verify with that key's audit_key_file")
        if not hmac.compare_digest(record_hash(body, key), record["hash"]):
            return "the record was edited (its hash does not match its content)"
    else:
        if after_keyed:
            return "an unkeyed record after keyed ones (the chain was rewritten without the audit key)"
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


# --------------------------------------------------------------------------- refusals before authentication
REFUSALS_PER_CLIENT = 10  # records per (reason, client address) and minute; the rest are counted
REFUSALS_OVERALL = 100  # records per minute for all clients together
REFUSAL_WINDOW_S = 60.0


@dataclass
class RefusalLimiter:
    """Which refusals before authentication (401, the browser guard's 403s) get a record of their own: at most
    ``per_client`` per reason and client address and ``overall`` in all per ``window_s``; the others are counted
    and said in one summary record per reason and client (``suppressed``) once its window has passed (with the
    next refusal, or at ``flush()`` when the server stops). A flood cannot fill the disk: it costs at most
    ``overall`` records and as many summaries a window."""

    per_client: int = REFUSALS_PER_CLIENT
    overall: int = REFUSALS_OVERALL
    window_s: float = REFUSAL_WINDOW_S
    clock: Any = time.monotonic
    # (reason, client) -> [start, recorded, suppressed]
    _windows: dict[tuple[str, str], list] = field(default_factory=dict)
    _overall: list = field(default_factory=lambda: [float("-inf"), 0])  # [start, recorded]
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, reason: str, client: str) -> tuple[bool, list[dict[str, Any]]]:
        """``(record this refusal, summaries due)``; a summary: ``reason``, ``client``, ``suppressed``."""
        with self._lock:
            now = self.clock()
            due = self._ended(now)
            if now - self._overall[0] >= self.window_s:
                self._overall[:] = [now, 0]
            key = (reason, client)
            window = self._windows.get(key)
            if window is None:
                if self._overall[1] >= self.overall:  # past the overall budget: counted under one entry
                    key = (reason, "*")
                    window = self._windows.setdefault(key, [now, self.per_client, 0])
                else:
                    window = self._windows.setdefault(key, [now, 0, 0])
            if window[1] < self.per_client and self._overall[1] < self.overall:
                window[1] += 1
                self._overall[1] += 1
                return True, due
            window[2] += 1
            return False, due

    def _ended(self, now: float) -> list[dict[str, Any]]:
        due = []
        for key, (start, _, suppressed) in list(self._windows.items()):
            if now - start >= self.window_s:
                del self._windows[key]
                if suppressed:
                    due.append({"reason": key[0], "client": key[1], "suppressed": suppressed})
        return due

    def flush(self) -> list[dict[str, Any]]:
        """Every summary still owed (at stop)."""
        with self._lock:
            return self._ended(float("inf"))
