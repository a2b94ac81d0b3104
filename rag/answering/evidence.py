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
from typing import Callable, NamedTuple, Sequence

import numpy as np

from rag.answering.english import (ABOUT_THE_CODE_ABOVE, ANNOUNCES_A_COMMAND, ANNOUNCES_A_LIST, ARTICLE_NEXT,
                                   ARTICLES, BOUND_BEFORE, CLAUSE_END, CLAUSE_INSIDE,
                                   CLAUSE_OPENERS, COORDINATION, DANGLING_WORDS, defines, FILE_NAME, INTRODUCES,
                                   LONE_ADVERBS, MAGNITUDE_NEXT, MAN_PAGE, MODAL_VERBS, MONTH, NAMED_AS_OPTION,
                                   NEGATED_HARM,
                                   negates, NOT_A_PROGRAM, NUMERIC_START, OPPOSITES, OPTION_WORD, ORDINAL_DATE_NEXT,
                                   PATH_START, PLACE_PREPOSITIONS, PREPOSITIONS, QUOTED_MESSAGE, REPLACED,
                                   RUNS_A_COMMAND, SIGNAL,
                                   STATES_DEFAULT, TECHNICAL_TOKEN, TEMPORAL_PREPOSITIONS, TIME_WORD, TIMED_PHRASE,
                                   UNIT_NEXT, VARIABLE_NAME, VARIABLE_TOKEN, YEAR_OR_MONTH)
from rag.answering.question import QuestionShape
from rag.core.text import STOPWORDS, content_words, stem
from rag.generation.logits import SpanSearch, TokenSpan

# The reply offered for a question the context does not answer: measured (``SamplingOptions.decline``), never
# picked; the answerability decision weighs it.
DECLINE_REPLY = "unknown"
SHORT_ANSWER_PROMPT = ("Answer the question with a short phrase copied from the context. If the context does not "
                       f"answer the question, reply: {DECLINE_REPLY}")
# Longest short answer in tokens (each span may stop earlier at a word end); docs/benchmark-notes.md.
MAX_SPAN_TOKENS = 16


@dataclass(frozen=True)
class SpanWeights:
    """How a whole candidate phrase is scored when the model's phrases are searched (``logits.best_span``): its
    log-probability (weight 1) plus these times its features. Fitted by ``tools/answers/fit_spans.py``."""

    start: float  # the start's prior (``start_priors``: the type asked for, nearness to the question's words)
    lead: float  # the phrase begins with the first token the model (and the prior) likes best
    technical: float  # the phrase holds a technical token (a path, an option, a snake_case name)
    technical_asked: float  # ... and the question asks for one ("Which file …?", "Where …?", how-to)
    words: float  # per word of the phrase (the log-probability alone favours the shortest)
    listed: float  # the phrase names two or more items ("Bacula, Amanda, and BackupPC") and several are asked for
    located: float  # "Where …?" and the phrase is a path ("/var/log/journal", not "systemd-journald.service")

    def search(self, width: int) -> SpanSearch:
        return SpanSearch(width, self.start, self.lead, SPAN_BRANCHES if width > 1 else 0)

    def bonus(self, phrase: str, question: QuestionShape) -> float:
        return float(np.dot(phrase_features(phrase, question),
                            (self.technical, self.technical_asked, self.words, self.listed, self.located)))


class PhraseFeatures(NamedTuple):
    """What ``SpanWeights`` weighs in a phrase besides the model's view of it (in the order of its fields)."""

    technical: float
    technical_asked: float
    words: float
    listed: float
    located: float


PATH_PHRASE = re.compile(r"^[\"'“‘(]*~?/\.?\w")  # "/var/log/journal", '"~/.gnupg/gpg.conf"'


def phrase_features(phrase: str, question: QuestionShape) -> PhraseFeatures:
    # Where a setting is asked for, one written in capitals is as technical as one with an underscore: "CERTFILE" (of
    # "CERTFILE /usr/local/ups/etc/upsd.pem") lost to "-DWITH_CLIENT_CERTIFICATE_VALIDATION" of a make command line
    # for "Which upsd.conf directive tells upsd where the certificate file is?" (seventh unseen set).
    words = phrase.split()
    technical = bool(TECHNICAL_TOKEN.search(phrase)) or (question.option and bool(words)
                                                          and bool(OPTION_WORD.search(words[0])))
    return PhraseFeatures(technical=float(technical), technical_asked=float(technical and question.technical),
                          words=float(len(WORD_OR_NUMBER.findall(phrase))),
                          listed=float(question.listing and bool(COORDINATION.search(phrase))),
                          located=float(question.place and bool(PATH_PHRASE.match(phrase))))


# Where the phrases followed from one first token part ways ("/etc/" of two paths), this many other ways are
# followed too, for one answer (``logits.best_span``).
SPAN_BRANCHES = 4
SPAN_WEIGHTS = SpanWeights(start=1.3, lead=1.2, technical=2.0, technical_asked=2.7, words=0.35, listed=1.0,
                           located=1.0)
CITATION = re.compile(r"\s*\[\d{1,2}\]")
# Added to the logit of the answer the evidence's polarity points to: "No" for a sentence that negates.
POLARITY_PRIOR = 2.0
YES_NO_PROMPT = ("Answer the question with Yes or No, as the context says. If the context does not say, reply: "
                 "unknown")
# A term line of a definition list: an option or setting named on a line of its own above its description
# ("-F format", "--format=format", "-c, --compress", "log_min_duration_statement (integer)"), the type in brackets
# left out.
TERM_LINE = re.compile(r"^(-{1,2}[\w-]+(?:[= ][\w<>.-]+)?(?:,\s*-{1,2}[\w-]+(?:[= ][\w<>.-]+)?)*|"
                       r"[a-z][a-z0-9_.]*_[a-z0-9_.]+|\\[a-z][a-z0-9+]*)"
                       r"(?:\s+\((?:\w+\s?){1,3}\)|(?:\s+\[[^\]]*\])+)?$")  # psql's "\timing [ on | off ]" too
# A keyword on a line of its own, a term line only where a description follows it (``keyword_terms``): a privilege
# ("REFERENCES"), a variable ("PGDATA", psql's "AUTOCOMMIT"), a signal ("SIGQUIT"), an SQL command's option
# ("FREEZE [ boolean ]"); not a navigation line ("COPY" above "Prev Up Next") nor a list's item.
KEYWORD_TERM_LINE = re.compile(r"^([A-Z][A-Z0-9_]*[A-Z0-9](?: [A-Z][A-Z0-9_]*[A-Z0-9]){0,2})"
                               r"(?:\s+\((?:\w+\s?){1,3}\)|(?:\s+\[[^\]]*\])+)?$")
SENTENCE_END = re.compile(r"\w[.!?](?:\s|$)")
# A shell line the documentation shows ("# dpkg --configure -a", "$ journalctl -b"); several flattened into one
# sentence are split at their prompts.
PROMPT_LINE = re.compile(r"^[#$]\s+(\S.*)$")
QUOTED = re.compile(r'"([^"]{2,160})"|“([^”]{2,160})”')
# What marks a quoted span as code: a path, an option, key=value, a glob, a pipe, "::".
CODE_CHARS = re.compile(r"[/=~*|;<>]|::|(?:^|\s)--?\w")
COMMAND_WORD = re.compile(r"^[a-z][a-z0-9._+-]*$")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")  # "LANG=C", a variable set for the command after it
BARE_SHELL = re.compile(r"^(?:--?[A-Za-z][\w-]*(?:=\S*)?|[<>|]|>>|2>&1)$")  # an option, a redirection, a pipe
BARE_COMMAND_WORDS = 16
COMMAND_TOKENS = 64  # the longest command offered as an answer (a longer one is not offered: never cut)
# Subtracted from the first-token logit of a command from the n-th ranked sentence, times n.
COMMAND_RANK_PRIOR = 1.0
# Two or more quoted items in a row ("/tmp", "/var/lock", and "/var/run"): the enumeration is the answer.
# Quoted as the page quotes: "…", “…”, ‘…’ or `…' (the Debian FAQ's "`start', `stop', `reload', `restart' or
# `force-reload'").
QUOTED_ITEM = r"""(?:"[^"]{1,80}"|“[^”]{1,80}”|‘[^’]{1,80}’|`[^`']{1,80}')"""
QUOTED_ENUMERATION = re.compile(rf"{QUOTED_ITEM}(?:\s*,\s*(?:and\s+|or\s+)?{QUOTED_ITEM}"
                                rf"|\s+(?:and|or)\s+{QUOTED_ITEM})+")
# Three or more paths in a row, unquoted: "/proc, /sys, /tmp, and /run". Not names: "Universal, Warner Brothers,
# and Sony" answered "Which company owns ABC?" (its "owns" read as a plural) on squad2-dev, and "Connell, Dane
# Reynolds, and Chris Ward" lost "Shaun White".
ENUMERATED_PATH = r"[/~$][\w./~$*-]+"
# Two paths joined by "and" are a list too: "/lib/systemd/system/apt-daily.timer and …/apt-daily.service".
PATH_ENUMERATION = re.compile(rf"(?<![\w/]){ENUMERATED_PATH}(?:,\s+{ENUMERATED_PATH})*,?\s+(?:and|or)\s+"
                              rf"{ENUMERATED_PATH}(?![\w/])")
# Two or more identifiers written with dots or underscores: "… given by the stash.showStat, and stash.showPatch config
# variables." (sixth unseen set: answered "stash.showPatch" alone), "max_wal_size and min_wal_size".
ENUMERATED_IDENTIFIER = r"[A-Za-z_]\w*(?:[._]\w+)+"
IDENTIFIER_ENUMERATION = re.compile(rf"(?<![\w./-]){ENUMERATED_IDENTIFIER}(?:,\s+{ENUMERATED_IDENTIFIER})*,?\s+"
                                    rf"(?:and|or)\s+{ENUMERATED_IDENTIFIER}(?![\w/]|\.\w)")
# Items numbered in the sentence: "… up to three characteristics: 1) The client's IP address; 2) the TSIG key …;
# and 3) an address prefix …" (BIND's ACLs, sixth unseen set: answered "up to three characteristics"), also "(a)
# …, (b) …". From the first marker to the sentence's end, as the page writes it.
NUMBERED_ENUMERATION = re.compile(r"(?<![\w(])(?:\(1\)|1\)|\(a\)|a\))\s+\S.*?[;,]\s+(?:and\s+|or\s+)?"
                                  r"(?:\(2\)|2\)|\(b\)|b\))\s+\S.*?(?=\.?\s*$)", re.DOTALL)
LIST_ITEMS = 8  # the most items a list answer names
ITEM_WORDS = 30  # a line longer than this is prose, not an item
OPENING_QUOTES = {'"': '"', "“": "”", "‘": "’"}  # an opening quote and the one that closes it
# A word, with "U.S.", "1,548", "3.5", "50%" and "don't" each read as one word: a short answer never ends
# inside one ("U" of "U.S." was once an answer).
WORD_OR_NUMBER = re.compile(r"(?:[A-Za-z]\.){2,}|\d+(?:[.,]\d+)*%?|\w+(?:['’]\w+)*")
# What may follow the end of a short answer: nothing, a space or punctuation; not a character glued to the
# word ("O(n log n)", "37° 9'", "2A").
WORD_BOUNDARY = re.compile(r"$|[\s,.;:!?)\]\"'”’]")
# Characters that join the parts of one technical token: a path (/etc/rsyslog.conf), an option (net.ifnames=0,
# --with-foo), a dotted name, a version, a URL, an e-mail address, a hyphenated package name. An answer never
# ends or starts at one of them when a letter or digit follows: not "/etc/rsyslog" of "/etc/rsyslog.conf".
TOKEN_GLUE = "/.=:-_@~+"
NUMBER_NEXT = re.compile(r"\s+\d")
ARITHMETIC = frozenset("- + * × ^ = / −".split())  # an operator written as a word of its own
GLUED = re.compile(r"[" + re.escape(TOKEN_GLUE) + r"]*[^\W_]")
TRAILING_GLUE = re.compile(r"(?:(?:/|\.?\*)+(?=$|[\s,;:!?)\]\"'”’]|\.(?!\w)))?")
# Priors on where an answer starts, added to the model's logit of the span's first token (tuned on dev F1:
# docs/benchmark-notes.md).
# A year or month for "when", a capitalised word for "who", a place after "in/at" for "where", a program's manual
# page ("blkid(8)") for "which command".
TYPE_PRIOR = 3.0
DISTANCE_PRIOR = 2.0  # times log(1 + words to the nearest of the question's words)
# An answer may hold two of the question's words ("Latin monastery at Sant'Eufemia" for "What monastery…"),
# not run on through a third (clause copies).
QUESTION_WORDS_IN_ANSWER = 2


@dataclass(frozen=True)
class Quote:
    """A verbatim piece of source ``source`` (1-based), at ``text[start:end]`` of that source's chunk."""

    source: int
    quote: str
    start: int
    end: int


def quoted_commands(sentence: str) -> list[tuple[int, int]]:
    """The (opening, closing) quote offsets of the quoted spans of ``sentence`` that read as code
    (``reads_as_code``) and are more than one word."""
    return [(match.start(), match.end() - 1) for match in QUOTED.finditer(sentence)
            if len((match.group(1) or match.group(2)).split()) > 1 and reads_as_code(match, sentence)]


def reads_as_code(quoted: re.Match[str], sentence: str) -> bool:
    """The quoted span (a ``QUOTED`` match in ``sentence``) reads as code: a path, an option, key=value …
    ("apt-get -s dist-upgrade", "/etc/default/grub", "start_smartd=yes"), one word that is a name with "-", "_"
    or "." in it, or a run of lowercase words where the sentence says it runs a command ("aptitude unmarkauto
    vim")."""
    text = (quoted.group(1) or quoted.group(2)).strip().rstrip("…").rstrip(" .").strip()
    words = text.split()
    return bool(words) and bool(CODE_CHARS.search(text)
                                or (len(words) == 1 and COMMAND_WORD.match(text) and any(c in text for c in "-_."))
                                or (2 <= len(words) <= 6 and all(COMMAND_WORD.match(w) for w in words)
                                    and RUNS_A_COMMAND.search(sentence)))


def commands_in(sentence: str) -> list[str]:
    """The commands, options, paths and configuration lines ``sentence`` shows as code: a shell line ("#
    dpkg --configure -a"), or a quoted span that reads as code ("apt-get -s dist-upgrade", "/etc/default/grub",
    "start_smartd=yes"; a run of lowercase words only where the sentence says it runs a command), not one it says
    to run no more ("instead of "sudo aptitude …"")."""
    line = PROMPT_LINE.match(sentence)
    if line:
        return [part.strip() for part in re.split(r"\s+[#$]\s+", line.group(1)) if part.strip()]
    return [(match.group(1) or match.group(2)).strip().rstrip("…").rstrip(" .").strip()
            for match in QUOTED.finditer(sentence)
            if reads_as_code(match, sentence) and not REPLACED.search(sentence[:match.start()])]


def programs_in(sentence: str) -> list[str]:
    """The programs ``sentence`` names by their manual pages: "lsmod(8)" of "The lsmod(8) program formats …"."""
    return MAN_PAGE.findall(sentence)


def variables_in(sentence: str) -> list[str]:
    """The variables ``sentence`` names: "$TMPDIR", "GRUB_BACKGROUND", "PGDATA" of "the environment variable
    PGDATA"."""
    return list(dict.fromkeys(VARIABLE_NAME.findall(sentence)))


def files_in(sentence: str) -> list[str]:
    """The paths and file names ``sentence`` names: "/var/log/journal", "postgresql.auto.conf"."""
    return FILE_NAME.findall(sentence)


def bare_command(line: str) -> bool:
    """``line`` reads as a shell command shown without a prompt ("pg_dump dbname > dumpfile", "psql -X -f dumpfile
    postgres"): a program name, then arguments with an option or a redirection, and no closing full stop; or a
    program run with variables set before it ("LANG=it_IT.UTF-8 man programname"). Only a line under a sentence
    that announces code is read so (``introduces_code``)."""
    words = line.split()
    settings = next((n for n, word in enumerate(words) if not ENV_ASSIGNMENT.match(word)), len(words))
    program = words[settings:]
    return 2 <= len(words) <= BARE_COMMAND_WORDS and bool(program) and bool(COMMAND_WORD.match(program[0])) \
        and not line.rstrip().endswith((".", ":", "?", "!")) \
        and (settings > 0 or any(BARE_SHELL.match(w) for w in program[1:]))


def announced_command(line: str, lead: str) -> bool:
    """``line`` is the command the sentence ``lead`` above it announces: a bare command (``bare_command``), or, where
    the sentence says it is a command to run (``ANNOUNCES_A_COMMAND``), any line of a program and its arguments
    ("systemctl disable service.service" under "…, you can run the command")."""
    words = line.split()
    return bare_command(line) or (bool(ANNOUNCES_A_COMMAND.search(lead)) and 2 <= len(words) <= BARE_COMMAND_WORDS
                                  and bool(COMMAND_WORD.match(words[0]))
                                  and not line.rstrip().endswith((".", ":", "?", "!")))


def about_the_code_above(sentence: str, line: str) -> bool:
    """``sentence`` speaks of the code ``line`` right above it: it says "This filter will match …", or it names the
    line's technical token ("The WINCH or graceful-stop signal causes …" under "apache2ctl -k graceful-stop")."""
    if line.rstrip().endswith((".", "?", "!")) or len(line.split()) > BARE_COMMAND_WORDS:
        return False
    if ABOUT_THE_CODE_ABOVE.match(sentence):
        return True
    tokens = [t for t in line.split()[1:] if TECHNICAL_TOKEN.search(t) or re.search(r"\w-\w", t)]
    return bare_command(line) and any(re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", sentence) for t in tokens)


def term_of(line: str, keywords: bool = False) -> str | None:
    """The option or setting a definition-list term line names, or None for any other line; with ``keywords``, a
    keyword's line too (``KEYWORD_TERM_LINE``: the caller knows a description follows it)."""
    match = TERM_LINE.match(line.strip()) or (KEYWORD_TERM_LINE.match(line.strip()) if keywords else None)
    return match.group(1) if match else None


def keyword_terms(chunk: str) -> frozenset[int]:
    """Where in ``chunk`` a definition list's keyword term lines start (``KEYWORD_TERM_LINE``): runs of keyword lines
    whose next line holds a sentence of prose, its description ("REFERENCES" above "Allows creation of a foreign key
    constraint …"; "PGHOST", "PGPORT" above "Default connection parameters.")."""
    found: set[int] = set()
    run: list[int] = []
    offset = 0
    for line in chunk.split("\n"):
        text = line.strip()
        if text and KEYWORD_TERM_LINE.match(text):
            run.append(offset + line.index(text))
        elif text:
            if run and SENTENCE_END.search(text):  # a description's first sentence (the chunk may cut its line)
                found.update(run)
            run = []
        offset += len(line) + 1
    return frozenset(found)


def introduces_code(sentence: str) -> bool:
    """The sentence announces code that follows it ("…execute the following command.")."""
    return bool(INTRODUCES.search(sentence))


def announces_a_list(sentence: str) -> bool:
    """The sentence announces, in words, the list under it ("LVM requires the following.")."""
    return bool(ANNOUNCES_A_LIST.search(sentence))


def command_spans(commands: Sequence[tuple[int, str]], encode: Callable[[str], np.ndarray],
                  margins: Sequence[float] = ()) -> list[TokenSpan]:
    """One span per (rank, command), taken whole (a command is never cut: not "sudo" of "sudo -H aptitude"),
    the lower-ranked sentences' commands less likely, each by its ``margins`` too (0 where none is given)."""
    spans = []
    for k, (rank, command) in enumerate(commands):
        tokens = tuple(int(t) for t in encode(command))
        if 0 < len(tokens) <= COMMAND_TOKENS:
            margin = margins[k] if k < len(margins) else 0.0
            spans.append(TokenSpan(tokens, frozenset({len(tokens)}), -COMMAND_RANK_PRIOR * rank - margin))
    return spans


def enumeration(sentence: str, identifiers: bool = True) -> str | None:
    """The items a sentence lists, as it spells them: quoted ('"/tmp", "/var/lock", and "/var/run"'), two or
    more paths ("/proc, /sys, /tmp, and /run"), identifiers ("stash.showStat, and stash.showPatch") or numbered
    ("1) …; 2) …; and 3) …"); else None. Identifiers only where ``identifiers`` (a list asked for, not a how-to:
    "How can I find out when Exim will next retry …?" is no "exim_dumpdb or exim_fixdb")."""
    found = QUOTED_ENUMERATION.search(sentence) or PATH_ENUMERATION.search(sentence) \
        or (IDENTIFIER_ENUMERATION.search(sentence) if identifiers else None) or NUMBERED_ENUMERATION.search(sentence)
    return found.group() if found else None


def is_item(sentence: str) -> bool:
    """A line that reads as one item of a list: short, not a question, not a shell line."""
    return 0 < len(sentence.split()) <= ITEM_WORDS and not sentence.rstrip().endswith("?") \
        and not PROMPT_LINE.match(sentence)


def yes_no_spans(sentence: str, question: QuestionShape, encode: Callable[[str], np.ndarray]) -> list[TokenSpan]:
    """The two answers a yes/no question may get, the one the sentence's polarity points to favoured (a question
    that negates itself, "Isn't X …?", flips it; a harm the sentence negates, "does not block", is no "No"
    unless the question asks about that harm: ``NEGATED_HARM``)."""
    harm = NEGATED_HARM.search(sentence)
    harm_asked = bool(harm) and bool(re.search(rf"(?i)\b{harm.group(1).rstrip('s')}", question.text))
    says_no = negates(sentence) and not (harm and not harm_asked)
    negative = (says_no != question.negated) != opposes(question.text, sentence)
    spans = []
    for answer in ("Yes", "No"):
        tokens = tuple(int(t) for t in encode(answer))
        prior = POLARITY_PRIOR if (answer == "No") == negative else 0.0
        spans.append(TokenSpan(tokens, frozenset({len(tokens)}), prior))
    return spans


def opposes(question: str, sentence: str) -> bool:
    """The sentence says the opposite of a word of the question (``OPPOSITES``): "safer" asked, "riskier" said."""
    return sum(1 for a, b in OPPOSITES for asked, said in ((a, b), (b, a))
               if asked.search(question) and said.search(sentence) and not asked.search(sentence)) % 2 == 1


def yes_no_messages(question: str, sentence: str, earlier: Sequence[str] = ()) -> list[dict[str, str]]:
    return [{"role": "system", "content": YES_NO_PROMPT},
            {"role": "user", "content": f"Context: {sentence}\n\n{earlier_questions(earlier)}"
                                        f"Question: {question.strip()}\nAnswer (Yes or No):"}]


def sentence_quote(source: int, chunk_text: str, sentence: str) -> Quote | None:
    """Where ``sentence`` (as ``split_sentences`` cut it: line breaks read as spaces) is in the chunk."""
    start = chunk_text.replace("\n", " ").find(sentence)
    if start < 0:
        return None
    return Quote(source, chunk_text[start:start + len(sentence)], start, start + len(sentence))


# "systemd-timesyncd", "apt-get"; in capitals where a later part holds a digit: "HMAC-SHA256", "SHA-1" (not
# "Anglo-Saxon"). "Which HMAC algorithm does the generated key use?" was answered "256 bits" (sixth unseen set).
COMPOUND_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+"
                           r"|[A-Za-z][A-Za-z0-9]*(?=(?:-[A-Za-z0-9]+)*?-[A-Za-z]*\d)(?:-[A-Za-z0-9]+)+")


def answer_starts(sentence: str, question: QuestionShape) -> list[int]:
    """Offsets in ``sentence`` where a short answer may begin: a word that is not one of the question's
    content words (the answer is what the question does not already say), not a function word other than an
    article, not a clause opener, and, for a when / how-many question, a number, a date or a month (or, for
    "when", a day, a time of day or a season)."""
    # The question's own one-letter words too: not "Q" of "Sky Q" for "What is the name of Sky Q's router?"
    asked, asked_stems = question.words, question.word_stems
    numeric, timing, counting = question.numeric, question.timing, question.counting
    spelt = question.text.lower()
    alone = set(re.findall(r"(?<![\w-])\w+(?![\w-])", spelt))  # the question's words outside hyphenated ones
    starts = []
    tokens = list(re.finditer(r"\S+", sentence))
    commands = quoted_commands(sentence)
    for i, match in enumerate(tokens):
        # A quoted command is answered whole, from its opening quote, whatever words of the question it holds: not
        # "update" of "must run "apt-file update" in advance".
        if any(opening < match.start() < closing for opening, closing in commands):
            continue
        if any(opening == match.start() for opening, _ in commands):
            starts.append(match.start() + 1)
            continue
        word = re.sub(r"\W", "", re.sub(r"['’]s\b", "", match.group().lower()))  # "Rollo's" is "Rollo"
        head = WORD_OR_NUMBER.search(match.group())  # "NTL" of "NTL:Telewest)"
        # A technical token the question does not spell is new however it begins: "/var/lib/dpkg/status-old" for
        # "Where is a backup copy of /var/lib/dpkg/status?", "~/.gnupg/gpg.conf" for "Where do I set GnuPG's
        # default keyserver?" (its parts run together, "gnupggpgconf", share the stem of "GnuPG" too).
        token = match.group().strip("\"'“”‘’()[],;:")
        # So is a name joining a word the question says on its own to others by hyphens: "systemd-timesyncd" for
        # "Under systemd, what should I use for network time synchronisation?" (not "apt-cache" where the question
        # says "apt-get").
        parts = token.split("-")
        new_token = bool(TECHNICAL_TOKEN.search(token) or (
            COMPOUND_NAME.fullmatch(token) and parts[0].lower() in alone
            and any(part.lower() not in STOPWORDS and not is_question_word(part, asked_stems) for part in parts[1:]))) \
            and token.lower().rstrip(".") not in spelt
        if head and (head.group().lower() in asked or is_question_word(head.group(), asked_stems)) and not new_token:
            continue
        if i and inside_a_date(tokens[i - 1].group(), match.group()):  # "1998" of "1 October 1998"
            continue
        if i and tokens[i - 1].group() in ARITHMETIC and NUMERIC_START.match(match.group()):
            continue  # inside a sum: not "1" of "(2^32 - 1) bytes" for the maximum file size on FAT
        if not of_the_asked_kind(match.group(), question):
            continue
        if i and tokens[i - 1].group().lower() in MODAL_VERBS and match.group().isalpha() \
                and match.group().islower():  # "default" of "the server will default to a fully qualified …"
            continue
        # "after completing the probation", "on the end date of the contract" answer "when" (not "on 1 May":
        # the date starts there)
        # (and not "Before Rollo's arrival" for "When did Rollo arrive?": what follows must say something new)
        after = tokens[i + 1].group() if i + 1 < len(tokens) else ""
        temporal = timing and (word in TEMPORAL_PREPOSITIONS or bool(TIMED_PHRASE.match(sentence[match.start():]))) \
            and not NUMERIC_START.match(after.lstrip("(\"'“")) and not is_question_word(re.sub(r"['’]s$|\W", "", after),
                                                                                 asked_stems)
        if not word or (not new_token and (word in asked or is_question_word(word, asked_stems))) \
                or (not temporal and ((word in STOPWORDS and word not in ARTICLES and not is_acronym(match.group()))
                                      or word in CLAUSE_OPENERS or word in LONE_ADVERBS)) \
                or (match.group()[0] in "([" and not (numeric and re.match(r"[(\[]\d", match.group()))):
            continue  # a bracket opens an aside, or for a number asked for, a sum: "(2^32 - 1) bytes"
        following = re.sub(r"\W", "", tokens[i + 1].group().lower()) if i + 1 < len(tokens) else ""
        if word in ARTICLES and following in asked:  # "The Republic" for "Who wrote the Republic?"
            continue
        unquoted = match.group().lstrip("(\"'“")
        if numeric and not NUMERIC_START.match(unquoted) and not (timing and (TIME_WORD.match(unquoted) or temporal)):
            continue
        if counting and YEAR_OR_MONTH.match(unquoted):  # "2014" is no count of teams
            continue
        # A quoted name starts inside its quotes: '/etc/apt/preferences', not '"/etc/apt/preferences" file'
        starts.append(match.start() + (1 if match.group()[0] in OPENING_QUOTES and len(match.group()) > 1 else 0))
    return starts


def of_the_asked_kind(phrase: str, question: QuestionShape, whole: bool = False) -> bool:
    """False for a path, an option or a URL where a program or a variable is asked for: "Which command shows the
    UUID of a block device?" is not answered "/dev/sda1" (of the sentence before "You can probe UUID … with
    blkid(8)."); a ``whole`` candidate for a variable must be one ("$TMPDIR", not "postgres -D /usr/local/pgsql")."""
    if question.variable and whole:
        return bool(VARIABLE_TOKEN.fullmatch(phrase.strip("\"'“”‘’")))
    if question.signal:  # "SIGUSR1", not "QEMU" of the sentence beside it
        return bool(SIGNAL.match(phrase.lstrip("\"'“‘(")))
    # Nor a path where a setting is asked for: "Which main.cf parameter sets the relay host?" is not answered
    # "/etc/postfix/main.cf" (SmolLM2 chose it over "relayhost" with AVX2 kernels, tools/avx2_view).
    if question.option and not question.file and PATH_START.match(phrase):
        return False
    return not ((question.command or question.variable) and NOT_A_PROGRAM.match(phrase))


def is_acronym(token: str) -> bool:
    """An all-capitals word of two letters or more ("IT" in "the IT Security team" is not the pronoun "it")."""
    letters = re.sub(r"\W", "", token)
    return len(letters) >= 2 and letters.isalpha() and letters.isupper()


def holds_the_asked_type(sentence: str, question: QuestionShape) -> bool:
    """False for a when / how-many question whose sentence holds no number, date or month (nor, for "when", a
    day, a time of day or a season) besides the question's own: "How many people live in Melbourne?" over a
    sentence on the Koori is not answered "Koori" (such sentences are far likelier under unanswerable questions).
    Likewise for a signal asked for, a sentence naming none ("Which signal …?" over a sentence on QEMU's pipes)."""
    return not (question.numeric or question.signal) or bool(answer_starts(sentence, question))


def with_bound(phrase: str, sentence: str) -> str:
    """A number's answer with the bound or approximation the sentence puts right before it ("less than 2%" for
    "2%" of "…is less than 2% of that of main packages"); any other answer as it is. On the dev dumps it changed 3
    dev set, 4 policies and 24 squad2-dev answers, each toward what the sentence says, none losing its gold."""
    if not NUMERIC_START.match(phrase):
        return phrase
    at = sentence.find(phrase)
    bound = BOUND_BEFORE.search(sentence[:at]) if at > 0 else None
    return sentence[bound.start():at] + phrase if bound else phrase


def holds_code_words(sentence: str, question: str) -> bool:
    """``sentence`` has a word written as code (``OPTION_WORD``) or named as an option or a setting
    (``NAMED_AS_OPTION``: "the relayhost parameter") that ``question`` does not."""
    trim = "\"'“”‘’()[],.;:?!"
    asked = {word.strip(trim).lower() for word in question.split()}
    if any(OPTION_WORD.search(word) and word.strip(trim).lower() not in asked for word in sentence.split()):
        return True
    named = (word.lower() for match in NAMED_AS_OPTION.finditer(sentence) for word in match.groups() if word)
    return any(word not in asked and word not in STOPWORDS and re.search(r"[a-z]", word) for word in named)


def restates_the_quote(question: str, sentence: str) -> bool:
    """``sentence`` holds a message the question quotes (``QUOTED_MESSAGE``; spacing and case aside): it restates
    what is asked about ("FATAL: could not create semaphores: No space left on device …" for "Does 'could not
    create semaphores: No space left on device' mean my disk is full?") rather than answering it."""
    squeezed = " ".join(sentence.split()).lower()
    return any(" ".join(quote.split()).lower() in squeezed for quote in QUOTED_MESSAGE.findall(question))


def defines_the_subject(question: QuestionShape, sentence: str | None) -> bool:
    """``sentence`` says what a definition question's subject is ("…the famed Viking ruler Rollo" for "Who was
    Rollo?"): it answers the question however far its words are from the question's."""
    return bool(question.subject and sentence and defines(question.subject, sentence))


def inside_a_date(before: str, word: str) -> bool:
    """``word`` continues a date begun by ``before``: a year after its month, a month after its day."""
    before, word = before.strip(",.()"), word.strip(",.()")
    return bool((MONTH.match(before) and re.fullmatch(r"\d{3,4}", word))
                or (re.fullmatch(r"\d{1,2}(?:st|nd|rd|th)?", before) and MONTH.match(word)))


def is_question_word(word: str, asked_stems: frozenset[str]) -> bool:
    """A content word whose stem is one of the question's (``asked_stems``)."""
    return word.lower() not in STOPWORDS and stem(word) in asked_stems


def starts_a_path(sentence: str, at: int) -> bool:
    """The word at offset ``at`` is the first of a path ("/var/log/journal", '"~/.gnupg/gpg.conf"'): what a where
    question over technical documentation asks for, as a name after "in" does in prose."""
    token = sentence[:at].rsplit(None, 1)[-1] if sentence[:at].strip() else ""
    return sentence[:at].endswith(token) and bool(re.fullmatch(r"[\"'“‘(]*~?/\.?", token))


def start_priors(sentence: str, question: QuestionShape) -> dict[int, float]:
    """For each word of ``sentence`` (by its offset), how much the words around it favour an answer beginning
    there: the type the question asks for, and closeness to the words of the question (an answer stands next
    to what the question says of it: most dev answers lie within two words of a question word)."""
    words = list(WORD_OR_NUMBER.finditer(sentence))
    near = [i for i, m in enumerate(words) if is_question_word(m.group(), question.content_stems)]
    # Nearness counts to the question's words the sentence says once: "a broadband router (Sky Q Hub)", not the
    # "Sky Q" said three times.
    said = collections.Counter(stem(words[i].group()) for i in near)
    near = [i for i in near if said[stem(words[i].group())] == 1] or near
    # Where a setting is asked for (not a file: "Which file holds the settings …?"), a word the sentence names as one
    # or writes as code: "relayhost" of "… in /etc/postfix/main.cf with the relayhost parameter" for "Which main.cf
    # parameter sets the relay host?" (each of several such words alike: "MaxConnectionsPerChild" as much as a
    # "MaxSpareServers directive").
    setting = question.option and not question.file
    setting_words = {found.start(group) for found in NAMED_AS_OPTION.finditer(sentence) for group in (1, 2)
             if setting and found.group(group) and found.group(group).lower() not in STOPWORDS}
    for token in re.finditer(r"\S+", sentence) if setting else ():
        first = WORD_OR_NUMBER.search(token.group())
        if first and OPTION_WORD.search(token.group()):
            setting_words.add(token.start() + first.start())
    priors = {}
    for at, match in enumerate(words):
        word, before = match.group(), words[at - 1].group().lower() if at else ""
        prior = 0.0
        if (question.timing and YEAR_OR_MONTH.match(word)) or (question.person and word[:1].isupper() and at > 0) \
                or match.start() in setting_words or (word.lower() in ARTICLES and at + 1 < len(words)
                                                      and words[at + 1].start() in setting_words) \
                or (question.place and word[:1].isupper() and before in PLACE_PREPOSITIONS) \
                or (question.place and starts_a_path(sentence, match.start())) \
                or (question.command and MAN_PAGE.match(sentence, match.start())) \
                or (question.default and STATES_DEFAULT.search(sentence[:match.start()])):
            prior += TYPE_PRIOR
        if near:
            prior -= DISTANCE_PRIOR * math.log1p(min(abs(at - i) for i in near))
        priors[match.start()] = prior
    return priors


def candidate_spans(sentence: str, question: QuestionShape, encode: Callable[[str], np.ndarray],
                    limit: int = MAX_SPAN_TOKENS, weights: SpanWeights = SPAN_WEIGHTS,
                    repeated: str = "") -> list[TokenSpan]:
    """For each answer start (``answer_starts``), the sentence from there tokenised on its own, and the
    lengths at which its text ends at the end of a word (never inside one, never after a function word or
    an open bracket, never past a third of the question's own words: not "The USGS has released a
    California Earthquake forecast" for "Which organization released a California Earthquake forecast?"):
    the token counts of
    those word-final prefixes, where they tokenise as the head of the whole (encode only, so any generator's
    tokenizer serves), with the start's prior and each end's bonus (``SpanWeights``). Not from where the sentence
    says the ``repeated`` phrase (a follow-up's previous answer) again."""
    spans = []
    asked, numeric = question.content_stems, question.numeric
    words = list(WORD_OR_NUMBER.finditer(sentence))
    priors = start_priors(sentence, question)
    again = re.compile(rf"{re.escape(repeated)}(?![\w-])", re.IGNORECASE) if repeated else None
    for start in answer_starts(sentence, question):
        suffix = sentence[start:]
        if again is not None and again.match(suffix):
            continue
        tokens = tuple(int(t) for t in encode(suffix))[:limit]
        ends, question_words, bonus, apart = set(), 0, [], []
        # Inside quotes, the answer ends by the closing quote at the latest.
        closing = suffix.find(OPENING_QUOTES[sentence[start - 1]]) if start and sentence[start - 1] in OPENING_QUOTES \
            else -1
        for i, word in enumerate(w for w in words if w.start() >= start):
            if 0 <= closing < word.end() - start:
                break
            lowered = word.group().lower()
            # The last part of a technical token ("so" of "pam_wheel.so") is no word of its own (nor are the parts
            # of "/var/lib/dpkg/status-old" the question's words when it asks about /var/lib/dpkg/status).
            tail_of_token = glued(sentence[:word.start()][::-1])
            if i > 0 and not tail_of_token and is_question_word(lowered, asked):
                question_words += 1
                if question_words > QUESTION_WORDS_IN_ANSWER:
                    break
            if glued(sentence[word.end():]):
                continue  # inside a technical token: not "/etc/rsyslog" of "/etc/rsyslog.conf"
            if not tail_of_token and (lowered in STOPWORDS or lowered in PREPOSITIONS or lowered in DANGLING_WORDS
                                      or lowered.endswith(("'s", "’s"))):
                continue  # nor on a possessive: "one third of the world's"
            # Past any closing brackets ("DTIME(f(n))") and a token's closing "/" or "*" ("http://localhost:631/",
            # "/var/log/fsck/", "dpkg.status.*"), which no word ends with. A quantity asked for ends inside the
            # brackets it is given in ("7 days" of "(default 7 days)"); a name does not ("Vic" of "Victoria
            # (abbreviated as Vic) is a state …" answers no "Where is Victoria?").
            run = re.match(r"[)\]]*", sentence[word.end():]).group()
            end = word.end() - start + (closing_brackets(suffix[:word.end() - start], run) if numeric else len(run))
            token_end = TRAILING_GLUE.match(suffix[end:]).group()
            end += len(token_end)
            if not balanced(suffix[:end]):  # never "DTIME(f(n", "Vic) is" nor "Mini), a router (Sky Q"
                continue
            if not WORD_BOUNDARY.match(suffix[end:end + 1]) or glued(suffix[end:]):
                continue  # never "is O" of "O(n log n)", "37" of "37°", "/etc/rsyslog" of "/etc/rsyslog.conf"
            if NUMBER_NEXT.match(suffix[end:]) or MAGNITUDE_NEXT.match(suffix[end:]) \
                    or (suffix[end - 1:end].isdigit() and (ORDINAL_DATE_NEXT.match(suffix[end:])
                                                           or UNIT_NEXT.match(suffix[end:]))):  # "at exactly 37°"
                continue
            if ARTICLE_NEXT.match(suffix[end:]):  # a verb or preposition without its object: "…the HD material uses"
                continue
            if cuts_a_clause(suffix[:end], suffix[end:]):  # not "each file that a user" of "… a user opens"
                continue
            head = tuple(int(t) for t in encode(suffix[:end]))
            if len(head) > len(tokens):
                break
            if tokens[:len(head)] == head:
                ends.add(len(head))
                bonus.append((len(head), weights.bonus(suffix[:end], question)))
            elif token_end:  # '/"' may be one token of the sentence: "http://localhost:631/" is then a span of its own
                apart.append((head, weights.bonus(suffix[:end], question)))
        prior = next((p for offset, p in priors.items() if offset >= start), 0.0)
        if ends:
            spans.append(TokenSpan(tokens, frozenset(ends), prior, tuple(bonus)))
        spans.extend(TokenSpan(head, frozenset({len(head)}), prior, ((len(head), value),)) for head, value in apart)
    return spans


def closing_brackets(phrase: str, run: str) -> int:
    """How many of the closing brackets ``run`` that follow ``phrase`` belong to it: those that close what it
    opened, all of them where they do not balance it (``balanced`` then refuses the end)."""
    for count in range(len(run) + 1):
        if balanced(phrase + run[:count]):
            return count
    return len(run)


def glued(text: str) -> bool:
    """``text`` (what follows an answer, or what precedes it, reversed) continues the token the answer is cut
    from: a letter or digit at once, or joining characters (``TOKEN_GLUE``) followed by one ("://" of a URL)."""
    return bool(GLUED.match(text))


def cuts_a_clause(phrase: str, rest: str) -> bool:
    """``phrase`` opens a clause it does not finish, ``rest`` being what follows it in the sentence: "each file
    that a user" of "each file that a user opens"."""
    return bool(CLAUSE_INSIDE.search(phrase)) and not CLAUSE_END.match(rest)


def dangles(phrase: str) -> bool:
    """``phrase`` ends on a word that leaves its clause unfinished (``DANGLING_WORDS``); the "so" of
    "pam_wheel.so" is part of a name, not a word, and the "no" of "smtpd_helo_required = no" a setting's value."""
    tokens = phrase.split()
    if len(tokens) >= 2 and (tokens[-2] == "=" or "=" in tokens[-1]):
        return False
    return bool(tokens) and tokens[-1].strip(".,;:!?\"'“”‘’()[]").lower() in DANGLING_WORDS


def balanced(text: str) -> bool:
    """Brackets close in order and none is left open; quotes come in pairs."""
    if text.count('"') % 2 or text.count("“") != text.count("”"):
        return False
    depth = 0
    for ch in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


# Worked examples shown before the question (invented, from no test corpus): the small model copies the
# entity, date or number the question asks for instead of the sentence's opening words (three measured best:
# docs/benchmark-notes.md). The same for every question, so the prefix cache keeps them (no prefill per question).
SHORT_ANSWER_EXAMPLES = (
    ("The Hoover Dam was completed in 1936, two years ahead of schedule, at a cost of $49 million.",
     "When was the Hoover Dam completed?", "1936"),
    ("The first transatlantic telegraph cable was laid by the steamship Great Eastern, which had been designed by "
     "Isambard Kingdom Brunel.", "Who designed the Great Eastern?", "Isambard Kingdom Brunel"),
    ("Most of the island's electricity comes from geothermal power stations, while hydropower supplies the rest.",
     "What supplies the rest of the island's electricity?", "hydropower"),
)


def short_answer_messages(question: str, sentence: str, examples: bool = True,
                          earlier: Sequence[str] = ()) -> list[dict[str, str]]:
    # Context first, then the question: dev F1 0.247 vs 0.195 with the question first.
    def ask(context: str, asked: str, before: Sequence[str] = ()) -> dict[str, str]:
        return {"role": "user", "content": f"Context: {context}\n\n{earlier_questions(before)}"
                                           f"Question: {asked.strip()}\nShort answer:"}

    messages = [{"role": "system", "content": SHORT_ANSWER_PROMPT}]
    for context, asked, answer in SHORT_ANSWER_EXAMPLES if examples else ():
        messages += [ask(context, asked), {"role": "assistant", "content": answer}]
    return [*messages, ask(sentence, question, earlier)]


def earlier_questions(earlier: Sequence[str]) -> str:
    """What a follow-up refers to, said before it in the prompt ("When does it expire?" alone leaves the model
    guessing what "it" is)."""
    return "".join(f"Earlier question: {q.strip()}\n" for q in earlier)


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
