"""EPUB (ebooklib): the chapters in reading (spine) order, their HTML read like .html files.

Each heading (h1-h6) starts a section titled by it; pages are not numbered (EPUB has none). ebooklib
parses the package XML with lxml and ``resolve_entities=False``; the zip passed the registry's caps.
"""

from __future__ import annotations

import io
from pathlib import Path

import ebooklib
from ebooklib import epub

from ingest.formats.base import HtmlText, LoadedDocument, NoExtractableText, finish
from ingest.formats.options import LoadContext


def load_epub(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    chapters = [item for item in (book.get_item_with_id(idref) for idref, *_ in book.spine)
                if item is not None and item.get_type() == ebooklib.ITEM_DOCUMENT]
    if not chapters:
        raise NoExtractableText("no extractable text (the book has no chapters)")
    ctx.check_pages(len(chapters), "chapters")
    parts: list[tuple[int | None, str | None, str]] = []
    for chapter in chapters:
        ctx.check_time()
        parser = HtmlText()
        parser.feed(chapter.get_content().decode("utf-8", errors="replace"))
        parser.close()
        parts.extend((None, title, "\n\n".join(paragraphs)) for title, paragraphs in parser.sections)
    titles = book.get_metadata("DC", "title")
    title = str(titles[0][0]).strip() if titles and titles[0][0] else None
    return finish(path, "epub", parts, pages=None, title=title or next((t for _, t, _ in parts if t), None))
