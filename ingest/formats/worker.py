"""The per-file time limit that truly stops a file: heavy formats load in a child process, killed when
one file runs past ``load_timeout_s``.

A thread cannot be stopped from outside, and a parser stuck inside C code (lxml, PDFium, zlib) never
reaches a deadline check; signals do not exist on Windows. So the ingest pipeline keeps one loader
process (multiprocessing "spawn", the same on Linux, macOS and Windows) for a run, sends it each PDF,
Office file or image, and kills and replaces it when a file overruns. Loaders also check the deadline
in their loops, which gives the same message sooner; the kill is the backstop. Plain-text formats
(linear-time parsers) load in-process. The loader and what it starts (one tesseract per OCR page) die together:
the loader leads a process group of its own (a Job Object that kills on close, on Windows).
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import time
from ctypes import wintypes
from pathlib import Path
from typing import Any

from ingest.formats.base import BrokenDocument, LoadedDocument
from ingest.formats.options import LoadOptions, LoadTimeout, PageProgress, timeout_message
from ingest.formats.registry import load, needs_isolation
from rag.core.errors import UnprocessableDocumentError

log = logging.getLogger(__name__)
GRACE_S = 5.0  # beyond load_timeout_s: the loader's own deadline check should fire first
START_TIMEOUT_S = 120.0


def _serve(conn: Any) -> None:  # runs in the child process
    if hasattr(os, "setsid"):
        os.setsid()  # its tesseract processes are in its group: killed with it
    conn.send(("ready",))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        path, data, options = request

        def progress(done: int, total: int) -> None:
            conn.send(("progress", done, total))

        try:
            reply: tuple = ("ok", load(path, data, options, progress))
        except UnprocessableDocumentError as exc:
            reply = ("error", exc)
        except BaseException as exc:  # MemoryError, RecursionError, ...: the file's fault, reported as such
            reply = ("error", BrokenDocument(f"cannot load: {type(exc).__name__}: {exc}"))
        conn.send(reply)


class FileLoader:
    """``load(path, data)`` for the ingest pipeline: isolated under a time limit where the format needs it."""

    def __init__(self, options: LoadOptions | None = None, progress: PageProgress | None = None) -> None:
        self.options = options or LoadOptions()
        self.progress = progress
        self._proc: Any = None
        self._conn: Any = None
        self._job: Any = None
        self._in_process = False  # set when no loader process can be started here

    def __enter__(self) -> "FileLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load(self, path: Path, data: bytes, progress: PageProgress | None = None) -> LoadedDocument:
        progress = progress or self.progress
        if self.options.load_timeout_s <= 0 or not needs_isolation(path) or not self._start():
            return load(path, data, self.options, progress)
        try:
            self._conn.send((Path(path), data, self.options))
        except (BrokenPipeError, EOFError, OSError):  # the child died since the last file: once more
            self._kill()
            if not self._start():
                return load(path, data, self.options, progress)
            self._conn.send((Path(path), data, self.options))
        deadline = time.monotonic() + self.options.load_timeout_s + GRACE_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._conn.poll(remaining):
                self._kill()
                raise LoadTimeout(timeout_message(self.options.load_timeout_s))
            try:
                message = self._conn.recv()
            except (EOFError, OSError) as exc:
                code = self._proc.exitcode if self._proc is not None else None
                self._kill()
                raise BrokenDocument(f"the loader process died reading this file (exit code {code}): "
                                     "a crash in a parser, or out of memory") from exc
            if message[0] == "progress":
                if progress is not None:
                    try:
                        progress(message[1], message[2])
                    except BaseException:  # the run stops (a cancelled job): so does the file's loading
                        self._kill()
                        raise
                continue
            if message[0] == "error":
                raise message[1]
            return message[1]

    def _start(self) -> bool:
        """A running loader process; False (files then load in-process, with the loaders' own deadline
        checks only) when none can be started, e.g. when the main module cannot be re-imported."""
        if self._in_process:
            return False
        if self._proc is not None and self._proc.is_alive():
            return True
        try:
            context = multiprocessing.get_context("spawn")
            parent, child = context.Pipe()
            proc = context.Process(target=_serve, args=(child,), name="rag-file-loader", daemon=True)
            proc.start()
            child.close()
            self._proc, self._conn = proc, parent
            self._job = windows_job_for(proc.pid) if os.name == "nt" else None
            if not parent.poll(START_TIMEOUT_S):
                raise TimeoutError(f"no answer in {START_TIMEOUT_S:g} s")
            parent.recv()
            return True
        except Exception as exc:
            self._kill()
            self._in_process = True
            log.warning("cannot start the file loader process (%s: %s); files load in-process, where "
                        "load_timeout_s is only checked between pages and rows", type(exc).__name__, exc)
            return False

    def _kill(self) -> None:
        proc, conn, job = self._proc, self._conn, self._job
        self._proc = self._conn = self._job = None
        if conn is not None:
            conn.close()
        if job is not None:
            close_windows_job(job, terminate=True)
        if proc is not None:
            if hasattr(os, "killpg"):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the loader's group: its tesseract processes too
                except OSError:  # it had not made its group yet, or is gone
                    pass
            proc.kill()
            proc.join(5)

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            self._conn.send(None)
            self._proc.join(5)
        except (BrokenPipeError, EOFError, OSError):
            pass
        if self._proc is not None and self._proc.is_alive():
            self._kill()
        else:
            self._conn.close()
            if self._job is not None:
                close_windows_job(self._job, terminate=False)
            self._proc = self._conn = self._job = None


def windows_job_for(pid: int) -> Any:
    """A Job Object holding process ``pid`` (and so every process it starts) that kills them all when it is
    closed or this process ends; None when Windows refuses (the loader is then killed alone, as before)."""
    class BasicLimits(ctypes.Structure):
        _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                    ("LimitFlags", wintypes.DWORD), ("MinimumWorkingSetSize", ctypes.c_size_t),
                    ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", wintypes.DWORD),
                    ("Affinity", ctypes.c_size_t), ("PriorityClass", wintypes.DWORD),
                    ("SchedulingClass", wintypes.DWORD)]

    class ExtendedLimits(ctypes.Structure):
        _fields_ = [("BasicLimitInformation", BasicLimits), ("IoInfo", ctypes.c_uint64 * 6),
                    ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                    ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]

    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.OpenProcess.restype = wintypes.HANDLE
    job = kernel32.CreateJobObjectW(None, None)
    if not job:
        return None
    limits = ExtendedLimits()
    limits.BasicLimitInformation.LimitFlags = 0x2000  # JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    process = kernel32.OpenProcess(0x0001 | 0x0100, False, pid)  # PROCESS_TERMINATE | PROCESS_SET_QUOTA
    try:
        if not (process and kernel32.SetInformationJobObject(job, 9, ctypes.byref(limits), ctypes.sizeof(limits))
                and kernel32.AssignProcessToJobObject(job, process)):  # 9: JobObjectExtendedLimitInformation
            log.warning("the file loader is not in a Job Object (%s): a tesseract it started may outlive it",
                        ctypes.WinError())
            kernel32.CloseHandle(job)
            return None
    finally:
        if process:
            kernel32.CloseHandle(process)
    return job


def close_windows_job(job: Any, terminate: bool) -> None:
    """Close ``job`` (every process still in it ends), terminating them first when asked."""
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    if terminate:
        kernel32.TerminateJobObject(job, 1)
    kernel32.CloseHandle(job)
