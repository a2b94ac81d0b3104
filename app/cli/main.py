"""The ``rag`` command: the top-level group; each command group lives in its own module."""

from __future__ import annotations

import logging
from pathlib import Path

import click
from rich.table import Table

from app.cli.access import audit, keys
from app.cli.answers import ask_cmd, eval_cmd
from app.cli.bench import bench
from app.cli.common import any_text_streams, handle_errors, json_option, literal, out, print_json
from app.cli.documents import documents, index_group, ingest_cmd
from app.cli.info import info_cmd
from app.cli.models import models
from app.cli.serve import serve_cmd
from app.cli.service import service_cmd
from app.cli.sources import sources_group, sync_cmd
from app.cli.telemetry import trace_group
from rag.core.settings import Settings, load_settings


class RagGroup(click.Group):
    def main(self, *args, windows_expand_args: bool = False, **kwargs):
        """click >= 8 expands globs, ``~`` and ``%VARS%`` in every argument on Windows (``--glob "*.pdf"`` would
        arrive as the names of the PDFs in the current folder): ``rag`` gets its command line as typed."""
        return super().main(*args, windows_expand_args=windows_expand_args, **kwargs)


@click.group(cls=RagGroup)
@click.option("--home", type=click.Path(path_type=Path), help="Home dir holding models/ and indexes/.")
@click.pass_context
@handle_errors
def main(ctx: click.Context, home: Path | None) -> None:
    """Offline RAG question answering over your documents."""
    any_text_streams()
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



for command in (models, ingest_cmd, documents, index_group, ask_cmd, eval_cmd, bench, serve_cmd, service_cmd, info_cmd,
                keys, audit, trace_group, sources_group, sync_cmd):
    main.add_command(command)
