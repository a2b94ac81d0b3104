"""What a question asks for, read once (``QuestionShape``): every rule of the answer flow that depends on the
kind of question consults this value, never the question's text again.

The reading is English (``rag.answering.english``); the rules over it are in ``evidence`` (where a short answer
may start, whether a sentence holds the type asked for) and ``service`` (which answer path a question takes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from rag.answering import english
from rag.core.text import STOPWORDS, content_words, stem


@dataclass(frozen=True)
class QuestionShape:
    text: str
    numeric: bool  # the answer starts with a number, a date or a month: "When …", "What year …", "How many …"
    timing: bool  # a time is asked for: "When …", "In what year …"
    person: bool  # "Who …", "Whose …"
    place: bool  # "Where …"
    yes_no: bool  # answered "Yes" or "No": "Is alcohol reimbursed?" (not "Is it A or B?")
    # The question negates itself ("Isn't X …?"): a yes/no answer's polarity flips. A message it quotes does not
    # ("Does 'could not create semaphores' mean …?").
    negated: bool
    howto: bool  # answered with a command, option, path or configuration line: "How do I …?", "Which option …?"
    procedure: bool  # a procedure is asked for: "How do I …?", "What is the command …?" (not "Which option …?")
    command: bool  # a program is asked for: "Which command …?", "Which package …?"
    variable: bool  # a variable is asked for: "Which environment variable …?"
    option: bool  # a name written as code is asked for: "Which createuser option …?", "Which setting …?"
    file: bool  # a file or a directory is asked for: "Which file …?", "Which directory …?"
    signal: bool  # a signal is asked for: "Which signal makes named reload its zones?"
    technical: bool  # a technical token is asked for: "Which file …?", "Where …?", a how-to question
    listing: bool  # several things are asked for: "Which directories …?", "What should I do …?"
    explains: bool  # an explanation is asked for: "Why …", "Describe …", "How does …"
    default: bool  # a default is asked for: "What is the default wal_level?", "… by default?"
    subject: str | None  # what a definition question names: "Rollo" of "Who was Rollo?"
    words: frozenset[str]  # the question's content words, with its one-letter words ("Q" of "Sky Q")
    word_stems: frozenset[str]  # the stems of ``words``
    content_stems: frozenset[str]  # the stems of the content words alone

    @classmethod
    def of(cls, question: str) -> "QuestionShape":
        expanded = english.CONTRACTED_IS.sub(lambda m: f"{m.group(1)} is", question)
        if expanded != question:  # "What's the command to …?" is read as "What is the command to …?"
            return replace(cls.of(expanded), text=question)
        existential = english.EXISTENTIAL_QUESTION.match(question)
        if existential:  # "Is there a dpkg flag that dumps …?" is read as "Which dpkg flag that dumps …?"
            opener = list(re.finditer(r"(?i)\b(?:is|are) there ", question[:existential.end()]))[-1]
            which = "Which" if opener.start() == 0 else "which"
            return replace(cls.of(f"{question[:opener.start()]}{which} {question[existential.end():]}"),
                           text=question)
        words = content_words(question) | {w for w in re.findall(r"\w+", question.lower()) if len(w) == 1}
        yes_no = bool(english.YES_NO_QUESTION.match(question))
        plural = english.LIST_QUESTION.match(question)
        return cls(
            text=question, numeric=bool(english.NUMERIC_QUESTION.match(question)),
            timing=bool(english.TIME_QUESTION.match(question)),
            person=bool(english.PERSON_QUESTION.match(question)), place=bool(english.PLACE_QUESTION.match(question)),
            yes_no=yes_no, negated=english.negates(english.QUOTED_MESSAGE.sub("", question)),
            howto=bool(english.HOWTO_QUESTION.match(question)),
            procedure=bool(english.PROCEDURE_QUESTION.match(question)),
            command=bool(english.COMMAND_QUESTION.match(question)),
            variable=bool(english.VARIABLE_QUESTION.match(question)),
            option=bool(english.OPTION_QUESTION.match(question)),
            file=bool(english.FILE_QUESTION.match(question)),
            signal=bool(english.SIGNAL_QUESTION.match(question)),
            technical=bool(english.HOWTO_QUESTION.match(question) or english.PLACE_QUESTION.match(question)
                           or english.TECHNICAL_NOUNS & set(re.findall(r"[^\W\d_]+", question.lower()))),
            listing=(bool(plural) and plural.group("noun").lower() not in english.NOT_PLURALS and not yes_no)
            or bool(english.STEPS_QUESTION.match(question)),
            explains=bool(english.EXPLANATORY_QUESTION.match(question)),
            default=bool(english.ASKS_DEFAULT.search(question)), subject=definition_subject(question),
            words=frozenset(words), word_stems=frozenset(stem(w) for w in words),
            content_stems=frozenset(stem(w) for w in content_words(question)))

    def with_earlier(self, earlier: tuple[str, ...]) -> "QuestionShape":
        """A follow-up's shape whose words include those of the earlier questions it refers back to: its answer
        is no more something they named than something it names ("autovacuum" for "Which lock does that one
        take?" after "Does autovacuum ever run VACUUM FULL?")."""
        if not earlier:
            return self
        words = set().union(*(content_words(q) for q in earlier))
        return replace(self, words=self.words | words, word_stems=self.word_stems | {stem(w) for w in words})

    @property
    def counting(self) -> bool:
        """A number that is no time is asked for ("How many …"): a year is no count."""
        return self.numeric and not self.timing

    @property
    def explanatory(self) -> bool:
        """Answered with the evidence sentences themselves, each cited: an explanation, or a definition ("Who was
        Rollo?"; not "Where is Victoria?", which asks a place)."""
        return self.explains or (self.subject is not None and not self.place)

    @property
    def wants_items(self) -> bool:
        """May be answered by a list the documents give (a how-to question's steps too)."""
        return self.listing or self.howto


def definition_subject(question: str) -> str | None:
    """What a definition question names ("Rollo" of "Who was Rollo?", "Victoria" of "Where is Victoria?"): up
    to 3 words, none a function word nor a possessive ("What is Melbourne's population?" asks a fact, not a
    definition); else None."""
    definition = english.DEFINITION_QUESTION.match(question)
    words = definition.group(1).lower().split() if definition else []
    if words and words[0] in english.VALUE_WORDS:  # "What is the default wal_level?" asks for a value
        return None
    if 0 < len(words) <= 3 and not any(w in STOPWORDS or re.search(r"['’]s?$", w) for w in words):
        return definition.group(1) if definition else None
    return None
