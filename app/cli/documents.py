"""``rag ingest``, ``rag documents`` and ``rag index``: what is in an index."""

from __future__ import annotations

import dataclasses
import sys
import time
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, Iterator

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from app.cli.common import (console, handle_errors, index_option, json_option, literal, on_this_disk, out, plural,
                            print_json, settings_from, traced)
from app.runtime import (delete_index, documents as documents_service, load_embedder, open_index, open_store)
from app.services import Documents
from ingest.parameters import IngestParameters
from ingest.pipeline import ingest_paths
from ingest.progress import FileDone, OcrPage, ProgressEvent, Started
from rag.core.errors import BadRequestError
from rag.core.names import index_name
from rag.core.settings import Settings
from rag.embedder import validate_embedder_dir


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option()
@click.option("--glob", "pattern", help="Only files whose name matches, e.g. '*.pdf'.")
@click.option("--chunk-tokens", type=int, help="Chunk size in embedder tokens.")
@click.option("--overlap", type=int, help="Overlap between chunks in tokens.")
@click.option("--groups", help="Comma-separated access groups for these documents: only keys and tokens in one of "
                               "them (or unrestricted) see them. --groups '' makes them public; left out, files "
                               "under a folder of the folder_groups setting get its groups, other new documents "
                               "are public and existing ones keep theirs.")
@json_option("Print the summary as JSON.")
@click.pass_context
@handle_errors
def ingest_cmd(ctx: click.Context, paths: tuple[Path, ...], index: str | None, pattern: str | None,
               chunk_tokens: int | None, overlap: int | None, groups: str | None, as_json: bool) -> None:
    """Add or update files and folders (recursively) in an index. Exit 2 if any readable file failed."""
    settings = settings_from(ctx, index=index, chunk_tokens=chunk_tokens, chunk_overlap=overlap)
    index_handle = open_index(settings)
    parameters = IngestParameters.from_settings(settings, load_embedder(settings))
    with ingest_progress(as_json) as progress, traced(settings, "ingest"):
        summary = ingest_paths(list(paths), index_handle, parameters, pattern, progress,
                               groups=None if groups is None else groups.split(","))
    if as_json:
        print_json(summary.as_dict())
    else:
        render_ingest_summary(summary)
    sys.exit(0 if summary.ok else 2)


@contextmanager
def ingest_progress(quiet: bool) -> Iterator[Callable[[ProgressEvent], None]]:
    """The progress bar of an ingest or a sync (files, chunks, rate, the current file and its OCR page);
    nothing when ``quiet`` (JSON output) or when stderr is not a terminal."""
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[chunks]} chunks · {task.fields[rate]:.0f}/s"), TimeElapsedColumn(),
                  TextColumn("{task.fields[current]}", style="dim", markup=False), console=console,
                  disable=quiet or not console.is_terminal) as bar:
        task = bar.add_task("ingesting", total=None, chunks=0, rate=0.0, current="")

        def progress(event: ProgressEvent) -> None:
            if isinstance(event, OcrPage):
                bar.update(task, current=f"{Path(event.path).name[-40:]} · OCR page {event.page}/{event.pages}")
                return
            if isinstance(event, Started):
                bar.update(task, total=event.files)
                return
            elapsed = bar.tasks[0].elapsed or 0.0
            bar.update(task, completed=event.files_done, chunks=event.chunks_done,
                       rate=event.chunks_done / elapsed if elapsed else 0.0,
                       current=Path(event.path).name[-40:] if isinstance(event, FileDone) else "")

        yield progress


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
    for status in ("added", "updated", "unchanged", "renamed", "removed", "skipped", "failed"):
        if status not in ("renamed", "removed") or summary.count(status):  # those two: syncs only
            table.add_row(status, str(summary.count(status)))
    for label, value in (("chunks written", str(summary.chunks_written)), ("pages", str(summary.pages)),
                         ("seconds", f"{summary.seconds:.1f}"), ("chunks/s", f"{summary.chunks_per_s:.1f}"),
                         ("OCR pages", str(summary.ocr_pages)), ("OCR seconds", f"{summary.ocr_seconds:.1f}")):
        table.add_row(label, value)
    out.print(table)


def open_reader(settings: Settings):
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
    docs = Documents.listed(open_index(settings_from(ctx, index=index)))
    if as_json:
        # As the API lists them: the path as spelled for people (its identity is what lookups compare).
        print_json([{**{k: v for k, v in d.__dict__.items() if k != "display_path"}, "path": d.display_path}
                    for d in docs])
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
                      literal(d.display_path), literal(d.access_groups or "public"))
    out.print(table)


@documents.command("delete")
@click.argument("document")
@index_option()
@click.pass_context
@handle_errors
def documents_delete(ctx: click.Context, document: str, index: str | None) -> None:
    """Remove a document (by id or path) and its vectors."""
    settings = settings_from(ctx, index=index)
    service = documents_service(settings, open_store(settings))
    record = service.delete(service.index(index_name(None, settings.index)), on_this_disk(document))
    console.print(Text.assemble(("deleted", "green"),
                                f" {record.id} ({record.display_path}, {plural(record.chunks, 'chunk')})"),
                  soft_wrap=True)


@click.group("index")
def index_group() -> None:
    """List, inspect, back up, restore, verify and delete indexes, or copy one between stores."""


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
    from rag.store.copy import copy_index  # lazy: keeps rag --help fast

    settings = settings_from(ctx)
    is_url = lambda value: bool(value) and value.startswith(("postgresql://", "postgres://"))  # noqa: E731
    if is_url(target) == is_url(source):
        raise BadRequestError("give one side as a postgresql:// URL and the other as a local index name "
                              "(--to URL [--from NAME], or --from URL --to NAME)")
    to_url = is_url(target)
    name = index_name(source if to_url else target, settings.index).value
    local = open_store(dataclasses.replace(settings, store_url=None))
    remote = open_store(dataclasses.replace(settings, store_url=target if to_url else source))
    src, dst = (local, remote) if to_url else (remote, local)
    try:
        report = copy_index(src.index(name), dst.index(name))
    finally:
        remote.close()
    console.print(Text.assemble(("copied", "green"), f" {plural(report.documents, 'document')}, {plural(report.chunks, 'chunk')} "
                                f"of index {name!r} to {dst.index(name).location}"), soft_wrap=True)


def embedded_store(ctx: click.Context, action: str):
    """The embedded store for backup, restore, verify and delete (PostgreSQL has pg_dump and its own tools)."""
    settings = settings_from(ctx)
    if settings.store_url:
        raise BadRequestError(f"rag index {action} works on the embedded store; with store_url (PostgreSQL) use "
                              "pg_dump / pg_restore on the rag schemas (docs/sources.md, Backup and restore)")
    return settings, open_store(settings)


@index_group.command("list")
@json_option()
@click.pass_context
@handle_errors
def index_list(ctx: click.Context, as_json: bool) -> None:
    """The indexes of the configured store, with their documents, chunks and size."""
    settings = settings_from(ctx)
    store = open_store(settings)
    try:
        infos = []
        for name in store.names():
            reader = store.index(name).reader()
            try:
                infos.append(reader.info())
            finally:
                reader.close()
    finally:
        store.close()
    if as_json:
        print_json([{**i.__dict__, "default": i.name == settings.index} for i in infos])
        return
    table = Table(title=plural(len(infos), "index", "indexes"))
    for column in ("name", "documents", "chunks", "size", "embedder"):
        table.add_column(column, justify="right" if column in ("documents", "chunks", "size") else "left")
    for i in infos:
        table.add_row(literal(i.name + (" (default)" if i.name == settings.index else "")), str(i.documents),
                      str(i.chunks), human_size(i.size_bytes), literal(i.embedder))
    out.print(table)


@index_group.command("backup")
@click.argument("name", required=False)
@click.option("--to", "target", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The backup file to write (a zip: the database, the vectors, a manifest with checksums).")
@click.pass_context
@handle_errors
def index_backup(ctx: click.Context, name: str | None, target: Path) -> None:
    """Write one committed generation of an index to a file, also while a server answers and an ingest runs."""
    from rag.store.backup import backup_index  # lazy: keeps rag --help fast

    settings, store = embedded_store(ctx, "backup")
    try:
        app_version = version("offline-rag")
    except PackageNotFoundError:
        app_version = "unknown"
    started = time.perf_counter()
    manifest = backup_index(store.index(index_name(name, settings.index).value), target, app_version)
    console.print(Text.assemble(("backed up", "green"), literal(
        f" index {manifest.index!r} (generation {manifest.generation}: {plural(manifest.documents, 'document')}, "
        f"{plural(manifest.chunks, 'chunk')}) to {target} ({human_size(target.stat().st_size)}, "
        f"{time.perf_counter() - started:.1f} s)")), soft_wrap=True)


@index_group.command("restore")
@click.argument("backup", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--as", "name", help="The index name to restore as (default: the name it was backed up from).")
@click.option("--re-embed", "re_embed", is_flag=True,
              help="A backup made with another embedder: embed every chunk again with the configured one.")
@click.pass_context
@handle_errors
def index_restore(ctx: click.Context, backup: Path, name: str | None, re_embed: bool) -> None:
    """Restore a backup as a new index, after checking every checksum and the embedder."""
    from rag.store.backup import restore_index  # lazy: keeps rag --help fast
    from rag.store.copy import ReEmbedder  # lazy: keeps rag --help fast

    settings, store = embedded_store(ctx, "restore")
    started = time.perf_counter()
    reembed = None
    if re_embed:
        embedder = load_embedder(settings)
        reembed = ReEmbedder(embedder.config.identity, embedder.dimension, embedder.embed)
    restored = restore_index(backup, store, name, validate_embedder_dir(settings.embedder_path).identity, reembed)
    manifest = restored.manifest
    console.print(Text.assemble(("restored", "green"), literal(
        f" index {restored.index!r} from {backup} (generation {manifest.generation}: "
        f"{plural(manifest.documents, 'document')}, {plural(manifest.chunks, 'chunk')}, backed up "
        f"{manifest.created}, {time.perf_counter() - started:.1f} s)")), soft_wrap=True)
    if restored.unscheduled:
        console.print(literal(
            f"the schedules of its {plural(len(restored.unscheduled), 'followed folder')} were dropped (a restored "
            f"index syncs nothing by itself): {', '.join(restored.unscheduled)}; to sync one on a schedule again: "
            f"rag sources add FOLDER --index {restored.index} --every 1h"), soft_wrap=True)
    if restored.forgotten:
        console.print(literal(
            f"restored under another name, it follows none of the original's folders "
            f"({', '.join(restored.forgotten)})"), soft_wrap=True)


@index_group.command("verify")
@click.argument("name", required=False)
@json_option()
@click.pass_context
@handle_errors
def index_verify(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Check an index's files against its own records. Exit 1 when something is wrong."""
    from rag.store.backup import verify_index  # lazy: keeps rag --help fast

    settings, store = embedded_store(ctx, "verify")
    check = verify_index(store.index(index_name(name, settings.index).value))
    if as_json:
        print_json({**check.__dict__, "ok": check.ok})
    elif check.ok:
        console.print(Text.assemble(("ok", "green"), literal(
            f" index {check.index!r}: generation {check.generation}, {plural(check.documents, 'document')}, "
            f"{plural(check.chunks, 'chunk')}; database, vectors and text index agree")), soft_wrap=True)
    else:
        for problem in check.problems:
            console.print(Text.assemble(("problem", "red"), literal(f" index {check.index!r}: {problem}")),
                          soft_wrap=True)
    if not check.ok:
        raise SystemExit(1)


@index_group.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Really delete it (there is no undo; back it up first).")
@click.pass_context
@handle_errors
def index_delete(ctx: click.Context, name: str, yes: bool) -> None:
    """Delete an index and everything in it (its uploaded originals too)."""
    settings = settings_from(ctx)
    store = open_store(settings)
    try:
        if not yes:
            reader = store.index(name).reader()  # the "no such index" error, with the names there are
            try:
                info = reader.info()
            finally:
                reader.close()
            raise BadRequestError(f"this deletes index {name!r} ({plural(info.documents, 'document')}, "
                                  f"{plural(info.chunks, 'chunk')}) for good: add --yes (back it up first: "
                                  f"rag index backup {name} --to {name}.zip)")
        delete_index(settings, store, name)
    finally:
        store.close()
    console.print(Text.assemble(("deleted", "green"), literal(f" index {name!r}")), soft_wrap=True)
