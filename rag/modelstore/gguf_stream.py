"""A GGUF file straight to MatMulNBits weights, one tensor at a time (the import's weight loader).

The builder (``onnxruntime_genai.models.builder``) emits ``MatMulNBits`` directly for a linear module
that already carries ``qweight``, ``scales``, ``qzeros``, ``bits``, ``group_size``, ``in_features`` and
``out_features`` (as its GPTQ/AWQ loaders shape them). :func:`load_quantized_model` gives it such a
model: transformers' own model class built on the ``meta`` device (no memory), whose weights are filled
from the memory-mapped GGUF tensor by tensor: ``gguf.quants.dequantize`` one tensor, transformers' GGUF
tensor processor (the Llama q/k un-permute), then ONNX Runtime's block quantiser into the MatMulNBits
layout; the float copy is dropped before the next tensor. No fp32 copy of the model ever exists, and the
builder's graph-wide quantisation pass has nothing left to do (``onnx_builder`` skips it).

Which bits where (:class:`WeightPlan`): int4, block 32, asymmetric for the body; int8 for the LM head, a
separate input embedding, and the q/k/v and down projections of the layers llama.cpp gives more bits
(its ``use_more_bits``; the builder's ``k_quant_mixed`` placement) -- the placement of the recipe this
replaces. Build time only: numpy, torch, gguf, transformers and onnxruntime are imported in the functions.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

Report = Callable[[str], None]

# Decoder families whose GGUF tensors map onto transformers' module names one to one (checked end to end:
# SmolLM2 = llama, Qwen2.5 = qwen2). Any other architecture goes through the dequantising recipe.
STREAM_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
METHODS = ("rtn", "k_quant")
CHUNK_VALUES = 1 << 24  # rows of a large tensor dequantised at a time: 16M values, 64 MB as float32
UNSUPPORTED_EXIT = 3  # the builder shim's exit status for "not streamable, use the dequantising recipe"


@dataclass(frozen=True)
class WeightPlan:
    """How each weight is quantised. ``method``: "rtn" (onnxruntime's C++ blockwise quantiser, the
    builder's "default") or "k_quant" (onnxruntime's numpy k-quant, the old recipe's; ~25x slower)."""

    method: str = "rtn"
    block_size: int = 32
    body_bits: int = 4
    more_bits: int = 8  # q/k/v + down_proj of the llama.cpp "use_more_bits" layers
    lm_head_bits: int = 8
    embedding_bits: int = 8  # a separate (untied) input embedding: GatherBlockQuantized

    def options(self) -> tuple[str, ...]:
        """As recorded in the manifest (a change of plan rebuilds a prepared model)."""
        return (f"gguf-stream:{self.method}", f"block={self.block_size}", f"body=int{self.body_bits}",
                f"more_bits_layers=int{self.more_bits}", f"lm_head=int{self.lm_head_bits}",
                f"embedding=int{self.embedding_bits}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "WeightPlan":
        plan = cls(**json.loads(text))
        if plan.method not in METHODS or {plan.body_bits, plan.more_bits, plan.lm_head_bits,
                                          plan.embedding_bits} - {4, 8}:
            raise ValueError(f"bad weight plan {text}")
        return plan


def uses_more_bits(layer: int, num_layers: int) -> bool:
    """llama.cpp's ``use_more_bits`` (llama-quant.cpp), as the builder's ``mixed_layers`` placement."""
    return layer < num_layers / 8 or layer >= 7 * num_layers / 8 or (layer - round(num_layers / 8)) % 3 == 2


# ------------------------------------------------------------------------------------------- quantising
def block_quantize(weight, bits: int, block_size: int, method: str = "rtn"):
    """``weight`` [N, K] float32 (a Linear's out x in) -> (qweight [N, blocks, block*bits/8] uint8,
    scales [N, blocks] float32, zero points [N, ceil(blocks*bits/8)] uint8): MatMulNBits' layout,
    asymmetric, blocks along K, each row's zero points packed on their own."""
    n, k = weight.shape
    blocks = -(-k // block_size)
    if blocks * block_size != k:
        weight = np.pad(weight, ((0, 0), (0, blocks * block_size - k)))
    if method == "rtn":
        packed = np.zeros((n, blocks, block_size * bits // 8), dtype=np.uint8)
        scales = np.zeros((n, blocks), dtype=np.float32)
        zeros = np.zeros((n, -(-blocks * bits // 8)), dtype=np.uint8)
        quantize = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
        # It reads the ONNX MatMul weight layout [K, N] and writes per output row: N rows of K/block blocks.
        quantize(packed, np.ascontiguousarray(weight.T), scales, zeros, block_size, n, blocks * block_size, False)
        return packed, scales, zeros
    if method != "k_quant":
        raise ValueError(f"unknown method {method}")
    from onnxruntime.quantization.neural_compressor.weight_only import quant_tensor_k_quant_cpu  # lazy: needs onnx (the build extra)

    packed = np.empty((n, blocks, block_size * bits // 8), dtype=np.uint8)
    scales = np.empty((n, blocks), dtype=np.float32)
    zero_points = np.empty((n, blocks), dtype=np.uint8)
    rows = max(1, (1 << 20) // (blocks * block_size))  # ~1M values at a time: bounded temporaries
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        q, s, z = quant_tensor_k_quant_cpu(weight[start:stop], bits, block_size)
        q = q.astype(np.uint8)
        if bits == 4:
            q = q[:, ::2] | (q[:, 1::2] << 4)
        packed[start:stop] = q.reshape(stop - start, blocks, -1)
        scales[start:stop] = s.reshape(stop - start, blocks)
        zero_points[start:stop] = z.reshape(stop - start, blocks)
    if bits == 8:
        return packed, scales, zero_points
    if blocks % 2:  # a row's last byte holds one zero point; 8 (the midpoint) in the unused nibble
        zero_points = np.pad(zero_points, ((0, 0), (0, 1)), constant_values=8)
    return packed, scales, (zero_points[:, ::2] | (zero_points[:, 1::2] << 4)).astype(np.uint8)


class QuantizedEmbedding:
    """An input embedding as GatherBlockQuantized weights (``onnx_builder`` emits the node)."""

    def __init__(self, rows: int, cols: int, qweight, scales, qzeros, bits: int, group_size: int):
        self.shape = (rows, cols)
        self.qweight, self.scales, self.qzeros = qweight, scales, qzeros
        self.bits, self.group_size = bits, group_size


def _set_quantized(module, quantized, bits: int, plan: WeightPlan, shape: tuple[int, int]) -> None:
    import torch  # lazy: optional dependency (the build extra)

    qweight, scales, zeros = quantized
    module.qweight = torch.from_numpy(qweight)
    module.scales = torch.from_numpy(scales)
    module.qzeros = torch.from_numpy(zeros)
    module.g_idx = None
    module.bits, module.group_size = bits, plan.block_size
    module.out_features, module.in_features = shape


# ------------------------------------------------------------------------------------------ the reader
_READERS: dict[str, Any] = {}


def _reader_class():
    from gguf import GGUFReader  # lazy: optional dependency (the build extra)

    class PlainViewReader(GGUFReader):
        """GGUFReader over a plain ndarray view of its np.memmap: the memmap subclass's Python hooks on
        every slice made parsing a 150k-token vocabulary take 13 s instead of 3.7 s (Qwen2.5 0.5B)."""

        @property
        def data(self):
            return self._data

        @data.setter
        def data(self, value):
            self._data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return PlainViewReader


def share_gguf_reader() -> None:
    """Parse each GGUF file's header once in this process: config, tokenizer (transformers) and weights
    (here) all ask ``gguf.GGUFReader`` for it."""
    import gguf  # lazy: optional dependency (the build extra)

    if getattr(gguf.GGUFReader, "_rag_shared", False):
        return
    reader_class = _reader_class()

    def reader(path, mode="r"):
        key = f"{os.path.realpath(path)}:{mode}"
        if key not in _READERS:
            _READERS[key] = reader_class(path, mode)
        return _READERS[key]

    reader._rag_shared = True
    gguf.GGUFReader = reader


def _field_text(reader, key: str) -> str | None:
    field = reader.fields.get(key)
    return None if field is None else bytes(field.parts[field.data[0]]).decode("utf-8")


def _release_pages(reader) -> None:
    """Drop the mapped file pages from this process's resident set (they stay in the page cache)."""
    mapping = getattr(reader.data.base, "_mmap", None)
    if mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


# ------------------------------------------------------------------------------------------ config dir
def write_config_dir(gguf_path: Path, hf_dir: Path) -> Any:
    """config.json, generation_config.json and the tokenizer, from the GGUF's metadata (no weights)."""
    # lazy: optional dependency (the build extra)
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    share_gguf_reader()
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if not getattr(config, "architectures", None):
        config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type, config.model_type)]
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(hf_dir)
    GenerationConfig.from_model_config(config).save_pretrained(hf_dir)
    AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name).save_pretrained(hf_dir)
    return config


# --------------------------------------------------------------------------------------------- loading
def load_quantized_model(gguf_path: Path, config: Any, plan: WeightPlan,
                         report: Report = lambda line: print(line, flush=True)) -> Any:
    """transformers' causal LM for ``config`` on the meta device, its weights from ``gguf_path``: every
    Linear as MatMulNBits weights, norms and biases as float tensors, the embedding tied to the LM head
    or as :class:`QuantizedEmbedding`. Holds at most one dequantised tensor at a time."""
    # lazy: optional dependencies (the build extra)
    import torch
    from gguf import GGUFReader, dequantize
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (TENSOR_PROCESSORS, TensorProcessor,
                                                          get_gguf_hf_weights_map)

    share_gguf_reader()
    reader = GGUFReader(str(gguf_path))
    architecture = _field_text(reader, "general.architecture") or config.model_type
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    config_dict = config.to_dict()
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config_dict)
    mapping = get_gguf_hf_weights_map(model, processor)
    layers = int(config.num_hidden_layers)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    embedding_module, lm_head = model.get_input_embeddings(), model.get_output_embeddings()
    names = {t.name for t in reader.tensors}
    if tied and "output.weight" in names:
        raise ValueError("the config ties the embeddings but the GGUF file has its own output.weight")
    total = len(reader.tensors)

    def processed(tensor, rows=slice(None)):
        """Rows of one tensor dequantised, through transformers' tensor processor; (HF name, float32)."""
        weights = dequantize(tensor.data[rows], tensor.tensor_type)
        result = processor.process(weights=weights, name=tensor.name, tensor_key_mapping=mapping,
                                   parsed_parameters={"config": config_dict, "tensors": {}})
        return mapping.get(result.name), np.asarray(result.weights, dtype=np.float32)

    def quantized(tensor, bits):
        """A large 2-D tensor (embeddings, LM head) dequantised and quantised CHUNK_VALUES at a time:
        blocks run along a row, so a slice of rows quantises as it would whole."""
        rows = tensor.data.shape[0]
        cols = int(tensor.n_elements) // rows
        step = max(1, CHUNK_VALUES // cols)
        out = None
        for start in range(0, rows, step):
            part = block_quantize(processed(tensor, slice(start, start + step))[1], bits, plan.block_size,
                                  plan.method)
            if out is None:
                out = tuple(np.empty((rows, *array.shape[1:]), dtype=array.dtype) for array in part)
            for whole, piece in zip(out, part):
                whole[start:start + len(piece)] = piece
        return out, (rows, cols)

    for index, tensor in enumerate(reader.tensors, 1):
        if int(tensor.n_elements) >= CHUNK_VALUES:
            report(f"[rag] quantising {tensor.name} ({int(tensor.n_elements) / 1e6:.0f}M values, "
                   f"{tensor.tensor_type.name})")
        target = mapping.get(tensor.name)
        module_name, attribute = target.rsplit(".", 1) if target else (None, None)
        module = model.get_submodule(module_name) if module_name else None
        if attribute == "weight" and module is embedding_module:
            if tied:  # one matrix: the LM head's MatMulNBits weights, gathered by the embedding
                weights, shape = quantized(tensor, plan.lm_head_bits)
                _set_quantized(lm_head, weights, plan.lm_head_bits, plan, shape)
            else:
                (qweight, scales, zeros), shape = quantized(tensor, plan.embedding_bits)
                del module.weight  # the meta parameter; the builder reads .weight
                module.weight = QuantizedEmbedding(*shape, qweight, scales, zeros, plan.embedding_bits,
                                                   plan.block_size)
        elif attribute == "weight" and module is lm_head:
            weights, shape = quantized(tensor, plan.lm_head_bits)
            _set_quantized(lm_head, weights, plan.lm_head_bits, plan, shape)
        else:
            target, weights = processed(tensor)
            if target is None:  # rope_freqs and the like: the builder computes them
                continue
            module_name, attribute = target.rsplit(".", 1)
            module = model.get_submodule(module_name)
            if isinstance(module, torch.nn.Linear) and attribute == "weight":
                bits = plan.body_bits
                parts = module_name.split(".")
                if "layers" in parts and parts[-1] in ("q_proj", "k_proj", "v_proj", "down_proj"):
                    if uses_more_bits(int(parts[parts.index("layers") + 1]), layers):
                        bits = plan.more_bits
                _set_quantized(module, block_quantize(weights, bits, plan.block_size, plan.method), bits, plan,
                               weights.shape)
            else:
                param = getattr(module, attribute)
                setattr(module, attribute, torch.nn.Parameter(
                    torch.from_numpy(weights.copy()).reshape(param.shape), requires_grad=False))
            del weights
        _release_pages(reader)
        if index % 16 == 0 or index == total:
            report(f"[rag] quantised {index}/{total} tensors")
    missing = [name for name, p in model.named_parameters() if p.is_meta
               and not (tied and p is embedding_module.weight)
               and not (name.endswith(".weight") and hasattr(model.get_submodule(name.rsplit(".", 1)[0]), "qweight"))]
    if tied and not hasattr(lm_head, "qweight"):
        missing.append("the (tied) token embedding")
    if missing:
        raise ValueError(f"the GGUF file has no tensor for {', '.join(missing[:5])}")
    return model


def gguf_facts(gguf_path: Path) -> dict:
    """Architecture and parameter count from the (shared) reader: for the manifest."""
    from gguf import GGUFReader  # lazy: optional dependency (the build extra)

    share_gguf_reader()
    reader = GGUFReader(str(gguf_path))
    return {"gguf_architecture": _field_text(reader, "general.architecture"),
            "parameters": int(sum(int(t.n_elements) for t in reader.tensors))}
