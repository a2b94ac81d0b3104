"""Check a question set (tests/data/debian-docs/questions.jsonl by default, or the one named, e.g.
tests/data/python-docs/questions.jsonl) against the text the product extracts from the docs/*.html beside it.

Run from the repository root (or anywhere: the repository root is put on sys.path):

    .venv/bin/python tests/data/debian-docs/verify.py [questions.jsonl]

For every record:
- answerable: each gold string in ``answers`` (and each of ``items`` for a list question) occurs,
  case-insensitive and whitespace-normalised, in the extracted text of ``document``; ``evidence`` occurs
  there verbatim (whitespace-normalised, case kept) and holds at least one gold string (a yes/no question's
  gold is "Yes"/"No", so only the evidence is checked; a list question's evidence holds every item);
- unanswerable: ``answers`` is empty and none of the ``absent`` terms occurs (case-insensitive,
  whitespace-normalised) in the text or the section titles of ANY page of the set;
- the fields and their types are the documented ones, ids are unique.

Prints the counts by type and by source, and every failure; exits 1 when there is one.
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

TYPES = ("factoid", "howto", "why", "list", "yesno", "followup", "unanswerable")
_WS = re.compile(r"\s+")


def norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def load_pages(docs: Path) -> dict[str, tuple[str, str]]:
    """File name -> (extracted text, extracted text plus section titles), both whitespace-normalised."""
    pages = {}
    for path in sorted(docs.glob("*.html")):
        doc = load_html(path, path.read_bytes(), None)
        titles = " \n ".join(s.title or "" for s in doc.sections)
        pages[path.name] = (norm(doc.text), norm(doc.text + "\n" + titles + "\n" + doc.title))
    return pages


def source_of(document: str | None) -> str:
    if not document:
        return "none"
    for source in ("debian-reference", "debian-faq", "postgresql", "python", "postfix", "apache", "rsyslog",
                   "varnish", "git", "bind", "exim", "ntpsec", "aptitude", "libvirt", "nut", "sqlite", "knot", "slurm",
                   "mutt", "haproxy", "cups", "krb5", "zsh"):
        if document.startswith(source):
            return source
    return "other"


def check(rec: dict, pages: dict[str, tuple[str, str]]) -> list[str]:
    errors: list[str] = []
    kind = rec.get("type")
    if kind not in TYPES:
        return [f"unknown type {kind!r}"]
    for field in ("id", "question"):
        if not isinstance(rec.get(field), str) or not rec[field].strip():
            errors.append(f"missing {field}")
    answers = rec.get("answers")
    if not isinstance(answers, list) or not all(isinstance(a, str) and a.strip() for a in answers):
        return errors + ["answers must be a list of non-empty strings"]
    if kind == "unanswerable":
        if rec.get("unanswerable") is not True:
            errors.append("unanswerable must be true")
        if answers:
            errors.append("an unanswerable question has no answers")
        absent = rec.get("absent")
        if not isinstance(absent, list) or not absent or not all(isinstance(a, str) and a.strip() for a in absent):
            return errors + ["absent must be a non-empty list of terms"]
        for term in absent:
            t = norm(term).lower()
            hits = [name for name, (_, full) in pages.items() if t in full.lower()]
            if hits:
                errors.append(f"absent term {term!r} occurs in {', '.join(hits)}")
        if rec.get("document") is not None and rec["document"] not in pages:
            errors.append(f"unknown document {rec['document']!r}")
        return errors
    if rec.get("unanswerable") is not False:
        errors.append("unanswerable must be false")
    if not answers:
        return errors + ["an answerable question needs answers"]
    document = rec.get("document")
    if document not in pages:
        return errors + [f"unknown document {document!r}"]
    text = pages[document][0]
    low = text.lower()
    evidence = rec.get("evidence")
    if not isinstance(evidence, str) or not evidence.strip():
        return errors + ["missing evidence"]
    ev = norm(evidence)
    if ev not in text:
        errors.append(f"evidence not in {document}: {ev[:90]!r}")
    golds = list(answers)
    if kind == "list":
        items = rec.get("items")
        if not isinstance(items, list) or len(items) < 2:
            errors.append("a list question needs at least two items")
            items = []
        golds += [i for i in items if i not in golds]
        missing = [i for i in items if norm(i).lower() not in ev.lower()]
        if missing:
            errors.append(f"items not in the evidence: {missing}")
    if kind == "followup":
        history = rec.get("history")
        if not isinstance(history, list) or not 1 <= len(history) <= 9 or not all(isinstance(h, str) for h in history):
            errors.append("a follow-up needs a history of 1 to 9 earlier user turns")
    if kind == "yesno":
        if answers not in (["Yes"], ["No"]):
            errors.append('a yes/no answer is ["Yes"] or ["No"]')
        return errors
    for gold in golds:
        if norm(gold).lower() not in low:
            errors.append(f"gold {gold!r} not in {document}")
    if not any(norm(g).lower() in ev.lower() for g in golds):
        errors.append("the evidence holds no gold string")
    return errors


def main(argv: list[str]) -> int:
    qfile = Path(argv[1]) if len(argv) > 1 else HERE / "questions.jsonl"
    pages = load_pages(qfile.resolve().parent / "docs")
    by_type: Counter = Counter()
    by_source: Counter = Counter()
    by_type_source: Counter = Counter()
    failures = 0
    seen: set[str] = set()
    records = 0
    for lineno, line in enumerate(qfile.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        records += 1
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            print(f"line {lineno}: not JSON: {exc}")
            failures += 1
            continue
        errors = check(rec, pages)
        if rec.get("id") in seen:
            errors.append("duplicate id")
        seen.add(rec.get("id"))
        if errors:
            failures += 1
            for e in errors:
                print(f"{rec.get('id', f'line {lineno}')}: {e}")
        kind = rec.get("type")
        src = source_of(rec.get("document"))
        by_type[kind] += 1
        by_source[src] += 1
        by_type_source[(kind, src)] += 1
    total_text = sum(len(t) for t, _ in pages.values())
    print(f"{records} questions over {len(pages)} pages ({total_text:,} characters of normalised text)")
    print("by type:   " + ", ".join(f"{t} {by_type[t]}" for t in TYPES))
    print("by source: " + ", ".join(f"{s} {n}" for s, n in sorted(by_source.items())))
    for t in TYPES:
        parts = [f"{s} {by_type_source[(t, s)]}" for s in ("debian-reference", "postgresql", "none") if by_type_source[(t, s)]]
        print(f"  {t:13s} " + (", ".join(parts) or "0"))
    close = sum(1 for line in qfile.read_text(encoding="utf-8").splitlines()
                if line.strip() and json.loads(line).get("close") is True)
    print(f"close-but-unanswered (qualifier swaps): {close}")
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
