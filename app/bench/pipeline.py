"""``rag bench rag``: where the time of an answer goes, stage by stage, in-process.

Stages: ``embed`` (question vector), ``retrieve`` (FAISS + BM25 search and fusion),
``compress`` (sentence selection and prompt), ``ttft`` (generation only: prefill up
to the first token), ``decode`` (the remaining tokens), ``total`` (question in to
answer out, including validation and bookkeeping). One warm-up question is not counted.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable

from app.bench.evaluate import load_questions
from app.bench.stats import summarise
from app.runtime import Models, answer_service, open_index
from rag.answering.service import AnswerRequest, options_from
from rag.core import observe
from rag.core.access import RequestContext
from rag.core.errors import BadRequestError

STAGES = ("embed_ms", "retrieve_ms", "compress_ms", "ttft_ms", "decode_ms", "total_ms")


def bench_rag(settings: Any, questions_file: Path, n: int, seed: int,
              progress: Callable[[str], None] = lambda message: None,
              warn: Callable[[str], None] = lambda message: None) -> dict:
    rows = load_questions(questions_file)
    if not rows:
        raise BadRequestError(f"{questions_file} holds no questions")
    sample = random.Random(seed).sample(rows, min(n, len(rows)))
    open_index(settings).reader().close()  # a missing index is reported before the models load
    progress("loading models")
    service = answer_service(settings, Models.load(settings))
    options = options_from(settings)
    samples: list[dict] = []
    skipped: list[dict] = []
    try:
        progress("warm-up")
        service.ask(AnswerRequest(question="warm-up question?", options=options, context=RequestContext.local()))
        for i, q in enumerate(sample, 1):
            progress(f"question {i}/{len(sample)}")
            try:
                with observe.start_span("rag bench question"):  # one trace per question, as per request
                    result = service.ask(AnswerRequest(question=q["question"], options=options,
                                                       context=RequestContext.local()))
            except BadRequestError as exc:
                skipped.append({"question": q["question"], "reason": exc.message})
                continue
            m = result.metrics
            generated = m.output_tokens > 0
            # The service's TTFT counts from the question's arrival; the generation's own starts after compression.
            generation_ttft = m.ttft_ms - m.retrieval_ms - m.compress_ms
            samples.append({
                "question": q["question"], "unanswerable": bool(q.get("unanswerable")),
                "embed_ms": m.embed_ms, "retrieve_ms": round(m.retrieval_ms - m.embed_ms, 3),
                "compress_ms": m.compress_ms,
                "ttft_ms": round(generation_ttft, 3) if generated else None,
                "decode_ms": round(m.tpot_ms * (m.output_tokens - 1), 3) if generated else None,
                "total_ms": m.total_ms, "prompt_tokens": m.prompt_tokens,
                "output_tokens": m.output_tokens, "abstained": result.abstained,
                "abstain_reason": result.abstain_reason})
    finally:
        service.close()
    for s in skipped:
        warn(f"skipped question ({s['reason']}): {s['question'][:60]}")
    breakdown = {}
    results = []
    for stage in STAGES:
        stats_row = summarise([s[stage] for s in samples], (50, 95))
        breakdown[stage] = stats_row
        results.append({"stage": stage.removesuffix("_ms"), **stats_row})
    abstained = [s for s in samples if s["abstained"]]
    abstentions = {
        "total": len(abstained),
        "weak_evidence": sum(s["abstain_reason"] == "weak_evidence" for s in abstained),
        "model_declined": sum(s["abstain_reason"] == "model_declined" for s in abstained),
        "ungrounded": sum(s["abstain_reason"] == "ungrounded" for s in abstained),
        "on_unanswerable": sum(s["unanswerable"] for s in abstained),
        "unanswerable_questions": sum(s["unanswerable"] for s in samples),
    }
    return {"benchmark": "rag", "questions": len(samples), "skipped": len(skipped), "breakdown": breakdown,
            "abstentions": abstentions, "results": results, "samples": samples}
