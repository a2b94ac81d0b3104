from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.loaders import (
    SUPPORTED_SUFFIXES,
    BrokenDocument,
    EncryptedDocument,
    NoExtractableText,
    UnsupportedFileType,
    load_document,
    normalize_pdf_text,
)
from rag.core.errors import UnprocessableDocumentError

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PDFS = DATA / "pdfs"
MD_DOCS = DATA / "squad2-dev" / "docs"


def _pdf_expectations() -> dict[str, dict]:
    entries = json.loads((PDFS / "files.json").read_text(encoding="utf-8"))["data"]
    return {e["path"]: e for e in entries}


def _assert_consistent(doc) -> None:
    assert doc.sections
    for section in doc.sections:
        assert section.text and section.text == section.text.strip()
        assert doc.text[section.start:section.start + len(section.text)] == section.text
    assert doc.title


@pytest.fixture(scope="module")
def pdf_results() -> dict[str, object]:
    if not PDFS.is_dir():
        pytest.skip(f"PDF corpus not found at {PDFS}")
    results: dict[str, object] = {}
    for name in _pdf_expectations():
        try:
            results[name] = load_document(PDFS / name)
        except UnprocessableDocumentError as exc:
            results[name] = exc
    return results


def test_pdf_corpus_loads_or_fails_cleanly(pdf_results):
    expected = _pdf_expectations()
    assert len(expected) == 31
    for name, result in pdf_results.items():
        if isinstance(result, UnprocessableDocumentError):
            assert result.message, name
            assert result.status_code == 422
            continue
        assert result.kind == "pdf"
        assert result.pages == expected[name]["pages"], name
        _assert_consistent(result)
        assert all(s.page is not None and 1 <= s.page <= result.pages for s in result.sections), name


def test_pdf_corpus_mostly_yields_text(pdf_results):
    loaded = [r for r in pdf_results.values() if not isinstance(r, Exception)]
    assert len(loaded) >= 20
    geo = pdf_results["GeoTopo-komprimiert.pdf"]
    assert geo.title == "Geometrie und Topologie"
    assert len(geo.sections) > 100 and "Topologische" in geo.text


def test_password_pdf_is_encrypted(pdf_results):
    result = pdf_results["libreoffice-writer-password.pdf"]
    assert isinstance(result, EncryptedDocument)
    assert "password" in result.message
    assert result.error_type == "encrypted_document"


def test_image_only_pdf_has_no_text(pdf_results):
    assert isinstance(pdf_results["grayscale-image.pdf"], NoExtractableText)


def test_garbage_pdf_is_broken(tmp_path: Path):
    path = tmp_path / "fake.pdf"
    path.write_bytes(b"%PDF-1.4\nthis is not really a pdf\n%%EOF")
    with pytest.raises(BrokenDocument, match="broken PDF"):
        load_document(path)
    with pytest.raises(BrokenDocument):
        load_document(tmp_path / "empty.pdf", data=b"")


def test_normalize_pdf_text():
    raw = "The \ufb01rst \ufb02ow of infor-\nmation\nacross  lines.\n\n\nNext\tpara\x00graph\nhere. Jean-\nPaul."
    expected = "The first flow of information across lines.\n\nNext paragraph here. Jean-Paul."
    assert normalize_pdf_text(raw) == expected
    assert normalize_pdf_text("  \n \x0c ") == ""


def test_markdown_sections_and_title():
    doc = load_document(MD_DOCS / "normans.md")
    assert doc.kind == "md" and doc.title == "Normans" and doc.pages is None
    _assert_consistent(doc)
    assert "# Normans" not in doc.text
    assert doc.sections[0].title == "Normans"
    assert doc.text.startswith("The Normans (Norman: Nourmands;")


def test_markdown_headings_split_sections(tmp_path: Path):
    path = tmp_path / "guide.MARKDOWN"
    path.write_text(
        "Intro line.\n\n# Setup\n\nInstall it.\n\n```\n# not a heading\n```\n\n## Usage ##\nRun it.\n\nTwice.\n",
        encoding="utf-8",
    )
    doc = load_document(path)
    assert doc.kind == "md" and doc.title == "Setup"
    assert [s.title for s in doc.sections] == [None, "Setup", "Usage"]
    assert doc.sections[0].text == "Intro line."
    assert "# not a heading" in doc.sections[1].text
    assert doc.sections[2].text == "Run it.\n\nTwice."
    _assert_consistent(doc)


def test_html_visible_text(tmp_path: Path):
    path = tmp_path / "page.htm"
    path.write_text(
        "<!doctype html><html><head><title>The  Page</title><style>p{color:red}</style>"
        "<script>var hidden = 1;</script></head><body><p>Caf&eacute; &amp; bar</p><div>one<br>two</div>"
        "<h2>Second <em>part</em></h2><ul><li>alpha</li><li>beta</li></ul><noscript>no js</noscript>"
        "<template><p>tpl</p></template></body></html>",
        encoding="utf-8",
    )
    doc = load_document(path)
    assert doc.kind == "html" and doc.title == "The Page"
    assert [s.title for s in doc.sections] == [None, "Second part"]
    assert doc.sections[0].text == "Café & bar\n\none\n\ntwo"
    assert doc.sections[1].text == "alpha\n\nbeta"
    for hidden in ("color", "hidden", "no js", "tpl", "The Page"):
        assert hidden not in doc.text
    _assert_consistent(doc)


def test_html_title_falls_back_to_heading(tmp_path: Path):
    path = tmp_path / "x.html"
    path.write_bytes("<h1>Überblick</h1><p>Text</p>".encode("cp1252"))
    doc = load_document(path)
    assert doc.title == "Überblick" and doc.text == "Text"


def test_html_permalinks_are_no_text(tmp_path: Path):
    """Sphinx and MkDocs put a "¶" permalink after every heading and option term: the Python manual's "-E¶" was no
    option a term line could name."""
    path = tmp_path / "cmdline.html"
    path.write_text('<h1>Command line<a class="headerlink" href="#cl" title="Permalink">¶</a></h1><dl><dt>-E'
                    '<a class="headerlink" href="#e">¶</a></dt><dd><p>Ignore all PYTHON* variables.</p></dd></dl>'
                    '<p>See <a class="reference" href="#e">-E</a>.</p>', encoding="utf-8")
    doc = load_document(path)
    assert doc.sections[-1].title == "Command line"
    assert doc.sections[-1].text == "-E\n\nIgnore all PYTHON* variables.\n\nSee -E."
    assert "¶" not in doc.text


def test_txt_utf8_bom_and_latin1_fallback(tmp_path: Path):
    path = tmp_path / "notes.txt"
    doc = load_document(path, data="\ufeffShort title\r\n\r\nBody text.\r\n".encode("utf-8"))
    assert doc.kind == "txt" and doc.title == "Short title"
    assert doc.text == "Short title\n\nBody text."
    assert doc.sections[0].title is None and doc.sections[0].page is None

    path.write_bytes("Garçon, un café crème!".encode("latin-1"))
    assert load_document(path).text == "Garçon, un café crème!"


def test_unsupported_suffix(tmp_path: Path):
    with pytest.raises(UnsupportedFileType, match=r"unsupported file type '\.rtf'"):
        load_document(tmp_path / "report.rtf", data=b"{\\rtf1 hello}")
    assert ".pdf" in SUPPORTED_SUFFIXES and ".docx" in SUPPORTED_SUFFIXES and ".rtf" not in SUPPORTED_SUFFIXES


@pytest.mark.parametrize("name", ["empty.txt", "blank.md", "blank.html"])
def test_empty_documents_have_no_text(tmp_path: Path, name: str):
    path = tmp_path / name
    path.write_text("  \n\n <script>x</script>" if name.endswith("html") else " \n\t\n", encoding="utf-8")
    with pytest.raises(NoExtractableText) as info:
        load_document(path)
    assert info.value.error_type == "no_text" and info.value.message


@pytest.mark.parametrize("data", [
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",  # NUL bytes
    b"\xff\xfegarbage",  # a UTF-16 BOM, then an odd byte count: was indexed as the title '慧扲条e\ufffd'
    b"\xff\xfe" + bytes(range(256)) * 8,  # a UTF-16 BOM, then binary
    bytes(range(1, 256)) * 4,  # no NUL, but mostly control bytes whatever the 8-bit encoding
    "\ufeff".encode("utf-8") + bytes(range(0x80, 0x100)) * 4,  # a UTF-8 BOM, then bytes that are not UTF-8
], ids=["nul", "utf16-bom-odd", "utf16-bom-binary", "controls", "utf8-bom-binary"])
@pytest.mark.parametrize("name", ["x.txt", "x.md", "x.html"])
def test_binary_text_file_is_broken(tmp_path: Path, data: bytes, name: str):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(BrokenDocument, match=r"^not a text file \(binary content\)$") as info:
        load_document(path)
    assert info.value.status_code == 422


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be-bom", "utf-32", "utf-8-sig"])
def test_text_with_a_bom_still_loads(tmp_path: Path, encoding: str):
    text = "# Überblick\n\nGarçon, привет, 中文 — straße.\n"
    data = b"\xfe\xff" + text.encode("utf-16-be") if encoding == "utf-16-be-bom" else text.encode(encoding)
    path = tmp_path / "notes.md"
    path.write_bytes(data)
    doc = load_document(path)
    assert doc.title == "Überblick" and doc.text == "Garçon, привет, 中文 — straße."
    # One stray byte (a truncated UTF-16 file) is not "binary": the rest still loads.
    path.write_bytes(("\ufeff" + "Plain words here. " * 20).encode("utf-16-le")[:-1])
    assert load_document(path).text.startswith("Plain words here. Plain words here.")


def test_ansi_coloured_log_is_text(tmp_path: Path):
    path = tmp_path / "build.txt"
    path.write_bytes(b"\x1b[31mERROR\x1b[0m the harbour ferry build failed\n" * 30)
    assert "harbour ferry" in load_document(path).text
