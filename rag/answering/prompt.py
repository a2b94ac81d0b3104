"""Prompt construction and reading the reply: pure functions."""

from __future__ import annotations

import re
from typing import Sequence

from rag.answering.compress import Passage
from rag.answering.english import ELLIPTICAL, EXPLETIVE_IT, MODEL_ABSTAINS, NAME, REFERS_BACK
from rag.core.text import content_words

ABSTENTION_MESSAGE = "The documents do not contain an answer to this question."
CITATION = re.compile(r"\[(\d{1,2})\]")


def refers_back(question: str) -> bool:
    """Whether ``question`` needs the conversation to be understood (then retrieval folds it in): a pronoun
    (not the "it" of "How long does it take …?"), "in there", an opening "and / what about", or a question of
    one or two words ("Why?", "Since when?")."""
    return bool(REFERS_BACK.search(EXPLETIVE_IT.sub(" ", question))) or len(question.split()) <= 2


# At most this many earlier questions make up the subject a follow-up refers to.
SUBJECT_QUESTIONS = 3


def subject_questions(earlier: Sequence[str]) -> tuple[str, ...]:
    """The earlier questions that name what a follow-up refers to: the most recent question that does not
    refer back itself, with the follow-ups asked after it ("Who approves VPN access for contractors?", "When
    does it expire?"), at most ``SUBJECT_QUESTIONS``. An older subject is left out, so the fifth or tenth turn
    is read against the most recent one, not the first."""
    chain: list[str] = []
    for question in reversed(earlier):
        chain.insert(0, question)
        if len(chain) >= SUBJECT_QUESTIONS or not refers_back(question):
            break
    return tuple(chain)


def resolve_elliptical(question: str, earlier: Sequence[str]) -> str:
    """A follow-up that only names what changes, as the whole question it stands for: "And in Berlin?" after
    "What is the hotel rate in London?" is "What is the hotel rate in Berlin?" (the phrase with the same
    preposition, else the last name, swapped). Any other question comes back as it is."""
    match = ELLIPTICAL.match(question)
    if not match or not earlier:
        return question
    preposition, replacement = match.group(1), match.group(2).strip()
    previous = resolve_elliptical(earlier[-1], earlier[:-1])
    if preposition:
        phrases = list(re.finditer(rf"(?i)\b{preposition}\s+(?:the\s+|an?\s+)?[\w.-]+(?:\s+[A-Z][\w.-]*)*", previous))
        if phrases:
            last = phrases[-1]
            return f"{previous[:last.start()]}{preposition} {replacement}{previous[last.end():]}"
    names = list(NAME.finditer(previous))
    if names:
        last = names[-1]
        return f"{previous[:last.start()]}{replacement}{previous[last.end():]}"
    return question


def drop_repeated_tail(reply: str, min_chars: int = 12, max_chars: int = 512) -> str:
    """``reply`` without the copies of a block it ends with repeatedly (the generator stops such loops
    at the second copy, so the block is already in the answer once)."""
    while True:
        for size in range(min_chars, min(max_chars, len(reply) // 2) + 1):
            if reply[-size:] == reply[-2 * size:-size]:
                reply = reply[:-size]
                break
        else:
            return reply


def model_abstained(reply: str) -> bool:
    return not reply.strip() or bool(MODEL_ABSTAINS.search(reply))


def grounded_share(reply: str, question: str, passages: Sequence[Passage]) -> float:
    """The share of the reply's content words, beyond the question's own, that occur in the passages:
    how much of the answer comes from the documents (1.0 when the reply adds no words of its own)."""
    words = content_words(CITATION.sub(" ", reply)) - content_words(question)
    if not words:
        return 1.0
    context = set().union(*(content_words(p.text) for p in passages))
    return len(words & context) / len(words)
