"""``rag ask`` and ``rag eval``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich.table import Table

from app.cli.common import (console, handle_errors, index_option, json_option, literal, out, plural, print_json,
                            progress, settings_from, traced)
from app.cli.documents import open_reader
from app.runtime import Models, answer_service
from rag.answering.result import AnswerResult
from rag.answering.service import AnswerRequest, options_from
from rag.core.access import RequestContext


@click.command("ask")
@click.argument("question")
@index_option()
@click.option("--top-k", "--k", "top_k", type=int,
              help="Chunks to retrieve (the `top_k` setting; --k is the old name).")
@click.option("--max-tokens", type=int, help="Max new tokens.")
@click.option("--temperature", type=float, help="Sampling temperature (0 = greedy).")
@click.option("--document", "documents", multiple=True, help="Restrict to these document ids (repeatable).")
@json_option("Print the result object as JSON.")
@click.pass_context
@handle_errors
def ask_cmd(ctx: click.Context, question: str, index: str | None, top_k: int | None, max_tokens: int | None,
            temperature: float | None, documents: tuple[str, ...], as_json: bool) -> None:
    """Answer QUESTION from the indexed documents, streaming the answer."""
    settings = settings_from(ctx, index=index)
    open_reader(settings).close()  # a missing index is reported before the models load
    service = answer_service(settings, Models.load(settings))
    options = options_from(settings, top_k=top_k, max_tokens=max_tokens, temperature=temperature,
                           documents=list(documents) or None)

    async def answer() -> AnswerResult | None:
        async for item in service.stream(AnswerRequest(question=question, options=options,
                                                            context=RequestContext.local())):
            if isinstance(item, AnswerResult):
                return item
            if not as_json:
                out.print(item, end="", highlight=False, soft_wrap=True, markup=False)
        return None

    with traced(settings, "ask"):
        result = asyncio.run(answer())
    assert result is not None
    if as_json:
        print_json(result.to_dict())
        return
    if result.abstained:
        out.print(result.answer, highlight=False, markup=False)
    else:
        out.print()
        if result.quotes_text():  # an answer made of cited quotes is not repeated
            for quote in result.evidence:
                out.print(f"  “{quote.quote}” [{quote.source}]", highlight=False, markup=False, soft_wrap=True)
    out.print()
    for line in source_lines(result):
        out.print(line, highlight=False, markup=False)
    console.print(literal(metrics_line(result), "dim"))


def source_lines(result) -> list[str]:
    """One line per source, in rank order: ``*[n] title · p. 3 · § section — path  (relevance 92%)``; ``*``
    marks the cited ones. Sources that share a title (and page and section) also show their first words."""
    def place(src) -> tuple:
        return src.title, src.page, src.section

    shared = {key for key in map(place, result.sources) if sum(place(s) == key for s in result.sources) > 1}
    lines = []
    for src in result.sources:
        mark = "*" if src.number in result.citations else " "
        where = "".join([f" · p. {src.page}" if src.page else "",
                         f" · § {src.section}" if src.section and src.section != src.title else ""])
        preview = f" · “{snippet_preview(src.snippet)}”" if place(src) in shared else ""
        lines.append(f"{mark}[{src.number}] {src.title}{where}{preview} — {src.path}  "
                     f"(relevance {src.relevance:.0%})")
    return lines


def snippet_preview(text: str, words: int = 8) -> str:
    head = text.split()
    return " ".join(head[:words]) + ("…" if len(head) > words else "")


def metrics_line(result) -> str:
    m = result.metrics
    if not m.output_tokens:  # nothing generated: no token rates of zero
        why = "the index holds no documents" if result.abstain_reason == "empty_index" else "no answer generated"
        return f"retrieval {m.retrieval_ms:.0f} ms · total {m.total_ms:.0f} ms · {why}"
    return (f"retrieval {m.retrieval_ms:.0f} ms · prompt {plural(m.prompt_tokens, 'token')} · "
            f"TTFT {m.ttft_ms:.0f} ms · {plural(m.output_tokens, 'token')} at {m.tokens_per_s:.0f} tok/s · "
            f"total {m.total_ms:.0f} ms")


@click.command("eval")
@click.option("--questions", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--docs", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@index_option("Use this existing index instead of a scratch one.")
@click.option("--top-k", "--k", "top_k", type=int, default=5, show_default=True,
              help="Chunks retrieved per question, the k of recall@k (--k is the old name).")
@click.option("--answers", type=int, default=0, help="Also answer N answerable + N unanswerable questions.")
@click.option("--followups", type=click.IntRange(0), default=0,
              help="Also measure follow-up retrieval on N two-turn conversations built from the set.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--distractors", type=click.Path(exists=True, path_type=Path), multiple=True,
              help="Then add these unrelated documents to the same index and answer the same questions again.")
@click.option("--off-topic/--no-off-topic", default=True, show_default=True,
              help="With --answers: also ask the built-in off-topic questions, alone and as a third turn.")
@click.option("--dump", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help="Write every question, answer, evidence, sources and verdict here (JSON Lines).")
@json_option()
@click.pass_context
@handle_errors
def eval_cmd(ctx: click.Context, questions: Path, docs: Path, index: str | None, top_k: int, answers: int,
             followups: int, seed: int, distractors: tuple[Path, ...], off_topic: bool, dump: Path | None,
             as_json: bool) -> None:
    """Retrieval recall@k, and what a reader sees of the answers: F1 / EM, gold in the answer, length,
    citation precision, abstention, off-topic refusal (alone and in a conversation), latency."""
    from app.bench.evaluate import evaluate  # lazy: keeps rag --help fast

    settings = settings_from(ctx)
    with traced(settings, "eval"):
        report = evaluate(settings, questions, docs, index, top_k, answers, seed,
                          log=progress, followups=followups,
                          distractors=distractors, dump=dump, off_topic=off_topic)
    if as_json:
        print_json(report)
        return
    table = Table("metric", "value", "with distractors" if distractors else "", title="evaluation")
    extra = report.get("with_distractors", {})
    for key, value in report.items():
        if not isinstance(value, (dict, list)):
            other = extra.get(key)
            table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value),
                          "" if other is None else f"{other:.3f}" if isinstance(other, float) else str(other))
    out.print(table)
    if report.get("by_type"):
        out.print(type_table(report["by_type"]))
    if report.get("by_language"):
        out.print(language_table(report["by_language"]))
    if report.get("answerability_curve"):
        out.print(curve_table(report["answerability_curve"], settings.answerable_threshold))


def curve_table(curve: list[dict], threshold: float) -> Table:
    """What each answerability threshold gives, the configured one marked."""
    table = Table("threshold", "unanswerable refused", "false refusal", "answer hit",
                  title="answerability: refusal against false refusal")
    for point in curve:
        mark = " ← answerable_threshold" if abs(point["threshold"] - threshold) < 0.026 else ""
        table.add_row(f"{point['threshold']:.2f}{mark}", f"{point['refused_unanswerable']:.0%}",
                      f"{point['false_refusal']:.0%}", f"{point['answer_hit']:.0%}")
    return table


def type_table(by_type: dict[str, dict]) -> Table:
    """The answer figures per question type (a typed set such as tests/data/debian-docs)."""
    columns = (("questions", None), ("answer hit", "gold_in_answer"), ("quote hit", "gold_in_evidence"),
               ("evidence@1", "evidence@1"), ("evidence@3", "evidence@3"), ("false refusal", "false_abstention"),
               ("refused", "abstention_unanswerable"), ("fragments", "fragments"))
    table = Table("type", *(name for name, _ in columns), title="by question type")
    for kind, figures in by_type.items():
        unanswerable = not figures["questions_answerable"]
        cells = [str(figures["questions_unanswerable"] if unanswerable else figures["questions_answerable"])]
        for _, key in columns[1:]:
            value = figures[key]
            shown = (key == "abstention_unanswerable") == unanswerable
            cells.append("" if not shown else str(value) if isinstance(value, int) else f"{value:.0%}")
        table.add_row(kind, *cells)
    return table


def language_table(by_language: dict[str, dict]) -> Table:
    """The answer figures per question language (questions with a "language", as tools/languages writes them)."""
    table = Table("language", "answerable", "answer hit", "quote hit", "false refusal", "unanswerable", "refused",
                  title="by question language")
    for language, f in by_language.items():
        table.add_row(language, str(f["questions_answerable"]), f"{f['gold_in_answer']:.0%}",
                      f"{f['gold_in_evidence']:.0%}", f"{f['false_abstention']:.0%}",
                      str(f["questions_unanswerable"]), f"{f['abstention_unanswerable']:.0%}")
    return table
