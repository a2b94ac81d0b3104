"""The `rag bench engine` protocol for peer engines: exact-length prompts of the same neutral text,
greedy, EOS suppressed, ``new`` tokens; TTFT = first token (prefill), decode tok/s after it."""

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from app.bench.engine import NEUTRAL_TEXT  # noqa: E402,F401  (re-exported for the peer scripts)

# One generation: (prompt token ids, new tokens) -> (seconds to first token, seconds for the rest).
Generate = Callable[[list, int], tuple[float, float]]


def arguments() -> tuple[str, list[int], int, int, int]:
    """MODEL LENGTHS NEW WARMUP REPEAT, e.g. `model.gguf 16,128,256,1024 128 2 3`."""
    if len(sys.argv) != 6:
        sys.exit(f"usage: {sys.argv[0]} MODEL LENGTHS NEW_TOKENS WARMUP REPEAT")
    model, lengths, new, warmup, repeat = sys.argv[1:]
    return model, [int(x) for x in lengths.split(",")], int(new), int(warmup), int(repeat)


def run(generate: Generate, prompt_ids: list, lengths: list[int], new: int, warmup: int, repeat: int,
        label: dict) -> None:
    rows = []
    for length in lengths:
        ttfts, decodes = [], []
        for attempt in range(warmup + repeat):
            first, rest = generate(prompt_ids[:length], new)
            if attempt >= warmup:
                ttfts.append(first)
                decodes.append((new - 1) / rest)
        rows.append({"prompt_tokens": length, "ttft_ms": round(statistics.mean(ttfts) * 1000, 1),
                     "decode_tok_s": round(statistics.mean(decodes), 1)})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({**label, "rows": rows}))


def clock() -> float:
    return time.perf_counter()
