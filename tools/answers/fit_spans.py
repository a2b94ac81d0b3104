"""Fit how whole candidate phrases are scored (``rag/answering/evidence.py`` SpanWeights) on question sets.

    python tools/answers/fit_spans.py --set QUESTIONS DOCS [--set QUESTIONS DOCS ...] [--width 8] [--limit N]

For every answerable factoid question of each set that takes the short-answer path (a scratch index of DOCS
each, the configured models), the phrases a span search of ``--width`` first tokens scores, with the model's
log-probability, the start's prior, whether it leads, and ``phrase_features``; a phrase is gold where ``rag
eval`` would count it a hit. A conditional logit (each question's gold phrases against its others, the
log-probability's weight held at 1, Adam on numpy) fitted on all sets together; printed: the weights, and per
set the questions whose best-scored phrase is gold for the log-probability alone, the current weights and the
fitted ones, and how many have a gold phrase at all. Sets whose questions name their ``document`` are also
cross-validated: fitted on the other sets and half of its pages, measured on the other half, and the other way.
A set's questions are shuffled (seed 0) before ``--limit`` keeps the first N.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import tempfile
from pathlib import Path

import numpy as np

from fit_sentences import page_halves  # tools/answers/, the script's own folder

from app.bench.evaluate import LOCAL, answer_hit, load_questions
from app.runtime import Models, answer_service, scratch_store
from ingest.parameters import IngestParameters
from ingest.pipeline import ingest_paths
from rag.answering.evidence import SPAN_WEIGHTS, SpanWeights, phrase_features
from rag.answering.service import AnswerRequest, options_from
from rag.core.settings import load_settings

NAMES = [f.name for f in dataclasses.fields(SpanWeights)]
SLACK = 9.0  # phrases scored this far below the best are still followed and kept
Question = tuple[np.ndarray, np.ndarray, str]  # features (log-probability first), gold flags, the document


def phrases_of(questions_file: Path, docs: Path, models: Models, width: int, limit: int) -> list[Question]:
    settings = load_settings()
    generator = models.local_generator
    if generator is None:
        raise SystemExit("fit_spans needs the local generator (no generator_url)")
    questions = [q for q in load_questions(questions_file) if not q["unanswerable"] and not q.get("history")]
    random.Random(0).shuffle(questions)
    rows: list[Question] = []
    with tempfile.TemporaryDirectory(prefix="rag-fit-") as scratch, \
            scratch_store(settings, Path(scratch)) as (store, index):
        ingest_paths([docs], store.index(index), IngestParameters.from_settings(settings, models.embedder))
        service = answer_service(settings.replace(index=index), models, store=store)
        try:
            for question in questions[:limit]:
                options = options_from(service.settings, span_search=width)
                prepared = service.prepare(AnswerRequest(question=question["question"], options=options,
                                                         context=LOCAL))
                if prepared.prompt is None or not prepared.sampling.spans or prepared.yes_no or prepared.commands:
                    continue
                scored = generator.scored_phrases(prepared.prompt.tokens, prepared.sampling, SLACK)
                if not scored:
                    continue
                features, gold = [], []
                for tokens, logprob, prior, leads in scored:
                    phrase = generator.decode(tokens).strip()
                    features.append([logprob, prior, float(leads), *phrase_features(phrase, prepared.shape)])
                    gold.append(answer_hit(question, phrase))
                rows.append((np.array(features), np.array(gold), str(question.get("document", ""))))
        finally:
            service.close()
    return rows


def fit(questions: list[Question], l2: float = 1e-3, steps: int = 1500) -> np.ndarray:
    """The weights of the features after the log-probability (whose weight is 1)."""
    usable = [(x, y) for x, y, _ in questions if y.any() and not y.all()]
    w, m, v = np.zeros(len(NAMES)), np.zeros(len(NAMES)), np.zeros(len(NAMES))
    for t in range(1, steps + 1):
        grad = l2 * w
        for x, y in usable:
            s = x[:, 0] + x[:, 1:] @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            q = np.where(y, p, 0.0) / p[y].sum()
            grad -= (q - p) @ x[:, 1:] / len(usable)
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad * grad
        w -= 0.05 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return w


def hits(questions: list[Question], w: np.ndarray) -> int:
    return sum(bool(y[np.argmax(x[:, 0] + x[:, 1:] @ w)]) for x, y, _ in questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", nargs=2, action="append", required=True, metavar=("QUESTIONS", "DOCS"))
    parser.add_argument("--width", type=int, default=8, help="first tokens followed (default 8)")
    parser.add_argument("--limit", type=int, default=250, help="questions per set (default 250)")
    args = parser.parse_args()
    models = Models.load(load_settings())
    sets = {Path(q).parent.name: phrases_of(Path(q), Path(d), models, args.width, args.limit) for q, d in args.set}
    current = np.array([getattr(SPAN_WEIGHTS, n) for n in NAMES])
    logprob_only = np.zeros(len(NAMES))
    fitted = fit([q for rows in sets.values() for q in rows])
    print("fitted weights:", {n: round(float(w), 2) for n, w in zip(NAMES, fitted)})
    for name, rows in sets.items():
        print(f"{name}: {len(rows)} questions, {sum(bool(y.any()) for _, y, _ in rows)} with a gold phrase; "
              f"the best phrase is gold: log-probability alone {hits(rows, logprob_only)}, current "
              f"{hits(rows, current)}, fitted {hits(rows, fitted)}")
        halves = page_halves({d for _, _, d in rows})
        if halves is None:
            continue
        others = [q for other, r in sets.items() if other != name for q in r]
        held_out = sum(hits([q for q in rows if q[2] in test], fit(others + [q for q in rows if q[2] in train]))
                       for train, test in (halves, halves[::-1]))
        print(f"  cross-validated over its pages: {held_out}")


if __name__ == "__main__":
    main()
