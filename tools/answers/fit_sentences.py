"""Fit the sentence ranker's weights (``rag/answering/compress.py`` SentenceWeights) on question sets.

    python tools/answers/fit_sentences.py --set QUESTIONS DOCS [--set QUESTIONS DOCS ...]
        [--held-out QUESTIONS DOCS ...] [--l2 1.0]

For every answerable question of each set (a scratch index of DOCS each, the configured embedder), the candidate
sentences the answer flow would rank and their ``sentence_features``; the gold sentences are the ones ``rag
eval`` counts as holding the gold answer. A conditional logit (each question's gold sentences against its other
candidates, L2-regularised, Adam on numpy) fitted on all sets together; printed: the weights, and per set the
gold in the best sentence (@1) and in the best three (@3) for the current weights and the fitted ones. Sets whose
questions name their ``document`` are also cross-validated: fitted on the other sets and half of its pages,
measured on the other half, and the other way round. A ``--held-out`` set (tests/data/unseen-docs) is only measured,
with the current and the fitted weights: a feature that lifts the sets it is fitted on should lift it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import tempfile
from pathlib import Path

import numpy as np

from app.bench.evaluate import LOCAL, load_questions, supports
from app.runtime import Models, answer_service, scratch_store
from ingest.parameters import IngestParameters
from ingest.pipeline import ingest_paths
from rag.answering.compress import (DEFINITION_BONUS, FITTED, LEXICAL_WEIGHT, RANK_WEIGHT, SentenceWeights,
                                    candidate_sentences, dense_gaps, evidence_texts, sentence_features)
from rag.answering.prompt import refers_back, resolve_elliptical, subject_questions
from rag.answering.question import QuestionShape
from rag.answering.service import options_from
from rag.core.settings import load_settings

NAMES = [f.name for f in dataclasses.fields(SentenceWeights)] + ["defines_the_subject"]
Question = tuple[np.ndarray, np.ndarray, str]  # features, gold flags, the question's document


def features_of(questions_file: Path, docs: Path, models: Models) -> list[Question]:
    settings = load_settings()
    rows: list[Question] = []
    with tempfile.TemporaryDirectory(prefix="rag-fit-") as scratch, \
            scratch_store(settings, Path(scratch)) as (store, index):
        ingest_paths([docs], store.index(index), IngestParameters.from_settings(settings, models.embedder))
        service = answer_service(settings.replace(index=index), models, store=store)
        options = options_from(service.settings)
        try:
            for question in load_questions(questions_file):
                if question["unanswerable"]:
                    continue
                history = list(question.get("history", ()))
                text = resolve_elliptical(question["question"], history)
                shape = QuestionShape.of(text)
                earlier = subject_questions(history) if refers_back(text) else ()
                retrieval = service.traced_retrieve(None, text, options.top_k, None, earlier, LOCAL.groups)
                if not retrieval.hits:
                    continue
                texts = evidence_texts(retrieval.hits, shape.subject)
                sentences = candidate_sentences(texts)
                if len(sentences) < 2:
                    continue
                vectors = models.embedder.embed([s.text for s in sentences])
                features = sentence_features(shape, retrieval.query_vector, sentences, vectors, " ".join(earlier),
                                             texts, dense_gaps(retrieval.hits))
                gold = np.array([supports(s.text, question) for s in sentences])
                rows.append((features.astype(np.float64), gold, str(question.get("document", ""))))
        finally:
            service.close()
    return rows


def fit(questions: list[Question], l2: float, steps: int = 800) -> np.ndarray:
    usable = [(x, y) for x, y, _ in questions if y.any()]
    x = np.vstack([q[0] for q in usable])
    gold = np.concatenate([q[1] for q in usable])
    sizes = [len(q[1]) for q in usable]
    starts = np.cumsum([0, *sizes])[:-1]
    group = np.repeat(np.arange(len(usable)), sizes)
    w, m, v = np.zeros(x.shape[1]), np.zeros(x.shape[1]), np.zeros(x.shape[1])
    for t in range(1, steps + 1):
        s = x @ w
        p = np.exp(s - np.maximum.reduceat(s, starts)[group])
        p /= np.add.reduceat(p, starts)[group]
        held = np.add.reduceat(np.where(gold, p, 0.0), starts)
        grad = -x.T @ (np.where(gold, p / held[group], 0.0) - p) + l2 * w
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad * grad
        w -= 0.05 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return w


def page_halves(documents: set[str]) -> tuple[set[str], set[str]] | None:
    """A set's pages in two halves (shuffled, seed 0) for cross-validation; None with fewer than two pages."""
    pages = sorted(d for d in documents if d)
    if len(pages) < 2:
        return None
    random.Random(0).shuffle(pages)
    return set(pages[: len(pages) // 2]), set(pages[len(pages) // 2:])


def gold_at(questions: list[Question], w: np.ndarray, k: int) -> float:
    return float(np.mean([y[np.argsort(-(x @ w), kind="stable")[:k]].any() for x, y, _ in questions]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", nargs=2, action="append", required=True, metavar=("QUESTIONS", "DOCS"))
    parser.add_argument("--held-out", nargs=2, action="append", default=[], metavar=("QUESTIONS", "DOCS"),
                        help="a set measured with the current and the fitted weights, never fitted on")
    parser.add_argument("--l2", type=float, default=1.0)
    args = parser.parse_args()
    models = Models.load(load_settings())
    sets = {Path(q).parent.name: features_of(Path(q), Path(d), models) for q, d in args.set}
    held = {Path(q).parent.name: features_of(Path(q), Path(d), models) for q, d in args.held_out}
    current = np.array([getattr(FITTED, n) for n in NAMES[:-1]] + [DEFINITION_BONUS * FITTED.words / LEXICAL_WEIGHT])
    # The score without sentence vectors, in the same features: words, rank prior, definition bonus.
    lexical = np.zeros(len(NAMES))
    lexical[[NAMES.index("words"), NAMES.index("source_rank"), -1]] = LEXICAL_WEIGHT, RANK_WEIGHT, DEFINITION_BONUS
    plus_cosine = lexical.copy()  # the score with sentence vectors before the fitted ranker: the cosine added
    plus_cosine[NAMES.index("cosine")] = 1.0
    fitted = fit([q for rows in sets.values() for q in rows], args.l2)
    print("fitted weights:", {n: round(float(w), 2) for n, w in zip(NAMES, fitted)})
    for name, rows in sets.items():
        print(f"{name}: {len(rows)} questions; gold in the best sentence / the best three: words only "
              f"{gold_at(rows, lexical, 1):.3f} / {gold_at(rows, lexical, 3):.3f}, words + cosine "
              f"{gold_at(rows, plus_cosine, 1):.3f} / {gold_at(rows, plus_cosine, 3):.3f}, current {gold_at(rows, current, 1):.3f}"
              f" / {gold_at(rows, current, 3):.3f}, fitted {gold_at(rows, fitted, 1):.3f} / {gold_at(rows, fitted, 3):.3f}")
        halves = page_halves({d for _, _, d in rows})
        if halves is None:
            continue
        others = [q for other, r in sets.items() if other != name for q in r]
        held_out = {1: 0.0, 3: 0.0}
        for train, test in (halves, halves[::-1]):
            w = fit(others + [q for q in rows if q[2] in train], args.l2)
            tested = [q for q in rows if q[2] in test]
            for k in held_out:
                held_out[k] += gold_at(tested, w, k) * len(tested) / len(rows)
        print(f"  cross-validated over its pages: @1 {held_out[1]:.3f}, @3 {held_out[3]:.3f}")
    for name, rows in held.items():
        print(f"{name} (held out, not fitted on): {len(rows)} questions; gold in the best sentence / the best three: "
              f"current {gold_at(rows, current, 1):.3f} / {gold_at(rows, current, 3):.3f}, fitted "
              f"{gold_at(rows, fitted, 1):.3f} / {gold_at(rows, fitted, 3):.3f}")


if __name__ == "__main__":
    main()
