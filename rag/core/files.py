"""File-system rules that matter on Windows, applied on every platform so they are tested on every platform.

* Windows refuses to rename, replace or delete a file that is open (by us, another worker, a reader, or an
  antivirus scanner that opens each new file for a moment): :func:`replace_file` and :func:`unlink_file` retry
  a few times before giving up.
* Office writes ``~$Name.docx`` lock files next to an open document, and Windows marks files hidden or system:
  :func:`noise_reason` says why such a file is not a document.
* A junction is not a symlink to ``Path.is_symlink()`` on Python < 3.12: :func:`is_link_like` treats it as one,
  but not the reparse points that lead nowhere else (OneDrive's cloud placeholders, a volume mounted in a
  folder).
* ``$RECYCLE.BIN`` and ``System Volume Information`` (hidden and system) hold no one's documents:
  :func:`is_system_folder`.
* Windows device names (``CON``, ``nul``, ``COM1``, ``COM¹``, ``CONIN$``...) open a device whatever the extension:
  :func:`is_device_name`.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

# A sharing violation from an indexer lasts milliseconds; a file held open by a reader lasts longer and is
# reported, not waited for. A virus scanner reads a large new file for seconds: a commit or a move (what
# ``replace_file`` does) waits for it longer.
LOCK_RETRIES = 6
LOCK_RETRY_DELAY_S = 0.05  # doubled on each try: 0.05 + 0.1 + ... ~ 1.6 s in all
MOVE_RETRIES = 14  # the doubling stops at MAX_RETRY_DELAY_S: ~9.5 s in all
MAX_RETRY_DELAY_S = 1.0

FILE_ATTRIBUTE_HIDDEN = getattr(stat, "FILE_ATTRIBUTE_HIDDEN", 0x2)
FILE_ATTRIBUTE_SYSTEM = getattr(stat, "FILE_ATTRIBUTE_SYSTEM", 0x4)
FILE_ATTRIBUTE_REPARSE_POINT = getattr(stat, "FILE_ATTRIBUTE_REPARSE_POINT", 0x400)
REPARSE_TAG_NAME_SURROGATE = 0x20000000  # the tag's bit for "this names another file": symlinks, junctions
IO_REPARSE_TAG_MOUNT_POINT = getattr(stat, "IO_REPARSE_TAG_MOUNT_POINT", 0xA0000003)  # junction or mounted volume
SYSTEM_FOLDER_NAMES = frozenset({"$recycle.bin", "recycler", "system volume information"})
OFFICE_LOCK_PREFIX = "~$"
_SUPERSCRIPT_DIGITS = "¹²³"  # Windows reads COM¹ as COM1
WINDOWS_DEVICE_NAMES = frozenset({
    "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$",
    *(f"{port}{digit}" for port in ("COM", "LPT") for digit in "0123456789" + _SUPERSCRIPT_DIGITS)})


def retry_locked(operation: Callable[[], T], retries: int = LOCK_RETRIES, delay_s: float = LOCK_RETRY_DELAY_S) -> T:
    """``operation()``, tried again after a short, growing pause while it raises PermissionError (a file open
    elsewhere on Windows); the last PermissionError propagates."""
    for attempt in range(retries):
        try:
            return operation()
        except PermissionError:
            if attempt == retries - 1:
                raise
            time.sleep(min(delay_s * 2 ** attempt, MAX_RETRY_DELAY_S))
    raise AssertionError("unreachable")


def replace_file(source: Path | str, target: Path | str, retries: int = MOVE_RETRIES) -> None:
    """``os.replace(source, target)``, retried while a lock on either refuses it. Every rename of the product
    goes through here or ``try_replace`` (tests/test_windows.py checks)."""
    retry_locked(lambda: os.replace(source, target), retries)


def try_replace(source: Path | str, target: Path | str) -> bool:
    """``os.replace(source, target)`` once, for what can wait for a later try (a log rotation): False when
    it was refused."""
    try:
        os.replace(source, target)
    except OSError:
        return False
    return True


@contextmanager
def scratch_folder(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A temporary folder, removed at the end; a file a scanner still holds then (common in %TEMP%) leaves
    it behind rather than failing what succeeded."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        try:
            remove_tree(folder)
        except OSError:
            pass


def read_with_stat(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` and the stat of the handle they were read from, taken before reading: a change
    saved meanwhile leaves a newer mtime on disk than the one returned, so it is seen the next time."""
    with path.open("rb") as handle:
        stat_result = os.fstat(handle.fileno())
        return handle.read(), stat_result


def unlink_file(path: Path) -> None:
    """Delete ``path`` if it is there, retried while a lock refuses it."""
    retry_locked(lambda: path.unlink(missing_ok=True))


def windows_attributes(path: Path) -> int:
    """The Windows file attributes of ``path`` itself (not a link's target); 0 where there are none."""
    try:
        return int(getattr(os.lstat(path), "st_file_attributes", 0))
    except OSError:
        return 0


def windows_reparse_point(path: Path) -> tuple[int, str | None]:
    """The reparse tag of ``path`` itself (0: none, or not reported) and, for a mount point, what it names."""
    try:
        tag = int(getattr(os.lstat(path), "st_reparse_tag", 0))
    except OSError:
        return 0, None
    target = None
    if tag == IO_REPARSE_TAG_MOUNT_POINT:
        try:
            target = os.readlink(path)
        except (OSError, ValueError):
            pass
    return tag, target


def is_link_like(path: Path) -> bool:
    """A symlink or a junction: something that leads elsewhere. A reparse point that is no name surrogate (a
    cloud placeholder) or a volume mounted into a folder holds its own files."""
    if path.is_symlink():
        return True
    if not windows_attributes(path) & FILE_ATTRIBUTE_REPARSE_POINT:
        return False
    tag, target = windows_reparse_point(path)
    if not tag:
        return True  # a reparse point of unknown kind: not followed, as before tags were read
    if not tag & REPARSE_TAG_NAME_SURROGATE:
        return False
    return not (tag == IO_REPARSE_TAG_MOUNT_POINT and target is not None
                and target.lstrip("\\?").startswith("Volume{"))


def is_system_folder(path: Path) -> bool:
    """A folder of Windows' own that holds no one's documents (the recycle bin: every user's deleted files)."""
    attributes = windows_attributes(path)
    return bool(attributes & FILE_ATTRIBUTE_HIDDEN and attributes & FILE_ATTRIBUTE_SYSTEM) or \
        path.name.lower() in SYSTEM_FOLDER_NAMES


def noise_reason(path: Path) -> str | None:
    """Why ``path`` is not a document a user put there (an Office lock file, a hidden or system file), or None."""
    if path.name.startswith(OFFICE_LOCK_PREFIX):
        return "an Office lock file (the document is open somewhere)"
    attributes = windows_attributes(path)
    if attributes & FILE_ATTRIBUTE_SYSTEM:
        return "a system file"
    if attributes & FILE_ATTRIBUTE_HIDDEN:
        return "a hidden file"
    return None


def is_device_name(name: str) -> bool:
    """Whether Windows opens a device for ``name``: its part before the first dot, case and trailing spaces
    aside, is a device name ("nul.txt", "COM1.tar.gz", "con ")."""
    return name.partition(".")[0].rstrip(" ").upper() in WINDOWS_DEVICE_NAMES


def windows_short_path(path: str) -> str | None:
    """Windows' 8.3 spelling of ``path`` (ASCII where the volume keeps 8.3 names), or None."""
    if os.name != "nt":
        return None
    import ctypes  # lazy: Windows only (windll)

    size = ctypes.windll.kernel32.GetShortPathNameW(path, None, 0)  # type: ignore[attr-defined]
    if not size:
        return None
    buffer = ctypes.create_unicode_buffer(size)
    return buffer.value if ctypes.windll.kernel32.GetShortPathNameW(path, buffer, size) else None  # type: ignore[attr-defined]


def path_for_native_library(path: Path, windows: bool = os.name == "nt",
                            short_path: Callable[[str], str | None] = windows_short_path) -> str | None:
    """A spelling of ``path`` that a C library opening it with ``fopen``/``std::ifstream`` can use, or None
    (then :func:`inside_folder` is the way left).

    On Windows such a library takes the ANSI code page, not Unicode, so a path outside ASCII (a home under
    ``C:\\Users\\Jürgen``) is not found; a relative path from the current folder sometimes avoids the foreign
    characters, the 8.3 short path usually does. Elsewhere, every path works as it is."""
    absolute = os.path.abspath(path)
    if not windows or absolute.isascii():
        return absolute
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive
        relative = ""
    if relative and relative.isascii():
        return relative
    short = short_path(absolute)
    return short if short and short.isascii() else None


_CURRENT_FOLDER = threading.Lock()


@contextmanager
def inside_folder(folder: Path) -> Iterator[str]:
    """``folder`` made the current folder for the block, which gets ``"."`` to open it by: a native library
    that cannot open ``folder``'s own spelling opens it so, whatever folder the process started in (a Windows
    service starts in ``C:\\Windows\\System32``). The current folder is the process's: one block at a time."""
    with _CURRENT_FOLDER:
        before = os.getcwd()
        os.chdir(folder)
        try:
            yield "."
        finally:
            os.chdir(before)


def make_writable(tree: Path) -> None:
    """Clear read-only flags under ``tree`` (a copy from a DVD or an ISO keeps them; Windows then refuses to
    replace or delete those files)."""
    for folder, _, names in os.walk(tree):
        for path in [Path(folder), *(Path(folder) / n for n in names)]:
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and not mode & stat.S_IWRITE:
                os.chmod(path, stat.S_IMODE(mode) | stat.S_IWRITE)


def remove_tree(tree: Path) -> None:
    """Delete ``tree`` (if it is there): read-only files too, each deletion retried while a lock refuses it."""
    if not os.path.lexists(tree):
        return

    def again(function, path, *_) -> None:
        os.chmod(path, stat.S_IWRITE | stat.S_IREAD | stat.S_IEXEC)
        retry_locked(lambda: function(path))

    if sys.version_info >= (3, 12):
        shutil.rmtree(tree, onexc=again)
    else:
        shutil.rmtree(tree, onerror=again)


# --------------------------------------------------------------------------- who may change a folder
# A folder made under C:\ inherits "Authenticated Users: Modify": rag's home (rag.toml, the key store, the audit
# trail) is made for its owner instead: full control for the owner, SYSTEM and administrators, nothing inherited.
PRIVATE_FOLDER_SDDL = "D:P(A;OICI;FA;;;OW)(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"
_OTHERS = {"WD": "Everyone", "S-1-1-0": "Everyone", "AU": "Authenticated Users", "S-1-5-11": "Authenticated Users",
           "BU": "Users", "S-1-5-32-545": "Users", "IU": "Interactive users", "S-1-5-4": "Interactive users",
           "AN": "Anonymous", "S-1-5-7": "Anonymous", "DU": "Domain Users", "BG": "Guests", "S-1-5-32-546": "Guests"}
# Rights that change a folder or what is in it: FILE_WRITE_DATA/ADD_FILE, APPEND/ADD_SUBDIRECTORY,
# FILE_WRITE_EA, FILE_DELETE_CHILD, FILE_WRITE_ATTRIBUTES, DELETE, WRITE_DAC, WRITE_OWNER, GENERIC_ALL/WRITE.
_WRITE_MASK = 0x2 | 0x4 | 0x10 | 0x40 | 0x100 | 0x10000 | 0x40000 | 0x80000 | 0x10000000 | 0x40000000
_SDDL_RIGHTS = {"FA": 0x1F01FF, "FW": 0x116, "GA": 0x10000000, "GW": 0x40000000, "SD": 0x10000, "WD": 0x40000,
                "WO": 0x80000, "DC": 0x2, "LC": 0x4, "WP": 0x20, "DT": 0x40, "CC": 0x1, "RP": 0x10}


def others_who_may_write(sddl: str) -> list[str]:
    """Who, besides the owner, administrators and SYSTEM, may change a folder or the files in it, from its
    security descriptor in SDDL (allow entries for Everyone, Authenticated Users, Users... with a write right)."""
    found: list[str] = []
    dacl = sddl.split("D:", 1)[1] if "D:" in sddl else ""
    for entry in dacl.split("(")[1:]:
        fields = entry.split(")")[0].split(";")
        if len(fields) < 6 or fields[0] != "A" or fields[5] not in _OTHERS:
            continue
        rights = fields[2]
        if rights.lower().startswith("0x"):
            mask = int(rights, 16)
        else:
            mask = sum(_SDDL_RIGHTS.get(rights[i:i + 2], 0) for i in range(0, len(rights), 2))
        if mask & _WRITE_MASK and _OTHERS[fields[5]] not in found:
            found.append(_OTHERS[fields[5]])
    return found


def _windows_security(path: Path, sddl: str | None = None) -> str:
    """The DACL of ``path`` in SDDL; with ``sddl``, that DACL set on it first."""
    # lazy: Windows only (windll, advapi32)
    import ctypes
    from ctypes import wintypes

    advapi32, kernel32 = ctypes.windll.advapi32, ctypes.windll.kernel32  # type: ignore[attr-defined]
    dacl_information, sddl_revision = 0x4, 1
    if sddl is not None:
        descriptor = ctypes.c_void_p()
        if not advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW(sddl, sddl_revision,
                                                                             ctypes.byref(descriptor), None):
            raise ctypes.WinError()
        try:
            if not advapi32.SetFileSecurityW(str(path), dacl_information, descriptor):
                raise ctypes.WinError()
        finally:
            kernel32.LocalFree(descriptor)
    needed = wintypes.DWORD()
    advapi32.GetFileSecurityW(str(path), dacl_information, None, 0, ctypes.byref(needed))
    buffer = ctypes.create_string_buffer(needed.value)
    if not advapi32.GetFileSecurityW(str(path), dacl_information, buffer, needed, ctypes.byref(needed)):
        raise ctypes.WinError()
    text = wintypes.LPWSTR()
    if not advapi32.ConvertSecurityDescriptorToStringSecurityDescriptorW(buffer, sddl_revision, dacl_information,
                                                                         ctypes.byref(text), None):
        raise ctypes.WinError()
    try:
        return text.value or ""
    finally:
        kernel32.LocalFree(text)


def make_private_folder(path: Path) -> None:
    """Create the folder ``path`` (and its missing parents) for its owner only: ``PRIVATE_FOLDER_SDDL`` on
    Windows, mode 0700 elsewhere. A folder that exists is left as it is (``writable_by_others`` tells)."""
    if path.is_dir():
        return
    path.mkdir(parents=True, exist_ok=True)
    if os.name == "nt":
        _windows_security(path, PRIVATE_FOLDER_SDDL)
    else:
        os.chmod(path, 0o700)


def writable_by_others(path: Path) -> str | None:
    """Who besides its owner (and the administrators) may change ``path`` or what is in it, in words; None: nobody."""
    if os.name == "nt":
        return ", ".join(others_who_may_write(_windows_security(path))) or None
    mode = stat.S_IMODE(os.stat(path).st_mode)
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "all others")) if mode & bit]
    return f"{' and '.join(who)} (mode {mode:04o})" if who else None
