"""Spreadsheets: .xlsx (openpyxl, read-only streaming) and .csv/.tsv (stdlib csv).

Each sheet is one section titled by its name (a CSV file's section is its file name). The first
non-empty row is the header; every later row becomes one paragraph of "header: value" lines, so the
chunker packs whole rows and cuts only between them. openpyxl parses with defusedxml when it is
installed (a dependency here), which refuses entity declarations.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import warnings
from pathlib import Path
from typing import Iterable, Iterator

import openpyxl
from openpyxl.utils import get_column_letter

from ingest.formats.base import LoadedDocument, NoExtractableText, decode, finish
from ingest.formats.options import LoadContext, TooLarge

_CSV_SNIFF_CHARS = 64 * 1024


class _RowBudget:
    def __init__(self, ctx: LoadContext) -> None:
        self.ctx = ctx
        self.rows = 0

    def take(self) -> None:
        self.rows += 1
        limit = self.ctx.options.max_rows_per_file
        if limit > 0 and self.rows > limit:
            raise TooLarge(f"too large: more than max_rows_per_file ({limit}) rows")
        if self.rows % 1000 == 0:
            self.ctx.check_time()


def rows_as_paragraphs(rows: Iterable[Iterable[object]], budget: _RowBudget) -> Iterator[str]:
    header: list[str] | None = None
    for values in rows:
        budget.take()
        cells = [_cell_text(v) for v in values]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        if header is None:
            header = cells
            continue
        lines = [f"{_column_name(header, i)}: {value}" for i, value in enumerate(cells) if value]
        yield "\n".join(lines)


def _column_name(header: list[str], index: int) -> str:
    if index < len(header) and header[index]:
        return header[index]
    return f"column {get_column_letter(index + 1)}"


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return " ".join(str(value).split())


def load_xlsx(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "extension not supported" chatter
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = book.worksheets
        ctx.check_pages(len(sheets), "sheets")
        budget = _RowBudget(ctx)
        parts: list[tuple[int | None, str | None, str]] = []
        for sheet in sheets:
            ctx.check_time()
            sheet.reset_dimensions()  # a bogus A1:XFD1048576 dimension must not pad every row
            parts.append((None, sheet.title, _rows_text(sheet.iter_rows(values_only=True), budget)))
        title = (book.properties.title or "").strip() or path.stem
    finally:
        book.close()
    if not any(text for _, _, text in parts):
        raise NoExtractableText("no extractable text (the workbook's sheets are empty)")
    return finish(path, "xlsx", parts, pages=None, title=title)


def load_csv(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    text = decode(data)
    sample = text[:_CSV_SNIFF_CHARS]
    if path.suffix.lower() == ".tsv":
        dialect: type[csv.Dialect] | csv.Dialect = csv.excel_tab
    else:
        try:
            dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    rows = csv.reader(io.StringIO(text, newline=""), dialect)
    body = _rows_text(rows, _RowBudget(ctx))
    return finish(path, "csv", [(None, path.name, body)], pages=None, title=path.stem)


def _rows_text(rows: Iterable[Iterable[object]], budget: _RowBudget) -> str:
    """Rows as "header: value" paragraphs; a sheet with only its header row keeps that row."""
    header_only: list[str] = []

    def watch(rows: Iterable[Iterable[object]]) -> Iterator[Iterable[object]]:
        for values in rows:
            if not header_only:
                cells = [_cell_text(v) for v in values]
                if any(cells):
                    header_only.extend(c for c in cells if c)
            yield values

    paragraphs = list(rows_as_paragraphs(watch(rows), budget))
    return "\n\n".join(paragraphs) if paragraphs else " | ".join(header_only)
