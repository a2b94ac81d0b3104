"""Check the multilingual dev set (``parallel-*.jsonl``) against the text the product extracts.

Run from the repository root:  .venv/bin/python tests/data/multilingual/verify.py [FILE ...]

Each record is one question asked in every language of the set (``LANGUAGES``) over the same Debian
Reference chapter in each language (``docs/<lang>/<chapter>.<lang>.html``):

- ``question``: language -> the question as a native speaker would ask it;
- answerable (``type`` factoid / howto): ``answers`` language -> gold strings, each found (case-insensitive,
  whitespace-normalised) in ``evidence[language]``, which occurs verbatim (whitespace-normalised) in that
  language's page;
- unanswerable: ``answers`` language -> [], ``absent`` language -> terms found in none of that language's pages
  (text or section titles).

Prints counts and every failure; exits 1 when there is one.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from ingest.formats.text import load_html  # noqa: E402

LANGUAGES = ("en", "de", "fr", "es")
TYPES = ("factoid", "howto", "unanswerable")
_WS = re.compile(r"\s+")


def norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def load_pages(language: str) -> dict[str, tuple[str, str]]:
    """Chapter -> (extracted text, text plus section titles), whitespace-normalised."""
    pages = {}
    for path in sorted((HERE / "docs" / language).glob("*.html")):
        doc = load_html(path, path.read_bytes(), None)
        titles = " \n ".join(s.title or "" for s in doc.sections)
        pages[path.name.split(".")[0]] = (norm(doc.text), norm(doc.text + "\n" + titles + "\n" + doc.title))
    return pages


def check(rec: dict, pages: dict[str, dict[str, tuple[str, str]]]) -> list[str]:
    errors = []
    kind = rec.get("type")
    if kind not in TYPES:
        return [f"unknown type {kind!r}"]
    chapter = rec.get("chapter")
    if chapter not in pages["en"]:
        return [f"unknown chapter {chapter!r}"]
    for field in ("question", "answers"):
        if not isinstance(rec.get(field), dict) or set(rec[field]) != set(LANGUAGES):
            return [f"{field} must map exactly {', '.join(LANGUAGES)}"]
    for lang in LANGUAGES:
        q, answers = rec["question"][lang], rec["answers"][lang]
        if not isinstance(q, str) or not q.strip():
            errors.append(f"{lang}: empty question")
        if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
            errors.append(f"{lang}: answers must be a list of non-empty strings")
            continue
        text, full = pages[lang][chapter]
        if kind == "unanswerable":
            if answers:
                errors.append(f"{lang}: an unanswerable question has no answers")
            absent = (rec.get("absent") or {}).get(lang)
            if not isinstance(absent, list) or not absent:
                errors.append(f"{lang}: absent must be a non-empty list of terms")
                continue
            for term in absent:
                hits = [c for c, (_, f) in pages[lang].items() if norm(term).lower() in f.lower()]
                if hits:
                    errors.append(f"{lang}: absent term {term!r} occurs in {', '.join(hits)}")
            continue
        if not answers:
            errors.append(f"{lang}: an answerable question needs answers")
        evidence = norm((rec.get("evidence") or {}).get(lang, ""))
        if not evidence:
            errors.append(f"{lang}: missing evidence")
            continue
        if evidence not in text:
            errors.append(f"{lang}: evidence not verbatim in {chapter}.{lang}.html: {evidence[:80]!r}")
        for gold in answers:
            if norm(gold).lower() not in evidence.lower():
                errors.append(f"{lang}: answer {gold!r} not in the evidence")
    return errors


def main(files: list[Path]) -> int:
    pages = {lang: load_pages(lang) for lang in LANGUAGES}
    ids, kinds, failures = set(), Counter(), 0
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            where = f"{file.name}:{number} {rec.get('id')}"
            if rec.get("id") in ids:
                print(f"{where}: duplicate id")
                failures += 1
            ids.add(rec.get("id"))
            kinds[rec.get("type")] += 1
            for error in check(rec, pages):
                print(f"{where}: {error}")
                failures += 1
    print(f"{len(ids)} records: {dict(kinds)}; {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main([Path(p) for p in sys.argv[1:]] or sorted(HERE.glob("parallel-*.jsonl"))))
