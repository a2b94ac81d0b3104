"""``rag eval``: retrieval recall and end-to-end answer quality on a SQuAD-style JSONL set."""

from __future__ import annotations

import json
import random
import re
import string
import tempfile
from pathlib import Path
from typing import Callable

from ingest.pipeline import ingest_paths
from ingest.store.embedded import EmbeddedStore
from rag.answering.service import AnswerRequest, AnswerService, PreparedAnswer, options_from
from rag.bench.stats import percentile
from rag.core.errors import BadRequestError
from rag.core.settings import Settings
from rag.runtime import Models, answer_service


PUNCTUATION = frozenset(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalise_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def contains_answer(text: str, answers: list[str]) -> bool:
    haystack = normalise_answer(text)
    return any(gold and gold in haystack for gold in map(normalise_answer, answers))


def answerable(questions: list[dict]) -> list[dict]:
    return [q for q in questions if not q["unanswerable"] and q["answers"]]


def load_questions(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            row["question"], row.setdefault("answers", []), row.setdefault("unanswerable", False)
        except (ValueError, KeyError) as exc:
            raise BadRequestError(f"{path}:{number}: not a question record ({exc})") from exc
        rows.append(row)
    return rows


def evaluate(settings: Settings, questions_file: Path, docs: Path, index: str | None, top_k: int,
             answers: int, seed: int, log: Callable[..., None] = print) -> dict:
    questions = load_questions(questions_file)
    models = Models.load(settings)
    with tempfile.TemporaryDirectory(prefix="rag-eval-") as scratch:
        if index:
            service = answer_service(settings.replace(index=index), models)
        else:
            store = EmbeddedStore(Path(scratch))
            log(f"ingesting {docs} into a scratch index")
            ingest_paths([docs], store.index(settings.index), models.embedder, settings.chunk_tokens,
                         settings.chunk_overlap)
            service = answer_service(settings, models, store=store)
        try:
            report = retrieval_report(service.retriever(), questions, top_k, log)
            if answers > 0:
                report.update(answer_report(service, questions, top_k, answers, seed, log))
        finally:
            service.close()
    return report


def retrieval_report(retriever, questions: list[dict], top_k: int, log: Callable[..., None]) -> dict:
    candidates = answerable(questions)
    log(f"retrieval recall@{top_k} over {len(candidates)} answerable questions")
    found = {"hybrid": 0, "dense": 0, "lexical": 0}
    for q in candidates:
        for mode in found:
            hits = retriever.retrieve(q["question"], top_k, mode=mode).hits
            if any(_from_document(h.chunk.path, q.get("document")) and contains_answer(h.chunk.text, q["answers"])
                   for h in hits):
                found[mode] += 1
    n = max(1, len(candidates))
    return {"questions": len(questions), "answerable": len(candidates), "k": top_k,
            f"recall@{top_k}": found["hybrid"] / n, f"recall@{top_k}_dense": found["dense"] / n,
            f"recall@{top_k}_lexical": found["lexical"] / n}


def _from_document(path: str, document: str | None) -> bool:
    return document is None or Path(path).name == document


def answer_report(service: AnswerService, questions: list[dict], top_k: int, n: int, seed: int,
                  log: Callable[..., None]) -> dict:
    rng = random.Random(seed)
    candidates = answerable(questions)
    unanswerable = [q for q in questions if q["unanswerable"]]
    sample_a = rng.sample(candidates, min(n, len(candidates)))
    sample_u = rng.sample(unanswerable, min(n, len(unanswerable)))
    options = options_from(service.settings, top_k=top_k)
    service.ask(AnswerRequest(question="warm-up question?", options=options))
    correct = false_abstain = abstain_u = 0
    funnel = {"chunks": 0, "prompt": 0, "best_sentence": 0}
    ttft, total, output_tokens, failures = [], [], [], []
    for i, q in enumerate(sample_a + sample_u, 1):
        prepared = service.prepare(AnswerRequest(question=q["question"], options=options))
        result = service.ask_prepared(prepared)
        total.append(result.metrics.total_ms)
        if result.metrics.output_tokens:
            ttft.append(result.metrics.ttft_ms)
            output_tokens.append(result.metrics.output_tokens)
        if q["unanswerable"]:
            abstain_u += result.abstained
            continue
        for stage, found in evidence_funnel(prepared, q).items():
            funnel[stage] += found
        if result.abstained:
            false_abstain += 1
        elif contains_answer(result.answer, q["answers"]):
            correct += 1
        else:
            failures.append({"question": q["question"], "gold": q["answers"], "answer": result.answer})
        if i % 50 == 0:
            log(f"answered {i}/{len(sample_a) + len(sample_u)}")
    na, nu = max(1, len(sample_a)), max(1, len(sample_u))
    sampling = options.sampling
    return {
        "answered_answerable": len(sample_a), "answered_unanswerable": len(sample_u),
        "accuracy": correct / na, "false_abstention": false_abstain / na, "abstention_unanswerable": abstain_u / nu,
        # Where gold answers are lost, over the answerable sample: retrieved (a top-k chunk of the question's
        # document holds it) -> in the compressed context sent to the model -> in the top-scored sentence
        # sent (evidence@1) -> in the reply (the accuracy).
        f"gold_in_top{top_k}_chunks": funnel["chunks"] / na, "gold_in_prompt": funnel["prompt"] / na,
        "evidence@1": funnel["best_sentence"] / na, "gold_in_reply": correct / na,
        "output_tokens_mean": sum(output_tokens) / len(output_tokens) if output_tokens else 0.0,
        "ttft_ms_p50": percentile(ttft, 50) or 0.0, "ttft_ms_p95": percentile(ttft, 95) or 0.0,
        "total_ms_p50": percentile(total, 50) or 0.0, "total_ms_p95": percentile(total, 95) or 0.0,
        "model": service.generator.model_id, "top_k": options.top_k, "context_tokens": options.context_tokens,
        "max_tokens": sampling.max_tokens, "temperature": sampling.temperature, "copy_bias": sampling.copy_bias,
        "seed": seed,
        "sample_failures": failures[:10],
    }


def evidence_funnel(prepared: PreparedAnswer, question: dict) -> dict[str, bool]:
    """Whether an answerable question's gold answer survived each step before generation."""
    gold = question["answers"]
    hits = prepared.retrieval.hits if prepared.retrieval is not None else []
    return {
        "chunks": any(_from_document(h.chunk.path, question.get("document")) and contains_answer(h.chunk.text, gold)
                      for h in hits),
        "prompt": contains_answer(" ".join(p.text for p in prepared.passages), gold),
        "best_sentence": contains_answer(prepared.best_sentence or "", gold),
    }
