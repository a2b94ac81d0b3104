"""Windows' file-system rules, imposed on Linux for a test (no Windows machine runs the suite).

``WindowsRules`` patches ``os.replace``/``os.rename``/``os.unlink``/``os.remove``/``os.rmdir`` (which pathlib and
shutil call) so that, as on Windows:

* a file that this process has open (tracked with psutil, the way Windows tracks handles) cannot be replaced,
  renamed or deleted, nor can a folder that holds an open file be renamed or removed: PermissionError;
* ``os.rename`` onto an existing file fails (FileExistsError), unless the names differ only in case;
* ``max_path``: opening a file whose absolute path is longer fails (Windows' MAX_PATH, 260 with the NUL,
  when LongPathsEnabled is off);
* ``fail_next(n, where)`` makes the next ``n`` such calls on a path containing ``where`` raise PermissionError
  once each: a scanner that opened the new file for a moment.
"""

from __future__ import annotations

import errno
import os
import pathlib
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest


def _full(path, dir_fd: int | None) -> Path:
    path = Path(os.fsdecode(path))
    if dir_fd is not None and not path.is_absolute():
        path = Path(os.readlink(f"/proc/self/fd/{dir_fd}")) / path
    return Path(os.path.abspath(path))


@dataclass
class WindowsRules:
    injected: list[str] = field(default_factory=list)  # one entry per refusal still to come: a path fragment
    refused: list[str] = field(default_factory=list)  # what was refused, for assertions
    max_path: int | None = None

    def fail_next(self, times: int = 1, where: str = "") -> None:
        self.injected += [where] * times

    def check(self, operation: str, *paths: Path) -> None:
        for path in paths:
            for i, where in enumerate(self.injected):
                if where in str(path):
                    del self.injected[i]
                    self.refused.append(f"{operation} {path} (injected)")
                    raise PermissionError(errno.EACCES, "The process cannot access the file because it is "
                                                        "being used by another process (injected)", str(path))
        open_now = [Path(f.path) for f in psutil.Process().open_files()]
        for path in paths:
            for held in open_now:
                if held == path or path in held.parents:
                    self.refused.append(f"{operation} {path} (open: {held})")
                    raise PermissionError(errno.EACCES, "The process cannot access the file because it is "
                                                        f"being used by another process ({held})", str(path))


@pytest.fixture()
def windows_rules(monkeypatch: pytest.MonkeyPatch) -> WindowsRules:
    rules = WindowsRules()
    real_replace, real_rename, real_unlink, real_rmdir = os.replace, os.rename, os.unlink, os.rmdir

    def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        rules.check("replace", _full(src, src_dir_fd), _full(dst, dst_dir_fd))
        return real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        source, target = _full(src, src_dir_fd), _full(dst, dst_dir_fd)
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

    real_open = pathlib.Path.open

    def path_open(self, *args, **kwargs):
        full = os.path.abspath(self)
        if rules.max_path is not None and len(full) > rules.max_path:
            rules.refused.append(f"open {full} (longer than {rules.max_path})")
            raise FileNotFoundError(errno.ENOENT, "The system cannot find the path specified", full)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", path_open)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "remove", unlink)
    monkeypatch.setattr(os, "rmdir", rmdir)
    return rules
