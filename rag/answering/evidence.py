"""Short answers and the quotes that support them: pure functions, no model.

The answer to a factoid question is a phrase copied from the best evidence sentence (the model picks
which, by constrained decoding over the spans offered here); the evidence is that sentence, verbatim, with
its character offsets in the source's text. Whatever a generator returns is aligned to the passages
afterwards: a reply no passage holds never reaches the user, and the offsets come from the alignment, never
from the model.
"""

from __future__ import annotations

import collections
import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from rag.core.text import STOPWORDS, content_words, stem
from rag.generation.logits import TokenSpan

SHORT_ANSWER_PROMPT = "Answer the question with a short phrase copied from the context."
# Longest short answer in tokens (spans are offered up to here; each may stop earlier at a word end). 16 with
# END_BONUS 3: dev F1 0.215 / gold 33% / 8 words (60 questions, seed 5), against 0.192 / 27% / 9 at 12 tokens.
MAX_SPAN_TOKENS = 16
CITATION = re.compile(r"\s*\[\d{1,2}\]")
# "When …", "What year …", "How many …": questions whose answer starts with a number, a date or a month.
NUMERIC_QUESTION = re.compile(
    r"(?i)^\s*(?:when|(?:in |by |since )?(?:what|which) (?:year|decade|century|date|month|percentage|percent|age)|"
    r"how (?:many|much|long|old|large|big|far|tall|high)|"
    r"what (?:is|was) (?:the )?(?:\S+['’]s? )?(?:population|area|height|length|cost|price|budget)\b)")
NUMERIC_START = re.compile(
    r"(?i)^(?:\d|(?:january|february|march|april|may|june|july|august|september|october|november|december|"
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|sixty|seventy|"
    r"eighty|ninety|hundred|thousand|million|billion|several|over|about|around|more|less|nearly|approximately)\b)")
# Questions asking for an explanation get the evidence sentences themselves, each cited, not a phrase.
EXPLANATORY_QUESTION = re.compile(
    r"(?i)^\s*(?:explain|describe|summari[sz]e|outline|discuss|tell me about|give an overview|"
    r"why\b|how (?:does|do|did|is|are|was|were|can|could)\b|what (?:is|are) the (?:difference|reason|purpose)s?\b)")
# "Who was Rollo?", "What is photosynthesis?": a definition is a sentence, not a phrase.
DEFINITION_QUESTION = re.compile(r"(?i)^\s*(?:who|what|where) (?:is|was|are|were) (?:an? |the )?([^?]+?)\s*\?*\s*$")
# A time said without a number also answers "when": "every Tuesday at noon", "in spring", "each morning".
TIME_WORD = re.compile(
    r"(?i)^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekdays?|weekends?|noon|midday|midnight|"
    r"dawn|dusk|sunrise|sunset|mornings?|afternoons?|evenings?|nights?|spring|summer|autumn|fall|winter|every|"
    r"each|daily|weekly|monthly|yearly|annually|today|tomorrow|yesterday|tonight)\b")
ARTICLES = frozenset({"the", "a", "an"})
# A word, with "U.S.", "1,548", "3.5", "50%" and "don't" each read as one word: a short answer never ends
# inside one ("U" of "U.S." was once an answer).
WORD_OR_NUMBER = re.compile(r"(?:[A-Za-z]\.){2,}|\d+(?:[.,]\d+)*%?|\w+(?:['’]\w+)*")
# What may follow the end of a short answer: nothing, a space or punctuation; not a character glued to the
# word ("O(n log n)", "37° 9'", "2A").
WORD_BOUNDARY = re.compile(r"$|[\s,.;:!?)\]\"'”’]")
NUMBER_NEXT = re.compile(r"\s+\d")
ARTICLE_NEXT = re.compile(r"(?i)\s+(?:the|a|an)\s")
# Words that open a clause, never an answer ("Although time and space are…", "Historically, Victoria…").
CLAUSE_OPENERS = frozenset("although while however historically since because though after before during whereas "
                           "thus therefore also then yet still subsequently similarly".split())
# Priors on where an answer starts, added to the model's logit of the span's first token. Tuned on 200 dev
# questions (seed 5): F1 0.266 / exact 16.5% with none; 0.306 / 21.5% with these and the cut at the
# question's words (`candidate_spans`); a stronger pull to the question's words (4, 6) lost (0.28, 0.27).
TYPE_PRIOR = 3.0  # a year or month for "when", a capitalised word for "who", a place after "in/at" for "where"
DISTANCE_PRIOR = 2.0  # times log(1 + words to the nearest of the question's words)
YEAR_OR_MONTH = re.compile(r"(?i)^(?:1\d{3}|20\d{2})s?\b|^(?:january|february|march|april|may|june|july|august|"
                           r"september|october|november|december)\b")
TIME_QUESTION = re.compile(r"(?i)^\s*(?:when|(?:in |by |since )?(?:what|which) (?:year|decade|century|date|month))\b")
PERSON_QUESTION = re.compile(r"(?i)^\s*(?:who|whom|whose)\b")
PLACE_QUESTION = re.compile(r"(?i)^\s*where\b")
# An answer may hold two of the question's words ("Latin monastery at Sant'Eufemia" for "What monastery…"),
# not run on through a third (clause copies). Dev F1 over seeds 5/0/1 (200 each): 0.311/0.304/0.271 with 2,
# 0.306/0.283/0.269 stopping at the first, 0.297/0.287/0.274 never stopping.
QUESTION_WORDS_IN_ANSWER = 2
PLACE_PREPOSITIONS = frozenset({"in", "at", "near", "from", "on", "into", "to"})
# Words an answer never ends on ("The cities and communities along"), besides the stop words.
PREPOSITIONS = frozenset("along across through between within without toward towards via under over among upon "
                         "onto beside besides despite per about against beyond like than".split())
# A number is not said without its magnitude or unit of time ("12" of "12 million", "9th" of "9th century").
MAGNITUDE_NEXT = re.compile(r"(?i)\s+(?:million|billion|trillion|thousand|hundred|centur(?:y|ies)|percent|per cent)\b")
MONTH = re.compile(r"(?i)^(?:january|february|march|april|may|june|july|august|september|october|november|"
                   r"december)$")


@dataclass(frozen=True)
class Quote:
    """A verbatim piece of source ``source`` (1-based), at ``text[start:end]`` of that source's chunk."""

    source: int
    quote: str
    start: int
    end: int


def is_explanatory(question: str) -> bool:
    return bool(EXPLANATORY_QUESTION.match(question)) or (
        definition_subject(question) is not None and not PLACE_QUESTION.match(question))


def definition_subject(question: str) -> str | None:
    """What a definition question names ("Rollo" of "Who was Rollo?", "Victoria" of "Where is Victoria?"): up
    to 3 words, none a function word nor a possessive ("What is Melbourne's population?" asks a fact, not a
    definition); else None."""
    definition = DEFINITION_QUESTION.match(question)
    words = definition.group(1).lower().split() if definition else []
    if 0 < len(words) <= 3 and not any(w in STOPWORDS or re.search(r"['’]s?$", w) for w in words):
        return definition.group(1) if definition else None
    return None


def sentence_quote(source: int, chunk_text: str, sentence: str) -> Quote | None:
    """Where ``sentence`` (as ``split_sentences`` cut it: line breaks read as spaces) is in the chunk."""
    start = chunk_text.replace("\n", " ").find(sentence)
    if start < 0:
        return None
    return Quote(source, chunk_text[start:start + len(sentence)], start, start + len(sentence))


def answer_starts(sentence: str, question: str) -> list[int]:
    """Offsets in ``sentence`` where a short answer may begin: a word that is not one of the question's
    content words (the answer is what the question does not already say), not a function word other than an
    article, not a clause opener, and, for a when / how-many question, a number, a date or a month (or, for
    "when", a day, a time of day or a season)."""
    # The question's own one-letter words too: not "Q" of "Sky Q" for "What is the name of Sky Q's router?"
    asked = content_words(question) | {w for w in re.findall(r"\w+", question.lower()) if len(w) == 1}
    asked_stems = {stem(w) for w in asked}
    numeric = bool(NUMERIC_QUESTION.match(question))
    timing = bool(TIME_QUESTION.match(question))
    counting = numeric and not timing
    starts = []
    tokens = list(re.finditer(r"\S+", sentence))
    for i, match in enumerate(tokens):
        word = re.sub(r"\W", "", re.sub(r"['’]s\b", "", match.group().lower()))  # "Rollo's" is "Rollo"
        head = WORD_OR_NUMBER.search(match.group())  # "NTL" of "NTL:Telewest)"
        if head and (head.group().lower() in asked or is_question_word(head.group(), asked_stems)):
            continue
        if i and inside_a_date(tokens[i - 1].group(), match.group()):  # "1998" of "1 October 1998"
            continue
        if not word or word in asked or is_question_word(word, asked_stems) \
                or (word in STOPWORDS and word not in ARTICLES) or word in CLAUSE_OPENERS \
                or match.group()[0] in "([":
            continue
        following = re.sub(r"\W", "", tokens[i + 1].group().lower()) if i + 1 < len(tokens) else ""
        if word in ARTICLES and following in asked:  # "The Republic" for "Who wrote the Republic?"
            continue
        unquoted = match.group().lstrip("(\"'“")
        if numeric and not NUMERIC_START.match(unquoted) and not (timing and TIME_WORD.match(unquoted)):
            continue
        if counting and YEAR_OR_MONTH.match(unquoted):  # "2014" is no count of teams
            continue
        starts.append(match.start())
    return starts


def holds_the_asked_type(sentence: str, question: str) -> bool:
    """False for a when / how-many question whose sentence holds no number, date or month (nor, for "when", a
    day, a time of day or a season) besides the question's own: "How many people live in Melbourne?" over a
    sentence on the Koori is not answered "Koori".
    Over all 1407 squad2-dev questions, 5 of 114 answerable numeric ones had no number in the best sentence
    (and none the answer there), against 15 of 90 unanswerable ones."""
    return not NUMERIC_QUESTION.match(question) or bool(answer_starts(sentence, question))


def inside_a_date(before: str, word: str) -> bool:
    """``word`` continues a date begun by ``before``: a year after its month, a month after its day."""
    before, word = before.strip(",.()"), word.strip(",.()")
    return bool((MONTH.match(before) and re.fullmatch(r"\d{3,4}", word))
                or (re.fullmatch(r"\d{1,2}(?:st|nd|rd|th)?", before) and MONTH.match(word)))


def is_question_word(word: str, asked_stems: set[str]) -> bool:
    """A content word whose stem is one of the question's (``asked_stems``)."""
    return word.lower() not in STOPWORDS and stem(word) in asked_stems


def start_priors(sentence: str, question: str) -> dict[int, float]:
    """For each word of ``sentence`` (by its offset), how much the words around it favour an answer beginning
    there: the type the question asks for, and closeness to the words of the question (an answer stands next
    to what the question says of it: on 136 dev answers in their evidence sentence, 69% lie within two words
    of a question word)."""
    words = list(WORD_OR_NUMBER.finditer(sentence))
    asked = {stem(w) for w in content_words(question)}
    near = [i for i, m in enumerate(words) if is_question_word(m.group(), asked)]
    # Nearness counts to the question's words the sentence says once: "a broadband router (Sky Q Hub)", not the
    # "Sky Q" said three times. Dev F1 seeds 5/0/1: 0.438/0.453/0.431 → 0.444/0.469/0.447.
    said = collections.Counter(stem(words[i].group()) for i in near)
    near = [i for i in near if said[stem(words[i].group())] == 1] or near
    time_q, person_q, place_q = (bool(q.match(question)) for q in (TIME_QUESTION, PERSON_QUESTION, PLACE_QUESTION))
    priors = {}
    for at, match in enumerate(words):
        word, before = match.group(), words[at - 1].group().lower() if at else ""
        prior = 0.0
        if (time_q and YEAR_OR_MONTH.match(word)) or (person_q and word[:1].isupper() and at > 0) \
                or (place_q and word[:1].isupper() and before in PLACE_PREPOSITIONS):
            prior += TYPE_PRIOR
        if near:
            prior -= DISTANCE_PRIOR * math.log1p(min(abs(at - i) for i in near))
        priors[match.start()] = prior
    return priors


def start_prior(sentence: str, question: str, start: int) -> float:
    """``start_priors`` for the word at or after ``start``."""
    priors = start_priors(sentence, question)
    return next((prior for offset, prior in priors.items() if offset >= start), 0.0)


def candidate_spans(sentence: str, question: str, encode: Callable[[str], np.ndarray],
                    limit: int = MAX_SPAN_TOKENS) -> list[TokenSpan]:
    """For each answer start (``answer_starts``), the sentence from there tokenised on its own, and the
    lengths at which its text ends at the end of a word (never inside one, never after a function word or
    an open bracket, never past a third of the question's own words: not "The USGS has released a
    California Earthquake forecast" for "Which organization released a California Earthquake forecast?"):
    the token counts of
    those word-final prefixes, where they tokenise as the head of the whole (encode only, so any generator's
    tokenizer serves), with the start's prior."""
    spans = []
    asked = {stem(w) for w in content_words(question)}
    words = list(WORD_OR_NUMBER.finditer(sentence))
    priors = start_priors(sentence, question)
    for start in answer_starts(sentence, question):
        suffix = sentence[start:]
        tokens = tuple(int(t) for t in encode(suffix))[:limit]
        ends, question_words = set(), 0
        for i, word in enumerate(w for w in words if w.start() >= start):
            lowered = word.group().lower()
            if i > 0 and is_question_word(lowered, asked):
                question_words += 1
                if question_words > QUESTION_WORDS_IN_ANSWER:
                    break
            if lowered in STOPWORDS or lowered in PREPOSITIONS or lowered.endswith(("'s", "’s")):
                continue  # nor on a possessive: "one third of the world's"
            # Past any closing brackets ("DTIME(f(n))").
            end = word.end() + len(re.match(r"[)\]]*", sentence[word.end():]).group()) - start
            if not balanced(suffix[:end]):  # never "DTIME(f(n", "Vic) is" nor "Mini), a router (Sky Q"
                continue
            if not WORD_BOUNDARY.match(suffix[end:end + 1]):  # never "is O" of "O(n log n)", "37" of "37°"
                continue
            if NUMBER_NEXT.match(suffix[end:]) or MAGNITUDE_NEXT.match(suffix[end:]):  # "at exactly 37°"
                continue
            if ARTICLE_NEXT.match(suffix[end:]):  # a verb or preposition without its object: "…the HD material uses"
                continue
            head = tuple(int(t) for t in encode(suffix[:end]))
            if len(head) > len(tokens):
                break
            if tokens[:len(head)] == head:
                ends.add(len(head))
        if ends:
            prior = next((p for offset, p in priors.items() if offset >= start), 0.0)
            spans.append(TokenSpan(tokens, frozenset(ends), prior))
    return spans


def balanced(text: str) -> bool:
    """Brackets close in order and none is left open."""
    depth = 0
    for ch in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


# Worked examples shown before the question (invented, from no test corpus): the small model copies the
# entity, date or number the question asks for instead of the sentence's opening words. 200 dev questions
# each, F1 on seeds 5/0/1: 0.312/0.325/0.284 without, 0.367/0.380/0.366 with the first two, 0.385/0.389/0.387
# with three, 0.383/0.370/0.374 with a fourth (about 120 concerts). The examples are the same for every
# question, so the prefix cache keeps them (no prefill per question). Qwen2.5-Coder-1.5B answers more tersely
# with them (seed 0, 100 questions: F1 0.637, gold 51% with; 0.650, 61% without): setting answer_examples.
SHORT_ANSWER_EXAMPLES = (
    ("The Hoover Dam was completed in 1936, two years ahead of schedule, at a cost of $49 million.",
     "When was the Hoover Dam completed?", "1936"),
    ("The first transatlantic telegraph cable was laid by the steamship Great Eastern, which had been designed by "
     "Isambard Kingdom Brunel.", "Who designed the Great Eastern?", "Isambard Kingdom Brunel"),
    ("Most of the island's electricity comes from geothermal power stations, while hydropower supplies the rest.",
     "What supplies the rest of the island's electricity?", "hydropower"),
)


def short_answer_messages(question: str, sentence: str, examples: bool = True) -> list[dict[str, str]]:
    # Context first, then the question: on 60 dev questions F1 0.247 vs 0.195 with the question first.
    def ask(context: str, asked: str) -> dict[str, str]:
        return {"role": "user", "content": f"Context: {context}\n\nQuestion: {asked.strip()}\nShort answer:"}

    messages = [{"role": "system", "content": SHORT_ANSWER_PROMPT}]
    for context, asked, answer in SHORT_ANSWER_EXAMPLES if examples else ():
        messages += [ask(context, asked), {"role": "assistant", "content": answer}]
    return [*messages, ask(sentence, question)]


def clean_reply(reply: str) -> str:
    """A reply without ``[n]`` labels, surrounding space, quotes and trailing punctuation."""
    text = " ".join(CITATION.sub("", reply).split())
    return text.strip(" \"'“”‘’").rstrip(".,;:").strip()


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def align(reply: str, sentences: Sequence[tuple[int, str]]) -> tuple[int, str, str] | None:
    """The first (source, sentence) whose text holds the reply, word for word (case and punctuation aside),
    with the reply as the sentence spells it; None when no sentence holds it."""
    wanted = _normal(reply)
    if not wanted:
        return None
    flat = re.escape(" ".join(reply.split()).lower())
    for source, sentence in sentences:  # the reply as it stands in a sentence, whole words only ("p" is not
        found = re.search(rf"(?<!\w){flat}(?!\w)", sentence.lower())  # the p of "complexity")
        if found:
            return source, sentence, sentence[found.start():found.end()]
    for source, sentence in sentences:  # else word for word, case and punctuation aside
        words = list(re.finditer(r"\w+", sentence))
        lowered = [w.group().lower() for w in words]
        target = wanted.split()
        for i in range(len(lowered) - len(target) + 1):
            if lowered[i:i + len(target)] == target:
                start, end = words[i].start(), words[i + len(target) - 1].end()
                if sentence[end:end + 1] == "%":
                    end += 1
                return source, sentence, sentence[start:end]
    return None


def align_part(reply: str, sentences: Sequence[tuple[int, str]], question: str) -> tuple[int, str, str] | None:
    """For a reply that is not a copy (a generator that could not be constrained: "The leader was Rollo."):
    its longest run of consecutive words that a sentence holds and that says something the question does not
    (a content word of its own), as that sentence spells it; None when no such run exists."""
    words = re.findall(r"\w+", reply)
    asked = content_words(question)
    for size in range(len(words), 0, -1):
        for i in range(len(words) - size + 1):
            run = words[i:i + size]
            if not (content_words(" ".join(run)) - asked):
                continue
            found = align(" ".join(run), sentences)
            if found is not None:
                return found
    return None


def first_sentence(text: str) -> str:
    match = re.search(r"(?<=[.!?])\s", text)
    return text[:match.start()] if match else text


def cut_cleanly(text: str) -> str:
    """A reply the token limit cut, ended at its last full sentence, else its last full word, then "…"."""
    text = text.rstrip()
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
    if ends and ends[-1] > len(text) // 2:
        return text[:ends[-1]] + " …"
    head = text.rsplit(None, 1)[0] if " " in text else text
    return head.rstrip(",;:") + " …"
