"""The one recipe that turns a model into an ORT GenAI folder, and ``rag models import``.

A GGUF file for an int4 CPU model goes tensor by tensor: ``onnxruntime_genai.models.builder`` (through
``onnx_builder``) reads its weights from ``gguf_stream``, which dequantises one GGUF tensor at a time and
quantises it straight to MatMulNBits, so no float copy of the model exists (Qwen2.5-Coder-1.5B: ~3 min,
~2.4 GB peak, instead of ~10 min and 17 GB). Any other GGUF (another precision or device, an
architecture the stream loader does not map) and any Hugging Face folder take the dequantising recipe:
GGUF -> fp32 HF checkpoint (transformers) -> builder. Both end in a finished folder (chat template
present, end-of-turn tokens in the EOS list). The default models (``prepare.py``) and every import go
through the same functions. Build time only: torch and transformers are imported inside the functions
(or in the builder's process). Nothing here touches a model hub: the build runs with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from rag.core.errors import BadRequestError, ModelError
from rag.core.files import is_device_name, make_writable, remove_tree, replace_file, scratch_folder
from rag.modelstore.gguf_stream import UNSUPPORTED_EXIT, WeightPlan
from rag.modelstore.manifest import output_hashes, read_manifest, record_model, sha256_file
from rag.modelstore.sources import GENERATOR_BUILDER_OPTIONS

Report = Callable[[str], None]

PRECISIONS = ("int4", "int8", "fp16", "fp32")
DEVICES = ("cpu", "cuda", "dml")
# The builder's valid precision + execution provider combinations (it prints them; 0.18).
BUILDABLE = {"cpu": ("int4", "int8", "fp32"), "cuda": PRECISIONS, "dml": ("int4", "fp16")}
# Text-only causal LMs that onnxruntime-genai 0.18's builder converts (builder.py create_model);
# multimodal, audio and MoE-only entries are left out: the answer service sends text.
SUPPORTED_ARCHITECTURES = (
    "ChatGLMModel", "Ernie4_5ForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
    "GptOssForCausalLM", "GraniteForCausalLM", "HunYuanDenseV1ForCausalLM", "InternLM2ForCausalLM",
    "Lfm2ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "NemotronForCausalLM", "OlmoForCausalLM",
    "PhiForCausalLM", "Phi3ForCausalLM", "Phi3SmallForCausalLM", "PhiMoEForCausalLM", "Qwen2ForCausalLM",
    "Qwen3ForCausalLM", "SmolLM3ForCausalLM",
)
# End-of-turn markers of the chat families; any of them in the vocabulary is added to the EOS list,
# so a reply stops at the end of its turn even when the checkpoint's config names only </s>.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
INT4_OPTIONS = GENERATOR_BUILDER_OPTIONS  # k-quant mixed int4 + pruned lm_head, as the default model
OTHER_OPTIONS = ("prune_lm_head=true",)  # k-quant is an int4 algorithm
# Bumped when the recipe's output changes, so that an earlier import of the same source is rebuilt.
RECIPE_VERSION = 2  # 2: GGUF -> int4 CPU tensor by tensor (gguf_stream)
IMPORT_PLAN = WeightPlan()  # how an imported GGUF's weights are quantised (gguf_stream.WeightPlan)
IMPORT_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")


def builder_options(precision: str) -> tuple[str, ...]:
    return INT4_OPTIONS if precision == "int4" else OTHER_OPTIONS


@dataclass(frozen=True)
class ImportResult:
    name: str
    status: str  # "built" | "up-to-date"
    seconds: float
    path: Path
    entry: dict


def _offline_env() -> None:
    """Never reach a hub: set before transformers / huggingface_hub are imported."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[key] = "1"
    os.environ.setdefault("TQDM_DISABLE", "1")  # the loaders' own bars; the CLI shows progress instead


# ---------------------------------------------------------------------------------------------- sources
def source_kind(source: Path) -> str:
    """"gguf" | "hf" | "ort"; a clear error for anything else."""
    if source.is_file() and source.suffix.lower() == ".gguf":
        return "gguf"
    if source.is_dir():
        if (source / "genai_config.json").is_file():
            return "ort"
        if (source / "config.json").is_file():
            weights = list(source.glob("*.safetensors")) + list(source.glob("pytorch_model*.bin"))
            if not weights:
                raise BadRequestError(f"{source} has config.json but no *.safetensors weights")
            if not any((source / f).is_file() for f in ("tokenizer.json", "tokenizer.model")):
                raise BadRequestError(f"{source} has no tokenizer.json or tokenizer.model")
            return "hf"
    if not source.exists():
        raise BadRequestError(f"{source} does not exist")
    raise BadRequestError(f"{source} is not a .gguf file, a Hugging Face model folder (config.json + "
                          "safetensors + tokenizer) or an ONNX Runtime GenAI folder (genai_config.json)")


def source_hashes(source: Path) -> dict[str, str]:
    if source.is_file():
        return {source.name: sha256_file(source)}
    return output_hashes(source)


def check_architecture(hf_dir: Path) -> str:
    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    architecture = (config.get("architectures") or ["?"])[0]
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ModelError(f"architecture {architecture} is not supported by the onnxruntime-genai 0.18 builder; "
                         f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    return architecture


def count_parameters(hf_dir: Path) -> int | None:
    """Parameters from the safetensors headers (no tensor is loaded)."""
    try:
        from safetensors import safe_open  # lazy: optional dependency (the build extra)
    except ImportError:
        return None
    total = 0
    for file in sorted(hf_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="numpy") as handle:
            for key in handle.keys():
                count = 1
                for dim in handle.get_slice(key).get_shape():
                    count *= int(dim)
                total += count
    return total or None


# ---------------------------------------------------------------------------------------------- recipe
def gguf_to_hf(gguf: Path, hf_dir: Path, report: Report) -> None:
    """Dequantise a GGUF file into an fp32 HF checkpoint (weights, config, tokenizer, chat template)."""
    _offline_env()
    # lazy: optional dependency (the build extra)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    report(f"loading {gguf.name} with transformers (dequantising)")
    try:
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (ValueError, KeyError, NotImplementedError) as exc:
        raise ModelError(f"transformers cannot read {gguf.name}: {exc}") from exc
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(hf_dir)
    del loaded, model


class NotStreamable(Exception):
    """The stream loader does not map this GGUF's architecture: take the dequantising recipe."""


def run_builder(hf_dir: Path, out: Path, work: Path, precision: str, device: str,
                options: tuple[str, ...], report: Report, gguf: Path | None = None,
                plan: WeightPlan | None = None) -> str:
    """``onnxruntime_genai.models.builder`` on an HF checkpoint, or with ``gguf`` on a GGUF file read
    tensor by tensor (``hf_dir`` then receives its config and tokenizer); returns the command as recorded."""
    report(f"building the ORT GenAI {precision} model for {device} (onnxruntime_genai.models.builder"
           + (", weights streamed from the GGUF)" if gguf else ")"))
    args = ["-p", precision, "-e", device]
    stream_args = []
    if gguf is not None:
        stream_args = ["--gguf", str(gguf), "--weights-plan", (plan or IMPORT_PLAN).to_json(),
                       "--facts", str(work / "facts.json")]
    # The builder through its shim (see onnx_builder.py); same arguments.
    cmd = [sys.executable, "-m", "rag.modelstore.onnx_builder", *stream_args, "-i", str(hf_dir), "-o", str(out),
           *args, "-c", str(work / "cache")]
    if options:
        cmd += ["--extra_options", *options]
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1",
           "PYTHONUTF8": "1",  # its output in UTF-8, not the Windows code page (file names, model card text)
           "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    # The builder prints per-tensor progress; the loader's own lines ("[rag] ...") are passed on, the rest
    # is kept and shown only on failure.
    tail: collections.deque[str] = collections.deque(maxlen=400)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8",
                          errors="replace", env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line)
            if line.startswith("[rag] "):
                report(line[6:].strip())
        returncode = proc.wait()
    if gguf is not None and returncode == UNSUPPORTED_EXIT:
        raise NotStreamable("".join(tail)[-500:])
    if returncode != 0 or not (out / "genai_config.json").is_file():
        raise ModelError(f"onnxruntime_genai builder failed:\n{''.join(tail)[-2000:]}")
    shown = (["--gguf", "GGUF", "--weights-plan", stream_args[3]] if gguf is not None else [])
    return " ".join(["python", "-m", "rag.modelstore.onnx_builder", *shown,
                     "-i", "CONFIG_DIR" if gguf is not None else "HF_DIR", "-o", "OUT", *args]
                    + (["--extra_options", *options] if options else [])
                    + ["# = python -m onnxruntime_genai.models.builder, transformers 5 Gemma 3 config fixed"
                       + (", weights from rag.modelstore.gguf_stream" if gguf is not None else "")])


def _tokenizer_vocab(folder: Path) -> dict[str, int]:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    model_vocab = data.get("model", {}).get("vocab")
    vocab = dict(model_vocab) if isinstance(model_vocab, dict) else {}  # unigram vocabularies are lists
    vocab.update({t["content"]: int(t["id"]) for t in data.get("added_tokens", [])})
    return vocab


def chat_template_of(folder: Path) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            return template
    return None


def finish_model_dir(out: Path, hf_dir: Path | None, report: Report) -> list[str]:
    """Make the built folder usable for chat; returns the fixes made.

    The chat template is copied from the checkpoint when the builder left it behind, and every
    end-of-turn token of the vocabulary joins ``eos_token_id`` in genai_config.json.
    """
    fixes = []
    if chat_template_of(out) is None and hf_dir is not None:
        template = chat_template_of(hf_dir)
        if template is not None:
            (out / "chat_template.jinja").write_text(template, encoding="utf-8")
            fixes.append("copied chat_template.jinja")
    config_path = out / "genai_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    eos = config["model"].get("eos_token_id")
    ids = list(eos) if isinstance(eos, list) else ([eos] if eos is not None else [])
    vocab = _tokenizer_vocab(out)
    template = chat_template_of(out) or ""
    for token in END_OF_TURN_TOKENS:
        # Only a marker the chat template writes ends a turn of this model (a vocabulary may hold others)
        if token in vocab and vocab[token] not in ids and token in template:
            ids.append(vocab[token])
            fixes.append(f"added {token} (id {vocab[token]}) to eos_token_id")
    if any(fix.startswith("added") for fix in fixes):
        config["model"]["eos_token_id"] = ids if len(ids) > 1 else ids[0]
        config_path.write_text(json.dumps(config, indent=4) + "\n", encoding="utf-8")
    for fix in fixes:
        report(fix)
    return fixes


def _set_template(out: Path, chat_template: Path | None) -> None:
    if chat_template is None:
        return
    (out / "chat_template.jinja").write_text(chat_template.read_text(encoding="utf-8"), encoding="utf-8")
    config = out / "tokenizer_config.json"
    if config.is_file():  # one template only: the given file wins over an embedded one
        data = json.loads(config.read_text(encoding="utf-8"))
        if data.pop("chat_template", None) is not None:
            config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def build_ort_model(hf_dir: Path, work: Path, out: Path, report: Report, precision: str = "int4",
                    device: str = "cpu", options: tuple[str, ...] | None = None,
                    chat_template: Path | None = None) -> str:
    """HF checkpoint -> finished ORT GenAI folder; returns the builder command as recorded."""
    check_architecture(hf_dir)
    command = run_builder(hf_dir, out, work, precision, device,
                          builder_options(precision) if options is None else options, report)
    _set_template(out, chat_template)
    finish_model_dir(out, hf_dir, report)
    return command


@dataclass(frozen=True)
class GGUFBuild:
    command: str
    options: tuple[str, ...]  # as recorded: the builder's, then the weight plan's when streamed
    architecture: str | None
    parameters: int | None
    streamed: bool


def streams(precision: str, device: str) -> bool:
    """Whether a GGUF for this precision and device is read tensor by tensor (else dequantised first)."""
    return precision == "int4" and device == "cpu"


def build_gguf_model(gguf: Path, work: Path, out: Path, report: Report, precision: str = "int4",
                     device: str = "cpu", options: tuple[str, ...] | None = None,
                     chat_template: Path | None = None, plan: WeightPlan | None = None) -> GGUFBuild:
    """A GGUF file -> finished ORT GenAI folder: tensor by tensor where it can (int4 on CPU, an
    architecture ``gguf_stream`` maps), else through a dequantised fp32 HF checkpoint."""
    options = builder_options(precision) if options is None else options
    hf_dir = work / "hf"
    if streams(precision, device):
        plan = plan or IMPORT_PLAN
        try:
            command = run_builder(hf_dir, out, work, precision, device, options, report, gguf=gguf, plan=plan)
        except NotStreamable:
            facts = json.loads((work / "facts.json").read_text(encoding="utf-8"))
            report(f"{facts.get('architecture')}: no tensor-by-tensor loader; dequantising the whole model")
            shutil.rmtree(hf_dir, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
        else:
            facts = json.loads((work / "facts.json").read_text(encoding="utf-8"))
            _set_template(out, chat_template)
            finish_model_dir(out, hf_dir, report)
            return GGUFBuild(command, tuple(options) + plan.options(), facts.get("architecture"),
                             facts.get("parameters"), True)
    gguf_to_hf(gguf, hf_dir, report)
    architecture = check_architecture(hf_dir)
    parameters = count_parameters(hf_dir)
    command = build_ort_model(hf_dir, work, out, report, precision, device, options, chat_template)
    return GGUFBuild(command, tuple(options), architecture, parameters, False)


def install_dir(built: Path, final: Path) -> None:
    """Swap a finished build into place. The current model is moved aside first and comes back if the new one
    cannot take its place; it is deleted only once the new one is in place (a Windows process that holds one of
    its files makes the move fail: nothing changes then). Left-overs of an interrupted install go last."""
    stale = sorted(final.parent.glob(f".{final.name}.old*"))
    old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        if final.exists():
            replace_file(final, old)
    except OSError as exc:
        raise ModelError(f"cannot replace {final}: it is in use ({exc.strerror or exc}); stop the server "
                         "using it and try again") from exc
    try:
        replace_file(built, final)
    except OSError as exc:
        if old.exists():
            replace_file(old, final)
        raise ModelError(f"cannot install the new model as {final}: {exc.strerror or exc}") from exc
    for leftover in [old, *stale]:
        if leftover.exists():
            try:
                remove_tree(leftover)
            except OSError:
                pass  # still held (Windows): removed by the next install


# ---------------------------------------------------------------------------------------------- import
def default_name(source: Path, precision: str) -> str:
    stem = source.stem if source.is_file() else source.name
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._") or "model"
    return name if name.endswith(precision) else f"{name}-{precision}"


def _genai_facts(folder: Path) -> dict:
    model = json.loads((folder / "genai_config.json").read_text(encoding="utf-8"))["model"]
    return {"model_type": model.get("type"), "context_length": model.get("context_length"),
            "eos_token_id": model.get("eos_token_id")}


def _is_current(models_dir: Path, name: str, hashes: dict[str, str], precision: str, device: str) -> dict | None:
    entry = read_manifest(models_dir)["models"].get(name)
    if not entry or not (models_dir / name).is_dir():
        return None
    source = entry.get("source", {})
    if (source.get("files") != hashes or entry.get("precision") != precision or entry.get("device") != device
            or entry.get("recipe") != RECIPE_VERSION):
        return None
    if not all((models_dir / name / rel).is_file() for rel in entry.get("outputs", {})):
        return None
    return entry


def import_model(models_dir: Path, source: Path, validate: Callable[[Path], object], name: str | None = None,
                 precision: str = "int4", device: str = "cpu", force: bool = False,
                 report: Report = print, chat_template: Path | None = None) -> ImportResult:
    """Import ``source`` (a .gguf file, an HF folder or an ORT GenAI folder) as ``models_dir/name``.

    ``chat_template`` (a Jinja file) replaces the model's own template, or gives one to a model without.
    ``validate`` checks an ORT GenAI folder (``rag.generation.ort.validate_generator_dir``; the model
    store does not import the generation layer): the source of a copy, and every result.
    """
    if precision not in PRECISIONS:
        raise BadRequestError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if device not in DEVICES:
        raise BadRequestError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if precision not in BUILDABLE[device]:
        raise BadRequestError(f"the builder makes {', '.join(BUILDABLE[device])} models for {device}, not {precision}")
    source = source.expanduser().resolve()
    kind = source_kind(source)
    name = name or default_name(source, precision if kind != "ort" else "")
    if not IMPORT_NAME.match(name) or is_device_name(name) or name.endswith("."):
        raise BadRequestError(f"model name {name!r}: use lowercase letters, digits, '.', '_' and '-', not ending "
                               "in '.', not a Windows device name (con, nul, com1...)")
    start = time.perf_counter()
    models_dir.mkdir(parents=True, exist_ok=True)
    report(f"hashing {source.name}")
    hashes = source_hashes(source)
    if chat_template is not None:
        hashes = {**hashes, f"chat_template:{chat_template.name}": sha256_file(chat_template)}
    if kind == "ort":
        precision = "as built"
    if not force and (entry := _is_current(models_dir, name, hashes, precision, device)):
        return ImportResult(name, "up-to-date", 0.0, models_dir / name, entry)

    architecture, parameters, command, options = None, None, "copied", ()
    with scratch_folder(".build-", models_dir) as work:
        built = work / "out"
        if kind == "ort":
            validate(source)
            report(f"copying the ORT GenAI folder {source}")
            shutil.copytree(source, built)
            make_writable(built)  # from a DVD or ISO: read-only flags that Windows will not delete later
            _set_template(built, chat_template)
            finish_model_dir(built, None, report)
        elif kind == "gguf":
            result = build_gguf_model(source, work, built, report, precision, device, builder_options(precision),
                                      chat_template)
            architecture, parameters, command, options = (result.architecture, result.parameters,
                                                           result.command, result.options)
        else:
            architecture = check_architecture(source)
            parameters = count_parameters(source)
            options = builder_options(precision)
            command = build_ort_model(source, work, built, report, precision, device, options, chat_template)
        validate(built)
        install_dir(built, models_dir / name)
    folder = models_dir / name
    entry = {
        "kind": "generator",
        "source": {"type": kind, "path": str(source), "files": hashes},
        "architecture": architecture,
        "parameters": parameters,
        "precision": precision,
        "device": device,
        "options": list(options),
        "build_command": command,
        "recipe": RECIPE_VERSION,
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "import_s": round(time.perf_counter() - start, 1),
        **_genai_facts(folder),
        "outputs": output_hashes(folder),
    }
    record_model(models_dir, name, entry)
    return ImportResult(name, "built", time.perf_counter() - start, folder, entry)
