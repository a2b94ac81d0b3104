"""``rag ask`` and ``rag eval``."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from rag.cli.documents import open_reader
from rag.cli.common import console, handle_errors, index_option, json_option, literal, out, print_json, settings_from


@click.command("ask")
@click.argument("question")
@index_option()
@click.option("--k", "top_k", type=int, help="Chunks to retrieve.")
@click.option("--max-tokens", type=int, help="Max new tokens.")
@click.option("--temperature", type=float, help="Sampling temperature (0 = greedy).")
@click.option("--copy-bias", type=float, help="Logit bias toward the passages' tokens (0 = off).")
@click.option("--document", "documents", multiple=True, help="Restrict to these document ids (repeatable).")
@json_option("Print the result object as JSON.")
@click.pass_context
@handle_errors
def ask_cmd(ctx: click.Context, question: str, index: str | None, top_k: int | None, max_tokens: int | None,
            temperature: float | None, copy_bias: float | None, documents: tuple[str, ...], as_json: bool) -> None:
    """Answer QUESTION from the indexed documents, streaming the answer."""
    import asyncio

    from rag.answering.result import AnswerResult
    from rag.answering.service import AnswerRequest, options_from
    from rag.runtime import Models, answer_service

    settings = settings_from(ctx, index=index)
    open_reader(settings).close()  # a missing index is reported before the models load
    service = answer_service(settings, Models.load(settings))
    options = options_from(settings, top_k=top_k, max_tokens=max_tokens, temperature=temperature,
                           copy_bias=copy_bias, documents=list(documents) or None)

    async def answer() -> AnswerResult | None:
        async for item in service.stream(AnswerRequest(question=question, options=options)):
            if isinstance(item, AnswerResult):
                return item
            if not as_json:
                out.print(item, end="", highlight=False, soft_wrap=True, markup=False)
        return None

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
    for src in result.sources:
        mark = "*" if src.number in result.citations else " "
        page = f" p.{src.page}" if src.page else ""
        out.print(f"{mark}[{src.number}] {src.title}{page} — {src.path}  (score {src.score:.3f})", highlight=False,
                  markup=False)
    m = result.metrics
    console.print(f"[dim]retrieval {m.retrieval_ms:.0f} ms · prompt {m.prompt_tokens} tok · "
                  f"TTFT {m.ttft_ms:.0f} ms · {m.output_tokens} tok at {m.tokens_per_s:.0f} tok/s · "
                  f"total {m.total_ms:.0f} ms[/]")


@click.command("eval")
@click.option("--questions", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--docs", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@index_option("Use this existing index instead of a scratch one.")
@click.option("--k", "top_k", type=int, default=5, show_default=True)
@click.option("--answers", type=int, default=0, help="Also answer N answerable + N unanswerable questions.")
@click.option("--followups", type=click.IntRange(0), default=0,
              help="Also measure follow-up retrieval on N two-turn conversations built from the set.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--distractors", type=click.Path(exists=True, path_type=Path), multiple=True,
              help="Then add these unrelated documents to the same index and answer the same questions again.")
@click.option("--dump", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help="Write every question, answer, evidence, sources and verdict here (JSON Lines).")
@json_option()
@click.pass_context
@handle_errors
def eval_cmd(ctx: click.Context, questions: Path, docs: Path, index: str | None, top_k: int, answers: int,
             followups: int, seed: int, distractors: tuple[Path, ...], dump: Path | None, as_json: bool) -> None:
    """Retrieval recall@k, and what a reader sees of the answers: F1 / EM, gold in the answer, length,
    citation precision, abstention, off-topic refusal (alone and in a conversation), latency."""
    from rag.evaluate import evaluate

    settings = settings_from(ctx)
    report = evaluate(settings, questions, docs, index, top_k, answers, seed,
                      log=lambda message: console.log(literal(message)), followups=followups,
                      distractors=distractors, dump=dump)
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


