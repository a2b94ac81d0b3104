"""Answerability: whether the evidence found answers the question asked, from signals measured on it.

Pure functions. The signals are computed while an answer is prepared (how much of the question the evidence
covers, whether names the question asks about occur in what was retrieved) and generated (how much the model
would rather reply "unknown" than pick an answer); ``decide`` weighs them into one score.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

from rag.answering.english import (CONTRACTION, GENERIC_WORDS, GROUP_AFTER, GROUP_GOVERNORS, MONTH,
                                   OPPOSITE_PAIRS, QUESTION_SUBJECT, plural)
from rag.core.text import STOPWORDS, content_words, stem

# A name or a number the question asks about: a capitalised word not opening a sentence, a word with a digit
# ("Paris", "PostgreSQL 15", "1975"), a path or an option ("/etc/fstab", "--verbose").
NAME_TOKEN = re.compile(r"[\w./=+:-]*[\w/]")
NOT_NAMES = STOPWORDS | {"ok", "url", "urls"}


def telling_words(question: str) -> set[str]:
    """The stems of the question's content words, the too-common ones aside."""
    return stems(" ".join(content_words(question) - GENERIC_WORDS))


def stems(text: str) -> set[str]:
    return {stem(w) for w in content_words(text)}


def shares_a_word(question: str, sentence: str) -> bool:
    """The sentence holds one of the question's telling words, in any form ("settled" ~ "settlement"; any
    word, when the question has none: "Why?")."""
    asked = telling_words(question)
    return not asked or bool(asked & stems(sentence))


def names(question: str, capitals: bool = True) -> list[str]:
    """The names, numbers and technical tokens the question asks about, lower-cased: "Paris" of "What is the
    hotel rate in Paris?", "15" of "…in PostgreSQL 15?", "/etc/fstab". ``capitals``: a capitalised word names
    something (not in German, where every noun has a capital: "Rechner", "Paket" were "missing names"; with
    German function words read as words no page holds, they refused 40 of the multilingual dev set's 51
    answerable German questions)."""
    found = []
    for match in NAME_TOKEN.finditer(question):
        token = match.group()
        technical = any(c in token for c in "/=") or token.startswith("-")
        # Capitals that open a sentence of the question ("…is broken. How do I fix it?") or a function word
        # ("Which", "OK") name nothing: on the dev set they were most of the "missing names" of answerable
        # questions.
        before = question[:match.start()].rstrip().rstrip("¿¡«„“\"'(")  # "¿Qué…?" opens with "Qué"
        opens = not before or before[-1] in ".?!:;"
        if token == "I" or (not technical and token.lower() in NOT_NAMES):
            continue
        if technical or any(c.isdigit() for c in token) or (capitals and not opens and token[:1].isupper()):
            found.append(token.lower())
    return list(dict.fromkeys(found))


def searchable_words(question: str) -> list[str]:
    """The question's telling words as written (not stems), three letters or more, contractions undone
    ("shouldn't" is no word of the documents'): the words whose absence from every document says the
    documents do not speak of what is asked."""
    text = CONTRACTION.sub(r"\1", question)
    return sorted(w for w in content_words(text) - GENERIC_WORDS if len(w) >= 3 and not w.isdigit())


def technical_word(word: str) -> bool:
    """A word written the same in every language: with a digit, "_" or "-" ("arm64", "pg_ctl", "utf-8")."""
    return any(c.isdigit() or c in "_-" for c in word)


def unknown_signals(question: str, absent: Sequence[str], capitals: bool = True) -> dict[str, float]:
    """How many of the question's words no visible document holds, how many of those are names or technical
    words (a digit, "_", "-", or capitalised in the question: "arm64", "pg_ctlcluster", "Dovecot"), and how many
    are identifiers ("_" inside: "autovacuum_work_mem"; ``names_an_unknown_identifier``)."""
    named = set(names(question, capitals)) | (
        {w.lower() for w in re.findall(r"(?<!^)\b[A-Z]\w+", question.strip())} if capitals else set())
    technical = [w for w in absent if w in named or technical_word(w)]
    return {"unknown_words": float(len(absent)), "unknown_names": float(len(technical)),
            "unknown_identifiers": float(sum("_" in w.strip("_") for w in absent))}


def refused_whatever_the_score(signals: Mapping[str, float]) -> bool:
    """The question names an identifier no visible document holds (``names_an_unknown_identifier``), a file name,
    identifier, option (``tokens_not_retrieved``) or version (``versions_not_retrieved``) no retrieved passage holds,
    or asks of another group than the one the evidence's rule is for (``another_group``: the "other_group"
    signal), or the evidence says the opposite of a word of the question (``opposite_in_evidence``)."""
    return (names_an_unknown_identifier(signals) or signals.get("tokens_not_retrieved", 0.0) >= 1
            or signals.get("versions_not_retrieved", 0.0) >= 1 or signals.get("other_group", 0.0) >= 1
            or signals.get("opposite_in_evidence", 0.0) >= 1)


def names_an_unknown_identifier(signals: Mapping[str, float]) -> bool:
    """The question names an identifier no visible document holds ("What is the default value of
    autovacuum_work_mem?", "How do I upgrade a cluster with pg_upgradecluster?"): the documents do not speak of it,
    whatever the score. Of the dev dumps' questions 3 of the 44 unanswerable ones named one (all three answered
    before: "2 milliseconds" for autovacuum_work_mem), none of the 712 answerable ones (dev set, squad2-dev seeds 0
    and 1, policies)."""
    return signals.get("unknown_identifiers", 0.0) >= 1


# What a question names exactly as the documents would write it: a file name with its extension ("journald.conf",
# "pg_hba.conf"; two letters or more before the dot: not "e.g."), a snake_case identifier ("log_checkpoints"), an
# option ("--incremental").
EXACT_TOKEN = re.compile(r"(?<![\w.-])(?:[A-Za-z][\w+-]+(?:\.[A-Za-z0-9_]+)+|[A-Za-z]\w*_\w+|--?[A-Za-z][\w-]+)(?!\w)")


# A token the question gives as an example of its own ("a made-up hostname like box.localdomain"), which no page
# need hold.
EXAMPLE_MARK = re.compile(r"(?i)(?:\blike|\bsuch as|\be\.g\.,?|\bfor (?:example|instance),?|\bsay,)\s*[\"'“‘(]?$")


def asked_tokens(question: str) -> list[str]:
    """The file names, identifiers and options the question names (``EXACT_TOKEN``), but those it gives as an
    example (``EXAMPLE_MARK``)."""
    return list(dict.fromkeys(m.group() for m in EXACT_TOKEN.finditer(question)
                              if not EXAMPLE_MARK.search(question[:m.start()])))


def holds_token(text: str, token: str) -> bool:
    """``text`` holds ``token`` as written (in any case), or as the start of a longer identifier ("mpm_event" of
    the module identifier "mpm_event_module") or, a suffix asked for ("its -data package"), as the end of a
    hyphenated name ("foo-data")."""
    name = re.escape(token.lower())
    before = r"(?<![\w-])" if not re.match(r"-\w", token) else r"(?<![-])"
    after = r"(?![^\W_])" if "_" in token else r"(?!\w)"
    return re.search(before + name + after, text.lower()) is not None


def unretrieved_tokens(question: str, retrieved: str) -> list[str]:
    """The tokens the question names (``asked_tokens``) no retrieved passage holds (``holds_token``): the passages
    then speak of something else ("min_wal_size" was the answer to "Which journald.conf setting limits …?",
    "/etc/shadow" to "Which setting in login.defs …?")."""
    return [token for token in asked_tokens(question) if not holds_token(retrieved, token)]


def tokens_not_retrieved(question: str, retrieved: str) -> int:
    """How many tokens the question names no retrieved passage holds (``unretrieved_tokens``). On the dev dumps'
    collected evidence 9 of the dev set's 18 unanswerable questions naming such a token had one no retrieved
    passage held, none of its 52 answerable ones; no policies or squad2-dev question names one. Retrieval gives
    each such token the chunk holding it where one does (``Retriever.chunks_holding``)."""
    return len(unretrieved_tokens(question, retrieved))


# A version of a named thing ("PostgreSQL 12", "Debian 7", "TLS 1.3"): a capitalised word, then a number of one or
# two digits (not a year), with its decimals.
VERSIONED_NAME = re.compile(r"\b([A-Z][A-Za-z]+) (\d{1,2}(?:\.\d+)?)\b(?![\d,.:/]\d)")


def versions_not_retrieved(question: str, retrieved: str) -> int:
    """How many of the versions the question names (``VERSIONED_NAME``; not a month's day, not "In 12 …") no
    retrieved passage names: as written, or "TLS version 1.3", "TLSv1.3", "Interstate 15" for "Interstates 15".
    The passages are then of another version ("What was the default ssl_min_protocol_version in PostgreSQL 12?"
    over the PostgreSQL 15 manual was answered "TLSv1.2", its default in 15). On the dev dumps' collected evidence
    it named 4 of the dev set's unanswerable questions and none of the 3 answerable ones naming a version; no
    policies question names one, one squad2-dev question ("Interstates 15"), whose passages name it. English only:
    the multilingual set's "SSH-Port 22" and "port SSH 22" name a port, not a version."""
    missing = 0
    for match in dict.fromkeys(m.groups() for m in VERSIONED_NAME.finditer(question)):
        name, number = match
        if name.lower() in STOPWORDS or MONTH.match(name):
            continue
        said = rf"\b{re.escape(name.rstrip('s'))}s?\W{{0,3}}(?:v|version\s+)?{re.escape(number)}(?!\d)"
        missing += not re.search(said, retrieved, re.IGNORECASE)
    return missing


def group_phrases(text: str) -> list[tuple[str, str, set[str]]]:
    """Each plural noun after "for" / "to" in ``text``: (the preposition, the noun, the stems of the few words
    before it)."""
    found = []
    for match in GROUP_AFTER.finditer(text):
        if plural(match.group(2)):
            before = re.findall(r"[\w-]+", text[:match.start()])[-GROUP_GOVERNORS:]
            found.append((match.group(1).lower(), match.group(2), {stem(w.lower()) for w in before}))
    return found


def another_group(question: str, evidence: str, heading: str, passage: str, others: Sequence[str]) -> str | None:
    """The group the evidence speaks of where the question asks of another: the question names a group (a plural
    noun after "for" / "to", or its subject) that the evidence's passage does not hold though ``others`` (the other
    retrieved passages; read only when such a group is asked about) do,
    while the evidence states its rule for a group the question does not name, as the subject of its sentence
    ("Contractors need the approval …" for "Who approves VPN access for employees?") or after the same
    preposition near a word of the question (its ``heading`` "VPN access for contractors", "keys are issued to
    administrators"). Such questions were answered from the rule for the other group ("IT Security team"). Of the
    dev dumps' questions it named one for 5 of the policies' 12 unanswerable ones, for none of the dev set's and
    squad2-dev's (358 and 686 questions)."""
    asked, asked_words, held = telling_words(question), stems(question), stems(passage)
    asked_groups = [*group_phrases(question),
                    *(("", m.group(1), set()) for m in QUESTION_SUBJECT.finditer(question) if plural(m.group(1)))]
    elsewhere: set[str] | None = None
    for preposition, group, before in asked_groups:
        group_stem = stem(group.lower())
        if group_stem not in asked or group_stem in held:
            continue
        elsewhere = stems(" ".join(others)) if elsewhere is None else elsewhere
        if group_stem not in elsewhere:
            continue
        subject = [w for w in re.findall(r"[A-Za-z][\w-]*", evidence)[:2] if plural(w)]
        said = [w for w in subject if stem(w.lower()) not in asked_words and w.lower() not in STOPWORDS]
        said += [other for p, other, near in (*group_phrases(evidence), *group_phrases(heading))
                 if preposition and p == preposition and stem(other.lower()) not in asked_words
                 and other.lower() not in STOPWORDS and before & near & asked]
        if said:
            return said[0]
    return None


def opposites_by_stem() -> dict[str, frozenset[str]]:
    """Each word's stem in ``OPPOSITE_PAIRS`` and its opposites' stems ("weekly": "daily", "monthly", "annual")."""
    found: dict[str, set[str]] = {}
    for one, other in OPPOSITE_PAIRS:
        found.setdefault(stem(one), set()).add(stem(other))
        found.setdefault(stem(other), set()).add(stem(one))
    return {word: frozenset(opposites) for word, opposites in found.items()}


OPPOSITE_OF = MappingProxyType(opposites_by_stem())
WORD = re.compile(r"[A-Za-z]+")


def opposite_in_evidence(question: str, evidence: str, nearby: Sequence[str] = ()) -> str | None:
    """A word of the question (``OPPOSITE_PAIRS``) that the evidence (nor the ``nearby`` sentences, the runners-up
    an answer may come from) does not hold while it says its opposite, which the question does not: "When did Sky
    launch a TV advertising campaign target towards men?" over "…targeting Sky+ at women", "What is interested in
    how algorithms scale with a decrease in the input size?" over "…with an increase". A capitalised word inside
    the sentence is a name, not the opposite ("the Northeastern megalopolis" for a question on southern
    California). On the dev dumps' collected evidence it named 10 of squad2-dev's 297 unanswerable questions and 1
    of its 326 answerable ones (that name, before capitals were read), none of the dev set's and the policies'
    (354 and 33 questions)."""
    asked = {stem(w.lower()) for w in WORD.findall(question)}
    said = {stem(m.group().lower()) for m in WORD.finditer(evidence)
            if m.group()[0].islower() or not evidence[:m.start()].strip()}
    held = said | {stem(w.lower()) for w in WORD.findall(" ".join(nearby))}
    for word in sorted(asked - held):
        for opposite in sorted(OPPOSITE_OF.get(word, frozenset()) & said - asked):
            return opposite
    return None


def coverage(question: str, text: str) -> float:
    """The share of the question's telling words that ``text`` holds, in any form (1.0 when it has none)."""
    asked = telling_words(question)
    return len(asked & stems(text)) / len(asked) if asked else 1.0


DASHES = str.maketrans({"–": "-", "—": "-", "‐": "-", "‑": "-", "−": "-"})
# A name misspelt by the asker ("Primeier Leage") still matches a word this close (difflib's ratio).
CLOSE_SPELLING = 0.8


def missing_names(question: str, text: str, capitals: bool = True) -> int:
    """How many of the question's names (``names``) ``text`` does not hold: as whole words, dashes alike
    ("1851-1860" ~ "1851–1860"), spaces aside ("Sky Drive" ~ "SkyDrive"), or misspelt by one or two letters."""
    lowered = text.lower().translate(DASHES)
    squeezed = re.sub(r"[\s-]+", "", lowered)
    words: list[str] | None = None
    missing = 0
    for name in names(question.translate(DASHES), capitals):
        if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", lowered) or re.sub(r"[\s-]+", "", name) in squeezed:
            continue
        if len(name) >= 5 and name.isalpha():
            words = words if words is not None else list(set(re.findall(r"[a-z]{4,}", lowered)))
            if difflib.get_close_matches(name, words, n=1, cutoff=CLOSE_SPELLING):
                continue
        missing += 1
    return missing


def lexical_signals(question: str, best: str, chunk: str, retrieved: Sequence[str], best_dense: float,
                    sentence_cosine: float, capitals: bool = True, across: bool = False) -> dict:
    """The signals read off the evidence before generation: the question's coverage by the best sentence and by
    its chunk, how many of the question's names the chunk and all retrieved chunks do not hold, and how close in
    meaning the best sentence and its chunk are to the question. ``across``: the question is in another language
    than the evidence, whose words it cannot cover (its coverage then counts as nothing)."""
    capitals = capitals and not across
    return {"coverage_sentence": 0.0 if across else coverage(question, best),
            "coverage_chunk": 0.0 if across else coverage(question, chunk),
            "names_missing": float(missing_names(question, " ".join(retrieved), capitals)),
            "names_missing_chunk": float(missing_names(question, chunk, capitals)),
            "tokens_not_retrieved": float(tokens_not_retrieved(question, " ".join(retrieved))),
            "best_dense": best_dense, "sentence_cosine": sentence_cosine}


def logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, x))))


def answerable_score(signals: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The chance the documents answer the question, by a logistic model over ``signals`` (weights by signal
    name, "bias" for the intercept; a signal the answer lacks counts as 0)."""
    return logistic(weights.get("bias", 0.0) + sum(weight * signals.get(name, 0.0)
                                                   for name, weight in weights.items() if name != "bias"))


# The answerability score's logistic weights by signal ("bias": the intercept), fitted by
# tools/answers/fit_answerability.py on both dev sets, two models pooled (the fit and its refusal rates:
# docs/benchmark-notes.md). ``decline_margin`` is left out: it got a weight near 0 in every fit.
WEIGHTS: dict[str, float] = {
    "bias": -2.739, "names_missing": -1.825, "names_missing_chunk": -0.064, "coverage_sentence": -0.29,
    "coverage_chunk": -0.479, "best_dense": 2.333, "sentence_cosine": 3.699, "unknown_words": -0.597,
    "unknown_names": -0.065,
}


@dataclass(frozen=True)
class AnswerProfile:
    """How a generator answers best, measured on the dev sets (tests/data/debian-docs, squad2-dev): used where
    the settings are left at their defaults."""

    answer_examples: bool  # the worked examples before a factoid question
    answer_sentences: int  # the best sentences a short answer may be copied from
    span_search: int = 8  # the first tokens whose whole phrases are scored (1: token by token)


# A generator without a profile of its own (an imported model, a remote server) gets the settings' defaults.
DEFAULT_PROFILE = AnswerProfile(True, 1)
PROFILES: dict[str, AnswerProfile] = {
    "smollm2-135m-instruct-int4": AnswerProfile(True, 1),  # the small model needs the examples (docs/models.md)
    # Choosing among the best three sentences hit more answers on the dev set (docs/benchmark-notes.md).
    "qwen25-coder-0.5b-int4": AnswerProfile(False, 3),
    # Three sentences not measured. Token by token: the 1.5B model's first tokens are good already (dev set answer
    # hit 51.4% vs 52.4% with span_search 8, F1 0.422 vs 0.412) and the search cost 0.3 s p50, 0.7 s p95.
    "qwen25-coder-1.5b-int4": AnswerProfile(False, 1, 1),
}


def profile_for(model_id: str) -> AnswerProfile:
    return PROFILES.get(model_id, DEFAULT_PROFILE)
