"""Peer measurement: torch fp32 (transformers, sdpa) with the `rag bench engine` protocol.

Loads the same GGUF the default generator is built from, dequantised to fp32 by transformers (as
`rag models prepare` does; needs the build extras `.[build]`). Greedy, EOS suppressed, TTFT = first
token (prefill), decode tok/s over the remaining tokens.

    python tools/peers/torch_engine.py MODEL.gguf 16,128,256,1024 128 2 3
"""

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rag.bench.engine import NEUTRAL_TEXT  # noqa: E402


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    gguf, lengths, new, warmup, repeat = Path(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")], *map(int, sys.argv[3:6])
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    ids = tokenizer(NEUTRAL_TEXT * 40, return_tensors="pt").input_ids
    rows = []
    with torch.inference_mode():
        for length in lengths:
            ttfts, decodes = [], []
            for run in range(warmup + repeat):
                start = time.perf_counter()
                out = model(ids[:, :length], use_cache=True, logits_to_keep=1)
                for n in range(1, new + 1):
                    logits = out.logits[:, -1]
                    logits[:, tokenizer.eos_token_id] = -1e30
                    token = logits.argmax(-1, keepdim=True)
                    if n == 1:
                        first = time.perf_counter()
                    if n < new:
                        out = model(token, past_key_values=out.past_key_values, use_cache=True)
                end = time.perf_counter()
                if run >= warmup:
                    ttfts.append(first - start)
                    decodes.append((new - 1) / (end - first))
            rows.append({"prompt_tokens": length, "ttft_ms": round(statistics.mean(ttfts) * 1000, 1),
                         "decode_tok_s": round(statistics.mean(decodes), 1)})
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"torch": torch.__version__, "rows": rows}))


if __name__ == "__main__":
    main()
