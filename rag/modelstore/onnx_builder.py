"""``python -m rag.modelstore.onnx_builder ARGS``: onnxruntime-genai's builder, with one compatibility fix.

onnxruntime-genai 0.18's Gemma 3 builder reads the transformers 4 config layout (``rope_theta``,
``rope_local_base_freq``, a flat ``rope_parameters``); transformers 5 gives Gemma 3 a per-layer-type
``rope_parameters`` dict ({"full_attention": {...}, "sliding_attention": {...}}), on which the builder
stops with ``KeyError: 'rope_type'``. The fix puts the old attributes back on the config before the
builder reads it; every other architecture goes through the builder untouched. Build time only.
"""

from __future__ import annotations

import runpy
from typing import Any


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


def main() -> None:
    import onnxruntime_genai.models  # noqa: F401  (puts the builder's own folder on sys.path)
    import builders.gemma  # the module the builder script imports its classes from

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
