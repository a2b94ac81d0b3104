"""``rag info``: this machine, what ONNX Runtime can run on, the installed models measured, the one to use."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from app.cli.common import console, handle_errors, json_option, literal, out, print_json
from rag.core.settings import Settings


@click.command("info")
@click.option("--no-probe", is_flag=True, help="Skip loading and timing each installed generator.")
@click.option("--model", "only", multiple=True, help="Probe only this installed model (repeatable).")
@json_option()
@click.pass_obj
@handle_errors
def info_cmd(settings: Settings, no_probe: bool, only: tuple[str, ...], as_json: bool) -> None:
    """CPU, memory, GPUs, usable execution providers, installed models (each probed) and a recommendation."""
    from app.diagnostics import ANSWER_TOKENS, machine_info  # lazy: keeps rag --help fast

    with console.status("probing the installed generators…"):
        info = machine_info(settings, probe=not no_probe, only=list(only) or None)
    if as_json:
        print_json(info)
        return
    cpu, memory, providers, device = info["cpu"], info["memory"], info["providers"], info["device"]
    sets = cpu["instruction_sets"]
    out.print(Text.assemble(("CPU      ", "bold"), literal(f"{cpu['model']} ({cpu['machine']}), "
                                                         f"{cpu['logical_cores']} logical cores, {cpu['os']}")))
    out.print(Text.assemble(("         ", ""), literal("instruction sets: " + (
        ", ".join(sets) if sets else ("none of note" if sets is not None else "unknown on this OS")))))
    out.print(Text.assemble(("         ", ""), literal(f"int8 kernels: {cpu['int8_path']}")))
    out.print(Text.assemble(("Memory   ", "bold"), literal(f"{memory['total_gb']} GB total, "
                                                         f"{memory['available_gb']} GB available")))
    out.print(Text.assemble(("GPUs     ", "bold"), literal(", ".join(info["gpus"]) or "none seen")))
    out.print(Text.assemble(("Runtime  ", "bold"), literal("onnxruntime providers: " + ", ".join(providers["onnxruntime"]))))
    genai = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in providers["genai"].items())
    out.print(Text.assemble(("         ", ""), literal(f"onnxruntime-genai: {genai}; usable: {', '.join(providers['usable'])}")))
    out.print(Text.assemble(("Device   ", "bold"), literal(f"device = {device['setting']} -> {device['chosen']} ({device['why']})")))
    out.print(Text.assemble(("In use   ", "bold"), literal(info["generator_in_use"])))
    out.print(Text.assemble(("         ", ""), literal(info["generator_choice"]["why"])))
    out.print(Text.assemble(("Embedder ", "bold"), literal(info["embedder"]["in_use"])))
    out.print(Text.assemble(("         ", ""), literal(info["embedder"]["why"])))
    for warning in info["permissions"]:
        out.print(Text.assemble(("Warning  ", "bold yellow"), literal(warning)))
    if info["probes"]:
        table = Table(title=f"installed generators (answer = TTFT on ~200 tokens + {ANSWER_TOKENS} tokens; "
                            f"budget {info['budget_s']:g} s)")
        for header in ("model", "params", "precision", "size MB", "context", "load s", "TTFT s", "tok/s",
                       "answer s", ""):
            table.add_column(header, overflow="fold")
        rows = {r["name"]: r for r in info["models"]}
        for p in info["probes"]:
            r = rows[p["name"]]
            params = f"{r['parameters'] / 1e6:.0f}M" if r["parameters"] else ""
            verdict = (literal(p["detail"], "red") if not p["ok"] else
                       literal("fits", "green") if p["answer_s"] <= info["budget_s"] else literal("too slow", "yellow"))
            table.add_row(*(literal(v) for v in (p["name"], params, r["precision"], r["size_mb"], p["context_length"],
                                                 p["load_s"], p["ttft_s"], p["decode_tokens_per_s"], p["answer_s"])),
                          verdict)
        out.print(table)
    rec = info.get("recommendation")
    if rec:
        if rec["model"]:
            action = "already in use, nothing to change" if rec.get("in_use") else rec["command"]
            out.print(Text.assemble(("Use      ", "bold green"), literal(f"{rec['model']}: {rec['why']}  "
                                                                       f"({action})")))
        else:
            out.print(Text.assemble(("Use      ", "bold red"), literal(rec["why"])))
