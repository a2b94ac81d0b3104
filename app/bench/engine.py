"""``rag bench engine``: the in-process generator at exact prompt lengths (prefill and decode speed).

Prompts are raw text continuations (no chat template), cut to exactly the wanted
number of token ids, so the prompt length is what the model really sees. EOS is
suppressed with ORT GenAI's ``min_length`` so every run decodes ``new_tokens``
tokens (``stop_at_eos`` lets the model stop early instead); the actual count is
always reported. Timing follows ``LocalGenerator.stream``: the clock starts before
the generator is created, TTFT is the first generated token (prefill), and each
token is detokenised incrementally as it would be when streaming. With ``copy_bias``, every run is paired
with a run of the same prompt whose logits get the copy bias (over the ids of the prompt's first
``COPY_BIAS_TOKENS`` tokens and EOS, like an answer's context), alternating, so both are measured in one
sitting; ``copy_bias_overhead`` compares their TPOT.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np
import onnxruntime_genai as og

from app.bench.stats import summarise
from rag.core.errors import BadRequestError
from rag.generation.logits import LogitBias
from rag.generation.ort import next_token

COPY_BIAS_TOKENS = 100  # about the context tokens of an answer's prompt (context_tokens 100)

# Neutral, descriptive prose: long enough to cut any prompt length from, and it invites more of the same.
NEUTRAL_TEXT = (
    "The river begins in the hills north of the town, where several small streams meet in a wide valley "
    "covered with grass and low trees. In spring the water rises quickly as the snow melts, and the old "
    "stone bridge near the mill is sometimes closed for a few days. Farmers in the valley grow wheat, "
    "barley and potatoes, and many families keep sheep on the higher fields. The town itself grew up around "
    "a market square, which still holds a market every Saturday morning. Visitors can walk along the river "
    "path to the lake, a journey of about two hours, passing a small chapel, a row of cottages and the "
    "ruins of a watchtower. The library on the square keeps records of the town going back several "
    "centuries, including maps, letters and lists of the goods that were once carried by boat to the coast. "
    "In the evening the lamps along the main street are lit, and people gather in the cafes to talk about "
    "the weather, the harvest and the news from the city. Each autumn the school organises a walk through "
    "the forest to collect leaves, and the children write short reports about the birds and animals they "
    "see. The railway station, built at the end of the nineteenth century, connects the town with the "
    "larger cities in the south, and the journey takes a little more than three hours. "
)

def synthetic_prompt_tokens(generator: Any, n: int) -> np.ndarray:
    """Exactly ``n`` token ids (int32) of neutral prose, tokenised by ``generator``'s own tokenizer."""
    if n < 1:
        raise ValueError("a prompt needs at least one token")
    ids = getattr(generator, "_bench_prompt_ids", None)
    if ids is None or len(ids) < n:
        repeats = 1
        while True:
            ids = np.asarray(generator.encode(NEUTRAL_TEXT * repeats), dtype=np.int32)
            if len(ids) >= n:
                break
            repeats = max(repeats * 2, int(repeats * n / max(1, len(ids))) + 1)
        generator._bench_prompt_ids = ids  # tokenised once per generator
    return np.ascontiguousarray(ids[:n], dtype=np.int32)


def timed_generation(generator: Any, prompt: np.ndarray, new_tokens: int, stop_at_eos: bool = False,
                     bias: LogitBias | None = None) -> dict:
    """One greedy generation of up to ``new_tokens`` tokens (its logits biased by ``bias``); returns its timings."""
    prompt_len = int(len(prompt))
    start = time.perf_counter()
    params = og.GeneratorParams(generator.model)
    search: dict[str, Any] = {"max_length": generator.info.kv_length(prompt_len + new_tokens), "do_sample": False}
    if not stop_at_eos:
        search["min_length"] = prompt_len + new_tokens
    params.set_search_options(**search)
    gen = og.Generator(generator.model, params)
    decoder = generator.tokenizer.create_stream()
    gen.append_tokens(prompt)
    eos = generator.eos_token_ids
    ttft = 0.0
    output = 0
    finish = "length"
    while not gen.is_done():
        token = next_token(gen, bias)
        if stop_at_eos and token in eos:
            finish = "stop"
            break
        output += 1
        if output == 1:
            ttft = time.perf_counter() - start
        decoder.decode(token)
        if output >= new_tokens:  # max_length may exceed the request (a sliding-window model's floor)
            break
    total = time.perf_counter() - start
    del gen
    tpot = (total - ttft) / (output - 1) if output > 1 else None
    return {"prompt_tokens": prompt_len, "output_tokens": output, "finish_reason": finish,
            "ttft_ms": ttft * 1000 if output else None, "total_ms": total * 1000,
            "tpot_ms": tpot * 1000 if tpot else None,
            "decode_tokens_per_s": 1.0 / tpot if tpot else None,
            "prefill_tokens_per_s": prompt_len / ttft if output and ttft > 0 else None}


def plan_lengths(prompt_lengths: Sequence[int], new_tokens: int, context_length: int,
                 warn: Callable[[str], None]) -> list[tuple[int, int]]:
    """(prompt length, new tokens) pairs that fit the context; too long prompts are skipped, outputs clipped."""
    plan = []
    for length in prompt_lengths:
        if length + 1 > context_length:
            warn(f"prompt length {length} does not fit the {context_length}-token context: skipped")
            continue
        tokens = new_tokens
        if length + new_tokens > context_length:
            tokens = context_length - length
            warn(f"prompt length {length} + {new_tokens} new tokens exceed the {context_length}-token context: "
                 f"generating {tokens} tokens")
        plan.append((length, tokens))
    return plan


def bench_engine(generator: Any, prompt_lengths: Sequence[int], new_tokens: int, warmup: int, repeat: int,
                 stop_at_eos: bool = False, progress: Callable[[str], None] = lambda message: None,
                 warn: Callable[[str], None] = lambda message: None, copy_bias: float = 0.0) -> dict:
    """Per prompt length: ``warmup`` unmeasured runs, then ``repeat`` measured ones, summarised (with
    ``copy_bias``: each also with the bias, alternating, in rows of their own)."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    plan = plan_lengths(prompt_lengths, new_tokens, generator.context_length, warn)
    if not plan:
        raise BadRequestError(f"no prompt length fits the model's {generator.context_length}-token context")
    bias = LogitBias.of(synthetic_prompt_tokens(generator, COPY_BIAS_TOKENS).tolist(), copy_bias,
                        also=generator.eos_token_ids)
    variants: list[tuple[float, LogitBias | None]] = [(0.0, None)] + ([(copy_bias, bias)] if bias else [])
    rows: list[dict] = []
    samples: list[dict] = []
    overhead: list[dict] = []
    for length, tokens in plan:
        prompt = synthetic_prompt_tokens(generator, length)
        for i in range(warmup):
            progress(f"prompt {length}: warm-up {i + 1}/{warmup}")
            for _, variant in variants:
                timed_generation(generator, prompt, tokens, stop_at_eos, variant)
        runs: dict[float, list[dict]] = {delta: [] for delta, _ in variants}
        for i in range(repeat):
            progress(f"prompt {length}: run {i + 1}/{repeat}")
            for delta, variant in variants:
                run = timed_generation(generator, prompt, tokens, stop_at_eos, variant)
                runs[delta].append(run)
                samples.append({"prompt_tokens": length, "run": i, **({"copy_bias": delta} if bias else {}), **run})
        for delta, measured in runs.items():
            short = sum(r["output_tokens"] < tokens for r in measured)
            if short:
                warn(f"prompt length {length}: {short}/{repeat} runs stopped at EOS before {tokens} tokens")
            row: dict[str, Any] = {"prompt_tokens": length, "new_tokens": tokens, "runs": repeat}
            if bias:
                row["copy_bias"] = delta
            for key in ("output_tokens", "ttft_ms", "tpot_ms", "decode_tokens_per_s", "prefill_tokens_per_s",
                        "total_ms"):
                stats = summarise([r[key] for r in measured], percentiles=(50, 95), prefix=key)
                stats.pop(f"{key}_n")
                row.update(stats)
            rows.append(row)
        if bias:
            base, biased = rows[-2]["tpot_ms_p50"], rows[-1]["tpot_ms_p50"]
            overhead.append({"prompt_tokens": length, "tpot_ms_p50": base, "tpot_ms_p50_biased": biased,
                             "overhead": biased / base - 1 if base and biased else None})
    result: dict[str, Any] = {"benchmark": "engine", "results": rows, "samples": samples}
    if bias:
        result["copy_bias_overhead"] = overhead
    return result
