"""PDF: pypdf's text per page; pypdfium2 as the second chance for files pypdf cannot parse; OCR
(Tesseract) for the pages that have no text layer. Page numbers are kept in every case."""

from __future__ import annotations

import io
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pypdfium2
from pypdf import PdfReader
from pypdf.errors import FileNotDecryptedError

from ingest.formats.base import (CONTROL_RE, JUNK_TITLE_RE, MAX_TITLE, BrokenDocument, EncryptedDocument,
                                 LoadedDocument, NoExtractableText, describe_error, finish, first_short_line,
                                 normalize_pdf_text)
from ingest.formats.ocr import OCR_DPI, missing_tesseract_message, ocr_images, page_list, tesseract_problem
from ingest.formats.options import LoadContext
from rag.core.errors import UnprocessableDocumentError

if TYPE_CHECKING:
    from PIL.Image import Image
    from pypdf import PdfReader

# A page whose text layer is this short and which is mostly picture (a scan with a stamped header, an
# annotator's banner over a scanned page) is OCR'd too; its OCR text follows the text layer.
THIN_TEXT_CHARS = 200
IMAGE_SHARE_FOR_OCR = 0.2


def load_pdf(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    if not data:
        raise BrokenDocument("broken PDF: empty file")
    try:
        texts, failures, title = _pypdf_pages(data, ctx)
    except BrokenDocument as first:
        # Second chance: PDFium reads many files pypdf rejects (broken xref, invalid page tree).
        try:
            texts, failures, title = _pdfium_pages(data, ctx), [], None
        except UnprocessableDocumentError:
            raise
        except Exception as exc:
            raise BrokenDocument(f"{first.message}; pypdfium2 cannot read it either ({describe_error(exc)})") from exc
    page_count = len(texts)
    if page_count == 0:
        raise NoExtractableText("no extractable text (PDF has no pages)")
    if len(failures) == page_count:
        raise BrokenDocument(f"broken PDF: text extraction failed on every page ({failures[0]})")

    missing = [n for n, text in enumerate(texts, 1) if not text]
    thin = [n for n, text in enumerate(texts, 1) if text and len(text) < THIN_TEXT_CHARS]
    if missing or thin:
        texts = _ocr_missing(data, texts, missing, thin, ctx)
    parts = [(n, None, text) for n, text in enumerate(texts, 1) if text]
    if not parts:
        raise NoExtractableText(f"no extractable text (image-only PDF: OCR found no text on {page_list(missing)})")
    first_text = next(text for _, _, text in parts)
    return finish(path, "pdf", parts, pages=page_count, title=title or first_short_line(first_text))


def _pypdf_pages(data: bytes, ctx: LoadContext) -> tuple[list[str], list[str], str | None]:
    """Normalised text per page ("" where there is none), per-page failures, the metadata title."""
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                decrypted = reader.decrypt("")
            except Exception as exc:  # e.g. AES without the optional crypto dependency
                raise EncryptedDocument(f"encrypted PDF: cannot decrypt ({describe_error(exc)})") from exc
            if not decrypted:
                raise EncryptedDocument("encrypted PDF: needs a password")
        pages = reader.pages
        page_count = len(pages)
    except FileNotDecryptedError as exc:
        raise EncryptedDocument("encrypted PDF: needs a password") from exc
    except UnprocessableDocumentError:
        raise
    except Exception as exc:
        raise BrokenDocument(f"broken PDF: {describe_error(exc)}") from exc
    ctx.check_pages(page_count)
    texts: list[str] = []
    failures: list[str] = []
    first_raw = ""
    for number in range(1, page_count + 1):
        ctx.check_time()
        try:
            raw = pages[number - 1].extract_text() or ""
        except Exception as exc:  # one bad page should not sink the document
            failures.append(describe_error(exc))
            raw = ""
        text = normalize_pdf_text(raw)
        if text and not first_raw:
            first_raw = raw
        texts.append(text)
    title = _pdf_meta_title(reader) or first_short_line(unicodedata.normalize("NFKC", first_raw))
    return texts, failures, title


def _pdfium_pages(data: bytes, ctx: LoadContext) -> list[str]:
    pdf = pypdfium2.PdfDocument(data)
    try:
        ctx.check_pages(len(pdf))
        texts = []
        for index in range(len(pdf)):
            ctx.check_time()
            texts.append(_pdfium_text(pdf, index))
        return texts
    finally:
        pdf.close()


def _pdfium_text(pdf, index: int) -> str:
    page = pdf[index]
    try:
        textpage = page.get_textpage()
        try:
            return normalize_pdf_text(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


def _ocr_missing(data: bytes, texts: list[str], missing: list[int], thin: list[int], ctx: LoadContext) -> list[str]:
    """Fill the pages without a text layer (PDFium's text where pypdf found none, else OCR), and add OCR
    text to pages with a thin text layer over a large picture."""
    texts = list(texts)
    try:
        pdf = pypdfium2.PdfDocument(data)
    except Exception as exc:
        if not missing:
            return texts
        ctx.warnings.append(f"{page_list(missing)} without text, and pypdfium2 cannot render the file "
                            f"for OCR ({describe_error(exc)})")
        return _no_ocr(texts, missing, None)
    try:
        for number in missing:
            ctx.check_time()
            texts[number - 1] = _pdfium_text(pdf, number - 1)
        scanned = [n for n in missing if not texts[n - 1]]
        pictured = [n for n in thin if _image_share(pdf, n - 1) >= IMAGE_SHARE_FOR_OCR]
        if not scanned and not pictured:
            return texts
        problem = tesseract_problem(ctx)
        if problem:
            return _no_ocr(texts, scanned, problem, ctx) if scanned else texts
        under_text = {n: texts[n - 1] for n in pictured}
        scanned = sorted(scanned + pictured)

        def rendered() -> Iterator[tuple[int, "Image"]]:
            for number in scanned:
                page = pdf[number - 1]
                try:
                    bitmap = page.render(scale=_ocr_dpi(page) / 72, grayscale=True)
                    yield number, bitmap.to_pil()
                finally:
                    page.close()

        for number, text in ocr_images(rendered(), len(scanned), ctx).items():
            texts[number - 1] = "\n\n".join(t for t in (under_text.get(number, ""), text) if t)
        return texts
    finally:
        pdf.close()


def _image_share(pdf, index: int) -> float:
    """The share of the page covered by images (overlaps counted twice, capped at 1)."""
    page = pdf[index]
    try:
        width, height = page.get_size()
        covered = 0.0
        for image in page.get_objects(filter=(pypdfium2.raw.FPDF_PAGEOBJ_IMAGE,), max_depth=2):
            left, bottom, right, top = image.get_bounds()
            covered += max(0.0, right - left) * max(0.0, top - bottom)
        return min(1.0, covered / (width * height)) if width * height > 0 else 0.0
    except Exception:  # odd image objects: not worth an OCR pass
        return 0.0
    finally:
        page.close()


def _ocr_dpi(page) -> float:
    """The resolution of the page's largest scanned image (so it is not resampled), within 150-400 dpi;
    OCR_DPI when the page has no image (vector outlines)."""
    best = 0.0
    try:
        for image in page.get_objects(filter=(pypdfium2.raw.FPDF_PAGEOBJ_IMAGE,), max_depth=2):
            width_px, _ = image.get_px_size()
            left, _, right, _ = image.get_bounds()
            if right - left > 36:  # at least half an inch wide: not an icon
                best = max(best, width_px / ((right - left) / 72))
    except Exception:  # odd image objects: render at the default
        return OCR_DPI
    return min(400.0, max(150.0, best)) if best else OCR_DPI


def _no_ocr(texts: list[str], scanned: list[int], problem: str | None, ctx: LoadContext | None = None) -> list[str]:
    """Without OCR: a warning when other pages have text, else the reason the file has none."""
    if problem is None:
        if not any(texts):
            raise NoExtractableText("no extractable text (scanned or image-only PDF?)")
        return texts
    message = missing_tesseract_message(scanned, problem)
    if not any(texts):
        raise NoExtractableText(f"no extractable text: {message}")
    assert ctx is not None
    ctx.warnings.append(message)
    return texts


def _pdf_meta_title(reader: PdfReader) -> str | None:
    try:
        meta = reader.metadata
        raw = meta.title if meta is not None else None
        if not isinstance(raw, str):
            return None
    except Exception:  # metadata is often the broken part of a PDF
        return None
    title = " ".join(CONTROL_RE.sub("", unicodedata.normalize("NFKC", raw)).split())
    if not title or len(title) > MAX_TITLE or not title.isprintable() or JUNK_TITLE_RE.match(title):
        return None
    return title
