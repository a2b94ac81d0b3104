"""Peer measurement: llama.cpp (llama-cpp-python) with the `rag bench engine` protocol.

Not part of the product; needs `pip install llama-cpp-python` (built from source) in a separate
environment.

    python tools/peers/llama_cpp_engine.py MODEL.gguf 16,128,256,1024 128 2 3
"""

from protocol import NEUTRAL_TEXT, arguments, clock, run


def main() -> None:
    import llama_cpp

    gguf, lengths, new, warmup, repeat = arguments()
    llm = llama_cpp.Llama(gguf, n_threads=2, n_threads_batch=2, n_ctx=4096, n_batch=2048, verbose=False)
    eos = llm.token_eos()

    def generate(prompt: list, new_tokens: int) -> tuple[float, float]:
        llm.reset()
        start = clock()
        llm.eval(prompt)
        first = start
        for n in range(1, new_tokens + 1):
            logits = llm.scores[llm.n_tokens - 1]
            logits[eos] = -1e30
            token = int(logits.argmax())
            if n == 1:
                first = clock()
            if n < new_tokens:
                llm.eval([token])
        return first - start, clock() - first

    ids = llm.tokenize((NEUTRAL_TEXT * 40).encode(), add_bos=False)
    run(generate, ids, lengths, new, warmup, repeat, {"llama_cpp_python": llama_cpp.__version__})


if __name__ == "__main__":
    main()
