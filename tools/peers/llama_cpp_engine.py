"""Peer measurement: llama.cpp (llama-cpp-python) with the `rag bench engine` protocol.

Same neutral prompt text cut to exact token counts, greedy, EOS suppressed, TTFT = first token
(prefill), decode tok/s over the remaining tokens. Not part of the product; needs
`pip install llama-cpp-python` (built from source) in a separate environment.

    python tools/peers/llama_cpp_engine.py MODEL.gguf 16,128,256,1024 128 2 3
"""

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rag.bench.engine import NEUTRAL_TEXT  # noqa: E402


def main() -> None:
    import llama_cpp

    gguf, lengths, new, warmup, repeat = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], *map(int, sys.argv[3:6])
    llm = llama_cpp.Llama(gguf, n_threads=2, n_threads_batch=2, n_ctx=4096, n_batch=2048, verbose=False)
    ids = llm.tokenize((NEUTRAL_TEXT * 40).encode(), add_bos=False)
    eos = llm.token_eos()
    rows = []
    for length in lengths:
        ttfts, decodes = [], []
        for run in range(warmup + repeat):
            llm.reset()
            start = time.perf_counter()
            llm.eval(ids[:length])
            first = 0.0
            for n in range(1, new + 1):
                logits = llm.scores[llm.n_tokens - 1]
                logits[eos] = -1e30
                token = int(logits.argmax())
                if n == 1:
                    first = time.perf_counter()
                if n < new:
                    llm.eval([token])
            end = time.perf_counter()
            if run >= warmup:
                ttfts.append(first - start)
                decodes.append((new - 1) / (end - first))
        rows.append({"prompt_tokens": length, "ttft_ms": round(statistics.mean(ttfts) * 1000, 1),
                     "decode_tok_s": round(statistics.mean(decodes), 1)})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"llama_cpp_python": llama_cpp.__version__, "rows": rows}))


if __name__ == "__main__":
    main()
