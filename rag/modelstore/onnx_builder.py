"""``python -m rag.modelstore.onnx_builder [--gguf FILE --weights-plan JSON --facts FILE] ARGS``:
onnxruntime-genai's builder, with one compatibility fix and an optional streaming GGUF weight loader.

onnxruntime-genai 0.18's Gemma 3 builder reads the transformers 4 config layout (``rope_theta``,
``rope_local_base_freq``, a flat ``rope_parameters``); transformers 5 gives Gemma 3 a per-layer-type
``rope_parameters`` dict ({"full_attention": {...}, "sliding_attention": {...}}), on which the builder
stops with ``KeyError: 'rope_type'``. The fix puts the old attributes back on the config before the
builder reads it; every other architecture goes through the builder untouched.

With ``--gguf FILE`` the builder's ``-i`` folder is first written from the GGUF's metadata (config,
generation config, tokenizer; no weights), and the builder reads its weights from
:func:`rag.modelstore.gguf_stream.load_quantized_model` (MatMulNBits weights, one tensor at a time)
instead of loading a float checkpoint; its graph-wide quantisation pass is then skipped (nothing is
left to quantise), and a separate quantised input embedding becomes a ``GatherBlockQuantized``. An
architecture the loader does not handle exits with status 3 (the caller takes the dequantising
recipe). Build time only.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path
from typing import Any

from rag.modelstore.gguf_stream import (QuantizedEmbedding, STREAM_ARCHITECTURES, UNSUPPORTED_EXIT, WeightPlan,
                                        gguf_facts, load_quantized_model, write_config_dir)


def flatten_layer_rope(config: Any) -> None:
    """Gemma 3's per-layer-type RoPE parameters in the flat form the 0.18 builder reads."""
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or "rope_type" in params or "full_attention" not in params:
        return
    full = dict(params["full_attention"])
    local = params.get("sliding_attention") or full
    config.rope_theta = full.get("rope_theta", 10000.0)
    config.rope_local_base_freq = local.get("rope_theta", config.rope_theta)
    config.rope_parameters = full


def _take_option(argv: list[str], name: str) -> str | None:
    """Remove ``name VALUE`` from argv (the builder does not know our options); its value or None."""
    if name not in argv:
        return None
    at = argv.index(name)
    value = argv[at + 1]
    del argv[at:at + 2]
    return value


def _builder_input(argv: list[str]) -> Path:
    for flag in ("-i", "--input"):
        if flag in argv:
            return Path(argv[argv.index(flag) + 1])
    raise SystemExit("--gguf needs the builder's -i folder")


def _embedding_lookup(original):
    """``Model.make_embedding_lookup`` that also gathers from a QuantizedEmbedding (an untied input
    embedding): GatherBlockQuantized over its own weights, as the builder does for a tied one."""
    def lookup(self, embedding, basename, lm_head):
        if not isinstance(embedding, QuantizedEmbedding):
            if getattr(embedding, "is_meta", False) and not self.tied_quantized_embeddings:
                raise ValueError("the embedding is tied to the LM head but the builder does not share them")
            return original(self, embedding, basename, lm_head)
        prefix = "model.embed_tokens.GatherBlockQuantized"
        rows, hidden = embedding.shape
        data = embedding.qweight.reshape(rows, -1)
        self.make_initializer(data, f"{prefix}.qweight")
        self.make_initializer(embedding.scales, f"{prefix}.scales", to=self.io_dtype)
        self.make_initializer(embedding.qzeros, f"{prefix}.qzeros")
        gather_name = f"{basename}/GatherBlockQuantized"
        gather_output = f"{gather_name}/output_0"
        self.make_node("GatherBlockQuantized",
                       inputs=[f"{prefix}.qweight", self.input_names["input_ids"], f"{prefix}.scales",
                               f"{prefix}.qzeros"],
                       outputs=[gather_output], name=gather_name, domain="com.microsoft", bits=embedding.bits,
                       block_size=embedding.group_size, gather_axis=0, quantize_axis=1)
        padded = data.shape[1] * 8 // embedding.bits
        if padded == hidden:
            return gather_output
        self.make_value(gather_output, self.io_dtype, shape=self.make_hidden_state_shape(last_dim=padded))
        slice_name = f"{basename}/Slice"
        self.make_slice(slice_name, [gather_output, "/model/constants/INT64/[0]", f"/model/constants/INT64/[{hidden}]",
                                     "/model/constants/INT64/[-1]"], dtype=self.io_dtype,
                        shape=self.make_hidden_state_shape())
        return f"{slice_name}/output_0"

    return lookup


def _to_nbits(original):
    """Skip the graph-wide quantisation when no float MatMul weight is left (the loader quantised them):
    it would copy the whole model into a ModelProto and back for nothing."""
    def to_nbits(self):
        for node in self.model.graph:
            if node.op_type == "MatMul" and len(node.inputs) > 1 and node.inputs[1] is not None \
                    and node.inputs[1].const_value is not None:
                return original(self)
        return self.model

    return to_nbits


def install_gguf_loader(gguf: Path, plan_json: str, facts_path: Path | None, hf_dir: Path) -> None:
    """Write the config folder from the GGUF, then point the builder's weight loading at the stream."""
    import builders.base  # lazy: on sys.path once onnxruntime_genai.models is imported

    plan = WeightPlan.from_json(plan_json)
    print("[rag] reading the GGUF metadata (config, tokenizer)", flush=True)
    config = write_config_dir(gguf, hf_dir)
    print(f"[rag] {config.architectures[0]}, {config.num_hidden_layers} layers: quantising tensor by tensor",
          flush=True)
    architecture = config.architectures[0]
    facts = {"architecture": architecture, **gguf_facts(gguf)}
    if facts_path is not None:
        facts_path.write_text(json.dumps(facts), encoding="utf-8")
    if architecture not in STREAM_ARCHITECTURES:
        print(f"[rag] {architecture}: no streaming loader", flush=True)
        raise SystemExit(UNSUPPORTED_EXIT)
    model = builders.base.Model

    def load_weights(self, input_path):  # transformers' module names and weight conventions (norm offsets)
        return load_quantized_model(gguf, config, plan)

    model.load_weights = load_weights
    model.to_nbits = _to_nbits(model.to_nbits)
    model.make_embedding_lookup = _embedding_lookup(model.make_embedding_lookup)


def main() -> None:
    # lazy: the model builder needs the build extra; importing it puts its own folder (builders) on sys.path
    import onnxruntime_genai.models  # noqa: F401
    import builders.gemma  # the module the builder script imports its classes from

    gguf = _take_option(sys.argv, "--gguf")
    plan_json = _take_option(sys.argv, "--weights-plan")
    facts = _take_option(sys.argv, "--facts")
    if gguf is not None:
        install_gguf_loader(Path(gguf), plan_json or "{}", Path(facts) if facts else None, _builder_input(sys.argv))

    gemma3 = builders.gemma.Gemma3Model
    original = gemma3.__init__

    def init(self, config, *args, **kwargs):
        if type(self) is gemma3:  # Gemma 4 reads the per-layer-type dict itself
            flatten_layer_rope(config)
        original(self, config, *args, **kwargs)

    gemma3.__init__ = init
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
