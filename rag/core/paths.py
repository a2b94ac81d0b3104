"""A document's path, twice: its identity and its display spelling.

* The **identity** is what dedupe, replace, delete by path, syncs, folder groups and sources compare (and what
  a document id is a hash of): absolute, links and junctions resolved, case-folded where the platform folds
  it. On Windows it must not depend on how a folder was reached: ``Z:\\Docs`` (a mapped network drive) and
  ``\\\\server\\share\\Docs`` are one folder. Resolving a link turns a mapped drive into its UNC path, but
  only while the share can be opened; a drive letter is therefore mapped to its UNC root first, so an offline
  share, or a path that does not exist yet, gets the same identity too. Windows' extended-length prefix
  (``\\\\?\\``), which resolving keeps on some long paths, is dropped.
* The **display** spelling is what people see (sources, document lists, citations, the web app): absolute,
  as the user or the file system spelled it — letter case kept, drive letters and links not resolved.

The rules are pure functions of the platform's facts (:class:`PathRules`), so tests on Linux take Windows'.
"""

from __future__ import annotations

import ntpath
import os
import posixpath
import threading
import time
from dataclasses import dataclass
from typing import Callable

EXTENDED_PREFIX = "\\\\?\\"
EXTENDED_UNC_PREFIX = "\\\\?\\UNC\\"


@dataclass(frozen=True)
class PathRules:
    """The facts of a platform that a path's identity depends on."""

    windows: bool  # drive letters, UNC paths, "\\" separators
    case_insensitive: bool  # identities are case-folded
    realpath: Callable[[str], str]  # an absolute path with its links (and, on Windows, junctions) resolved
    mapped_drive: Callable[[str], str | None] = lambda drive: None  # "Z:" -> "\\\\server\\share", or None
    drive_exists: Callable[[str], bool] = lambda drive: True  # "Z:" is a drive of this logon session


def fold_case(name: str) -> str:
    """``name`` as case-insensitive identities compare it: each character lower-cased on its own, as NTFS
    compares names, never ``str.casefold``'s expansions ("Straße" and "Strasse" are two files there)."""
    return name.lower()


def is_under(path: str, folder: str, sep: str = os.sep) -> bool:
    """Whether the identity ``path`` lies inside the identity ``folder`` (a drive or file-system root, which
    ends in the separator already, too)."""
    return path != folder and path.startswith(folder if folder.endswith(sep) else folder + sep)


def path_identity(path: str, rules: PathRules) -> str:
    """The identity of ``path`` under ``rules`` (see the module notes)."""
    flavour = ntpath if rules.windows else posixpath
    absolute = flavour.abspath(path)
    if rules.windows:
        absolute = _unc(absolute, rules.mapped_drive)
    resolved = rules.realpath(absolute)
    if rules.windows:
        resolved = _unc(resolved, rules.mapped_drive)
    if rules.case_insensitive:
        resolved = ntpath.normcase(resolved) if rules.windows else fold_case(resolved)
    return resolved


def path_lexical_identity(path: str, rules: PathRules) -> str:
    """What ``path`` would be as an identity, by its spelling alone: absolute, case-folded where the platform
    folds it — never resolved on disk, never a drive mapping looked up. For paths a caller sends (a document
    filter, a delete, a source): matched against stored identities, they never make the service open a file,
    a link or a network share (a reader sending ``\\\\host\\share\\x`` on Windows would otherwise have the
    service connect to that host with its account's credentials)."""
    flavour = ntpath if rules.windows else posixpath
    absolute = flavour.abspath(path)
    if rules.windows:
        absolute = _unc(absolute, lambda drive: None)
    if rules.case_insensitive:
        absolute = ntpath.normcase(absolute) if rules.windows else absolute.lower()
    return absolute


def unreachable_drive(path: str, rules: PathRules) -> str | None:
    """The drive letter of ``path`` ("Z:") when this session has no such drive and no mapping for it — a network
    drive mapped in a user's logon session is not there for a service or an elevated session, so a folder spelled
    with it never matches the files it names; None when the path can be reached as spelled (or has no letter)."""
    if not rules.windows:
        return None
    drive, _ = ntpath.splitdrive(path)
    if len(drive) != 2 or drive[1] != ":":
        return None
    letter = drive.upper()
    return None if rules.drive_exists(letter) or rules.mapped_drive(letter) else letter


def path_display(path: str, rules: PathRules) -> str:
    """The display spelling of ``path`` under ``rules``: absolute, nothing resolved, letter case kept."""
    return (ntpath if rules.windows else posixpath).abspath(path)


def _unc(path: str, mapped_drive: Callable[[str], str | None]) -> str:
    """A Windows path without the extended-length prefix, a mapped drive letter spelled as its UNC root."""
    if path.upper().startswith(EXTENDED_UNC_PREFIX):
        path = "\\\\" + path[len(EXTENDED_UNC_PREFIX):]
    elif path.startswith(EXTENDED_PREFIX) and path[len(EXTENDED_PREFIX) + 1:len(EXTENDED_PREFIX) + 2] == ":":
        path = path[len(EXTENDED_PREFIX):]
    drive, rest = ntpath.splitdrive(path)
    if len(drive) == 2 and drive[1] == ":":
        root = mapped_drive(drive.upper())
        if root:
            return root.rstrip("\\") + (rest if rest.startswith("\\") else "\\" + rest)
    return path


# --------------------------------------------------------------------------- this machine
MAPPED_DRIVE_TTL_S = 60.0  # a drive mapped or unmapped while a server runs is seen within a minute
_mapped: dict[str, tuple[float, str | None]] = {}
_mapped_lock = threading.Lock()


def windows_mapped_drive(drive: str) -> str | None:
    """The UNC root the network drive ``drive`` ("Z:") is mapped to in this logon session, None for a local
    drive (or one not mapped here: a service often does not see the user's mappings)."""
    now = time.monotonic()
    with _mapped_lock:
        cached = _mapped.get(drive)
        if cached is not None and now - cached[0] < MAPPED_DRIVE_TTL_S:
            return cached[1]
    root = _query_mapped_drive(drive)
    with _mapped_lock:
        _mapped[drive] = (now, root)
    return root


def _query_mapped_drive(drive: str) -> str | None:
    # lazy: Windows only (windll)
    import ctypes
    from ctypes import wintypes

    buffer = ctypes.create_unicode_buffer(1024)
    size = wintypes.DWORD(len(buffer))
    try:
        result = ctypes.WinDLL("mpr").WNetGetConnectionW(drive, buffer, ctypes.byref(size))
    except (OSError, AttributeError):
        return None
    # 0: connected; 1201 (ERROR_CONNECTION_UNAVAIL): a remembered mapping that is not connected right now.
    return (buffer.value or None) if result in (0, 1201) else None


def windows_drive_exists(drive: str) -> bool:
    """Whether ``drive`` ("Z:") is a drive of this logon session (GetDriveTypeW is not DRIVE_NO_ROOT_DIR)."""
    import ctypes  # lazy: Windows only (windll)

    try:
        return ctypes.WinDLL("kernel32").GetDriveTypeW(f"{drive}\\") != 1
    except (OSError, AttributeError):
        return True


def local_rules() -> PathRules:
    """This machine's rules. Identities are case-folded on Windows only: macOS ignores case too, but folding
    there would change the id of every document its indexes already hold."""
    windows = os.name == "nt"
    return PathRules(windows=windows, case_insensitive=windows, realpath=os.path.realpath,
                     mapped_drive=windows_mapped_drive if windows else (lambda drive: None),
                     drive_exists=windows_drive_exists if windows else (lambda drive: True))


LOCAL = local_rules()


def identity(path: str | os.PathLike[str]) -> str:
    """``path``'s identity on this machine."""
    return path_identity(os.fspath(path), LOCAL)


def lexical_identity(path: str | os.PathLike[str]) -> str:
    """``path``'s identity on this machine by its spelling alone (``path_lexical_identity``)."""
    return path_lexical_identity(os.fspath(path), LOCAL)


def unreachable_drive_here(path: str | os.PathLike[str]) -> str | None:
    """``unreachable_drive`` with this machine's facts."""
    return unreachable_drive(os.fspath(path), LOCAL)


def display(path: str | os.PathLike[str]) -> str:
    """``path``'s display spelling on this machine."""
    return path_display(os.fspath(path), LOCAL)
