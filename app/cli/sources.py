"""``rag sources`` and ``rag sync``: folders an index follows."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from app.cli.common import (console, handle_errors, index_option, json_option, literal, on_this_disk, out, print_json,
                            settings_from, traced)
from app.cli.documents import ingest_progress, render_ingest_summary
from app.runtime import load_embedder, open_index
from app.services import Sources
from ingest.parameters import IngestParameters
from ingest.sources import find_source
from rag.core.durations import parse_duration
from rag.core.errors import SourceBusyError, SourceUnavailableError


def read_sources(settings) -> list:
    """The sources of the settings' index (an index not created yet follows none)."""
    return Sources.of(open_index(settings))


@click.group("sources")
def sources_group() -> None:
    """Folders an index follows: `rag sync` brings the index to their current state."""


@sources_group.command("add")
@click.argument("folder", type=click.Path(path_type=Path))
@index_option()
@click.option("--glob", "pattern", help="Only files matching this pattern, e.g. '*.pdf'.")
@click.option("--groups", help="Comma-separated access groups for every document of this folder (default: those "
                               "of the folder_groups setting; outside it, existing documents keep theirs, new "
                               "ones are public).")
@click.option("--every", help="`rag serve` syncs it this often, e.g. 15m, 2h, 1d; off: only `rag sync` (default: "
                              "off for a new folder, unchanged for one already followed).")
@json_option()
@click.pass_context
@handle_errors
def add_cmd(ctx: click.Context, folder: Path, index: str | None, pattern: str | None, groups: str | None,
            every: str | None, as_json: bool) -> None:
    """Follow FOLDER (recursively) in an index; nothing is read until `rag sync` (or the server's schedule)."""
    settings = settings_from(ctx, index=index)
    every_s = int(parse_duration(every, "an interval", allow_off=True)) if every is not None else None
    source = Sources.add(open_index(settings), load_embedder(settings), folder, pattern,
                         None if groups is None else [g for g in groups.split(",") if g.strip()], every_s)
    if as_json:
        print_json(source.summary())
        return
    out.print(literal(f"source {source.id}: {source.display_path} -> index {source.index!r}; "
                      "run `rag sync` to read it"))


@sources_group.command("list")
@index_option()
@json_option()
@click.pass_context
@handle_errors
def list_cmd(ctx: click.Context, index: str | None, as_json: bool) -> None:
    """The folders an index follows and how their last sync went."""
    settings = settings_from(ctx, index=index)
    sources = read_sources(settings)
    if as_json:
        print_json([s.summary() for s in sources])
        return
    if not sources:
        out.print(f"index {settings.index!r} follows no folders; add one with `rag sources add FOLDER`")
        return
    table = Table("id", "folder", "every", "files", "last sync", "result")
    for source in sources:
        last = source.last
        if last is None:
            when, result = "never", ""
        elif last.status == "error":
            when, result = last.started_at, f"error: {last.error}"
        else:
            when = f"{last.started_at} ({last.seconds:.1f} s)"
            result = (f"{last.added} added, {last.updated} updated, {last.renamed} renamed, {last.removed} removed, "
                      f"{last.unchanged} unchanged, {last.failed} failed")
        table.add_row(source.id, literal(source.display_path + (f" ({source.glob})" if source.glob else "")),
                      f"{source.every_s} s" if source.every_s else "–", str(len(source.files)), literal(when),
                      literal(result))
    out.print(table)


@sources_group.command("remove")
@click.argument("source")
@index_option()
@click.pass_context
@handle_errors
def remove_cmd(ctx: click.Context, source: str, index: str | None) -> None:
    """Stop following SOURCE (an id or the folder); its documents stay in the index."""
    removed = Sources.remove(open_index(settings_from(ctx, index=index)), source)
    out.print(literal(f"removed source {removed.id} ({removed.display_path}); its documents stay in the index"))


@click.command("sync")
@click.argument("source", required=False)
@index_option()
@json_option("Print each sync's summary as JSON.")
@click.option("--allow-empty", is_flag=True, help="A folder that has no file left was emptied on purpose: remove "
              "its documents (without this, an empty folder is taken for a share not mounted).")
@click.pass_context
@handle_errors
def sync_cmd(ctx: click.Context, source: str | None, index: str | None, as_json: bool, allow_empty: bool) -> None:
    """Bring the index to the state of its folders (or of SOURCE, an id or folder): new and changed files
    ingested, deleted ones removed, renamed ones moved without embedding again. Exit 2 if a folder could not
    be read (nothing is removed then), another process is syncing a source (nothing changes then; PostgreSQL)
    or a file failed."""
    settings = settings_from(ctx, index=index)
    sources = read_sources(settings)
    if source is not None:
        sources = [find_source(sources, on_this_disk(source))]
    if not sources:
        out.print(f"index {settings.index!r} follows no folders; add one with `rag sources add FOLDER`")
        return
    parameters = IngestParameters.from_settings(settings, load_embedder(settings))
    stored = open_index(settings)
    results, errors = [], []
    for item in sources:
        try:
            with ingest_progress(as_json) as progress, traced(settings, "sync"):
                summary = Sources.sync(stored, item, parameters, progress, allow_empty=allow_empty)
        except (SourceUnavailableError, SourceBusyError) as exc:
            errors.append({"source": item.id, "folder": item.display_path, "error": exc.message,
                           "type": exc.error_type})
            if not as_json:
                console.print(literal(f"error: {exc.message}"), soft_wrap=True)
            continue
        results.append(summary)
        if not as_json:
            out.print(literal(f"source {item.id}: {item.display_path}"))
            render_ingest_summary(summary.ingest)
            if summary.renamed:
                out.print(literal(f"renamed without embedding again: {len(summary.renamed)}"))
    if as_json:
        print_json({"synced": [r.as_dict() for r in results], "errors": errors})
    sys.exit(0 if not errors and all(r.ok for r in results) else 2)
