"""The plain-text formats (.txt, .md, .html), read by the parsers in ``ingest.formats.base``."""

from __future__ import annotations

from pathlib import Path

from ingest.formats.base import LoadedDocument, clean_plain, decode, finish, parse_html, parse_markdown
from ingest.formats.options import LoadContext


def load_txt(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    return finish(path, "txt", [(None, None, clean_plain(decode(data)))], pages=None, title=None)


def load_markdown(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    return parse_markdown(path, decode(data))


def load_html(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    return parse_html(path, decode(data, sniff_html=True))
