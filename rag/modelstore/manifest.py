"""``models/manifest.json``: what was built, from what, and how."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from rag.core.files import replace_file

MANIFEST_NAME = "manifest.json"


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write beside the target, flush to disk, then rename over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    replace_file(tmp, path)


def read_manifest(models_dir: Path) -> dict[str, Any]:
    path = models_dir / MANIFEST_NAME
    if not path.is_file():
        return {"models": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {"models": {}}
    data.setdefault("models", {})
    return data


def record_model(models_dir: Path, name: str, entry: dict[str, Any]) -> None:
    manifest = read_manifest(models_dir)
    manifest["models"][name] = entry
    atomic_write_text(models_dir / MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def output_hashes(model_dir: Path) -> dict[str, str]:
    return {
        p.relative_to(model_dir).as_posix(): sha256_file(p)
        for p in sorted(model_dir.rglob("*"))
        if p.is_file()
    }
