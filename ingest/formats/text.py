"""The plain-text formats (.txt, .md, .html), read by the parsers in ``ingest.loaders``."""

from __future__ import annotations

from pathlib import Path

from ingest.formats.options import LoadContext
from ingest.loaders import LoadedDocument, _clean_plain, _decode, _finish, _load_html, _load_markdown


def load_txt(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    return _finish(path, "txt", [(None, None, _clean_plain(_decode(data)))], pages=None, title=None)


def load_markdown(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    return _load_markdown(path, _decode(data))


def load_html(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    return _load_html(path, _decode(data, sniff_html=True))
