"""Which generator a machine gets by default: a small table and a pure function over it.

The rule (``LADDER``, largest first): the first rung whose needs the machine meets -- total memory,
logical cores, CPU instruction sets (all of them) -- is the default; the last rung needs nothing, so a
small machine gets a small model, never a failure. Today: Qwen2.5-Coder-0.5B-Instruct with 6 GB of
memory or more, else SmolLM2-135M-Instruct. Change the default by editing the table (e.g. put
Qwen2.5-Coder-1.5B first with its own threshold). The setting ``generator`` (a ladder name or a folder
under models/) or ``generator_dir`` overrides the choice; ``rag info`` says which model is used and why.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import psutil


@dataclass(frozen=True)
class Rung:
    model: str  # folder name under models/ (``rag models prepare`` builds it from a known source)
    alias: str  # the short name accepted by the ``generator`` setting and ``--generator``
    label: str
    min_memory_gb: float = 0.0  # total memory
    min_cores: int = 1  # logical cores
    cpu_flags: tuple[str, ...] = ()  # /proc/cpuinfo flags, all needed (e.g. "avx2"); () = any CPU


SMOLLM2_135M = Rung("smollm2-135m-instruct-int4", "smollm2-135m", "SmolLM2-135M-Instruct")
QWEN25_CODER_05B = Rung("qwen25-coder-0.5b-int4", "qwen25-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct",
                        min_memory_gb=6.0)
QWEN25_CODER_15B = Rung("qwen25-coder-1.5b-int4", "qwen25-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct",
                        min_memory_gb=12.0)

# The default rule, largest first; the last rung must need nothing. The 1.5B is a known model (prepare it
# with --generator qwen25-coder-1.5b) but not a default: add QWEN25_CODER_15B in front to make it one. Measured
# 2026-11-29 on 2 VNNI cores (docs/models.md): it answers no better than the 0.5B on the dev set (73.5% vs 73.8%),
# worse on the policies (63.6% vs 90.9%), and its `ask` p95 (3.2 s) is past the 2.5 s budget.
LADDER: tuple[Rung, ...] = (QWEN25_CODER_05B, SMOLLM2_135M)
KNOWN: tuple[Rung, ...] = (QWEN25_CODER_15B, QWEN25_CODER_05B, SMOLLM2_135M)
AUTO = "auto"


@dataclass(frozen=True)
class Machine:
    memory_gb: float | None  # total; None when unknown
    cores: int
    cpu_flags: frozenset[str] | None  # None when this OS does not show them


@dataclass(frozen=True)
class Choice:
    model: str  # folder name under models/
    why: str
    by: str  # "machine" | "setting"


def _meets(rung: Rung, machine: Machine) -> bool:
    if machine.memory_gb is not None and machine.memory_gb < rung.min_memory_gb:
        return False
    if machine.memory_gb is None and rung.min_memory_gb > 0:
        return False  # unknown memory: only a rung that needs none
    if machine.cores < rung.min_cores:
        return False
    if rung.cpu_flags and (machine.cpu_flags is None or not set(rung.cpu_flags) <= machine.cpu_flags):
        return False
    return True


def _needs(rung: Rung) -> str:
    needs = []
    if rung.min_memory_gb:
        needs.append(f"{rung.min_memory_gb:g} GB of memory")
    if rung.min_cores > 1:
        needs.append(f"{rung.min_cores} cores")
    if rung.cpu_flags:
        needs.append("+".join(rung.cpu_flags))
    return " and ".join(needs) or "nothing"


def choose_generator(machine: Machine, ladder: Iterable[Rung] = LADDER) -> Choice:
    """The default generator for ``machine``: the first rung of ``ladder`` it meets, with the reason."""
    rungs = tuple(ladder)
    memory = "unknown" if machine.memory_gb is None else f"{machine.memory_gb:g} GB"
    have = f"this machine has {memory} of memory and {machine.cores} cores"
    for index, rung in enumerate(rungs):
        if _meets(rung, machine):
            skipped = [f"{r.label} needs {_needs(r)}" for r in rungs[:index]]
            why = f"{have}; {rung.label} needs {_needs(rung)}" + (f" ({'; '.join(skipped)})" if skipped else "")
            return Choice(rung.model, why, "machine")
    last = rungs[-1]  # the table's last rung needs nothing; a stricter table still never fails
    return Choice(last.model, f"{have}; no rung fits, taking the smallest ({last.label})", "machine")


def rung_for(name: str) -> Rung | None:
    """A known model by alias or folder name."""
    return next((r for r in KNOWN if name in (r.alias, r.model)), None)


def resolve_generator(setting: str, models_dir: Path, machine: Machine | None = None) -> Choice:
    """The generator folder name for the ``generator`` setting: a known alias, a folder name, or "auto"
    (the machine's choice). Under "auto", a chosen model that is not prepared yet falls back to the
    largest prepared rung below it (an upgrade before ``rag models prepare`` keeps answering)."""
    if setting and setting != AUTO:
        rung = rung_for(setting)
        return Choice(rung.model if rung else setting, "the generator setting names it", "setting")
    choice = choose_generator(machine or this_machine())
    if (models_dir / choice.model).is_dir():
        return choice
    names = [r.model for r in LADDER]
    below = names[names.index(choice.model) + 1:] if choice.model in names else []
    ready = next((n for n in below if (models_dir / n).is_dir()), None)
    if ready is None:
        return Choice(choice.model, choice.why + "; not prepared yet: run `rag models prepare`", "machine")
    return Choice(ready, f"{choice.why}; {choice.model} is not prepared yet (`rag models prepare`), so "
                         f"{ready} answers meanwhile", "machine")


@functools.lru_cache(maxsize=1)
def this_machine() -> Machine:
    """Total memory (psutil), logical cores and, on Linux, the CPU flags of /proc/cpuinfo."""
    try:
        memory_gb: float | None = round(psutil.virtual_memory().total / 2**30, 1)
    except OSError:
        memory_gb = None
    flags = None
    if sys.platform.startswith("linux"):
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
            match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
            flags = frozenset(match.group(1).split()) if match else frozenset()
        except OSError:
            flags = None
    return Machine(memory_gb, os.cpu_count() or 1, flags)
