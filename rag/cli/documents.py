"""``rag ingest``, ``rag documents`` and ``rag index``: what is in an index."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from rag.cli.common import (console, handle_errors, index_option, json_option, literal, out, plural, print_json,
                            settings_from)
from rag.core.settings import Settings


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option()
@click.option("--glob", "pattern", help="Only files whose name matches, e.g. '*.pdf'.")
@click.option("--chunk-tokens", type=int, help="Chunk size in embedder tokens.")
@click.option("--overlap", type=int, help="Overlap between chunks in tokens.")
@click.option("--groups", help="Comma-separated access groups for these documents: only keys and tokens in one of "
                               "them (or unrestricted) see them. --groups '' makes them public; left out, new "
                               "documents are public and existing ones keep theirs.")
@json_option("Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest_cmd(ctx: click.Context, paths: tuple[Path, ...], index: str | None, pattern: str | None,
               chunk_tokens: int | None, overlap: int | None, groups: str | None, as_json: bool) -> None:
    """Add or update files and folders (recursively) in an index. Exit 2 if any readable file failed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ingest.formats.options import LoadOptions
    from ingest.pipeline import ingest_paths
    from rag.runtime import load_embedder, open_index

    settings = settings_from(ctx, index=index, chunk_tokens=chunk_tokens, chunk_overlap=overlap)
    index_handle = open_index(settings)
    embedder = load_embedder(settings)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[chunks]} chunks · {task.fields[rate]:.0f}/s"), TimeElapsedColumn(),
                  TextColumn("{task.fields[current]}", style="dim", markup=False), console=console,
                  disable=as_json or not console.is_terminal) as bar:
        task = bar.add_task("ingesting", total=None, chunks=0, rate=0.0, current="")

        def progress(event: str, files_done: int, chunks_done: int) -> None:
            if event.startswith("ocr:"):  # "ocr:DONE/TOTAL:PATH" while a file's pages are OCR'd
                pages, _, path = event[4:].partition(":")
                bar.update(task, current=f"{Path(path).name[-40:]} · OCR page {pages}")
                return
            if event.startswith("start:"):
                bar.update(task, total=int(event.split(":", 1)[1]))
                return
            elapsed = bar.tasks[0].elapsed or 0.0
            bar.update(task, completed=files_done, chunks=chunks_done,
                       rate=chunks_done / elapsed if elapsed else 0.0, current=Path(event).name[-40:])

        summary = ingest_paths(list(paths), index_handle, embedder, settings.chunk_tokens,
                               settings.chunk_overlap, pattern, progress,
                               load_options=LoadOptions.from_settings(settings),
                               groups=None if groups is None else groups.split(","))
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
    warned = [o for o in summary.outcomes if o.warning]
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


def open_reader(settings: Settings):
    from rag.runtime import open_index

    return open_index(settings).reader()


@click.group()
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
    table = Table(title=plural(len(docs), "document"))
    # The id is what `rag documents delete` takes: never cut or wrapped; title and path wrap instead.
    table.add_column("id", no_wrap=True, min_width=max((len(d.id) for d in docs), default=2))
    table.add_column("title", overflow="fold")
    table.add_column("kind", no_wrap=True)
    table.add_column("pages", justify="right", no_wrap=True)
    table.add_column("chunks", justify="right", no_wrap=True)
    table.add_column("path", overflow="fold")
    table.add_column("groups", overflow="fold")
    for d in docs:
        table.add_row(literal(d.id), literal(d.title[:40]), literal(d.kind), str(d.pages or ""), str(d.chunks),
                      literal(d.path), literal(d.access_groups or "public"))
    out.print(table)


@documents.command("delete")
@click.argument("document")
@index_option()
@click.pass_context
@handle_errors
def documents_delete(ctx: click.Context, document: str, index: str | None) -> None:
    """Remove a document (by id or path) and its vectors."""
    from rag.runtime import open_index, open_uploads

    settings = settings_from(ctx, index=index)
    record = open_uploads(settings).delete(open_index(settings), document)
    console.print(Text.assemble(("deleted", "green"), f" {record.id} ({record.path}, {plural(record.chunks, 'chunk')})"),
                  soft_wrap=True)


@click.group("index")
def index_group() -> None:
    """Inspect indexes, or copy one between stores."""


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
        label, shown = INDEX_INFO_LABELS.get(key, key), literal(value)
        if key == "size_bytes":
            shown = literal(human_size(value))
        table.add_row(label, shown)
    out.print(table)


INDEX_INFO_LABELS = {"size_bytes": "size on disk", "vector_index": "vector index", "path": "location"}


def human_size(size: int) -> str:
    """``840 B``, ``84.2 kB``, ``12.3 MB``, ``1.2 GB`` (decimal units, as the file managers show them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


@index_group.command("migrate")
@click.option("--to", "target", required=True,
              help="postgresql://… to copy a local index into that database, or a local index name (with --from URL).")
@click.option("--from", "source",
              help="The local index to copy (default: the `index` setting), or postgresql://… to copy back from.")
@click.pass_context
@handle_errors
def index_migrate(ctx: click.Context, target: str, source: str | None) -> None:
    """Copy an index between the embedded store and PostgreSQL, keeping document ids and vectors."""
    import dataclasses

    from ingest.store.copy import copy_index
    from rag.core.errors import BadRequestError
    from rag.core.names import validate_index_name
    from rag.runtime import open_store

    settings = settings_from(ctx)
    is_url = lambda value: bool(value) and value.startswith(("postgresql://", "postgres://"))  # noqa: E731
    if is_url(target) == is_url(source):
        raise BadRequestError("give one side as a postgresql:// URL and the other as a local index name "
                              "(--to URL [--from NAME], or --from URL --to NAME)")
    to_url = is_url(target)
    name = validate_index_name((source if to_url else target) or settings.index)
    local = open_store(dataclasses.replace(settings, store_url=None))
    remote = open_store(dataclasses.replace(settings, store_url=target if to_url else source))
    src, dst = (local, remote) if to_url else (remote, local)
    try:
        report = copy_index(src.index(name), dst.index(name))
    finally:
        remote.close()
    console.print(Text.assemble(("copied", "green"), f" {plural(report.documents, 'document')}, {plural(report.chunks, 'chunk')} "
                                f"of index {name!r} to {dst.index(name).location}"), soft_wrap=True)
