"""tools/avx2_view: a library whose cpuid / xgetbv were turned into traps sees no AVX-512 or AVX-VNNI once the
trap handler is loaded, and the same feature words otherwise (the AVX2 figures of issues 33, 38 and 39 are
measured through it on machines with AVX-512)."""

from __future__ import annotations

import importlib.util
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "avx2_view"
PROBE = r"""
#include <cpuid.h>
#include <stdint.h>
unsigned leaf7_ebx(void) { unsigned a, b, c, d; __cpuid_count(7, 0, a, b, c, d); return b; }
unsigned leaf7_1_eax(void) { unsigned a, b, c, d; __cpuid_count(7, 1, a, b, c, d); return a; }
unsigned leaf1_ecx(void) { unsigned a, b, c, d; __cpuid(1, a, b, c, d); return c; }
uint64_t xcr0(void) { uint32_t lo, hi; __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0)); return ((uint64_t)hi << 32) | lo; }
"""
READ = r"""
import ctypes, json, sys
if sys.argv[2] == "trapped":
    ctypes.CDLL(sys.argv[3])
lib = ctypes.CDLL(sys.argv[1])
for name in ("leaf7_ebx", "leaf7_1_eax", "leaf1_ecx"):
    getattr(lib, name).restype = ctypes.c_uint32
lib.xcr0.restype = ctypes.c_uint64
print(json.dumps({"ebx": lib.leaf7_ebx(), "eax1": lib.leaf7_1_eax(), "ecx": lib.leaf1_ecx(), "xcr0": lib.xcr0()}))
"""


def load_tool():
    spec = importlib.util.spec_from_file_location("make_view", TOOL / "make_view.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() != "x86_64",
                    reason="the AVX2 view is a developer's tool for Linux on x86-64")
def test_a_patched_library_sees_avx2_only_and_the_rest_unchanged(tmp_path: Path):
    make_view = load_tool()
    (tmp_path / "probe.c").write_text(PROBE)
    plain = tmp_path / "libprobe.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(plain), str(tmp_path / "probe.c")], check=True)
    patched = tmp_path / "libprobe-patched.so"
    shutil.copy(plain, patched)
    assert make_view.patch(patched) == 4  # three cpuid, one xgetbv
    assert make_view.trap_sites(patched) == []  # objdump now decodes int3s there
    handler = tmp_path / "cpuid_trap.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(handler), str(TOOL / "cpuid_trap.c")], check=True)

    def read(lib: Path, mode: str) -> dict:
        run = subprocess.run([sys.executable, "-c", READ, str(lib), mode, str(handler)], capture_output=True,
                             text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    real, seen = read(plain, "plain"), read(patched, "trapped")
    avx512f, avx_vnni = 1 << 16, 1 << 4
    assert seen["ebx"] & avx512f == 0 and seen["xcr0"] & 0xE0 == 0 and seen["eax1"] & avx_vnni == 0
    assert seen["ebx"] & (1 << 5) == real["ebx"] & (1 << 5)  # AVX2 stays as the CPU has it
    assert seen["ecx"] == real["ecx"] and seen["xcr0"] & 0x7 == real["xcr0"] & 0x7  # leaf 1, SSE/AVX state kept
    assert seen["ebx"] == real["ebx"] & ~0xDC230000  # only the AVX-512 bits of leaf 7 are cleared
