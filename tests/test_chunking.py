from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingest.chunking import Chunk, chunk_document
from ingest.loaders import LoadedDocument, Section, load_document

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MD_DOCS = DATA / "squad2-dev" / "docs"
PDFS = DATA / "pdfs"


@pytest.fixture(scope="module")
def tok(embedder_tokenizer):
    return embedder_tokenizer


@pytest.fixture(scope="module")
def plain(tok):
    """Counts the way chunk_document must: without the file's padding or the embedder's truncation."""
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tok.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _doc_from_texts(*texts: str, pages: bool = False) -> LoadedDocument:
    sections, offset = [], 0
    for i, text in enumerate(texts):
        text = text.strip()
        sections.append(Section(text=text, page=i + 1 if pages else None, title=f"s{i}", start=offset))
        offset += len(text) + 2
    return LoadedDocument(Path("x.txt"), "txt", "x", tuple(sections), len(texts) if pages else None)


def _check_invariants(doc: LoadedDocument, chunks: list[Chunk], plain, chunk_tokens: int) -> None:
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    bounds = [(s.start, s.start + len(s.text), s) for s in doc.sections]
    counts = [len(e.ids) for e in plain.encode_batch([c.text for c in chunks], add_special_tokens=False)]
    for chunk, count in zip(chunks, counts):
        assert doc.text[chunk.start:chunk.end] == chunk.text
        assert chunk.text and chunk.text == chunk.text.strip()
        assert count <= chunk_tokens, (count, chunk.text[:80])
        owner = [s for a, b, s in bounds if a <= chunk.start and chunk.end <= b]
        assert len(owner) == 1, "chunk crosses a section"
        assert (chunk.page, chunk.section) == (owner[0].page, owner[0].title)
    # Every paragraph's opening words land in some chunk.
    for section in doc.sections:
        for paragraph in re.split(r"\n\s*\n", section.text):
            head = " ".join(paragraph.split())[:30]
            if head:
                assert any(head in " ".join(c.text.split()) for c in chunks), head


@pytest.mark.parametrize("chunk_tokens,overlap", [(200, 30), (64, 16), (24, 0)])
def test_markdown_corpus_invariants(tok, plain, chunk_tokens, overlap):
    for path in sorted(MD_DOCS.glob("*.md")):
        doc = load_document(path)
        chunks = chunk_document(doc, tok, chunk_tokens=chunk_tokens, overlap=overlap)
        assert len(chunks) > 1
        _check_invariants(doc, chunks, plain, chunk_tokens)
        # Contiguous coverage: no gap between consecutive chunks of one section.
        for x, y in zip(chunks, chunks[1:]):
            if x.section == y.section and x.page == y.page:
                assert y.start <= x.end or not doc.text[x.end:y.start].strip()


def test_whole_paragraphs_are_kept(tok, plain):
    doc = load_document(MD_DOCS / "normans.md")
    chunks = chunk_document(doc, tok)
    paragraphs = [p.strip() for p in doc.text.split("\n\n")]
    fitting = [p for p in paragraphs if len(plain.encode(p, add_special_tokens=False).ids) <= 200]
    assert fitting
    for paragraph in fitting:
        assert any(paragraph in c.text for c in chunks), paragraph[:60]


def test_overlap_in_long_paragraph(tok, plain):
    sentences = [f"Sentence number {i} talks about topic {i * 7} in some detail." for i in range(120)]
    doc = _doc_from_texts(" ".join(sentences))
    chunks = chunk_document(doc, tok, chunk_tokens=100, overlap=20)
    _check_invariants(doc, chunks, plain, 100)
    assert len(chunks) > 5
    for x, y in zip(chunks, chunks[1:]):
        assert y.start < x.end, "consecutive chunks must overlap"
        shared = plain.encode(doc.text[y.start:x.end], add_special_tokens=False)
        assert 5 <= len(shared.ids) <= 40
        assert y.text.startswith("Sentence number"), "overlap snaps to a sentence start"
    assert chunks[-1].text.endswith("topic 833 in some detail.")


def test_sections_and_pages_are_never_crossed(tok, plain):
    doc = _doc_from_texts("Page one text. " * 40, "Second page. Short.", "Third page. " * 90, pages=True)
    chunks = chunk_document(doc, tok, chunk_tokens=50, overlap=10)
    _check_invariants(doc, chunks, plain, 50)
    assert {c.page for c in chunks} == {1, 2, 3}
    assert [c.text for c in chunks if c.page == 2] == ["Second page. Short."]


def test_overlong_sentence_is_hard_cut(tok, plain):
    words = " ".join(f"word{i}" for i in range(400))
    cjk = "東京は日本の首都であり" * 30  # no whitespace at all
    doc = _doc_from_texts(words, cjk)
    chunks = chunk_document(doc, tok, chunk_tokens=50, overlap=10)
    _check_invariants(doc, chunks, plain, 50)
    assert all(c.start < p.end for c, p in zip(chunks[1:], chunks) if c.section == p.section)


def test_pdf_chunks_keep_pages(tok, plain):
    doc = load_document(PDFS / "pdflatex-4-pages.pdf")
    chunks = chunk_document(doc, tok)
    _check_invariants(doc, chunks, plain, 200)
    assert {c.page for c in chunks} == {1, 2, 3, 4}
    assert all(c.section is None for c in chunks)


@pytest.mark.parametrize("stride,pad,direction", [(0, False, "right"), (4, True, "right"), (0, True, "left")])
def test_truncating_padding_tokenizer(tok, plain, stride, pad, direction):
    """The embedder's tokenizer truncates; tokenizer.json may pad. Counting must see every token."""
    from tokenizers import Tokenizer

    capped = Tokenizer.from_str(tok.to_str())
    capped.enable_truncation(16, stride=stride, direction=direction)
    if pad:
        capped.enable_padding(length=16)
    doc = _doc_from_texts("Alpha beta gamma delta. " * 60, "Epsilon zeta " * 50)
    chunks = chunk_document(doc, capped, chunk_tokens=40, overlap=8)
    _check_invariants(doc, chunks, plain, 40)
    assert chunks == chunk_document(doc, plain, chunk_tokens=40, overlap=8)
    assert capped.truncation is not None and capped.truncation["max_length"] == 16  # caller's tokenizer untouched


def test_bad_arguments(tok):
    doc = _doc_from_texts("Text.")
    with pytest.raises(ValueError):
        chunk_document(doc, tok, chunk_tokens=10, overlap=10)
    assert [c.text for c in chunk_document(doc, tok)] == ["Text."]
