"""Test files for the format loaders, written by other code than the readers: python-docx / python-pptx /
openpyxl writers, the stdlib csv and email writers, Pillow (scanned pages), plus hostile files.
(tests/fixtures/ holds a few small files converted by LibreOffice; see make_office_fixtures.sh.)"""

from __future__ import annotations

import csv
import io
import random
import zipfile
from email.message import EmailMessage
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

# Known text of the scanned page: OCR must recover at least 95% of these words.
SCANNED_TEXT = """The lighthouse keeper of Port Averill logged every passing ship in a green ledger.
In the winter of 1887 the harbour froze solid for eleven days and no vessel moved.
The keeper walked across the ice to the fishing village to buy lamp oil and bread.
His daughter Marguerite later became the first woman to command a river steamer.
She sailed the Saint Clair route for twenty years without a single accident.
The ledger is now kept in the maritime museum next to the brass fog bell."""


def make_docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.core_properties.title = "Orchard cooperative handbook"
    document.add_heading("Orchard cooperative handbook", level=0)
    document.add_paragraph("This handbook describes how the cooperative runs its apple orchards.")
    document.add_heading("Pruning schedule", level=1)
    document.add_paragraph("Members prune the Bramley trees in late February, before the buds swell.")
    document.add_heading("Harvest rota", level=1)
    document.add_paragraph("Pickers are assigned to rows by the harvest coordinator.")
    table = document.add_table(rows=3, cols=3)
    for row, cells in zip(table.rows, [("Variety", "Picker", "Week"), ("Cox", "Ingrid Halvorsen", "38"),
                                        ("Russet", "Tobias Wren", "41")]):
        for cell, text in zip(row.cells, cells):
            cell.text = text
    document.add_paragraph("Cider pressing starts once the last russets are in.")
    document.save(path)
    return path


def make_pptx(path: Path) -> Path:
    import pptx

    presentation = pptx.Presentation()
    layout = presentation.slide_layouts[1]  # title and content
    slides = [
        ("Quarterly review", "Revenue grew in every region this quarter.", "Welcome everyone."),
        ("Glacier survey results", "The Vatnajokull outlet glacier retreated 212 metres since the last survey.",
         "Mention that the drone photogrammetry was done by the Reykjavik team."),
        ("Next steps", "Hire two field technicians and renew the snowmobile lease.", ""),
    ]
    for title, body, notes in slides:
        slide = presentation.slides.add_slide(layout)
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    presentation.save(path)
    return path


def make_empty_pptx(path: Path) -> Path:
    import pptx

    pptx.Presentation().save(path)
    return path


def make_xlsx(path: Path) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Staff"
    sheet.append(["Name", "Department", "Office"])
    sheet.append(["Amara Okafor", "Hydrology", "Room 114"])
    sheet.append(["Lars Pettersen", "Geodesy", "Room 207"])
    stock = book.create_sheet("Inventory")
    stock.append(["Item", "Quantity", "Location"])
    stock.append(["Theodolite", 4, "Cabinet B"])
    stock.append(["Seismometer", 2, "Basement vault"])
    stock.append(["Rain gauge", 17, "Roof store"])
    book.save(path)
    return path


def make_csv(path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["Station", "River", "Peak flow (m3/s)"])
        writer.writerow(["Kettle Bridge", "Ouse", "312"])
        writer.writerow(["Millbrook Weir", "Tamar", "188"])
        writer.writerow(["Dunmore Gauge", "Suir", "97"])
    return path


def make_eml(path: Path, attachment: tuple[str, bytes, str] | None = None) -> Path:
    message = EmailMessage()
    message["From"] = "Priya Raman <priya@example.org>"
    message["To"] = "Field team <team@example.org>"
    message["Date"] = "Tue, 03 Mar 2026 09:15:00 +0000"
    message["Subject"] = "Borehole samples from Site 7"
    message.set_content("Hello all,\n\nThe borehole samples from Site 7 arrived at the lab on Monday.\n"
                        "The core from 40 metres shows a layer of volcanic ash.\n\nPriya\n")
    message.add_alternative("<html><body><p>Hello all,</p><p>The borehole samples from Site 7 arrived at the "
                            "lab on Monday.</p></body></html>", subtype="html")
    if attachment is not None:
        name, data, mime = attachment
        maintype, subtype = mime.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    path.write_bytes(message.as_bytes())
    return path


def scanned_page(text: str = SCANNED_TEXT, dpi: int = 200, angle: float = 0.8, seed: int = 7):
    """``text`` printed on an A4 page and scanned at ``dpi``: 11 pt DejaVu Sans, slightly rotated, speckled."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = int(8.27 * dpi), int(11.69 * dpi)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    size = int(11 / 72 * dpi)
    # DejaVu Sans (Debian: fonts-dejavu-core, installed by .ci/run); elsewhere Pillow's built-in scalable font.
    font = ImageFont.truetype(FONT, size) if Path(FONT).is_file() else ImageFont.load_default(size)
    y = int(1.0 * dpi)
    for line in text.splitlines():
        draw.text((int(0.9 * dpi), y), line, font=font, fill=20)
        y += int(11 / 72 * dpi * 1.6)
    page = page.rotate(angle, resample=Image.BICUBIC, fillcolor=255, expand=False)
    rng = random.Random(seed)
    pixels = page.load()
    for _ in range(width * height // 200):  # salt-and-pepper noise on 0.5% of the pixels
        x, y = rng.randrange(width), rng.randrange(height)
        pixels[x, y] = rng.choice((0, 90, 255))
    page.info["dpi"] = (dpi, dpi)
    return page


def make_scanned_pdf(path: Path, text: str = SCANNED_TEXT) -> Path:
    scanned_page(text).save(path, "PDF", resolution=200)
    return path


def make_long_scan(path: Path, pages: int, dpi: int = 150) -> Path:
    """A scanned report of ``pages`` small pages (4 x 1.2 inch), one printed line each, no text layer
    (200 pages OCR in about 11 s on 2 cores)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(FONT, int(11 / 72 * dpi)) if Path(FONT).is_file() else ImageFont.load_default(23)
    images = []
    for n in range(1, pages + 1):
        page = Image.new("L", (int(4 * dpi), int(1.2 * dpi)), 255)
        ImageDraw.Draw(page).text((int(0.3 * dpi), int(0.4 * dpi)),
                                  f"Page {n}: the Kestrel survey counted {n * 7} owls.", font=font, fill=20)
        images.append(page)
    images[0].save(path, "PDF", resolution=dpi, save_all=True, append_images=images[1:])
    return path


def make_scanned_tiff(path: Path, texts: list[str]) -> Path:
    pages = [scanned_page(t, seed=i) for i, t in enumerate(texts)]
    pages[0].save(path, "TIFF", save_all=True, append_images=pages[1:], dpi=(200, 200), compression="tiff_lzw")
    return path


def make_mixed_pdf(path: Path, text_pdf: Path, scanned_text: str, scanned_at: int = 2) -> Path:
    """The pages of ``text_pdf`` (which has a text layer) with one scanned page inserted as page
    ``scanned_at``."""
    from pypdf import PdfReader, PdfWriter

    buffer = io.BytesIO()
    scanned_page(scanned_text).save(buffer, "PDF", resolution=200)
    writer = PdfWriter()
    text_pages = PdfReader(text_pdf).pages
    scan = PdfReader(io.BytesIO(buffer.getvalue())).pages[0]
    for page in text_pages[:scanned_at - 1]:
        writer.add_page(page)
    writer.add_page(scan)
    for page in text_pages[scanned_at - 1:]:
        writer.add_page(page)
    with open(path, "wb") as f:
        writer.write(f)
    return path


# --------------------------------------------------------------------------- hostile files
def make_zip_bomb_docx(path: Path, unpacked_mb: int = 1024) -> Path:
    """A .docx whose document.xml inflates to ``unpacked_mb`` MB of zeros (1 MB on disk)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            chunk = b"\0" * (1 << 20)
            for _ in range(unpacked_mb):
                member.write(chunk)
    return path


def make_entity_bomb(path: Path, base: Path, member: str) -> Path:
    """``base`` (a valid .docx or .xlsx) with ``member`` replaced by a "billion laughs" document."""
    lol = "".join(f'<!ENTITY lol{i} "{("&lol%d;" % (i - 1)) * 10}">' for i in range(1, 10))
    bomb = (f'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">{lol}]>'
            f'<root>&lol9;</root>').encode()
    with zipfile.ZipFile(base) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info, bomb if info.filename == member else source.read(info.filename))
    return path


def make_truncated(path: Path, source: Path, keep: float = 0.6) -> Path:
    data = source.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    return path


_CONTENT_TYPES = (b'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/'
                  b'package/2006/content-types"><Override PartName="/word/document.xml" ContentType="application/'
                  b'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>')


def word_recall(expected: str, got: str) -> float:
    """Share of the expected words (in order-free multiset terms) found in ``got``."""
    import re
    from collections import Counter

    want = Counter(re.findall(r"\w+", expected.lower()))
    have = Counter(re.findall(r"\w+", got.lower()))
    return sum(min(n, have[w]) for w, n in want.items()) / sum(want.values())


def stuck_loader(conn) -> None:
    """A loader process that takes a file and never answers: stands in for a parser stuck in C code."""
    import time

    conn.send(("ready",))
    conn.recv()
    time.sleep(3600)
