"""Word (.docx, python-docx) and PowerPoint (.pptx, python-pptx).

Both libraries parse the package XML with lxml and ``resolve_entities=False`` (entity bombs are not
expanded); the zip itself passed ``registry.open_zip``'s entry-count and size caps before this runs.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable, Iterator

import docx
import pptx
from docx.table import Table
from pptx.shapes.group import GroupShape

from ingest.formats.base import LoadedDocument, NoExtractableText, finish
from ingest.formats.options import LoadContext

_HEADING_STYLE_RE = re.compile(r"^(heading \d|title)$", re.IGNORECASE)


def load_docx(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    """Paragraphs in order; each heading (style "Heading N" or "Title") starts a titled section; a table
    becomes one paragraph per row, its cells joined by " | "."""
    document = docx.Document(io.BytesIO(data))
    parts: list[tuple[int | None, str | None, str]] = []
    title: str | None = None
    paragraphs: list[str] = []
    for n, block in enumerate(document.iter_inner_content()):
        if n % 200 == 0:
            ctx.check_time()
        if isinstance(block, Table):
            paragraphs.extend(_table_rows(block))
            continue
        text = block.text.strip()
        if not text:
            continue
        style = block.style.name if block.style is not None else ""
        if _HEADING_STYLE_RE.match(style or ""):
            parts.append((None, title, "\n\n".join(paragraphs)))
            title, paragraphs = " ".join(text.split()), []
        else:
            paragraphs.append(text)
    parts.append((None, title, "\n\n".join(paragraphs)))
    meta_title = (document.core_properties.title or "").strip() or None
    first_heading = next((t for _, t, _ in parts if t), None)
    return finish(path, "docx", parts, pages=None, title=meta_title or first_heading)


def _table_rows(table) -> Iterator[str]:
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:  # a merged cell repeats itself across the span
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            yield " | ".join(cells)


def load_pptx(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    """One page per slide (page = slide number), titled by the slide's title; speaker notes included."""
    presentation = pptx.Presentation(io.BytesIO(data))
    slides = list(presentation.slides)
    if not slides:
        raise NoExtractableText("no extractable text (presentation has no slides)")
    ctx.check_pages(len(slides), "slides")
    parts: list[tuple[int | None, str | None, str]] = []
    for number, slide in enumerate(slides, 1):
        ctx.check_time()
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None and \
            title_shape.has_text_frame else ""
        paragraphs = list(_shape_texts(slide.shapes))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                paragraphs.append(f"Speaker notes: {notes}")
        parts.append((number, title or None, "\n\n".join(paragraphs)))
    meta_title = (presentation.core_properties.title or "").strip() or None
    first_title = next((t for _, t, _ in parts if t), None)
    return finish(path, "pptx", parts, pages=len(slides), title=meta_title or first_title)


def _shape_texts(shapes: Iterable) -> Iterator[str]:
    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _shape_texts(shape.shapes)
        elif getattr(shape, "has_table", False) and shape.has_table:
            yield from _table_rows_pptx(shape.table)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            text = shape.text_frame.text.strip()
            if text:
                yield text


def _table_rows_pptx(table) -> Iterator[str]:
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        if any(cells):
            yield " | ".join(cells)
