"""The one table of readable formats: suffix -> loader, checked against the file's magic bytes.

The suffix says what a file claims to be; for binary formats the content decides: a ``.docx`` that
is really a PDF is read as a PDF, a ``.xlsx`` that is really a Word file as Word, and a zip that is
no Office file at all fails with the reason. Loaders are imported on first use, so the heavy
libraries (python-docx, openpyxl, pypdfium2, ...) load only when such a file turns up.
"""

from __future__ import annotations

import importlib
import io
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from ingest.formats.base import BrokenDocument, LoadedDocument, UnsupportedFileType
from ingest.formats.options import LoadContext, LoadOptions, PageProgress, TooLarge
from rag.core.errors import UnprocessableDocumentError


@dataclass(frozen=True)
class Format:
    kind: str  # LoadedDocument.kind
    suffixes: tuple[str, ...]
    loader: str  # "module:function", called as function(path, data, ctx) -> LoadedDocument
    family: str  # text | pdf | zip | image: how the content is checked
    isolate: bool  # heavy parsing: the ingest pipeline runs it in a worker process under load_timeout_s
    zip_member: str | None = None  # the part that makes a zip this format
    label: str = ""  # what people call it ("Word", "E-mail"): the web app's upload hint is made from these


FORMATS: tuple[Format, ...] = (
    Format("pdf", (".pdf",), "ingest.formats.pdf:load_pdf", "pdf", True, label="PDF"),
    Format("txt", (".txt",), "ingest.formats.text:load_txt", "text", False, label="text"),
    Format("md", (".md", ".markdown"), "ingest.formats.text:load_markdown", "text", False, label="Markdown"),
    Format("html", (".html", ".htm"), "ingest.formats.text:load_html", "text", False, label="HTML"),
    Format("docx", (".docx",), "ingest.formats.office:load_docx", "zip", True, "word/document.xml", label="Word"),
    Format("pptx", (".pptx",), "ingest.formats.office:load_pptx", "zip", True, "ppt/presentation.xml", label="PowerPoint"),
    Format("xlsx", (".xlsx", ".xlsm"), "ingest.formats.sheets:load_xlsx", "zip", True, "xl/workbook.xml", label="Excel"),
    Format("csv", (".csv", ".tsv"), "ingest.formats.sheets:load_csv", "text", False, label="CSV"),
    Format("eml", (".eml",), "ingest.formats.mail:load_eml", "text", False, label="e-mail"),
    Format("epub", (".epub",), "ingest.formats.ebook:load_epub", "zip", True, "META-INF/container.xml", label="EPUB"),
    Format("image", (".png", ".jpg", ".jpeg", ".tif", ".tiff"), "ingest.formats.ocr:load_image", "image", True, label="images (OCR)"),
)
BY_SUFFIX: dict[str, Format] = {suffix: f for f in FORMATS for suffix in f.suffixes}
BY_KIND: dict[str, Format] = {f.kind: f for f in FORMATS}
SUPPORTED_SUFFIXES = frozenset(BY_SUFFIX)

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # legacy .doc / .xls / .ppt
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")
_ODF_KINDS = {"application/vnd.oasis.opendocument.text": ".odt",
              "application/vnd.oasis.opendocument.presentation": ".odp",
              "application/vnd.oasis.opendocument.spreadsheet": ".ods"}


def format_for(path: Path) -> Format | None:
    return BY_SUFFIX.get(Path(path).suffix.lower())


def needs_isolation(path: Path) -> bool:
    fmt = format_for(path)
    return fmt is not None and fmt.isolate


def sniff(data: bytes) -> str | None:
    """The content's family from its magic bytes: pdf, zip, image, ole, or None (text or unknown)."""
    if data[:1024].find(b"%PDF-") != -1:  # the spec tolerates junk before the header
        return "pdf"
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if data.startswith(_IMAGE_MAGIC):
        return "image"
    if data.startswith(_OLE_MAGIC):
        return "ole"
    return None


def load(path: Path, data: bytes | None, options: LoadOptions | None = None,
         progress: PageProgress | None = None) -> LoadedDocument:
    """Every failure leaves as an UnprocessableDocumentError subclass with a human message."""

    fmt = format_for(path)
    if fmt is None:
        raise UnsupportedFileType(f"unsupported file type '{path.suffix.lower() or path.name}'")
    ctx = LoadContext(options or LoadOptions(), progress)
    kind = fmt.kind
    try:
        if data is None:
            data = path.read_bytes()
        fmt = _check_content(fmt, data, ctx)
        kind = fmt.kind
        module, _, function = fmt.loader.partition(":")
        doc = getattr(importlib.import_module(module), function)(path, data, ctx)
    except UnprocessableDocumentError:
        raise
    except OSError as exc:
        raise BrokenDocument(f"cannot read file: {exc.strerror or exc}") from exc
    except Exception as exc:  # any parser bug or oddity is the document's fault, never a 500
        raise BrokenDocument(f"broken {kind.upper()}: {describe(exc)}") from exc
    if ctx.ocr_pages or ctx.warnings:
        doc = replace(doc, ocr_pages=ctx.ocr_pages, ocr_seconds=ctx.ocr_seconds,
                      warnings=doc.warnings + tuple(ctx.warnings))
    return doc


def _check_content(fmt: Format, data: bytes, ctx) -> Format:
    """The format the bytes really are (binary formats only); zips pass the size caps first."""

    if fmt.family == "text":
        return fmt  # text formats keep their own "not a text file" check
    found = sniff(data)
    name = fmt.kind.upper()
    if found == "ole":
        raise UnsupportedFileType(f"legacy binary Office file (.doc/.xls/.ppt) named {name}: not supported; "
                                  "save it as .docx/.xlsx/.pptx")
    if found == "pdf":
        return BY_KIND["pdf"]
    if found == "image":
        return BY_KIND["image"]
    if found == "zip":
        return _zip_format(fmt, data, ctx)
    if fmt.family == "zip":
        what = "empty file" if not data else "not a zip archive"
        raise BrokenDocument(f"not a valid {name} file ({what})")
    if fmt.family == "image":
        raise BrokenDocument(f"not a PNG, JPEG or TIFF image ({'empty file' if not data else 'unknown content'})")
    return fmt  # a PDF without a header: the PDF loader says why it is broken


def _zip_format(claimed: Format, data: bytes, ctx) -> Format:

    name = claimed.kind.upper() if claimed.family == "zip" else f"{claimed.kind.upper()} (the file is a zip archive)"
    archive = open_zip(data, ctx, name)
    with archive:
        names = set(archive.namelist())
        if claimed.zip_member in names:
            return claimed
        for fmt in FORMATS:
            if fmt.zip_member and fmt.zip_member in names:
                return fmt
        if "mimetype" in names:
            mimetype = archive.read("mimetype")[:100].decode("ascii", "replace").strip()
            if mimetype in _ODF_KINDS:
                raise UnsupportedFileType(f"{_ODF_KINDS[mimetype]} content in a {name} file: not supported")
    expected = f" (no {claimed.zip_member})" if claimed.zip_member else ""
    raise BrokenDocument(f"not a valid {name} file: a zip archive that is no Office document{expected}")


def open_zip(data: bytes, ctx, name: str) -> zipfile.ZipFile:
    """Open an Office zip after checking entry count and declared uncompressed size (zip bombs).

    Python's zipfile never inflates an entry past its declared size (it fails the CRC instead), so the
    declared sizes bound what python-docx, python-pptx and openpyxl can read out of the archive.
    """

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise BrokenDocument(f"broken {name}: not a readable zip archive (truncated?): {describe(exc)}") from exc
    infos = archive.infolist()
    options = ctx.options
    if options.max_zip_entries > 0 and len(infos) > options.max_zip_entries:
        archive.close()
        raise TooLarge(f"too large: {name} holds {len(infos)} zip entries, more than {options.max_zip_entries}")
    total = sum(i.file_size for i in infos)
    if options.max_unzipped_mb > 0 and total > options.max_unzipped_mb * 1024 * 1024:
        archive.close()
        raise TooLarge(f"too large: {name} unpacks to {total / 2**20:,.0f} MB, more than max_unzipped_mb "
                       f"({options.max_unzipped_mb}); a zip bomb?")
    return archive


def describe(exc: BaseException) -> str:
    """The first line of the message, and the root cause's when a library wrapped it (openpyxl does)."""
    def first_line(e: BaseException) -> str:
        return (str(e).strip().splitlines() or [type(e).__name__])[0]

    text = first_line(exc)
    root, seen = exc, {id(exc)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    if root is not exc:
        text += f" ({type(root).__name__}: {first_line(root)})"
    return text
