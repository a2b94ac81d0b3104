"""The language a question is written in, and the service's own words in it (rag/core/languages.toml).

Detection is py3langid (langid.py's model, restricted to the languages that have replies): on the 300
questions of the multilingual dev set (en, de, fr, es) it named every language right, and it called none of
the 1,765 English dev and squad2-dev questions anything but English; 0.03 ms a question after a 0.7 s load.
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any, Mapping

from rag.core.text import LANGUAGE_RULES

log = logging.getLogger(__name__)

# The languages a reply can be written in: those with a refusal of their own.
REPLIES = MappingProxyType({language: rules for language, rules in LANGUAGE_RULES.items()
                            if "not_in_documents" in rules})
DEFAULT_LANGUAGE = "en"
# Below this probability (among the reply languages) a question is taken to be in the default language: a
# word or two ("OK?", "pg_dump -Fc?") says too little.
MIN_PROBABILITY = 0.6


def replies_in(language: str) -> Mapping[str, Any]:
    """The service's own words in ``language``, English's where it has none."""
    return REPLIES.get(language, REPLIES[DEFAULT_LANGUAGE])


def refusal_message(language: str) -> str:
    return replies_in(language)["not_in_documents"]


def yes_no_word(answer: str, language: str) -> str:
    """A yes/no answer ("Yes" or "No", as decoded) in ``language``: "Ja" for a German question."""
    return str(replies_in(language).get("yes" if answer == "Yes" else "no", answer))


def nouns_capitalised(language: str) -> bool:
    """Every noun of ``language`` starts with a capital (German): a capital then names nothing."""
    return bool(REPLIES.get(language, {}).get("nouns_capitalised", False))


class LanguageDetector:
    """Names the language of a text among ``REPLIES``' languages; the model loads on the first call."""

    def __init__(self, languages: tuple[str, ...] = tuple(REPLIES)) -> None:
        self.languages = languages
        self._identifier = None
        self._failed = False

    def load(self) -> bool:
        """Load the model once; False (every text then the default language, said once in the log) where it
        cannot be: py3langid unpacks its model through a temporary file, which a full disk refuses, and a full
        disk must not stop the service from answering."""
        if self._identifier is None and not self._failed:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier  # lazy: 0.7 s, not on `rag --help`

            try:
                identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            except (OSError, ValueError) as exc:
                self._failed = True
                log.warning("language detection is off (every question is taken as %s): %s", DEFAULT_LANGUAGE, exc)
                return False
            identifier.set_languages(list(self.languages))
            self._identifier = identifier
        return self._identifier is not None

    def detect(self, text: str) -> str:
        if len(self.languages) == 1 or not any(ch.isalpha() for ch in text):
            return self.languages[0] if len(self.languages) == 1 else DEFAULT_LANGUAGE
        if not self.load():
            return DEFAULT_LANGUAGE
        language, probability = self._identifier.classify(text)
        return language if probability >= MIN_PROBABILITY else DEFAULT_LANGUAGE
