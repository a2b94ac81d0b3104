"""Rendering and writing results: rich tables, JSON, CSV and (with matplotlib) PNG charts."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from rag.core.errors import BadRequestError

PLOT_HINT = "--plot needs matplotlib: pip install 'offline-rag[plot]' (or pip install matplotlib)"


def require_matplotlib() -> None:
    """Fail before a long run, not after it, when a chart is asked for but cannot be drawn."""
    try:
        import matplotlib  # noqa: F401  # lazy: optional dependency (the plot extra)
    except ImportError as exc:
        raise BadRequestError(f"{PLOT_HINT} ({exc})") from exc


# --------------------------------------------------------------------------- files
def write_json(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")


def write_csv(rows: list[dict], path: Path) -> None:
    """One line per result row; columns are the union of the rows' keys in first-seen order."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def write_plot(result: dict, path: Path) -> None:
    try:
        import matplotlib  # lazy: optional dependency (the plot extra)
    except ImportError as exc:
        raise BadRequestError(f"{PLOT_HINT} ({exc})") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: optional dependency (the plot extra)

    env = result.get("environment", {})
    kind = result["benchmark"]
    rows = result["results"]
    fig, grid = plt.subplots(2, 2, figsize=(11, 7.5)) if kind == "scale" else plt.subplots(1, 2, figsize=(11, 4.2))
    axes = list(grid.flat)
    if kind == "scale":
        _plot_scale(axes, rows)
    elif kind == "engine":
        x = [r["prompt_tokens"] for r in rows]
        axes[0].plot(x, [r["decode_tokens_per_s_mean"] for r in rows], marker="o", label="decode")
        axes[0].set(title="decode speed", xlabel="prompt tokens", ylabel="tokens/s")
        axes[1].plot(x, [r["ttft_ms_mean"] for r in rows], marker="o", label="mean")
        axes[1].plot(x, [r["ttft_ms_p50"] for r in rows], marker="x", linestyle="--", label="p50")
        axes[1].set(title="time to first token (prefill)", xlabel="prompt tokens", ylabel="ms")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [str(v) for v in x])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
    elif kind == "serve":
        for scenario in dict.fromkeys(r["scenario"] for r in rows):
            sub = [r for r in rows if r["scenario"] == scenario]
            x = [r["concurrency"] for r in sub]
            line, = axes[0].plot(x, [r["e2e_ms_p50"] for r in sub], marker="o", label=f"{scenario} e2e p50")
            axes[0].plot(x, [r["ttft_ms_p50"] for r in sub], marker="x", linestyle="--", color=line.get_color(),
                         label=f"{scenario} TTFT p50")
            axes[1].plot(x, [r["aggregate_tokens_per_s"] for r in sub], marker="o", label=scenario)
        axes[0].set(title="latency", xlabel="concurrency", ylabel="ms")
        axes[1].set(title="aggregate output throughput", xlabel="concurrency", ylabel="tokens/s")
        levels = sorted({r["concurrency"] for r in rows})
        for ax in axes:
            ax.set_xticks(levels, [str(v) for v in levels])
            ax.set_ylim(bottom=0)
    else:
        stages = [r["stage"] for r in rows]
        positions = range(len(stages))
        axes[0].bar([p - 0.2 for p in positions], [r["p50"] or 0 for r in rows], width=0.4, label="p50")
        axes[0].bar([p + 0.2 for p in positions], [r["p95"] or 0 for r in rows], width=0.4, label="p95")
        axes[0].set_xticks(list(positions), stages)
        axes[0].set(title="latency by stage", ylabel="ms")
        left = 0.0
        for r in rows:
            if r["stage"] != "total" and r["p50"]:
                axes[1].barh(["p50"], [r["p50"]], left=left, label=f"{r['stage']} {r['p50']:.0f} ms")
                left += r["p50"]
        axes[1].set(title="p50 stages stacked", xlabel="ms")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"rag bench {kind} · {env.get('model')} ({env.get('precision')}) · {env.get('cpu')}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_scale(axes: list, rows: list[dict]) -> None:
    """Four growth curves against the corpus size (log axis): search latency, recall, memory/disk, answers."""
    x = [r["chunks"] for r in rows]
    for name in ("dense", "lexical", "fused"):
        line, = axes[0].plot(x, [r[f"{name}_ms_p95"] for r in rows], marker="o", label=f"{name} p95")
        axes[0].plot(x, [r[f"{name}_ms_p50"] for r in rows], marker="x", linestyle="--", color=line.get_color(),
                     label=f"{name} p50")
    axes[0].set(title="retrieval latency (question embedding excluded)", ylabel="ms")
    axes[0].set_yscale("log")
    for key, label in (("recall@5", "fused"), ("recall@5_dense", "dense"), ("recall@5_lexical", "lexical")):
        axes[1].plot(x, [r[key] for r in rows], marker="o", label=label)
    axes[1].set(title="recall@5 of the dev questions", ylabel="recall@5", ylim=(0, 1.02))
    axes[2].plot(x, [r["index_rss_mb"] for r in rows], marker="o", label="reader memory (index, RSS)")
    axes[2].plot(x, [r["disk_mb"] for r in rows], marker="s", label="on disk")
    axes[2].set(title="memory and disk", ylabel="MB")
    axes[2].set_yscale("log")
    axes[3].plot(x, [r["ask_total_ms_p50"] for r in rows], marker="o", label="ask total p50")
    axes[3].plot(x, [r["ask_ttft_ms_p50"] for r in rows], marker="x", label="ask TTFT p50")
    axes[3].set(title="answers", ylabel="ms", ylim=(0, None))
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("chunks in the index")


def save(result: dict, json_path: Path | None, csv_path: Path | None, plot_path: Path | None) -> list[str]:
    written = []
    if json_path:
        write_json(result, json_path)
        written.append(str(json_path))
    if csv_path:
        write_csv(result["results"], csv_path)
        written.append(str(csv_path))
    if plot_path:
        write_plot(result, plot_path)
        written.append(str(plot_path))
    return written


# --------------------------------------------------------------------------- tables
def print_table(console: Any, t: Table) -> None:
    """Print ``t``; when the output is not a terminal (a file, a pipe), never squeeze its columns."""
    if console.is_terminal:
        console.print(t)
    else:
        needed = Measurement.get(console, console.options.update_width(1000), t).maximum
        width = console.width
        console.width = max(width, needed)  # print() alone caps at the console's width
        try:
            console.print(t)
        finally:
            console.width = width


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def environment_line(env: dict) -> str:
    packages = env.get("packages", {})
    ort = packages.get("onnxruntime-genai") or next((v for k, v in packages.items() if "genai" in k), None)
    return (f"{env.get('cpu')} · {env.get('logical_cores')} logical cores · threads {env.get('threads_setting')} · "
            f"{env.get('model')} ({env.get('precision')}, {env.get('device')}) · python {env.get('python')}"
            + (f" · onnxruntime-genai {ort}" if ort else "") + f" · {env.get('timestamp')}")


def table(result: dict) -> Table:
    kind = result["benchmark"]
    rows = result["results"]
    if kind == "engine":
        t = Table("prompt tok", "out tok", "TTFT mean ms", "TTFT p50 ms", "prefill tok/s", "TPOT p50 ms",
                  "decode tok/s", "wall mean ms", "wall p50 ms", title="engine (greedy, in-process)")
        for r in rows:
            label = str(r["prompt_tokens"]) + (f" bias {r['copy_bias']:g}" if r.get("copy_bias") else "")
            t.add_row(label, fmt(r["output_tokens_mean"]), fmt(r["ttft_ms_mean"]),
                      fmt(r["ttft_ms_p50"]), fmt(r["prefill_tokens_per_s_mean"], 0), fmt(r["tpot_ms_p50"], 2),
                      fmt(r["decode_tokens_per_s_mean"]), fmt(r["total_ms_mean"], 0), fmt(r["total_ms_p50"], 0))
    elif kind == "serve":
        t = Table("scenario", "C", "ok", "err", "shed", "t/o", "req/s", "agg tok/s", "TTFT p50", "TTFT p99",
                  "ITL p50", "ITL p99", "TPOT p50", "E2E p50", "E2E p99",
                  # The URL and model name come from the user and the server: plain text, never markup.
                  title=Text(f"serve · {result.get('config', {}).get('url')} · {result.get('model')} · latency in ms"))
        for r in rows:
            t.add_row(r["scenario"], str(r["concurrency"]), str(r["ok"]), str(r["errors"]), str(r["shed"]),
                      str(r["timeouts"]), fmt(r["requests_per_s"], 2), fmt(r["aggregate_tokens_per_s"]),
                      fmt(r["ttft_ms_p50"], 0), fmt(r["ttft_ms_p99"], 0), fmt(r["itl_ms_p50"], 1),
                      fmt(r["itl_ms_p99"], 1), fmt(r["tpot_ms_p50"], 1), fmt(r["e2e_ms_p50"], 0),
                      fmt(r["e2e_ms_p99"], 0))
    elif kind == "scale":
        c = result["corpus"]
        t = Table("chunks", "vector index", "build s", "disk MB", "index RSS MB", "dense p50/p95", "lexical p50/p95",
                  "fused p50/p95", "recall@5 fused/dense/lex", "ask TTFT p50", "ask total p50",
                  title="scale · latency in ms",
                  caption=f"{c['real_chunks']} real chunks (ingested at {c['real_ingest_chunks_per_s']} chunks/s) + "
                          f"synthetic ones; build = {c['build']}; mean-vector cosine to a real embedding "
                          f"{c['synthetic_vector_cosine_to_real_embedding']}")
        for r in rows:
            t.add_row(f"{r['chunks']:,}", Text(r["vector_index"].split(":")[0]), fmt(r["build_s"]), fmt(r["disk_mb"]),
                      fmt(r["index_rss_mb"]), f"{fmt(r['dense_ms_p50'])}/{fmt(r['dense_ms_p95'])}",
                      f"{fmt(r['lexical_ms_p50'])}/{fmt(r['lexical_ms_p95'])}",
                      f"{fmt(r['fused_ms_p50'])}/{fmt(r['fused_ms_p95'])}",
                      f"{r['recall@5']:.3f}/{r['recall@5_dense']:.3f}/{r['recall@5_lexical']:.3f}",
                      fmt(r["ask_ttft_ms_p50"], 0), fmt(r["ask_total_ms_p50"], 0))
    else:
        a = result["abstentions"]
        t = Table("stage", "n", "p50 ms", "p95 ms", "mean ms",
                  title=f"RAG latency over {result['questions']} questions",
                  caption=f"abstained {a['total']}: weak evidence {a['weak_evidence']}, declined "
                          f"{a['model_declined']}, ungrounded {a.get('ungrounded', 0)}; on unanswerable {a['on_unanswerable']}/{a['unanswerable_questions']}"
                          + (f"; skipped {result['skipped']}" if result.get("skipped") else ""))
        for r in rows:
            t.add_row(r["stage"], str(r["n"]), fmt(r["p50"]), fmt(r["p95"]), fmt(r["mean"]))
    return t
