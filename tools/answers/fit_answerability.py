"""Fit the answerability weights (``rag/answering/answerability.py`` WEIGHTS) from ``rag eval --dump`` files.

    python tools/answers/fit_answerability.py --train DUMP [--train DUMP ...] [--test DUMP ...]

A logistic regression (Newton's method on numpy, L2-regularised) of "the question is answerable" over the
signals each answer recorded; prints the weights as a Python dict, and for each file the refusal of
unanswerable questions and the false refusal of answerable ones at thresholds 0.3-0.7. Questions refused
before any signal was measured (no evidence) are left out: the threshold does not decide them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

FEATURES = ("names_missing", "names_missing_chunk", "coverage_sentence", "coverage_chunk", "best_dense",
            "sentence_cosine", "unknown_words", "unknown_names")


# A signal an answer may lack, and the value it counts as then (``--features …,decline_margin``): an answer made
# without a constrained generation step (cited sentences, a list) has no decline margin.
DEFAULTS = {"decline_margin": 0.0}


def load(path: Path, features: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    rows, labels = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("run") not in ("main", "", None):
            continue
        signals = {**DEFAULTS, **record["verdict"].get("signals", {})}
        if not record["verdict"].get("signals") or any(name not in signals for name in features):
            continue  # refused before the score was computed: the threshold does not decide it
        rows.append([signals[name] for name in features])
        labels.append(0.0 if record["unanswerable"] else 1.0)
    return np.asarray(rows, dtype=np.float64), np.asarray(labels)


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 50) -> np.ndarray:
    """Weights (intercept last) of an L2-regularised logistic regression; unanswerable questions are weighted up
    to the answerable ones' total (the sets hold far fewer of them)."""
    design = np.hstack([x, np.ones((len(x), 1))])
    balance = np.where(y == 0, (y == 1).sum() / max(1, (y == 0).sum()), 1.0)
    w = np.zeros(design.shape[1])
    penalty = np.eye(design.shape[1]) * l2
    penalty[-1, -1] = 0.0
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-design @ w))
        gradient = design.T @ (balance * (p - y)) + penalty @ w
        hessian = design.T @ (design * (balance * p * (1 - p))[:, None]) + penalty
        w -= np.linalg.solve(hessian, gradient)
    return w


def report(name: str, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> None:
    if not len(x):
        print(f"  {name}: no answer with every signal")
        return
    scores = 1 / (1 + np.exp(-(np.hstack([x, np.ones((len(x), 1))]) @ w)))
    for threshold in (0.3, 0.4, 0.5, 0.6, 0.7):
        refused = scores < threshold
        print(f"  {name} @ {threshold:.1f}: unanswerable refused {refused[y == 0].mean():.0%}, "
              f"answerable refused {refused[y == 1].mean():.0%}  (n = {int((y == 0).sum())} / {int((y == 1).sum())})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, action="append", required=True)
    parser.add_argument("--test", type=Path, action="append", default=[])
    parser.add_argument("--features", default=",".join(FEATURES))
    parser.add_argument("--l2", type=float, default=1.0)
    args = parser.parse_args()
    features = tuple(args.features.split(","))
    parts = [load(path, features) for path in args.train]
    x, y = np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    w = fit(x, y, args.l2)
    print({"bias": round(float(w[-1]), 3), **{name: round(float(v), 3) for name, v in zip(features, w[:-1])},
           **{f"default:{name}": value for name, value in DEFAULTS.items() if name in features}})
    for path, (px, py) in zip(args.train, parts):
        report(f"train {path.name}", px, py, w)
    for path in args.test:
        report(f"test {path.name}", *load(path, features), w)


if __name__ == "__main__":
    main()
