"""Windows' file-system rules, imposed on Linux for a test (no Windows machine runs the suite).

``WindowsRules`` patches the ``os`` functions that pathlib and shutil call (and ``sqlite3.connect``) so that, as on
Windows:

* a file that this process **or one of its child processes** has open (tracked with psutil, the way Windows
  tracks handles) cannot be replaced, renamed or deleted, unless the handle shares delete access; nor can a
  folder that holds an open file, or that is a child process's current folder, be renamed or removed:
  PermissionError. ``held_elsewhere(path, share)`` opens ``path`` in another real process with Windows' share
  modes (``"rw"``: read and write, what Python's ``open`` and SQLite ask for; add ``"d"`` for delete, what
  a careful scanner asks for); a child ``rag serve`` holds its files the same way;
* ``os.rename`` onto an existing file fails (FileExistsError), unless the names differ only in case;
* names are case-insensitive: ``stat``/``lstat`` (so ``exists``/``is_dir``/``is_file``) and opening find
  ``docs`` when the folder is ``Docs``;
* ``max_path``: every path call (open, ``stat``, ``mkdir``, ``replace``/``rename``, ``sqlite3.connect``) on an
  absolute path longer than that fails (Windows' MAX_PATH, 260 with the NUL, when LongPathsEnabled is off);
* ``fail_next(n, where)`` makes the next ``n`` replace/rename/delete calls on a path containing ``where`` raise
  PermissionError once each: a scanner that opened the new file for a moment.

``install(rules)`` applies them to a whole process (``tests/windows_child.py`` runs ``rag`` under them).
"""

from __future__ import annotations

import builtins
import errno
import os
import pathlib
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import psutil
import pytest

_REAL_LSTAT = os.lstat  # the rules' own look-ups must not go through the rules
IN_USE = "The process cannot access the file because it is being used by another process"


def _full(path, dir_fd: int | None = None) -> Path:
    path = Path(os.fsdecode(path))
    if dir_fd is not None and not path.is_absolute():
        path = Path(os.readlink(f"/proc/self/fd/{dir_fd}")) / path
    return Path(os.path.abspath(path))


@dataclass
class Handle:
    path: Path
    share_delete: bool
    pid: int
    folder: bool = False  # a current folder (or a folder opened as such): only its tree is held


@dataclass
class WindowsRules:
    injected: list[str] = field(default_factory=list)  # one entry per refusal still to come: a path fragment
    refused: list[str] = field(default_factory=list)  # what was refused, for assertions
    max_path: int | None = None
    share_delete: dict[int, set[Path]] = field(default_factory=dict)  # pid -> files it opened sharing delete
    holders: list[subprocess.Popen] = field(default_factory=list)

    def fail_next(self, times: int = 1, where: str = "") -> None:
        self.injected += [where] * times

    @contextmanager
    def held_elsewhere(self, path: Path, share: str = "rw") -> Iterator[subprocess.Popen]:
        """``path`` (a file, or a folder: its current folder) held open by another process until the block ends."""
        holder = self.hold(path, share)
        try:
            yield holder
        finally:
            self.release(holder)

    def hold(self, path: Path, share: str = "rw") -> subprocess.Popen:
        """Like ``held_elsewhere``, until ``release(holder)``."""
        folder = path.is_dir()
        code = ("import os, sys; f = None if sys.argv[2] == 'dir' else open(sys.argv[1], 'rb'); "
                "os.chdir(sys.argv[1]) if sys.argv[2] == 'dir' else None; print('ready', flush=True); "
                "sys.stdin.read()")
        holder = subprocess.Popen([sys.executable, "-c", code, str(path), "dir" if folder else "file"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        if "d" in share:
            self.share_delete.setdefault(holder.pid, set()).add(_full(path))
        self.holders.append(holder)
        return holder

    def release(self, holder: subprocess.Popen) -> None:
        if holder.poll() is None:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(10)
        self.share_delete.pop(holder.pid, None)
        if holder in self.holders:
            self.holders.remove(holder)

    def close(self) -> None:
        for holder in list(self.holders):
            self.release(holder)

    def handles(self) -> list[Handle]:
        """Every file this process and its children hold open, and the children's current folders."""
        found: list[Handle] = []
        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            try:
                files = process.open_files()
                cwd = process.cwd() if process.pid != me.pid else None
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            shared = self.share_delete.get(process.pid, set())
            found += [Handle(Path(f.path), Path(f.path) in shared, process.pid) for f in files]
            if cwd is not None:
                found.append(Handle(Path(cwd), False, process.pid, folder=True))
        return found

    def check(self, operation: str, *paths: Path) -> None:
        for path in paths:
            for i, where in enumerate(self.injected):
                if where in str(path):
                    del self.injected[i]
                    self.refused.append(f"{operation} {path} (injected)")
                    raise PermissionError(errno.EACCES, f"{IN_USE} (injected)", str(path))
        handles = self.handles()
        for path in paths:
            for held in handles:
                inside = path in held.path.parents or (held.folder and held.path == path)
                if inside or (held.path == path and not held.share_delete):
                    whose = "open" if held.pid == os.getpid() else f"open in process {held.pid}"
                    self.refused.append(f"{operation} {path} ({whose}: {held.path})")
                    raise PermissionError(errno.EACCES, f"{IN_USE} ({held.path})", str(path))

    def check_length(self, operation: str, path) -> None:
        if self.max_path is None or isinstance(path, int):
            return
        full = os.path.abspath(os.fsdecode(path))
        if len(full) > self.max_path:
            self.refused.append(f"{operation} {full} (longer than {self.max_path})")
            raise FileNotFoundError(errno.ENOENT, "The system cannot find the path specified", full)


def _lexists(path) -> bool:
    try:
        _REAL_LSTAT(path)
    except (OSError, ValueError):
        return False
    return True


def case_insensitive(path) -> str:
    """``path`` as it is spelled on disk when only its letter case differs (the path itself when it exists or
    no spelling matches)."""
    text = os.fsdecode(path)
    if _lexists(text):
        return text
    full = Path(os.path.abspath(text))
    current = Path(full.anchor)
    for part in full.parts[1:]:
        exact = current / part
        if not _lexists(exact):
            try:
                exact = next((current / n for n in os.listdir(current) if n.casefold() == part.casefold()), exact)
            except OSError:
                return text
        current = exact
    return str(current) if _lexists(current) else text


@dataclass
class Patches:
    """What ``install`` replaced, for ``uninstall``."""

    saved: list[tuple[object, str, object]] = field(default_factory=list)

    def set(self, owner: object, name: str, value: object) -> None:
        self.saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def undo(self) -> None:
        for owner, name, value in reversed(self.saved):
            setattr(owner, name, value)
        self.saved.clear()


def install(rules: WindowsRules, patch=None) -> Patches:
    """Impose ``rules`` on this process: ``patch(owner, name, value)`` (``monkeypatch.setattr`` in a test)."""
    patches = Patches()
    patch = patch or patches.set
    real_replace, real_rename, real_unlink, real_rmdir = os.replace, os.rename, os.unlink, os.rmdir
    real_stat, real_lstat, real_mkdir, real_connect = os.stat, os.lstat, os.mkdir, sqlite3.connect
    real_open, real_builtin_open = pathlib.Path.open, builtins.open

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        source, target = _full(src, src_dir_fd), _full(dst, dst_dir_fd)
        rules.check_length("replace", source)
        rules.check_length("replace", target)
        rules.check("replace", source, target)
        return real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        source, target = _full(src, src_dir_fd), _full(dst, dst_dir_fd)
        rules.check_length("rename", source)
        rules.check_length("rename", target)
        rules.check("rename", source, target)
        if target.exists() and source.name.casefold() != target.name.casefold():
            raise FileExistsError(errno.EEXIST, "Cannot create a file when that file already exists", str(target))
        return real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def unlink(path, *, dir_fd=None):
        rules.check("unlink", _full(path, dir_fd))
        return real_unlink(path, dir_fd=dir_fd)

    def rmdir(path, *, dir_fd=None):
        rules.check("rmdir", _full(path, dir_fd))
        return real_rmdir(path, dir_fd=dir_fd)

    def stat(path, *, dir_fd=None, follow_symlinks=True):
        if dir_fd is None and not isinstance(path, int):
            rules.check_length("stat", path)
            path = case_insensitive(path)
        return real_stat(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    def lstat(path, *, dir_fd=None):
        if dir_fd is None:
            rules.check_length("stat", path)
            path = case_insensitive(path)
        return real_lstat(path, dir_fd=dir_fd)

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if dir_fd is None:
            rules.check_length("mkdir", path)
            if _lexists(case_insensitive(path)):
                raise FileExistsError(errno.EEXIST, "Cannot create a file when that file already exists", path)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    def connect(database, *args, **kwargs):
        if isinstance(database, (str, bytes, os.PathLike)) and os.fsdecode(database) != ":memory:":
            rules.check_length("sqlite3.connect", database)
            database = case_insensitive(database)
        return real_connect(database, *args, **kwargs)

    def path_open(self, *args, **kwargs):
        rules.check_length("open", self)
        return real_open(pathlib.Path(case_insensitive(self)), *args, **kwargs)

    def builtin_open(file, *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)):
            rules.check_length("open", file)
            file = case_insensitive(file)
        return real_builtin_open(file, *args, **kwargs)

    patch(pathlib.Path, "open", path_open)
    patch(builtins, "open", builtin_open)
    patch(os, "replace", replace)
    patch(os, "rename", rename)
    patch(os, "unlink", unlink)
    patch(os, "remove", unlink)
    patch(os, "rmdir", rmdir)
    patch(os, "stat", stat)
    patch(os, "lstat", lstat)
    patch(os, "mkdir", mkdir)
    patch(sqlite3, "connect", connect)
    return patches


@pytest.fixture()
def windows_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[WindowsRules]:
    rules = WindowsRules()
    install(rules, monkeypatch.setattr)
    yield rules
    monkeypatch.undo()
    rules.close()


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
