"""``rag models list`` / ``rag models check``: what is installed and whether it works."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag.modelstore.manifest import read_manifest
from rag.core.errors import RagError
from rag.core.settings import Settings

CHECK_PROMPT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
CHECK_SENTENCES = ("The Eiffel Tower was completed in 1889.", "When was the Eiffel Tower built?")
# ~200-token passage used to measure embedding throughput on realistic chunk sizes.
THROUGHPUT_CHUNK = (
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region "
    "in France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway who, "
    "under their leader Rollo, agreed to swear fealty to King Charles III of West Francia. "
) * 3


@dataclass
class CheckResult:
    role: str
    path: str
    ok: bool
    detail: str
    figures: dict[str, float] = field(default_factory=dict)


def installed_models(models_dir: Path) -> list[dict]:
    manifest = read_manifest(models_dir)["models"]
    rows = []
    for name, entry in sorted(manifest.items()):
        folder = models_dir / name
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
        rows.append({"name": name, "kind": entry.get("kind"), "precision": entry.get("precision"),
                     "source": f"{entry['source']['package']}=={entry['source']['version']}",
                     "licence": entry.get("licence"), "built_at": entry.get("built_at"),
                     "present": folder.is_dir(), "size_mb": round(size / 1e6, 1)})
    return rows


def check_generator(settings: Settings) -> CheckResult:
    from rag.generation.base import SamplingOptions
    from rag.runtime import load_generator

    path = settings.generator_path
    try:
        # No prefix cache: the check runs one prompt twice, and a cached second run would flatter TTFT.
        generator = load_generator(settings.replace(prefix_cache_slots=0))
        tokens = generator.encode(generator.chat_prompt(CHECK_PROMPT))
        generator.generate(tokens, SamplingOptions(max_tokens=8))  # warm-up
        text, stats = generator.generate(tokens, SamplingOptions(max_tokens=48))
    except RagError as exc:
        return CheckResult("generator", str(path), False, exc.message)
    if not text.strip():
        return CheckResult("generator", str(path), False, "generated no text for the check prompt")
    return CheckResult("generator", str(path), True, f"{generator.device}: {text.strip()[:60]!r}", {
        "load_s": round(generator.load_s, 2), "ttft_s": round(stats.ttft_s, 3),
        "tokens_per_s": round(stats.decode_tokens_per_s, 1), "output_tokens": stats.output_tokens})


def check_embedder(settings: Settings) -> CheckResult:
    from rag.runtime import load_embedder

    path = settings.embedder_path
    try:
        start = time.perf_counter()
        embedder = load_embedder(settings)
        load_s = time.perf_counter() - start
        a, b = embedder.embed(list(CHECK_SENTENCES))
        unrelated = embedder.embed_query("Bananas are rich in potassium.")
        batch = [THROUGHPUT_CHUNK] * 64
        embedder.embed(batch[:8])
        start = time.perf_counter()
        embedder.embed(batch)
        chunks_per_s = len(batch) / (time.perf_counter() - start)
    except RagError as exc:
        return CheckResult("embedder", str(path), False, exc.message)
    related, other = float(np.dot(a, b)), float(np.dot(a, unrelated))
    ok = related > other + 0.2
    detail = f"{embedder.config.precision}, dim {embedder.dimension}: cos(related)={related:.2f} cos(unrelated)={other:.2f}"
    return CheckResult("embedder", str(path), ok, detail if ok else "embeddings look wrong: " + detail, {
        "load_s": round(load_s, 2), "chunks_per_s": round(chunks_per_s, 1)})
