"""Text rules shared by ingest, retrieval, compression, citations and grounding: one definition each."""

from __future__ import annotations

import re
import tomllib
from importlib.resources import files
from urllib.parse import unquote, urlsplit

# A character that is whitespace neither to Python (which counts the separators U+001C-U+001F and U+0085) nor to
# the ECMA regular expressions of JSON Schema (which count U+FEFF): text holding one is not blank, by the same rule
# for the server's checks and for the OpenAPI schema's ``pattern`` (a fuzzer sent the title "\u001f", valid by the
# schema's plain "\S", and the server refused it as blank).
WRITTEN = r"[^\s\u001c-\u001f\u0085\ufeff]"


def is_blank(text: str) -> bool:
    return re.search(WRITTEN, text) is None


# What the service knows of each language (sentence rules, function words, its refusal): rag/core/languages.toml.
LANGUAGE_RULES = tomllib.loads(files("rag.core").joinpath("languages.toml").read_text(encoding="utf-8"))
# Frequent words: they slow the lexical OR-query down (BM25's idf weighs them ~0 anyway) and say
# nothing about whether a reply is grounded in a passage; the other languages' too (a German question's "welche",
# "meinem" were words no document held, which the answerability score read as a sign of no answer).
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in is it its of on or that the "
    "their there these this to was were what when where which who whom whose why will with".split()
) | frozenset(word for rules in LANGUAGE_RULES.values() for word in rules.get("stopwords", "").split())
WORD = re.compile(r"\w+")
# A sentence boundary: end punctuation, optional closing quotes/brackets, whitespace, then something that
# can open a sentence (an optional opening quote/bracket and a capital letter or digit); never after an
# abbreviation ("Dr. Mira Quell" was once cut into the answer "Dr"; "z. B.", "Nr.") nor inside a date written with
# an ordinal dot ("bis zum 31. März" was answered "zum 31"). The words are data: rag/core/languages.toml.
ABBREVIATIONS = tuple(dict.fromkeys(a for rules in LANGUAGE_RULES.values() for a in rules.get("abbreviations", ())))
MONTHS = tuple(dict.fromkeys(m for rules in LANGUAGE_RULES.values() for m in rules.get("months", ())))
SENTENCE_BOUNDARY = re.compile(  # end punctuation first: the abbreviations are tried only after it (5x faster)
    r"(?<=[.!?])" + "".join(rf"(?<!(?<!\w){re.escape(word)}\.)" for word in ABBREVIATIONS)
    + r"""["'”’“»)\]]*\s+"""
    + rf"(?:(?<!\d\.\s)|(?!(?:{'|'.join(map(re.escape, MONTHS))})\b))"
    + "".join(rf"(?!(?<=(?<!\w){re.escape(word[:cut])}\s){re.escape(word[cut:].split()[0])}\.)"  # "z. | B."
              for word in ABBREVIATIONS for cut in [m.end() for m in re.finditer(r"\.(?=\s)", word)])
    + r"""(?=["'“‘„«¿¡(\[]?[A-Z0-9À-ÖØ-ÞА-ЯΑ-Ω])""")


def content_terms(text: str) -> list[str]:
    """The distinct words that carry meaning (no stopwords, no single letters), in order of appearance."""
    return list(dict.fromkeys(w for w in WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1))


def content_words(text: str) -> set[str]:
    return set(content_terms(text))


def stem(word: str) -> str:
    """A crude stem for matching a question's words to a passage's ("married" ~ "marry", "solved" ~
    "solve"): the first five letters, lower-cased. A snake_case name is an identifier, kept whole:
    "autovacuum_max_workers" is not "autovacuum_naptime"."""
    return word.lower() if "_" in word else word.lower()[:5]


PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")


def sentence_starts(text: str) -> list[int]:
    """Offsets in ``text`` where a sentence after the first begins."""
    return [m.end() for m in SENTENCE_BOUNDARY.finditer(text)]


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (line breaks read as spaces), each stripped; one-character scraps dropped."""
    flat = text.replace("\n", " ")
    # A blank line ends a sentence too: a title line is not the head of the paragraph under it.
    breaks = (m.end() for m in PARAGRAPH_BREAK.finditer(text))
    cuts = sorted({0, *sentence_starts(flat), *breaks, len(flat)})
    parts = (flat[a:b].strip() for a, b in zip(cuts, cuts[1:]))
    return [p for p in parts if len(p) > 1]


def public_host(url: str) -> str:
    """The host[:port] of ``url``, what may be shown to anyone: never the user name or password of
    ``http://user:pass@host`` (``/healthz`` is open, upstream errors reach callers)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:  # a port that is no number: show none
        port = None
    return f"{host}:{port}" if port is not None else host


def without_credentials(text: str, url: str) -> str:
    """``text`` with the user name and password of ``url`` (if any) blotted out."""
    parts = urlsplit(url)
    for secret in (parts.username, parts.password):
        if secret:
            for spelled in {secret, unquote(secret)}:
                text = text.replace(spelled, "***")
    return text
