"""``rag trace show``: the span trees of the telemetry files, with timings."""

from __future__ import annotations

from pathlib import Path

import click

from app.cli.common import handle_errors, literal, out


@click.group("trace")
def trace_group() -> None:
    """Read the OpenTelemetry trace files (telemetry = "file")."""


@trace_group.command("show")
@click.argument("target", required=False, type=click.Path(path_type=Path))
@click.option("--trace", "trace_id", help="Show the trace whose id starts with this.")
@click.option("--slowest", type=click.IntRange(min=1), help="Show the N slowest traces.")
@click.option("--latest", type=click.IntRange(min=1), default=3, show_default=True,
              help="Without --trace or --slowest: the N most recent traces.")
@click.pass_obj
@handle_errors
def show_cmd(settings, target: Path | None, trace_id: str | None, slowest: int | None, latest: int) -> None:
    """Print span trees with timings from TARGET (a traces.jsonl file or a telemetry folder; default: the
    telemetry_dir setting, home/telemetry)."""
    # lazy: keeps rag --help fast (rag.telemetry loads the OpenTelemetry SDK)
    from rag.telemetry.show import build_traces, pick_traces, read_spans, render_trace, trace_files

    roots = build_traces(read_spans(trace_files(target or settings.telemetry_path)))
    picked = pick_traces(roots, trace_id, slowest, latest)
    if not picked:
        out.print("no traces in the files yet")
        return
    for number, (tid, spans) in enumerate(picked):
        if number:
            out.print()
        for line in render_trace(tid, spans):
            out.print(literal(line), soft_wrap=True)
