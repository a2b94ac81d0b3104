"""OCR with Tesseract (through pytesseract): scanned PDF pages and images (PNG, JPEG, multi-page TIFF).

Tesseract runs as one process per page. Pages are rendered (or decoded) one at a time in the calling
thread and OCR'd by a pool of threads, one per core, with at most two pages per thread waiting, so
memory stays flat on long scans. Each tesseract process is kept to one thread (OMP_THREAD_LIMIT=1):
parallel pages beat tesseract's own threading on few cores.
"""

from __future__ import annotations

import io
import os
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pytesseract
from PIL import Image, ImageOps, ImageSequence

from ingest.formats.base import LoadedDocument, NoExtractableText, finish, normalize_pdf_text
from ingest.formats.options import LoadContext, LoadTimeout, TooLarge, timeout_message

OCR_DPI = 300  # rendering resolution of scanned PDF pages (Tesseract reads best at about 300 dpi)
INSTALL_HINT = "install tesseract-ocr to read scanned pages"
WINDOWS_INSTALL_HINT = ("install Tesseract (the UB Mannheim build) to read scanned pages, for all users when rag runs "
                        "as a service (a service does not see one installed for a single user), or set "
                        "tesseract_cmd to its tesseract.exe")
_checked: dict[tuple[str, str], str | None] = {}


def install_hint(windows: bool = os.name == "nt") -> str:
    return WINDOWS_INSTALL_HINT if windows else INSTALL_HINT


def find_tesseract(environ: Mapping[str, str] = os.environ, windows: bool = os.name == "nt") -> str:
    """The Tesseract to run when ``tesseract_cmd`` is not set: the one on PATH; on Windows, where its installers
    put it (they do not add it to PATH): Program Files, or the user's own programs folder."""
    if shutil.which("tesseract", path=environ.get("PATH", "")) or not windows:
        return "tesseract"
    folders = [environ.get("ProgramFiles"), environ.get("ProgramW6432"), environ.get("ProgramFiles(x86)"),
               str(Path(environ["LOCALAPPDATA"]) / "Programs") if environ.get("LOCALAPPDATA") else None]
    found = (Path(f) / "Tesseract-OCR" / "tesseract.exe" for f in folders if f)
    return next((str(p) for p in found if p.is_file()), "tesseract")


def tesseract_problem(ctx: LoadContext) -> str | None:
    """None when Tesseract runs with every language in ``ocr_languages``; else what is wrong (cached)."""
    cmd = ctx.options.tesseract_cmd or find_tesseract()
    key = (cmd, ctx.options.ocr_languages)
    if key not in _checked:
        pytesseract.pytesseract.tesseract_cmd = cmd
        try:
            pytesseract.get_tesseract_version()
            installed = set(pytesseract.get_languages())
        except (pytesseract.TesseractNotFoundError, OSError, SystemExit):
            _checked[key] = "tesseract not found"
        else:
            missing = [lang for lang in ctx.options.ocr_languages.split("+") if lang not in installed]
            first = missing[0] if missing else ""
            where = (f"rerun its installer and tick {first}, or put {first}.traineddata in its tessdata folder"
                     if os.name == "nt" else f"install e.g. tesseract-ocr-{first}")
            _checked[key] = (f"Tesseract has no data for language(s) {', '.join(missing)} (ocr_languages); "
                             f"{where}") if missing else None
    return _checked[key]


def page_list(pages: list[int]) -> str:
    """"page 3", "pages 2, 5, 7", "pages 1-40" (runs of consecutive pages collapsed)."""
    runs: list[list[int]] = []
    for page in pages:
        if runs and page == runs[-1][-1] + 1:
            runs[-1].append(page)
        else:
            runs.append([page])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    return f"page{'s' if len(pages) > 1 else ''} {text}"


def missing_tesseract_message(pages: list[int], problem: str, what: str = "has no text layer") -> str:
    verb = what if len(pages) == 1 else what.replace("has ", "have ")
    hint = install_hint() if problem == "tesseract not found" else problem
    return f"{page_list(pages)} {verb}; {hint}"


def ocr_images(images: Iterable[tuple[int, Image.Image]], total: int, ctx: LoadContext) -> dict[int, str]:
    """page number -> normalised OCR text, for (page, image) pairs produced lazily by ``images``."""
    workers = max(1, min(os.cpu_count() or 1, total))
    if workers > 1:
        os.environ["OMP_THREAD_LIMIT"] = "1"  # read by each tesseract process we start
    started = time.perf_counter()
    results: dict[int, str] = {}
    done = 0

    def one(page: int, image: Image.Image) -> tuple[int, str]:
        remaining = ctx.remaining()
        if remaining <= 0:
            raise LoadTimeout(timeout_message(ctx.options.load_timeout_s))
        try:
            text = pytesseract.image_to_string(image, lang=ctx.options.ocr_languages, config="--psm 3",
                                               timeout=0 if remaining == float("inf") else max(1, int(remaining)))
        except RuntimeError as exc:
            if "timeout" in str(exc).lower():
                raise LoadTimeout(timeout_message(ctx.options.load_timeout_s)) from exc
            raise
        return page, normalize_pdf_text(text)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ocr") as pool:
        pending: set[Future] = set()
        try:
            for page, image in images:
                ctx.check_time()
                image.format = "PPM"  # pytesseract hands Tesseract a temp file; PGM/PPM write fastest
                pending.add(pool.submit(one, page, image))
                while len(pending) >= 2 * workers:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    done += _collect(finished, results, ctx, done, total)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                done += _collect(finished, results, ctx, done, total)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    ctx.ocr_pages += len(results)
    ctx.ocr_seconds += time.perf_counter() - started
    return results


def _collect(finished: set[Future], results: dict[int, str], ctx: LoadContext, done: int, total: int) -> int:
    for future in finished:
        page, text = future.result()
        results[page] = text
        done += 1
        if ctx.progress is not None:
            ctx.progress(done, total)
    return len(finished)


def load_image(path: Path, data: bytes, ctx: LoadContext) -> LoadedDocument:
    """A PNG, JPEG or TIFF (every frame of a multi-page TIFF is a page), read by OCR."""
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise TooLarge(f"too large: {exc}") from exc
    with image:
        frames = getattr(image, "n_frames", 1)
        ctx.check_pages(frames, "images")
        problem = tesseract_problem(ctx)
        if problem:
            raise NoExtractableText(f"no extractable text: an image needs OCR; "
                                    f"{install_hint() if problem == 'tesseract not found' else problem}")

        def pages() -> Iterator[tuple[int, Image.Image]]:
            for number, frame in enumerate(ImageSequence.Iterator(image), 1):
                yield number, _for_ocr(ImageOps.exif_transpose(frame))

        texts = ocr_images(pages(), frames, ctx)
    parts = [(n, None, texts[n]) for n in sorted(texts)]
    if not any(text for _, _, text in parts):
        raise NoExtractableText("no extractable text (OCR found no text in the image)")
    return finish(path, "image", parts, pages=frames, title=None)


def _for_ocr(image: Image.Image) -> Image.Image:
    """Grayscale (or bilevel) copy: what Tesseract binarises anyway, a third of RGB's bytes."""
    if image.mode == "1":
        return image.copy()
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        background.alpha_composite(image.convert("RGBA"))
        image = background
    return image.convert("L")
