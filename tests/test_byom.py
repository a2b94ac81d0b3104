"""Bring your own model: `rag models import/use/list/check`, chat families, `rag info`, device = auto.

CI cannot download real models, so tiny random-weight checkpoints of four families (llama, qwen2,
phi3, gemma2: hidden 64, 2 layers) are made here with transformers, each with a tokenizer that has
its family's special tokens and real chat template (the SmolLM2 BPE vocabulary plus added tokens),
and imported through the real CLI: as HF folders, llama also as a GGUF written with the `gguf`
package, and as an ORT GenAI folder (copied). Their outputs are nonsense; the tests check the
plumbing: template applied, end-of-turn ids in the EOS list and honoured, tokens streamed, prefix
cache used, metrics filled, one RAG answer end to end. Builds are cached under models/.byom-test/
(git-ignored), so a second run only loads them.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from app.cli.main import main as cli
from rag.core.errors import ModelError
from rag.core.settings import PROJECT_ROOT, Settings, load_settings
from rag.generation.base import GenerationStats, SamplingOptions
from rag.generation.ort import LocalGenerator, choose_provider, merge_system, provider_facts

from conftest import SQUAD_DOCS

BYOM_HOME = PROJECT_ROOT / "models" / ".byom-test"  # models/*/ is git-ignored
SMOL_TOKENIZER = PROJECT_ROOT / "models" / "smollm2-135m-instruct-int4" / "tokenizer.json"
SYSTEM = "Answer from the passages only."
QUESTION = "Who was the leader of the Normans who swore fealty to King Charles III?"


@dataclass(frozen=True)
class Family:
    name: str
    architecture: str
    end_of_turn: str
    specials: tuple[str, ...]
    bos: str
    template: str
    turn_marker: str  # text the template puts before a user turn


# The families' own chat templates (as their tokenizer_config.json ship them), shortened only where
# they handle tools.
FAMILIES = {
    "llama": Family(
        "llama", "LlamaForCausalLM", "<|eot_id|>",
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"), "<|begin_of_text|>",
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
        "{{ content }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
        "<|start_header_id|>user<|end_header_id|>"),
    "qwen2": Family(
        "qwen2", "Qwen2ForCausalLM", "<|im_end|>", ("<|im_start|>", "<|im_end|>"), "<|im_start|>",
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
        "<|im_start|>user"),
    "phi3": Family(
        "phi3", "Phi3ForCausalLM", "<|end|>", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<s>",
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
        "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
        "<|user|>"),
    # Gemma's template refuses the system role: the generator must fold it into the user turn.
    "gemma2": Family(
        "gemma2", "Gemma2ForCausalLM", "<end_of_turn>", ("<bos>", "<start_of_turn>", "<end_of_turn>"), "<bos>",
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
        "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
        "<start_of_turn>user"),
}


def make_tokenizer(family: Family, out: Path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(SMOL_TOKENIZER)),
                                        bos_token=family.bos, eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                        pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(family.specials)})
    tokenizer.chat_template = family.template
    tokenizer.save_pretrained(out)
    return tokenizer


def make_checkpoint(family: Family, out: Path) -> Path:
    """A random-weight checkpoint whose config names only <|endoftext|> as EOS (the end-of-turn id
    must come from the import), context 2048."""
    import torch
    import transformers

    if (out / "model.safetensors").is_file():
        return out
    tokenizer = make_tokenizer(family, out)
    common = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=2048,
                  bos_token_id=tokenizer.convert_tokens_to_ids(family.bos),
                  eos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                  pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    if family.name == "llama":
        config = transformers.LlamaConfig(num_key_value_heads=2, tie_word_embeddings=True, **common)
    elif family.name == "qwen2":
        config = transformers.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common)
    elif family.name == "phi3":
        config = transformers.Phi3Config(num_key_value_heads=4, original_max_position_embeddings=2048, **common)
    else:
        config = transformers.Gemma2Config(num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                                           sliding_window=512, **common)
    config.architectures = [family.architecture]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    return out


def write_llama_gguf(hf_dir: Path, out: Path) -> Path:
    """The llama checkpoint as a GGUF file (F32 tensors, llama.cpp names and Q/K row order, gpt2 BPE
    tokenizer and chat template in the metadata), as llama.cpp's converter writes it."""
    import gguf
    from safetensors.numpy import load_file

    if out.is_file():
        return out
    config = json.loads((hf_dir / "config.json").read_text())
    tok = json.loads((hf_dir / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    vocab.update({t["content"]: t["id"] for t in tok["added_tokens"]})
    special = {t["content"] for t in tok["added_tokens"] if t["special"]}
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert len(tokens) == config["vocab_size"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]

    def permute(w: np.ndarray, n_head: int) -> np.ndarray:  # llama.cpp's rotary row order
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("tiny-llama")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(float(config.get("rope_theta") or config["rope_parameters"]["rope_theta"]))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(config["hidden_size"] // heads)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(FAMILIES["llama"].template)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for key, value in load_file(str(hf_dir / "model.safetensors")).items():
        value = value.astype(np.float32)
        if key == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif key == "model.norm.weight":
            name = "output_norm.weight"
        elif key == "lm_head.weight":
            continue  # tied to the embeddings
        else:
            layer, part = re.match(r"model\.layers\.(\d+)\.(.+)\.weight", key).groups()
            name = f"blk.{layer}.{names[part]}.weight"
            if part == "self_attn.q_proj":
                value = permute(value, heads)
            elif part == "self_attn.k_proj":
                value = permute(value, kv_heads)
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def run_cli(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--home", str(BYOM_HOME), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def imported(models_dir: Path) -> dict[str, Path]:  # models_dir: the SmolLM2 tokenizer is borrowed
    """Each family imported from its HF folder (+ llama from GGUF and as a copied ORT folder)."""
    sources = BYOM_HOME / "sources"
    models = {}
    for family in FAMILIES.values():
        src = make_checkpoint(family, sources / family.name)
        run_cli("models", "import", str(src), "--name", f"tiny-{family.name}")
        models[family.name] = BYOM_HOME / "models" / f"tiny-{family.name}"
    gguf_file = write_llama_gguf(sources / "llama", sources / "tiny-llama.gguf")
    run_cli("models", "import", str(gguf_file), "--name", "tiny-llama-gguf")
    models["llama-gguf"] = BYOM_HOME / "models" / "tiny-llama-gguf"
    run_cli("models", "import", str(models["llama"]), "--name", "tiny-llama-copy")
    models["llama-copy"] = BYOM_HOME / "models" / "tiny-llama-copy"
    return models


def load(path: Path, slots: int = 0) -> LocalGenerator:
    return LocalGenerator(path, "cpu", 0, prefix_cache_slots=slots, prefix_cache_tokens=512)


def family_of(key: str) -> Family:
    return FAMILIES[key.split("-")[0]]


# ------------------------------------------------------------------------------------------ import
def test_manifest_records_every_input_and_output(imported: dict[str, Path]):
    manifest = json.loads((BYOM_HOME / "models" / "manifest.json").read_text())["models"]
    for key, path in imported.items():
        entry = manifest[path.name]
        assert entry["outputs"] and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in entry["outputs"].values())
        assert set(entry["outputs"]) == {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
        assert entry["source"]["files"] and all(re.fullmatch(r"[0-9a-f]{64}", h)
                                                for h in entry["source"]["files"].values())
        if key != "llama-copy":
            assert entry["architecture"] == family_of(key).architecture
            assert entry["precision"] == "int4" and entry["options"][0] == "algo_config=k_quant_mixed"
            assert 3_000_000 < entry["parameters"] < 7_000_000  # 49k x 64 embeddings (x2 untied: phi3) + 2 tiny layers
        assert entry["context_length"] == 2048
    assert manifest["tiny-llama-gguf"]["source"]["type"] == "gguf"
    assert manifest["tiny-llama-copy"]["source"]["type"] == "ort"


def test_second_import_is_a_no_op(imported: dict[str, Path]):
    out = run_cli("models", "import", str(BYOM_HOME / "sources" / "qwen2"), "--name", "tiny-qwen2")
    assert "already imported" in out


@pytest.mark.parametrize("key", ["llama", "qwen2", "phi3", "gemma2", "llama-gguf", "llama-copy"])
def test_family_template_eos_and_streaming(imported: dict[str, Path], key: str):
    family = family_of(key)
    path = imported[key]
    config = json.loads((path / "genai_config.json").read_text())["model"]
    generator = load(path)
    end_id = int(generator.encode(family.end_of_turn)[-1])
    eos = config["eos_token_id"]
    assert end_id in (eos if isinstance(eos, list) else [eos]), (family.end_of_turn, eos)
    assert end_id in generator.eos_token_ids
    assert generator.context_length == 2048

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is Rouen?"}]
    text = generator.chat_prompt(messages)
    assert family.turn_marker in text and SYSTEM in text and "Where is Rouen?" in text
    if family.name == "gemma2":  # no system role: the instructions open the user turn
        assert f"<start_of_turn>user\n{SYSTEM}\n\nWhere is Rouen?<end_of_turn>" in text

    # The end-of-turn token ends a reply: fed to the recorder it finishes with "stop".
    stats = GenerationStats()
    recorder = generator.recorder(stats, 0.0)
    assert recorder.add(end_id) is None or recorder.finished
    assert stats.finish_reason == "stop"

    stats = GenerationStats()
    pieces = list(generator.run(generator.prompt(messages).tokens, SamplingOptions(max_tokens=12), stats))
    assert stats.output_tokens >= 1 and stats.prompt_tokens > 10 and stats.ttft_s > 0
    assert stats.finish_reason in ("stop", "length") and len(pieces) >= 1


GEMMA3_TEMPLATE = Path(__file__).parent / "data" / "gemma3_chat_template.jinja"  # google/gemma-3-*-it's template


def test_gemma3_template_given_at_import_folds_the_system_turn_itself(imported: dict[str, Path]):
    """Gemma 3's template puts the system text into the first user turn on its own: used as it is,
    not merged a second time. Given with --chat-template to an ORT folder import (a copy, no build)."""
    run_cli("models", "import", str(imported["gemma2"]), "--name", "tiny-gemma2-g3", "--chat-template",
            str(GEMMA3_TEMPLATE))
    generator = load(BYOM_HOME / "models" / "tiny-gemma2-g3")
    text = generator.chat_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where?"}])
    assert text == f"<bos><start_of_turn>user\n{SYSTEM}\n\nWhere?<end_of_turn>\n<start_of_turn>model\n"
    eos = json.loads((BYOM_HOME / "models" / "tiny-gemma2-g3" / "genai_config.json").read_text())["model"]
    assert int(generator.encode("<end_of_turn>")[-1]) in eos["eos_token_id"]


def test_a_model_without_chat_template_gets_a_completion_prompt(imported: dict[str, Path], tmp_path: Path):
    import shutil

    base = tmp_path / "base-model"
    shutil.copytree(imported["llama"], base)
    (base / "chat_template.jinja").unlink()
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (base / "tokenizer_config.json").write_text(json.dumps(config))
    generator = load(base)
    assert not generator.has_chat_template
    text = generator.chat_prompt([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Q?"}])
    assert text == f"<|begin_of_text|>{SYSTEM}\n\nQ?\n\nAnswer:"  # BOS written out: encode adds none
    assert int(generator.encode(text)[0]) == json.loads((base / "genai_config.json").read_text())["model"]["bos_token_id"]
    stats = GenerationStats()
    assert list(generator.run(generator.prompt([{"role": "user", "content": "Q?"}]).tokens,
                              SamplingOptions(max_tokens=4), stats)) and stats.output_tokens >= 1


def test_prefix_cache_works_on_an_imported_model(imported: dict[str, Path]):
    generator = load(imported["gemma2"], slots=2)
    tokens = generator.prompt([{"role": "user", "content": "Tell me about Normandy."}]).tokens
    first, second = GenerationStats(), GenerationStats()
    a = "".join(generator.run(tokens, SamplingOptions(max_tokens=8), first))
    b = "".join(generator.run(tokens, SamplingOptions(max_tokens=8), second))
    assert first.cached_tokens == 0 and second.cached_tokens > 0 and a == b


def test_rag_answer_end_to_end_with_each_family(imported: dict[str, Path], settings: Settings, embedder,
                                                tmp_path_factory: pytest.TempPathFactory):
    from ingest.pipeline import ingest_paths
    from ingest.parameters import IngestParameters
    from rag.store.embedded import EmbeddedIndex
    from rag.answering.service import AnswerOptions, AnswerRequest
    from app.runtime import Models, answer_service

    if not SQUAD_DOCS.is_dir():
        pytest.fail(f"SQuAD data not found at {SQUAD_DOCS}")
    home = tmp_path_factory.mktemp("byom-rag")
    base = settings.replace(home=home)
    ingest_paths([SQUAD_DOCS / "normans.md"], EmbeddedIndex(base.index_path()),
                 IngestParameters.from_settings(base, embedder))
    for key in ("llama", "qwen2", "phi3", "gemma2"):
        local = base.replace(generator_dir=imported[key])
        from app.runtime import load_generator

        service = answer_service(local, Models(embedder, load_generator(local)))
        try:
            request = AnswerRequest(question=QUESTION, options=AnswerOptions(sampling=SamplingOptions(max_tokens=8)))

            async def collect():
                return [item async for item in service.stream(request)]

            events = asyncio.run(collect())
        finally:
            service.close()
        result = events[-1]
        assert result.model == f"tiny-{key}"
        assert result.sources and result.metrics.prompt_tokens > 50
        assert result.metrics.output_tokens >= 1 and result.metrics.ttft_ms > 0 and result.metrics.total_ms > 0
        assert [e for e in events[:-1] if isinstance(e, str)], "no token was streamed"


def test_unsupported_architecture_names_the_supported_ones(tmp_path: Path):
    from rag.generation.ort import validate_generator_dir
    from rag.modelstore.importer import import_model

    src = make_checkpoint(FAMILIES["qwen2"], BYOM_HOME / "sources" / "qwen2")
    odd = tmp_path / "gpt2ish"
    odd.mkdir()
    for file in src.iterdir():
        (odd / file.name).write_bytes(file.read_bytes())
    config = json.loads((odd / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (odd / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="GPT2LMHeadModel is not supported.*LlamaForCausalLM.*Qwen2ForCausalLM"):
        import_model(tmp_path / "models", odd, validate_generator_dir, report=lambda m: None)
    assert not (tmp_path / "models" / "gpt2ish-int4").exists()
    assert not [p for p in (tmp_path / "models").iterdir() if p.name.startswith(".build-")]


def test_import_rejects_a_folder_that_is_no_model(tmp_path: Path):
    result = CliRunner().invoke(cli, ["--home", str(tmp_path), "models", "import", str(tmp_path)])
    assert result.exit_code != 0 and "not a .gguf file" in result.output


# ------------------------------------------------------------------------------------------ use / list / check
def test_models_use_writes_rag_toml_and_keeps_other_keys(imported: dict[str, Path], tmp_path: Path):
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    (home / "models" / "tiny-phi3").symlink_to(imported["phi3"], target_is_directory=True)
    (home / "rag.toml").write_text('# mine\ntop_k = 7\ngenerator_dir = "/old"\n\n[unrelated]\nx = 1\n')
    with pytest.raises(Exception):  # [unrelated] is not a setting: prove the file is only edited, not rebuilt
        load_settings(environ={"RAG_HOME": str(home)})
    (home / "rag.toml").write_text('# mine\ntop_k = 7\ngenerator_dir = "/old"\n')
    result = CliRunner().invoke(cli, ["--home", str(home), "models", "use", "tiny-phi3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = (home / "rag.toml").read_text()
    assert text.startswith("# mine\ntop_k = 7\n") and text.count("generator_dir") == 1
    loaded = load_settings(environ={"RAG_HOME": str(home)})
    assert loaded.generator_path == (home / "models" / "tiny-phi3").resolve() and loaded.top_k == 7
    bad = CliRunner().invoke(cli, ["--home", str(home), "models", "use", "nope"])
    assert bad.exit_code != 0 and "no model 'nope'" in bad.output


def test_set_toml_key_adds_before_the_first_table():
    from app.diagnostics import set_toml_key

    text = set_toml_key('a = 1\n[t]\nb = 2\n', "generator_dir", 'C:\\models\\x "y"')
    assert text.splitlines()[1].startswith("generator_dir = ") and text.endswith("[t]\nb = 2\n")


def test_models_list_and_check_an_imported_model(imported: dict[str, Path]):
    rows = json.loads(run_cli("models", "list", "--json"))
    by_name = {r["name"]: r for r in rows}
    row = by_name["tiny-gemma2"]
    assert row["architecture"] == "Gemma2ForCausalLM" and row["precision"] == "int4" and row["size_mb"] > 0
    assert row["source"] == "hf: gemma2" and len(row["sha256"]) == 64
    assert by_name["tiny-llama-gguf"]["source"] == "gguf: tiny-llama.gguf"
    checked = json.loads(CliRunner().invoke(cli, ["--home", str(BYOM_HOME), "models", "check", "tiny-qwen2",
                                                  "--json"]).output)
    # Random weights may emit only whitespace; the check loaded and ran the model either way.
    assert checked[0]["role"] == "generator" and checked[0]["path"].endswith("tiny-qwen2")
    assert checked[0]["ok"] or "no text" in checked[0]["detail"]


# ------------------------------------------------------------------------------------------ rag info / device
def test_rag_info_matches_this_machine(imported: dict[str, Path]):
    import onnxruntime

    info = json.loads(run_cli("info", "--json", "--model", "tiny-llama", "--model", "tiny-gemma2"))
    cpuinfo = Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.MULTILINE).group(1).split())
    assert info["cpu"]["model"] == re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE).group(1).strip()
    assert ("AVX2" in info["cpu"]["instruction_sets"]) == ("avx2" in flags)
    assert ("AVX-512" in info["cpu"]["instruction_sets"]) == ("avx512f" in flags)
    assert ("AVX-512 VNNI" in info["cpu"]["instruction_sets"]) == ("avx512_vnni" in flags)
    assert info["providers"]["onnxruntime"] == onnxruntime.get_available_providers()
    assert info["memory"]["total_gb"] > 0
    assert info["device"]["setting"] == "auto" and info["device"]["chosen"] in info["providers"]["usable"]
    probes = {p["name"]: p for p in info["probes"]}
    assert set(probes) == {"tiny-llama", "tiny-gemma2"}  # gemma2: a sliding-window model
    for probe in probes.values():
        assert probe["ok"] and probe["ttft_s"] > 0 and probe["decode_tokens_per_s"] > 0
        assert probe["answer_s"] == pytest.approx(probe["ttft_s"] + 64 / probe["decode_tokens_per_s"], rel=0.05, abs=0.01)
    assert info["recommendation"]["model"] in probes


def test_auto_device_prefers_cuda_then_dml_then_cpu():
    facts = {"usable": ["cuda", "dml", "cpu"]}
    assert choose_provider("auto", facts)[0] == "cuda"
    assert choose_provider("auto", {"usable": ["dml", "cpu"]}) == ("dml", "auto: cuda not usable in this install; "
                                                                           "using dml")
    assert choose_provider("auto", {"usable": ["cpu"]})[0] == "cpu"
    assert choose_provider("cuda", {"usable": ["cpu"]})[0] == "cpu"
    real = provider_facts()
    assert "cpu" in real["usable"]
    assert load_settings(environ={}).device == "auto"


def test_merge_system_folds_instructions_into_the_first_user_turn():
    merged = merge_system([{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                           {"role": "assistant", "content": "A"}, {"role": "user", "content": "V"}])
    assert merged == [{"role": "user", "content": "S\n\nU"}, {"role": "assistant", "content": "A"},
                      {"role": "user", "content": "V"}]


def test_healthz_reports_the_usable_providers(settings: Settings):
    from litestar.testing import TestClient

    from api.app import create_app

    with TestClient(create_app(settings), base_url="http://127.0.0.1", timeout=120) as client:
        body = client.get("/healthz").json()  # answered while the models load (503) and after
    assert body["providers"] == provider_facts()["usable"] and body["providers"][-1] == "cpu"


def test_models_bench_runs_the_engine_bench_on_a_named_model(imported: dict[str, Path], tmp_path: Path):
    out = tmp_path / "bench.json"
    run_cli("models", "bench", "tiny-gemma2", "--prompt-lengths", "16,64", "--new-tokens", "4", "--warmup", "0",
            "--repeat", "1", "--json", str(out))
    result = json.loads(out.read_text())
    assert result["config"]["generator_path"].endswith("tiny-gemma2")
    assert [r["prompt_tokens"] for r in result["results"]] == [16, 64]
    assert all(r["output_tokens"] == 4 for r in result["samples"])
