"""The ``environment`` block every result carries: machine, software, model, time (best-effort, any OS)."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

# Distribution names to report; the first found of each group is used (GPU builds have their own names).
PACKAGES: tuple[tuple[str, ...], ...] = (
    ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino"),
    ("onnxruntime-genai", "onnxruntime-genai-cuda", "onnxruntime-genai-directml"),
    ("numpy",), ("faiss-cpu", "faiss-gpu", "faiss"), ("tokenizers",), ("httpx",), ("offline-rag",),
)
PRECISION_HINTS = ("int4", "int8", "fp16", "bf16", "fp32", "q4", "q8", "awq", "gptq")


def cpu_model() -> str:
    """The CPU's marketing name where the OS tells it, else whatever ``platform`` knows."""
    try:
        if sys.platform.startswith("linux"):
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
            for key in ("model name", "Hardware", "Model", "cpu model", "uarch"):
                match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
                if match and match.group(1).strip():
                    return match.group(1).strip()
        elif sys.platform == "darwin":
            result = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                    text=True, timeout=2, check=False)
            if result.returncode == 0 and result.stdout.strip():
                return result.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine() or "unknown"


def package_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for names in PACKAGES:
        for name in names:
            try:
                versions[name] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def model_precision(generator_path: Path | None, models_dir: Path | None = None) -> str | None:
    """Precision from the models/manifest.json entry of the generator dir, else a hint in its name."""
    if generator_path is None:
        return None
    for manifest in dict.fromkeys(p / "manifest.json" for p in (generator_path.parent, models_dir) if p):
        try:
            entry = json.loads(manifest.read_text(encoding="utf-8"))["models"][generator_path.name]
            if entry.get("precision"):
                return str(entry["precision"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return precision_from_name(generator_path.name)


def precision_from_name(name: str | None) -> str | None:
    parts = re.split(r"[-_./]", (name or "").lower())
    return next((hint for hint in PRECISION_HINTS if hint in parts), None)


def environment(settings: Any = None, *, model: str | None = None, precision: str | None = None,
                device: str | None = None) -> dict[str, Any]:
    """Where and with what a benchmark ran. ``settings`` (a ``Settings``) supplies threads and the model."""
    threads = getattr(settings, "threads", None)
    generator_path = getattr(settings, "generator_path", None) if settings is not None else None
    if model is None and generator_path is not None:
        model = generator_path.name
    if precision is None:
        precision = (model_precision(generator_path, getattr(settings, "models_dir", None))
                     if generator_path is not None and model == generator_path.name else precision_from_name(model))
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "threads_setting": threads,
        "threads_effective": (threads if threads else os.cpu_count()) if threads is not None else None,
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "model": model,
        "precision": precision,
        "device": device if device is not None else getattr(settings, "device", None),
    }
