"""What every format loader builds on: the document model (one file -> one LoadedDocument: normalised text
split into titled, paged sections), the errors a user's file can cause, and the shared text helpers and
plain-text parsers (.txt, .md, .html). Format modules import from here, never from ``ingest.loaders``.
Every failure a user's file can cause leaves as an UnprocessableDocumentError
subclass with a human message; nothing from a parser library or the codecs escapes.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from html.parser import HTMLParser
from pathlib import Path

from rag.core.errors import UnprocessableDocumentError



class UnsupportedFileType(UnprocessableDocumentError):
    error_type = "unsupported_file_type"


class EncryptedDocument(UnprocessableDocumentError):
    error_type = "encrypted_document"


class NoExtractableText(UnprocessableDocumentError):
    error_type = "no_text"


class BrokenDocument(UnprocessableDocumentError):
    error_type = "broken_document"


@dataclass(frozen=True)
class Section:
    text: str
    page: int | None
    title: str | None
    start: int  # offset of `text` inside LoadedDocument.text


@dataclass(frozen=True)
class Attachment:
    """A file carried inside another (an e-mail attachment): ingested as a document of its own."""

    name: str
    data: bytes


@dataclass(frozen=True)
class LoadedDocument:
    path: Path
    kind: str
    title: str
    sections: tuple[Section, ...]
    pages: int | None
    attachments: tuple[Attachment, ...] = ()
    ocr_pages: int = 0  # pages (or images) read by OCR
    ocr_seconds: float = 0.0
    warnings: tuple[str, ...] = ()  # loaded, but something is missing (e.g. scanned pages without Tesseract)

    @cached_property
    def text(self) -> str:
        return _SECTION_SEP.join(s.text for s in self.sections)


_SECTION_SEP = "\n\n"
MAX_TITLE = 200
# C0/C1 controls except tab and newline, plus soft hyphen and zero-width marks.
CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200d\u2060\ufeff]")
_HSPACE_RE = re.compile(r"[^\S\n]+")
_BLANK_LINES_RE = re.compile(r"\n\s*\n")
_HYPHEN_BREAK_RE = re.compile(r"([^\W\d_])-\n(\w)")
_MD_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_MD_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")
JUNK_TITLE_RE = re.compile(
    r"^(untitled|microsoft (word|powerpoint|excel) - .*|.*\.(docx?|pdf|tex|dvi|ps|rtf|odt|pptx?|xlsx?|txt|html?))$",
    re.IGNORECASE,
)


def normalize_pdf_text(s: str) -> str:
    """NFKC, drop controls, undo end-of-line hyphenation, one line per paragraph."""
    s = unicodedata.normalize("NFKC", s).replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n\n")
    s = CONTROL_RE.sub("", s)
    s = "\n".join(line.strip() for line in _HSPACE_RE.sub(" ", s).split("\n"))
    # Drop the hyphen only before a lowercase continuation: "Jean-\nPaul" keeps it.
    s = _HYPHEN_BREAK_RE.sub(lambda m: m.group(1) + ("" if m.group(2).islower() else "-") + m.group(2), s)
    paragraphs = (" ".join(p.split("\n")).strip() for p in _BLANK_LINES_RE.split(s))
    return "\n\n".join(p for p in paragraphs if p)


def parse_markdown(path: Path, text: str) -> LoadedDocument:
    parts: list[tuple[int | None, str | None, str]] = []
    title: str | None = None
    lines: list[str] = []
    in_fence = False
    for line in clean_plain(text).split("\n"):
        if _MD_FENCE_RE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _MD_HEADING_RE.match(line)
        if heading is None:
            lines.append(line)
            continue
        parts.append((None, title, "\n".join(lines)))
        title = (heading.group(2) or "").strip() or None
        lines = []
    parts.append((None, title, "\n".join(lines)))
    first_heading = next((t for _, t, _ in parts if t), None)
    return finish(path, "md", parts, pages=None, title=first_heading)


class HtmlText(HTMLParser):
    """Visible text, split into sections at h1-h6; block elements become paragraph breaks."""

    _SKIP = frozenset({"script", "style", "head", "noscript", "template", "svg"})
    _BLOCK = frozenset({
        "p", "div", "li", "br", "tr", "ul", "ol", "dl", "dt", "dd", "table", "thead", "tbody", "blockquote",
        "pre", "hr", "section", "article", "header", "footer", "nav", "aside", "main", "figure",
        "figcaption", "form", "fieldset", "address", "details", "summary", "caption",
    })
    _HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
    _HEAD_ONLY = frozenset({"title", "meta", "link", "style", "script", "base", "noscript", "template"})
    _VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                       "wbr", "param"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[tuple[str | None, list[str]]] = [(None, [])]
        self.html_title: str | None = None
        self._skip: list[str] = []
        self._buf: list[str] = []
        self._heading: list[str] | None = None
        self._title_buf: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "title" and self.html_title is None and "svg" not in self._skip:
            self._title_buf = []
        elif "head" in self._skip and tag not in self._HEAD_ONLY:  # an unclosed <head> ends at body content
            del self._skip[self._skip.index("head"):]
            self.handle_starttag(tag, attrs)
        elif self._skip:
            if tag not in self._VOID:  # so that a skipped element's own children do not end it
                self._skip.append(tag)
        elif tag in self._SKIP or self._navigation(tag, dict(attrs)):
            self._skip.append(tag)
        elif not self._skip and tag in self._HEADINGS:
            self._flush()
            self._heading = []
        elif tag in self._BLOCK:
            if self._heading and "".join(self._heading).strip():  # an unclosed heading ends at the next block
                self._end_heading()
            self._flush()

    @staticmethod
    def _navigation(tag: str, attrs: dict) -> bool:
        """No text of the page's own: navigation (``<nav>``, ARIA's navigation and search landmarks: Sphinx's
        sidebar and "Previous topic" / "Next topic" links) and Sphinx's and MkDocs' "¶" permalinks after every
        heading and option term ("-E¶")."""
        return (tag == "nav" or attrs.get("role") in ("navigation", "search")
                or (tag == "a" and "headerlink" in (attrs.get("class") or "").split()))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in self._BLOCK or tag in self._HEADINGS:  # <br/>, <hr/>; never opens a skipped region
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self._title_buf is not None:
            self.html_title = " ".join("".join(self._title_buf).split()) or self.html_title
            self._title_buf = None
        elif tag in self._skip:
            del self._skip[len(self._skip) - 1 - self._skip[::-1].index(tag):]
        elif tag in self._HEADINGS and self._heading is not None:
            self._end_heading()
        elif tag in self._BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._title_buf is not None:
            self._title_buf.append(data)
        elif self._skip:
            return
        elif self._heading is not None:
            self._heading.append(data)
        else:
            self._buf.append(data)

    def _end_heading(self) -> None:
        self.sections.append((" ".join("".join(self._heading or []).split()) or None, []))
        self._heading = None

    def _flush(self) -> None:
        paragraph = " ".join("".join(self._buf).split())
        self._buf = []
        if paragraph:
            self.sections[-1][1].append(paragraph)

    def close(self) -> None:
        super().close()
        if self._heading is not None:
            self._end_heading()
        self._flush()


def parse_html(path: Path, text: str) -> LoadedDocument:
    parser = HtmlText()
    parser.feed(text)
    parser.close()
    parts = [(None, title, "\n\n".join(paras)) for title, paras in parser.sections]
    first_heading = next((t for t, _ in parser.sections if t), None)
    return finish(path, "html", parts, pages=None, title=parser.html_title or first_heading)


def finish(
    path: Path, kind: str, parts: list[tuple[int | None, str | None, str]], pages: int | None, title: str | None
) -> LoadedDocument:
    sections: list[Section] = []
    offset = 0
    for page, section_title, text in parts:
        text = CONTROL_RE.sub("", text).strip()
        if not text:
            continue
        sections.append(Section(text=text, page=page, title=section_title, start=offset))
        offset += len(text) + len(_SECTION_SEP)
    if not sections:
        raise NoExtractableText("no extractable text (empty document)")
    title = _sane_title(title) or first_short_line(sections[0].text) or path.stem
    return LoadedDocument(path=path, kind=kind, title=title, sections=tuple(sections), pages=pages)


def decode(data: bytes, sniff_html: bool = False) -> str:
    """Text of a .txt/.md/.html file: BOM-marked UTF-8/16/32, else UTF-8, cp1252, latin-1.

    Content that is not text (NUL bytes, or mostly control, unassigned or undecodable characters once
    decoded) raises BrokenDocument rather than being indexed as mojibake.
    """
    text = _decode_text(data, sniff_html)
    if _looks_binary(text):
        raise BrokenDocument(_NOT_TEXT)
    return text


def _decode_text(data: bytes, sniff_html: bool) -> str:
    # UTF-32 LE's BOM starts like UTF-16 LE's, so it is tried first.
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"),
                          (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
                          (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")  # a few bad bytes: U+FFFD, judged by _looks_binary
    if b"\x00" in data:
        raise BrokenDocument(_NOT_TEXT)
    encodings = ["utf-8", "cp1252"]
    if sniff_html:
        declared = re.search(rb"""<meta[^>]+charset\s*=\s*["']?([\w.:-]+)""", data[:4096], re.IGNORECASE)
        if declared:
            encodings.insert(0, declared.group(1).decode("ascii"))
    for encoding in encodings:
        try:
            return data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            continue
    return data.decode("latin-1")  # total: every byte maps to a character


_NOT_TEXT = "not a text file (binary content)"
_TEXT_CONTROLS = frozenset("\t\n\v\f\r\x1b")  # ESC: ANSI colours in logs
_BINARY_SAMPLE_CHARS = 4096
_BINARY_MAX_ODD_SHARE = 0.1


def _looks_binary(text: str) -> bool:
    """NULs, or over 10% of the first 4096 characters control, private-use, unassigned or U+FFFD."""
    if "\x00" in text:
        return True
    sample = text[:_BINARY_SAMPLE_CHARS]
    odd = sum(1 for ch in sample if ch == "\ufffd" or (
        ch not in _TEXT_CONTROLS and unicodedata.category(ch) in ("Cc", "Co", "Cn", "Cs")))
    return odd > _BINARY_MAX_ODD_SHARE * len(sample)


def clean_plain(text: str) -> str:
    text = CONTROL_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _sane_title(title: str | None) -> str | None:
    if not title:
        return None
    title = " ".join(title.split())
    return title[:MAX_TITLE] if title else None


def first_short_line(text: str, limit: int = 120) -> str | None:
    for line in text.split("\n"):
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else None
    return None


def describe_error(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__
