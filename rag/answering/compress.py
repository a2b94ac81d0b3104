"""Context compression: keep only the sentences that answer the question, under a token budget.

Pure functions: the caller supplies sentence vectors and a token counter, so this
module does no I/O and holds no model.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rag.answering.english import defines
from rag.answering.question import QuestionShape
from rag.core.text import content_words, split_sentences, stem

# Added to a sentence's cosine: the idf-weighted share of the question's word stems it holds (idf over the
# candidate sentences: a word every retrieved sentence has tells little; docs/benchmark-notes.md).
LEXICAL_WEIGHT = 0.5
# Added to a sentence that says what a definition question's subject is ("Who was Rollo?"): without it the
# docs/asking.md's example quoted "Before Rollo's arrival, its populations did not differ from Picardy…".
DEFINITION_BONUS = 0.3
HISTORY_WEIGHT = 0.3  # a follow-up's earlier questions' words, against the question's own
RANK_WEIGHT = 0.05  # slight preference for sentences from higher-ranked chunks
LABEL_TOKENS = 4  # "[n] " label and line break around each passage


@dataclass(frozen=True)
class Sentence:
    text: str
    source: int  # 0-based index of the hit (chunk) it comes from
    position: int  # order inside that chunk


@dataclass(frozen=True)
class Passage:
    """Consecutive selected sentences of one source, cited as [number]."""

    number: int  # 1-based citation number == source index + 1
    text: str
    sentences: tuple[str, ...] = ()  # the selected sentences ``text`` joins


def candidate_sentences(chunks: Sequence[str]) -> list[Sentence]:
    return [Sentence(s, i, j) for i, chunk in enumerate(chunks) for j, s in enumerate(split_sentences(chunk))]


def score_sentences(question: QuestionShape, question_vector: np.ndarray, sentences: Sequence[Sentence],
                    sentence_vectors: np.ndarray | None, history: str = "") -> np.ndarray:
    """Cosine to the question (if vectors are given) + lexical overlap + a small rank prior. A follow-up's
    earlier questions (``history``) count for their words too, at ``HISTORY_WEIGHT`` of the question's own:
    "When does it expire?" after a question on contractors' VPN access quotes the sentence that says when it
    expires, not the one about contractors."""
    own = set(question.content_stems)
    earlier = {stem(w) for w in content_words(history)} - own
    wanted = own | earlier
    held = [{stem(w) for w in content_words(s.text)} & wanted for s in sentences]
    frequency = collections.Counter(w for words in held for w in words)
    weight = {w: math.log(1 + len(sentences) / (1 + frequency[w])) * (HISTORY_WEIGHT if w in earlier else 1.0)
              for w in wanted}
    total = sum(weight.values())
    scores = np.zeros(len(sentences), dtype=np.float32)
    for i, sentence in enumerate(sentences):
        overlap = sum(weight[w] for w in held[i]) / total if total else 0.0
        scores[i] = LEXICAL_WEIGHT * overlap + RANK_WEIGHT / (1 + sentence.source)
    if sentence_vectors is not None and len(sentences):
        scores += sentence_vectors @ question_vector
    if question.subject:
        scores += DEFINITION_BONUS * np.array([defines(question.subject, s.text) for s in sentences], dtype=np.float32)
    return scores


def defining_sentences(text: str, subject: str | None) -> str:
    """The sentences of ``text`` that say what ``subject`` is (``defines``), joined; "" without a subject."""
    return " ".join(s for s in split_sentences(text) if defines(subject, s)) if subject else ""


def select_passages(sentences: Sequence[Sentence], scores: np.ndarray, count_tokens: Callable[[str], int],
                    budget_tokens: int, max_sentences: int = 8) -> list[Passage]:
    """Best sentences first until the budget is spent; returned grouped by source, in reading order."""
    chosen: list[Sentence] = []
    used = 0
    for i in np.argsort(-scores, kind="stable"):
        sentence = sentences[int(i)]
        cost = count_tokens(sentence.text) + LABEL_TOKENS
        if used + cost > budget_tokens:
            if not chosen:  # a single over-long best sentence: keep its head rather than nothing
                head = _truncate(sentence.text, count_tokens, budget_tokens - LABEL_TOKENS)
                if head:
                    chosen.append(Sentence(head, sentence.source, sentence.position))
                    used = count_tokens(head) + LABEL_TOKENS
            continue
        chosen.append(sentence)
        used += cost
        if len(chosen) >= max_sentences:
            break
    by_source: dict[int, list[Sentence]] = {}
    for sentence in sorted(chosen, key=lambda s: (s.source, s.position)):
        by_source.setdefault(sentence.source, []).append(sentence)
    return [Passage(source + 1, " ".join(s.text for s in group), tuple(s.text for s in group))
            for source, group in by_source.items()]


def _truncate(text: str, count_tokens: Callable[[str], int], budget: int) -> str:
    words = text.split()
    while words and count_tokens(" ".join(words)) > budget:
        words = words[: max(1, int(len(words) * 0.8))] if len(words) > 1 else []
    return " ".join(words)
