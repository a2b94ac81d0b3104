"""``rag bench``: the generation engine, any OpenAI-compatible server, the RAG pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click
from rich.text import Text

from app.bench.stats import parse_int_list
from app.cli.bench_report import environment_line, print_table, require_matplotlib, save, table
from app.cli.common import console, handle_errors, index_option, literal, out, settings_from, traced
from app.runtime import load_generator


def _bench_int_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        return parse_int_list(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def _bench_outputs(func: Callable) -> Callable:
    func = click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Write a PNG chart (needs the plot extra: matplotlib).")(func)
    func = click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Write the result rows as CSV.")(func)
    return click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
                        help="Write the full result (environment, config, rows, samples) as JSON.")(func)


def _bench_finish(result: dict, json_path: Path | None, csv_path: Path | None, plot_path: Path | None) -> None:
    print_table(out, table(result))
    console.print(literal(environment_line(result["environment"]), "dim"))
    for path in save(result, json_path, csv_path, plot_path):
        console.print(Text.assemble(("wrote", "green"), f" {path}"))


def _bench_warn(message: str) -> None:
    console.print(Text.assemble(("warning:", "yellow"), f" {message}"), soft_wrap=True)


def _status_text(status: Any) -> Callable[[str], None]:
    """A progress callback that shows its message literally on a rich status line."""
    return lambda message: status.update(literal(message))


@click.group()
def bench() -> None:
    """Benchmarks: the generation engine, any OpenAI-compatible server, the RAG pipeline."""


@bench.command("engine")
@click.option("--prompt-lengths", default="16,64,256,1024,2048", show_default=True, callback=_bench_int_list,
              help="Comma-separated prompt lengths in model tokens (exact).")
@click.option("--new-tokens", type=click.IntRange(1), default=256, show_default=True,
              help="Tokens to generate per run (EOS is suppressed unless --stop-at-eos).")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True, help="Unmeasured runs per length.")
@click.option("--repeat", type=click.IntRange(1), default=10, show_default=True, help="Measured runs per length.")
@click.option("--stop-at-eos", is_flag=True, help="Let the model stop at EOS (output counts are reported).")
@click.option("--threads", type=click.IntRange(0), help="Intra-op threads (0 = all cores).")
@click.option("--copy-bias", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Also time every run with this copy bias (over 100 prompt tokens), alternating, and report the "
                   "TPOT overhead.")
@_bench_outputs
@click.pass_context
@handle_errors
def bench_engine_cmd(ctx: click.Context, prompt_lengths: list[int], new_tokens: int, warmup: int, repeat: int,
                     stop_at_eos: bool, threads: int | None, copy_bias: float, json_path: Path | None,
                     csv_path: Path | None, plot_path: Path | None) -> None:
    """Prefill (TTFT) and decode speed of the local generator at exact prompt lengths, greedy, in-process."""
    from app.bench.engine import bench_engine  # lazy: keeps rag --help fast
    from app.bench.environment import environment  # lazy: keeps rag --help fast

    if plot_path:
        require_matplotlib()
    settings = settings_from(ctx, threads=threads)
    with console.status("loading the generator…") as status:
        generator = load_generator(settings)
        result = bench_engine(generator, prompt_lengths, new_tokens, warmup, repeat, stop_at_eos,
                              progress=_status_text(status), warn=_bench_warn, copy_bias=copy_bias)
    result["environment"] = environment(settings, device=generator.device)
    result["config"] = {"prompt_lengths": prompt_lengths, "new_tokens": new_tokens, "warmup": warmup,
                        "repeat": repeat, "stop_at_eos": stop_at_eos, "copy_bias": copy_bias, "context_length": generator.context_length,
                        "generator_path": str(settings.generator_path), "load_s": round(generator.load_s, 3)}
    _bench_finish(result, json_path, csv_path, plot_path)
    for row in result.get("copy_bias_overhead", []):
        change = f"{row['overhead']:+.1%}" if row["overhead"] is not None else "n/a"
        out.print(f"copy bias {copy_bias:g}, prompt {row['prompt_tokens']} tok: TPOT p50 {row['tpot_ms_p50']:.2f} ms "
                  f"-> {row['tpot_ms_p50_biased']:.2f} ms ({change})", highlight=False, markup=False)


@bench.command("serve")
@click.option("--url", required=True, help="Base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", help="Model name to send (default: the first one GET {url}/models lists).")
@click.option("--scenarios", default="chatbot,generation,summarization,long", show_default=True,
              help="Comma-separated: chatbot 128/128, generation 128/2048, summarization 2048/128, long 2048/2048 "
                   "input/output tokens. Input size is approximated by word count (~0.75 words per token): "
                   "remote models cannot be tokenised here.")
@click.option("--concurrency", default="1,5,10", show_default=True, callback=_bench_int_list,
              help="Comma-separated concurrency levels (parallel streaming clients).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True),
              help="Seconds per level: each worker loops requests until then (no new request after it).")
@click.option("--requests", type=click.IntRange(1), help="Requests per level in total (default: 4 x concurrency).")
@click.option("--max-output", type=click.IntRange(1), help="Cap every scenario's output tokens (CPU boxes).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=120.0,
              show_default=True, help="Per-request limit in seconds (whole stream).")
@click.option("--api-key", help="Sent as a bearer token.")
@click.option("--no-retrieval", is_flag=True,
              help="Send \"use_context\": false (plain chat) - for this project's server, which otherwise answers "
                   "from its index (questions then limited to max_question_tokens). Without the flag nothing "
                   "beyond standard OpenAI fields is sent, so any compatible server works.")
@_bench_outputs
@click.pass_context
@handle_errors
def bench_serve_cmd(ctx: click.Context, url: str, model: str | None, scenarios: str, concurrency: list[int],
                    duration: float | None, requests: int | None, max_output: int | None, timeout_s: float,
                    api_key: str | None, no_retrieval: bool, json_path: Path | None, csv_path: Path | None,
                    plot_path: Path | None) -> None:
    """Streaming load test of any OpenAI-compatible /chat/completions: TTFT, ITL, TPOT, E2E, throughput."""
    from app.bench.environment import environment  # lazy: keeps rag --help fast
    from app.bench.serve import SCENARIOS, bench_serve  # lazy: keeps rag --help fast

    if duration is not None and requests is not None:
        raise click.UsageError("give --duration or --requests, not both")
    if not url.startswith(("http://", "https://")):
        raise click.BadParameter("must start with http:// or https://", param_hint="--url")
    names = [s.strip() for s in scenarios.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS]
    if not names or unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(SCENARIOS)}",
                                 param_hint="--scenarios")
    if plot_path:
        require_matplotlib()
    with console.status("benchmarking…") as status:
        result = bench_serve(url, model, names, concurrency, requests, duration, max_output, timeout_s, api_key,
                             no_retrieval, progress=_status_text(status), warn=_bench_warn)
    result["environment"] = {**environment(settings_from(ctx), model=result["model"], device="remote"),
                             "threads_setting": None, "threads_effective": None, "role": "client"}
    result["config"] = {"url": url, "scenarios": names, "concurrency": concurrency, "duration_s": duration,
                        "requests": requests, "max_output": max_output, "timeout_s": timeout_s,
                        "no_retrieval": no_retrieval, "input_tokens_approximation": "words / 0.75"}
    _bench_finish(result, json_path, csv_path, plot_path)


@bench.command("rag")
@click.option("--questions", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="JSONL of {question, answers, unanswerable, document}.")
@click.option("--n", "count", type=click.IntRange(1), default=20, show_default=True, help="Questions to sample.")
@index_option()
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=click.IntRange(0), help="Intra-op threads (0 = all cores).")
@_bench_outputs
@click.pass_context
@handle_errors
def bench_rag_cmd(ctx: click.Context, questions: Path, count: int, index: str | None, seed: int,
                  threads: int | None, json_path: Path | None, csv_path: Path | None,
                  plot_path: Path | None) -> None:
    """End-to-end answer latency by stage (embed, retrieve, compress, TTFT, decode, total) and abstentions."""
    from app.bench.environment import environment  # lazy: keeps rag --help fast
    from app.bench.pipeline import bench_rag  # lazy: keeps rag --help fast

    if plot_path:
        require_matplotlib()
    settings = settings_from(ctx, index=index, threads=threads)
    with console.status("preparing…") as status, traced(settings, "bench rag", root=False):
        result = bench_rag(settings, questions, count, seed, progress=_status_text(status), warn=_bench_warn)
    result["environment"] = environment(settings)
    result["config"] = {"questions_file": str(questions), "n": count, "seed": seed, "index": settings.index,
                        "max_tokens": settings.max_tokens, "top_k": settings.top_k,
                        "context_tokens": settings.context_tokens, "telemetry": settings.telemetry}
    _bench_finish(result, json_path, csv_path, plot_path)




@bench.command("scale")
@click.option("--sizes", default="10000,100000,1000000", show_default=True, callback=_bench_int_list,
              help="Comma-separated corpus sizes in chunks; one index grows through them.")
@click.option("--questions", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="JSONL of {question, answers, unanswerable, document} on the documents in --docs.")
@click.option("--docs", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="Folder of .md documents: ingested for real, and the sentences of the synthetic chunks.")
@click.option("--queries", type=click.IntRange(1), default=200, show_default=True,
              help="Answerable questions timed and scored per size (recall@5).")
@click.option("--asks", type=click.IntRange(0), default=10, show_default=True,
              help="Questions answered end to end per size (ask TTFT and total).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the grown index here (default: a temporary folder, removed afterwards).")
@click.option("--embed", is_flag=True,
              help="Embed every synthetic chunk (build time becomes a real ingest rate; ~80 chunks/s on 2 cores) "
                   "instead of giving it the mean of its sentences' vectors.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=click.IntRange(0), help="Intra-op threads (0 = all cores).")
@_bench_outputs
@click.pass_context
@handle_errors
def bench_scale_cmd(ctx: click.Context, sizes: list[int], questions: Path, docs: Path, queries: int, asks: int,
                    workdir: Path | None, embed: bool, seed: int, threads: int | None, json_path: Path | None,
                    csv_path: Path | None, plot_path: Path | None) -> None:
    """Growth curves: build time, disk, memory, search latency, recall@5 and answer latency per corpus size."""
    from app.bench.environment import environment  # lazy: keeps rag --help fast
    from app.bench.scale import bench_scale  # lazy: keeps rag --help fast

    if plot_path:
        require_matplotlib()
    settings = settings_from(ctx, threads=threads)
    with console.status("preparing…") as status:
        result = bench_scale(settings, sizes, questions, docs, queries, asks, seed, workdir, embed,
                             progress=_status_text(status), warn=_bench_warn)
    result["environment"] = environment(settings)
    result["config"] = {"sizes": sizes, "questions_file": str(questions), "docs": str(docs), "queries": queries,
                        "asks": asks, "seed": seed, "workdir": str(workdir) if workdir else None, "embed": embed}
    _bench_finish(result, json_path, csv_path, plot_path)
