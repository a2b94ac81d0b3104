"""Office files, spreadsheets, e-mail, scanned pages (real Tesseract), content sniffing and hostile files.

Fixtures come from other writers than the readers: python-docx / python-pptx / openpyxl writers, stdlib
csv and email, Pillow for scans (tests/format_fixtures.py), and LibreOffice (tests/fixtures/lo-*, made by
tests/fixtures/make_office_fixtures.sh). With CI=true a missing Tesseract fails the OCR tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from format_fixtures import (FIXTURES, SCANNED_TEXT, make_csv, make_docx, make_empty_pptx, make_entity_bomb,
                             make_eml, make_mixed_pdf, make_pptx, make_scanned_pdf, make_scanned_tiff,
                             make_truncated, make_xlsx, make_zip_bomb_docx, scanned_page, word_recall)
from helpers import cli_env
from ingest.formats.options import LoadOptions
from ingest.formats.registry import sniff
from ingest.loaders import BrokenDocument, NoExtractableText, UnsupportedFileType, load_document
from ingest.pipeline import attachment_path, delete_document, ingest_paths
from ingest.parameters import IngestParameters
from ingest.progress import OcrPage, ProgressEvent
from rag.store.embedded import EmbeddedIndex
from rag.core.records import document_id
from rag.store.embedded import EmbeddedReader
from rag.core.errors import UnprocessableDocumentError
from rag.answering.retrieval import Retriever
from rag.core.settings import PROJECT_ROOT

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
TIFF_PAGE_2 = "The pelican colony on Lake Tana nests in the papyrus reeds every spring."
MIXED_SCAN = "Marguerite Dufresne commanded the river steamer Belle Rive from 1901 to 1921."
BUDGET_CSV = b"Item,Cost (EUR)\nCore drilling at Site 7,4200\nCourier for the samples,310\n"


@pytest.fixture(scope="session")
def tesseract() -> str:
    """The tesseract executable. Missing: skipped locally, a failure under CI=true (the OCR tests must run there)."""
    found = shutil.which("tesseract")
    if found is None:
        message = "tesseract not installed (apt-get install tesseract-ocr)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{message}: CI must run the OCR tests")
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def made(tmp_path_factory) -> Path:
    """One file per generated format (no OCR needed to write them)."""
    folder = tmp_path_factory.mktemp("made")
    make_docx(folder / "handbook.docx")
    make_pptx(folder / "review.pptx")
    make_xlsx(folder / "lab.xlsx")
    make_csv(folder / "flows.csv")
    make_eml(folder / "samples.eml", ("budget.csv", BUDGET_CSV, "text/csv"))
    return folder


@pytest.fixture(scope="session")
def scans(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("scans")
    make_scanned_pdf(folder / "scan.pdf")
    make_scanned_tiff(folder / "scan.tiff", [SCANNED_TEXT, TIFF_PAGE_2])
    make_mixed_pdf(folder / "mixed.pdf", FIXTURES / "lo-text.pdf", MIXED_SCAN, scanned_at=2)
    return folder


def _consistent(doc) -> None:
    assert doc.sections and doc.title
    for section in doc.sections:
        assert section.text == section.text.strip() and section.text
        assert doc.text[section.start:section.start + len(section.text)] == section.text


# --------------------------------------------------------------------------- formats
@pytest.mark.parametrize("name", ["handbook.docx", "lo-report.docx"])
def test_docx_headings_become_sections_and_tables_rows(made, name):
    doc = load_document(made / name if name == "handbook.docx" else FIXTURES / name)
    _consistent(doc)
    assert doc.kind == "docx" and doc.pages is None
    titles = [s.title for s in doc.sections]
    if name == "handbook.docx":  # python-docx writer
        assert doc.title == "Orchard cooperative handbook"
        assert titles == ["Orchard cooperative handbook", "Pruning schedule", "Harvest rota"]
        rota = doc.sections[2].text
        assert "Variety | Picker | Week\n\nCox | Ingrid Halvorsen | 38" in rota
        assert rota.endswith("Cider pressing starts once the last russets are in.")
    else:  # LibreOffice writer
        assert titles == ["Beekeeping association minutes", "Swarm collection", "Varroa treatment"]
        assert "North meadow | Oskar Lindqvist" in doc.sections[1].text


@pytest.mark.parametrize("name", ["review.pptx", "lo-slides.pptx"])
def test_pptx_slides_are_pages_with_speaker_notes(made, name):
    doc = load_document(made / name if name == "review.pptx" else FIXTURES / name)
    _consistent(doc)
    assert doc.kind == "pptx"
    if name == "review.pptx":
        assert doc.pages == 3 and [s.page for s in doc.sections] == [1, 2, 3]
        assert [s.title for s in doc.sections] == ["Quarterly review", "Glacier survey results", "Next steps"]
        assert "Speaker notes: Mention that the drone photogrammetry" in doc.sections[1].text
    else:
        assert doc.pages == 2 and [s.page for s in doc.sections] == [1, 2]
        assert doc.sections[1].title == "Winter service"
        assert "Speaker notes: Remind the audience" in doc.sections[1].text


def test_xlsx_sheets_are_sections_of_header_value_rows(made):
    doc = load_document(made / "lab.xlsx")
    _consistent(doc)
    assert doc.kind == "xlsx" and [s.title for s in doc.sections] == ["Staff", "Inventory"]
    assert doc.sections[1].text.split("\n\n") == [
        "Item: Theodolite\nQuantity: 4\nLocation: Cabinet B",
        "Item: Seismometer\nQuantity: 2\nLocation: Basement vault",
        "Item: Rain gauge\nQuantity: 17\nLocation: Roof store"]
    lakes = load_document(FIXTURES / "lo-lakes.xlsx")  # LibreOffice writer: formulas keep their computed value
    assert lakes.sections[0].text.split("\n\n")[0] == (
        "Lake: Loch Ness\nDepth (m): 227\nArea (km2): 56\nVolume index: 12712")


def test_csv_rows_and_row_cap(made):
    doc = load_document(made / "flows.csv")
    assert doc.kind == "csv" and doc.sections[0].title == "flows.csv"
    assert doc.text.split("\n\n")[1] == "Station: Millbrook Weir\nRiver: Tamar\nPeak flow (m3/s): 188"
    with pytest.raises(UnprocessableDocumentError, match=r"more than max_rows_per_file \(2\)") as info:
        load_document(made / "flows.csv", options=LoadOptions(max_rows_per_file=2))
    assert info.value.error_type == "too_large"


def test_chunks_of_a_sheet_split_between_rows(made, embedder_tokenizer):
    from ingest.chunking import chunk_document

    rows = [["Id", "Name", "Notes"]] + [[str(i), f"Person {i}", "likes long walks " * (i % 5 + 1)]
                                         for i in range(1, 80)]
    path = made / "people.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n", encoding="utf-8")
    chunks = chunk_document(load_document(path), embedder_tokenizer, chunk_tokens=60, overlap=0)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.text.startswith("Id: ") and chunk.text.split("\n")[-1].startswith("Notes: ")


def test_epub_chapters(tmp_path):
    doc = load_document(FIXTURES / "lo-book.epub")  # LibreOffice's EPUB export
    _consistent(doc)
    assert doc.kind == "epub" and doc.title == "The lighthouse almanac" and doc.pages is None
    assert doc.text.endswith("The lamp burned colza oil until the keepers switched to paraffin in 1869.")


def test_eml_headers_body_and_attachment(made):
    doc = load_document(made / "samples.eml")
    _consistent(doc)
    assert doc.kind == "eml" and doc.title == "Borehole samples from Site 7"
    assert doc.sections[0].text.splitlines() == [
        "From: Priya Raman <priya@example.org>", "To: Field team <team@example.org>",
        "Date: Tue, 03 Mar 2026 09:15:00 +0000", "Subject: Borehole samples from Site 7"]
    assert "layer of volcanic ash" in doc.sections[1].text  # the plain part, not the HTML one
    assert [a.name for a in doc.attachments] == ["budget.csv"]
    assert doc.attachments[0].data == BUDGET_CSV


def test_html_only_mail_body(tmp_path):
    from email.message import EmailMessage

    message = EmailMessage()
    message["Subject"] = "Menu"
    message.set_content("<html><head><style>p{}</style></head><body><h1>Lunch</h1><p>Leek soup &amp; bread</p>"
                        "</body></html>", subtype="html")
    path = tmp_path / "menu.eml"
    path.write_bytes(message.as_bytes())
    doc = load_document(path)
    assert doc.sections[1].text == "Leek soup & bread" and "p{}" not in doc.text


# --------------------------------------------------------------------------- the registry: magic bytes win
def test_content_decides_the_loader(made, scans, tmp_path):
    assert sniff((made / "handbook.docx").read_bytes()) == "zip" and sniff(b"%PDF-1.7") == "pdf"
    fake = tmp_path / "minutes.docx"
    fake.write_bytes((FIXTURES / "lo-text.pdf").read_bytes())
    assert load_document(fake).kind == "pdf"
    swapped = tmp_path / "numbers.xlsx"
    swapped.write_bytes((made / "handbook.docx").read_bytes())
    assert load_document(swapped).kind == "docx"
    import zipfile

    with zipfile.ZipFile(tmp_path / "archive.docx", "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(BrokenDocument, match=r"not a valid DOCX file: a zip archive that is no Office document"):
        load_document(tmp_path / "archive.docx")
    (tmp_path / "old.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    with pytest.raises(UnsupportedFileType, match=r"legacy binary Office file"):
        load_document(tmp_path / "old.docx")
    (tmp_path / "text.pptx").write_text("just text", encoding="utf-8")
    with pytest.raises(BrokenDocument, match=r"not a valid PPTX file \(not a zip archive\)"):
        load_document(tmp_path / "text.pptx")


# --------------------------------------------------------------------------- OCR
def test_scanned_pdf_is_read_by_ocr(scans, tesseract):
    doc = load_document(scans / "scan.pdf")
    assert doc.kind == "pdf" and doc.pages == 1 and doc.ocr_pages == 1 and doc.ocr_seconds > 0
    assert [s.page for s in doc.sections] == [1]
    assert word_recall(SCANNED_TEXT, doc.text) >= 0.95


def test_mixed_pdf_ocrs_only_the_scanned_page_and_keeps_page_numbers(scans, tesseract):
    doc = load_document(scans / "mixed.pdf")
    assert doc.pages == 3 and doc.ocr_pages == 1
    pages = {s.page: s.text for s in doc.sections}
    assert set(pages) == {1, 2, 3}
    assert pages[1] == "First page: the tram network of Graz has seven lines."  # text layers, untouched
    assert pages[3] == "Second page: the cable car to the Schlossberg opened in 1894."
    assert word_recall(MIXED_SCAN, pages[2]) >= 0.95


def test_multipage_tiff_pages_and_png(scans, tesseract, tmp_path):
    doc = load_document(scans / "scan.tiff")
    assert doc.kind == "image" and doc.pages == 2 and doc.ocr_pages == 2
    assert [s.page for s in doc.sections] == [1, 2]
    assert word_recall(SCANNED_TEXT, doc.sections[0].text) >= 0.95
    assert word_recall(TIFF_PAGE_2, doc.sections[1].text) >= 0.95
    scanned_page(TIFF_PAGE_2).convert("RGB").save(tmp_path / "photo.jpg", quality=90)
    assert word_recall(TIFF_PAGE_2, load_document(tmp_path / "photo.jpg").text) >= 0.95


def test_missing_tesseract_is_reported_never_silent(scans):
    no_ocr = LoadOptions(tesseract_cmd=str(scans / "no-such-tesseract"))
    with pytest.raises(NoExtractableText, match=r"page 1 has no text layer; install tesseract-ocr to read "
                                                 r"scanned pages$"):
        load_document(scans / "scan.pdf", options=no_ocr)
    mixed = load_document(scans / "mixed.pdf", options=no_ocr)  # the text pages still load, with a warning
    assert [s.page for s in mixed.sections] == [1, 3] and mixed.ocr_pages == 0
    assert mixed.warnings == ("page 2 has no text layer; install tesseract-ocr to read scanned pages",)
    with pytest.raises(NoExtractableText, match=r"install tesseract-ocr"):
        load_document(scans / "scan.tiff", options=no_ocr)


def test_a_partly_read_file_is_added_with_its_warning(scans, embedder, tmp_path):
    no_ocr = LoadOptions(tesseract_cmd=str(tmp_path / "no-such-tesseract"))
    parameters = dataclasses.replace(IngestParameters.defaults(embedder), load_options=no_ocr)
    summary = ingest_paths([scans / "mixed.pdf"], EmbeddedIndex(tmp_path / "indexes" / "t"), parameters)
    (outcome,) = summary.outcomes
    assert outcome.status == "added" and outcome.reason is None and summary.ok
    assert outcome.warning == "page 2 has no text layer; install tesseract-ocr to read scanned pages"
    assert summary.as_dict()["files"][0]["warning"] == outcome.warning


def test_unknown_ocr_language_is_reported(scans, tesseract):
    with pytest.raises(NoExtractableText, match=r"no data for language\(s\) xx-not-a-language"):
        load_document(scans / "scan.pdf", options=LoadOptions(ocr_languages="eng+xx-not-a-language"))


def test_image_pdfs_of_the_corpus(tesseract):
    """The corpus's image-only PDFs hold photos and 4-pt placeholder images, no writing: OCR runs and says so.
    base64image.pdf has only an annotator's banner as text layer over a captioned picture: the caption is read."""
    pdfs = PROJECT_ROOT.parent / "shared" / "data" / "pdfs"
    if not pdfs.is_dir():
        pytest.skip(f"PDF corpus not found at {pdfs}")
    for name in ("grayscale-image.pdf", "cmyk-image.pdf"):
        with pytest.raises(NoExtractableText, match=r"OCR found no text on page 1"):
            load_document(pdfs / name)
    meme = load_document(pdfs / "base64image.pdf")
    assert meme.ocr_pages == 1 and meme.sections[0].text.startswith("Produced with a Trial Version of PDF Annotator")
    assert "assign it to yourself, fix the issue and close it" in meme.text


def test_pdfium_reads_what_pypdf_cannot(monkeypatch):
    """The second chance: when pypdf rejects a file, PDFium's text extraction is tried before failing."""
    import pypdf

    def refuse(*args, **kwargs):
        raise pypdf.errors.PdfReadError("Invalid object in /Pages")

    monkeypatch.setattr(pypdf, "PdfReader", refuse)
    doc = load_document(FIXTURES / "lo-text.pdf")
    assert [s.page for s in doc.sections] == [1, 2] and "Schlossberg" in doc.sections[1].text
    broken = PROJECT_ROOT.parent / "shared" / "data" / "pdfs" / "unreadablemetadata.pdf"
    if broken.is_file():  # its page tree is really missing: both parsers fail, and the reason says so
        monkeypatch.undo()
        with pytest.raises(BrokenDocument, match=r"Invalid object in /Pages; pypdfium2 cannot read it either"):
            load_document(broken)


# --------------------------------------------------------------------------- hostile files and limits
@pytest.fixture(scope="session")
def hostile(made, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    make_zip_bomb_docx(folder / "bomb.docx", unpacked_mb=600)  # 0.6 MB on disk
    make_entity_bomb(folder / "laughs.docx", made / "handbook.docx", "word/document.xml")
    make_entity_bomb(folder / "laughs.xlsx", made / "lab.xlsx", "xl/worksheets/sheet1.xml")
    make_truncated(folder / "truncated.xlsx", made / "lab.xlsx")
    make_empty_pptx(folder / "empty.pptx")
    shutil.copy2(made / "flows.csv", folder / "good.csv")
    return folder


HOSTILE_REASONS = {
    "bomb.docx": ("too_large", r"unpacks to 600 MB, more than max_unzipped_mb \(512\); a zip bomb\?"),
    "laughs.docx": ("broken_document", r"entity amplification"),
    "laughs.xlsx": ("broken_document", r"EntitiesForbidden"),
    "truncated.xlsx": ("broken_document", r"not a readable zip archive \(truncated\?\)"),
    "empty.pptx": ("no_text", r"presentation has no slides"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_REASONS))
def test_hostile_file_fails_with_a_reason(hostile, name):
    error_type, pattern = HOSTILE_REASONS[name]
    start = time.perf_counter()
    with pytest.raises(UnprocessableDocumentError, match=pattern) as info:
        load_document(hostile / name)
    assert info.value.error_type == error_type
    assert time.perf_counter() - start < 5


def test_page_cap(made):
    with pytest.raises(UnprocessableDocumentError, match=r"3 slides, more than max_pages_per_file \(2\)"):
        load_document(made / "review.pptx", options=LoadOptions(max_pages_per_file=2))


def test_hostile_folder_ingest_keeps_the_good_file(hostile, embedder, tmp_path):
    start = time.perf_counter()
    summary = ingest_paths([hostile], EmbeddedIndex(tmp_path / "indexes" / "t"), IngestParameters.defaults(embedder))
    assert time.perf_counter() - start < 60
    outcomes = {Path(o.path).name: o for o in summary.outcomes}
    assert outcomes["good.csv"].status == "added" and outcomes["good.csv"].chunks > 0
    for name, (error_type, pattern) in HOSTILE_REASONS.items():
        assert outcomes[name].status == "failed" and outcomes[name].reason_type == error_type, name
    reader = EmbeddedReader(tmp_path / "indexes" / "t")
    try:
        assert [Path(d.path).name for d in reader.documents()] == ["good.csv"]
    finally:
        reader.close()


def test_time_limit_stops_a_file_and_the_run_goes_on(scans, embedder, tesseract, tmp_path):
    """A file over load_timeout_s fails with the reason (its loader process is stopped); the next file loads."""
    folder = tmp_path / "slow"
    folder.mkdir()
    many = [SCANNED_TEXT] * 12
    make_scanned_tiff(folder / "a-long-scan.tiff", many)
    shutil.copy2(FIXTURES / "lo-text.pdf", folder / "b-text.pdf")
    start = time.perf_counter()
    parameters = dataclasses.replace(IngestParameters.defaults(embedder), load_options=LoadOptions(load_timeout_s=1.5))
    summary = ingest_paths([folder], EmbeddedIndex(tmp_path / "indexes" / "t"), parameters)
    elapsed = time.perf_counter() - start
    outcomes = {Path(o.path).name: o for o in summary.outcomes}
    assert outcomes["a-long-scan.tiff"].status == "failed"
    assert outcomes["a-long-scan.tiff"].reason_type == "load_timeout"
    assert "took longer than 1.5 s to load" in outcomes["a-long-scan.tiff"].reason
    assert outcomes["b-text.pdf"].status == "added"
    assert elapsed < 30


def test_a_stuck_loader_process_is_killed_and_replaced(made, monkeypatch):
    """The backstop for a parser that never returns to Python: the process is killed at the limit."""
    from format_fixtures import stuck_loader
    from ingest.formats import worker

    monkeypatch.setattr(worker, "GRACE_S", 0.5)
    with worker.FileLoader(LoadOptions(load_timeout_s=1)) as loader:
        monkeypatch.setattr(worker, "_serve", stuck_loader)
        start = time.perf_counter()
        with pytest.raises(UnprocessableDocumentError, match=r"took longer than 1 s to load") as info:
            loader.load(made / "review.pptx", (made / "review.pptx").read_bytes())
        assert info.value.error_type == "load_timeout" and time.perf_counter() - start < 10
        assert loader._proc is None  # killed
        monkeypatch.undo()
        assert loader.load(made / "review.pptx", (made / "review.pptx").read_bytes()).pages == 3  # a new one


def test_without_a_loader_process_files_load_in_process(made, monkeypatch, caplog):
    """Where no child process can be spawned (e.g. a main module read from stdin), the run still loads."""
    from ingest.formats import worker

    def refuse(*args, **kwargs):
        raise OSError("no processes here")

    monkeypatch.setattr(worker.multiprocessing, "get_context", refuse)
    with worker.FileLoader(LoadOptions()) as loader:
        assert loader.load(made / "review.pptx", (made / "review.pptx").read_bytes()).pages == 3
        assert loader.load(made / "lab.xlsx", (made / "lab.xlsx").read_bytes()).kind == "xlsx"
    assert [r.message for r in caplog.records].count(
        "cannot start the file loader process (OSError: no processes here); files load in-process, where "
        "load_timeout_s is only checked between pages and rows") == 1


# --------------------------------------------------------------------------- ingest: attachments, OCR counts, retrieval
@pytest.fixture(scope="session")
def all_formats(made, scans, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("all-formats")
    for source in [*made.iterdir(), *scans.iterdir(), *FIXTURES.glob("lo-*")]:
        if source.name not in ("people.csv", "lo-text.pdf"):  # lo-text.pdf's pages are in mixed.pdf
            shutil.copy2(source, folder / source.name)
    return folder


@pytest.fixture(scope="session")
def formats_index(all_formats, embedder, tesseract, tmp_path_factory):
    root = tmp_path_factory.mktemp("formats-home") / "indexes" / "formats"
    events: list[ProgressEvent] = []
    summary = ingest_paths([all_formats], EmbeddedIndex(root), IngestParameters.defaults(embedder),
                           progress=events.append)
    return root, summary, events


def test_every_format_ingests_with_ocr_counted(formats_index, all_formats):
    root, summary, events = formats_index
    outcomes = {o.path: o for o in summary.outcomes}
    assert {o.status for o in summary.outcomes} == {"added"}, [o for o in summary.outcomes if o.status != "added"]
    assert str(attachment_path(all_formats / "samples.eml", "budget.csv")) in outcomes
    assert summary.ocr_pages == 4 and summary.ocr_seconds > 0  # scan.pdf 1 + scan.tiff 2 + mixed.pdf 1
    assert summary.as_dict()["ocr_pages"] == 4
    ocr_events = [(e.path, e.page, e.pages) for e in events if isinstance(e, OcrPage)]
    assert (str(all_formats / "scan.tiff"), 2, 2) in ocr_events


def test_attachment_is_its_own_document_linked_to_the_mail(formats_index, all_formats, embedder):
    root, _, _ = formats_index
    mail = all_formats / "samples.eml"
    reader = EmbeddedReader(root)
    try:
        attached = reader.find_document(str(attachment_path(mail, "budget.csv")))
        assert attached is not None and attached.kind == "csv" and attached.bytes == len(BUDGET_CSV)
        assert attached.title == "attachment budget.csv of Borehole samples from Site 7"
        assert attached.id == document_id(attachment_path(mail, "budget.csv"))
    finally:
        reader.close()


def test_attachments_follow_their_mail(made, embedder, tmp_path):
    """A changed mail drops the attachments it no longer has; deleting the mail deletes its attachments."""
    folder = tmp_path / "mail"
    folder.mkdir()
    mail = make_eml(folder / "m.eml", ("report.docx", (made / "handbook.docx").read_bytes(), DOCX_MIME))
    root = tmp_path / "indexes" / "t"
    first = ingest_paths([folder], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    assert [o.status for o in first.outcomes] == ["added", "added"]
    make_eml(mail, ("sheet.xlsx", (made / "lab.xlsx").read_bytes(), "application/octet-stream"))
    second = ingest_paths([folder], EmbeddedIndex(root), IngestParameters.defaults(embedder))
    assert [(Path(o.path).name, o.status) for o in second.outcomes] == [("m.eml", "updated"),
                                                                        ("m.eml#sheet.xlsx", "added")]
    reader = EmbeddedReader(root)
    assert sorted(Path(d.path).name for d in reader.documents()) == ["m.eml", "m.eml#sheet.xlsx"]
    reader.close()
    delete_document(EmbeddedIndex(root), str(mail))
    reader = EmbeddedReader(root)
    assert reader.documents() == []
    reader.close()


QUESTIONS = [  # (question, file, page, section)
    ("When are the Bramley trees pruned?", "handbook.docx", None, "Pruning schedule"),
    ("How far did the outlet glacier retreat since the last survey?", "review.pptx", 2, "Glacier survey results"),
    ("Who did the drone photogrammetry?", "review.pptx", 2, "Glacier survey results"),
    ("How many seismometers are in the basement vault?", "lab.xlsx", None, "Inventory"),
    ("Which room is Amara Okafor's office in?", "lab.xlsx", None, "Staff"),
    ("What was the peak flow at Millbrook Weir on the Tamar?", "flows.csv", None, "flows.csv"),
    ("What layer did the borehole core from 40 metres show?", "samples.eml", None, None),
    ("What did the core drilling at Site 7 cost?", "samples.eml#budget.csv", None, "samples.eml#budget.csv"),
    ("How long did the harbour of Port Averill stay frozen?", "scan.pdf", 1, None),
    ("Where does the pelican colony nest?", "scan.tiff", 2, None),
    ("Which river steamer did Marguerite Dufresne command?", "mixed.pdf", 2, None),
    ("When did the cable car to the Schlossberg open?", "mixed.pdf", 3, None),
    ("When is oxalic acid applied against varroa?", "lo-report.docx", None, "Varroa treatment"),
    ("What time does the last ferry depart from November?", "lo-slides.pptx", 2, "Winter service"),
    ("How deep is Wastwater?", "lo-lakes.xlsx", None, "lo-lakes"),
    ("What oil did the lamp burn before paraffin?", "lo-book.epub", None, None),
]


def test_questions_retrieve_the_right_page_slide_or_sheet(formats_index, embedder):
    root, _, _ = formats_index
    reader = EmbeddedReader(root)
    try:
        retriever = Retriever(reader, embedder)
        for question, name, page, section in QUESTIONS:
            top = retriever.retrieve(question, k=3).hits[0].chunk
            assert (Path(top.path).name, top.page, top.section) == (name, page, section), question
    finally:
        reader.close()


def test_cli_summary_shows_ocr(settings, scans, tesseract, tmp_path):
    folder = tmp_path / "cli"
    folder.mkdir()
    shutil.copy2(scans / "scan.pdf", folder / "scan.pdf")
    shutil.copy2(FIXTURES / "lo-report.docx", folder / "minutes.docx")
    env = cli_env(settings, COLUMNS="200")
    rag = [sys.executable, "-m", "app.cli", "--home", str(tmp_path / "home")]
    proc = subprocess.run([*rag, "ingest", str(folder), "--json"], capture_output=True, text=True, env=env,
                          cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["added"], report["ocr_pages"]) == (2, 1) and report["ocr_seconds"] > 0
    proc = subprocess.run([*rag, "ingest", str(folder), "--index", "other"], capture_output=True, text=True,
                          env={**env, "RAG_TESSERACT_CMD": str(tmp_path / "missing-tesseract")},
                          cwd=PROJECT_ROOT, timeout=120)
    assert proc.returncode == 2
    text = " ".join(proc.stdout.split())
    assert "page 1 has no text layer; install tesseract-ocr to read scanned pages" in text
    assert "│ OCR pages │ 0 │" in text and "│ OCR seconds │ 0.0 │" in text
