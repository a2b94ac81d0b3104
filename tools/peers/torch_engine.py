"""Peer measurement: torch fp32 (transformers, sdpa) with the `rag bench engine` protocol.

Loads the same GGUF the default generator is built from, dequantised to fp32 by transformers (as
`rag models prepare` does; needs the build extras `.[build]`).

    python tools/peers/torch_engine.py MODEL.gguf 16,128,256,1024 128 2 3
"""

from pathlib import Path

from protocol import NEUTRAL_TEXT, arguments, clock, run


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    gguf, lengths, new, warmup, repeat = arguments()
    path = Path(gguf)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)

    @torch.inference_mode()
    def generate(prompt: list, new_tokens: int) -> tuple[float, float]:
        start = clock()
        out = model(torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
        first = start
        for n in range(1, new_tokens + 1):
            logits = out.logits[:, -1]
            logits[:, tokenizer.eos_token_id] = -1e30
            token = logits.argmax(-1, keepdim=True)
            if n == 1:
                first = clock()
            if n < new_tokens:
                out = model(token, past_key_values=out.past_key_values, use_cache=True)
        return first - start, clock() - first

    ids = tokenizer(NEUTRAL_TEXT * 40).input_ids
    run(generate, ids, lengths, new, warmup, repeat, {"torch": torch.__version__})


if __name__ == "__main__":
    main()
