"""Token-aware chunking: whole paragraphs where they fit, sentences where not, tokens as a last resort.

Works on one flat token list per section, built from a single batched encoding of every
paragraph of the document. A chunk is a token range [a, b); its text is the document text
from token a's first character to token b-1's last, so it never starts or ends in whitespace
and always equals doc.text[start:end].
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from tokenizers import Tokenizer

from ingest.loaders import LoadedDocument, Section
from rag.core.records import Chunk
from rag.core.settings import Settings
from rag.core.text import SENTENCE_BOUNDARY

_PARAGRAPH_RE = re.compile(r"\S(?:.*?\S)?(?=\s*\n[ \t]*\n|\s*$)", re.DOTALL)
_MAX_REPAIR_ROUNDS = 4



@dataclass(frozen=True)
class _SectionTokens:
    """Token char spans (absolute offsets into doc.text) and the break points between them."""

    spans: list[tuple[int, int]]
    units: list[int]  # cut points packing prefers: paragraph starts, sentence starts inside long paragraphs
    sentences: list[int]  # every sentence start (and paragraph start): where an overlap likes to begin
    words: list[int]  # token indices preceded by whitespace: acceptable hard cuts


def chunk_document(
    doc: LoadedDocument, tokenizer: Tokenizer, chunk_tokens: int = Settings.chunk_tokens,
    overlap: int = Settings.chunk_overlap
) -> list[Chunk]:
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be positive")
    if not 0 <= overlap < chunk_tokens:
        raise ValueError("overlap must be >= 0 and smaller than chunk_tokens")
    tokenizer, stride = _counting_view(tokenizer)
    text = doc.text
    paragraphs = [
        (si, section.start + m.start(), section.start + m.end())
        for si, section in enumerate(doc.sections)
        for m in _PARAGRAPH_RE.finditer(section.text)
    ]
    encodings = tokenizer.encode_batch([text[a:b] for _, a, b in paragraphs], add_special_tokens=False)

    per_section: list[list[tuple[int, int, list[tuple[int, int]]]]] = [[] for _ in doc.sections]
    for (si, a, b), enc in zip(paragraphs, encodings):
        per_section[si].append((a, b, [(a + s, a + e) for s, e in _offsets(enc, stride) if e > s]))

    ranges: list[tuple[Section, int, int]] = []
    for section, paras in zip(doc.sections, per_section):
        tokens = _section_tokens(paras, text, chunk_tokens)
        ranges.extend((section, s, e) for s, e in _pack(tokens, chunk_tokens, overlap))
    ranges = _enforce_limit(ranges, text, tokenizer, stride, chunk_tokens)
    return [
        Chunk(text=text[s:e], page=sec.page, section=sec.title, start=s, end=e, ordinal=i)
        for i, (sec, s, e) in enumerate(ranges)
    ]


def _counting_view(tokenizer: Tokenizer) -> tuple[Tokenizer, int]:
    """The embedder's tokenizer truncates (and may pad); counting needs every token.

    Right-truncation is undone from the overflow pieces (see _offsets), which is far cheaper
    than copying the tokenizer per document; only other truncation forces a copy.
    """
    truncation = tokenizer.truncation
    if truncation is None or truncation.get("direction", "right") == "right":
        return tokenizer, (truncation or {}).get("stride", 0)
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    return copy, 0


def _offsets(encoding, stride: int) -> list[tuple[int, int]]:
    """Char offsets of every real token: padding dropped, overflow pieces stitched back on."""
    out = [o for o, m in zip(encoding.offsets, encoding.attention_mask) if m]
    for part in encoding.overflowing:
        out += [o for o, m in zip(part.offsets, part.attention_mask) if m][stride:]
    return out


def _section_tokens(
    paras: list[tuple[int, int, list[tuple[int, int]]]], text: str, chunk_tokens: int
) -> _SectionTokens:
    spans: list[tuple[int, int]] = []
    units: list[int] = []
    sentences: list[int] = []
    words: list[int] = []
    for a, b, para_spans in paras:
        if not para_spans:
            continue
        first = len(spans)
        units.append(first)
        sentences.append(first)
        starts = [s for s, _ in para_spans]
        for m in SENTENCE_BOUNDARY.finditer(text, a, b):
            i = first + bisect_left(starts, m.end())
            if first < i < first + len(para_spans):
                sentences.append(i)
                if len(para_spans) > chunk_tokens:
                    units.append(i)
        words.append(first)
        words.extend(first + k for k in range(1, len(para_spans)) if para_spans[k][0] > para_spans[k - 1][1])
        spans.extend(para_spans)
    return _SectionTokens(spans, sorted(set(units)), sorted(set(sentences)), words)


def _pack(tokens: _SectionTokens, chunk_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """Greedy token ranges -> char ranges.

    A paragraph that fits in one chunk is never cut; when it fits only without the overlap,
    the overlap shrinks for that chunk. Word cuts happen only inside over-long sentences.
    """
    n = len(tokens.spans)
    units = tokens.units + [n]
    min_progress = max(1, (chunk_tokens - overlap) // 2)
    out: list[tuple[int, int]] = []
    a, covered = 0, 0  # covered: tokens [0, covered) already sit in some chunk
    while covered < n:
        limit = min(n, a + chunk_tokens)
        b1 = _last_in(units, covered, limit)
        if limit == n or (b1 is not None and b1 - covered >= min_progress):
            b = limit if limit == n else b1
        elif (b2 := _last_in(units, covered, covered + chunk_tokens)) is not None and b2 > (b1 or 0):
            b = b2
            a = _shrunk_start(tokens, max(a, b2 - chunk_tokens), covered)
        elif b1 is not None and units[bisect_right(units, b1)] - b1 <= chunk_tokens:
            b = b1  # small, but what follows fits in the next chunk whole
        else:
            b = _last_in(tokens.words, covered, limit) or limit
        out.append((tokens.spans[a][0], tokens.spans[b - 1][1]))
        covered = b
        if b < n:
            a = _overlap_start(tokens, a, b, chunk_tokens, overlap)
    return out


def _shrunk_start(tokens: _SectionTokens, lo: int, covered: int) -> int:
    """Earliest sentence (else word) start in [lo, covered): the most overlap that still fits."""
    for points in (tokens.sentences, tokens.words):
        i = bisect_left(points, lo)
        if i < len(points) and points[i] < covered:
            return points[i]
    return covered


def _last_in(points: list[int], lo: int, hi: int) -> int | None:
    """Largest p in points with lo < p <= hi."""
    i = bisect_right(points, hi) - 1
    return points[i] if i >= 0 and points[i] > lo else None


def _overlap_start(tokens: _SectionTokens, a: int, b: int, chunk_tokens: int, overlap: int) -> int:
    if overlap == 0:
        return b
    target = b - overlap
    # The next chunk must still reach past b, and start after this one did.
    lo = max(a + 1, b - chunk_tokens + 1, b - overlap - overlap // 2)
    hi = b - max(1, overlap // 2)
    for points in (tokens.sentences, tokens.words):
        window = points[bisect_left(points, lo):bisect_right(points, hi)]
        if window:
            return min(window, key=lambda p: (abs(p - target), -p))
    return max(a + 1, min(target, b - 1))


def _enforce_limit(
    ranges: list[tuple[Section, int, int]], text: str, tokenizer: Tokenizer, stride: int, chunk_tokens: int
) -> list[tuple[Section, int, int]]:
    """Re-count every chunk on its own; hard-cut the rare one a mid-word cut made grow."""
    for _ in range(_MAX_REPAIR_ROUNDS):
        encodings = tokenizer.encode_batch([text[s:e] for _, s, e in ranges], add_special_tokens=False)
        offsets = [_offsets(enc, stride) for enc in encodings]
        if all(len(o) <= chunk_tokens for o in offsets):
            break
        fixed: list[tuple[Section, int, int]] = []
        for (section, s, e), offs in zip(ranges, offsets):
            if len(offs) <= chunk_tokens:
                fixed.append((section, s, e))
                continue
            spans = [(s + x, s + y) for x, y in offs if y > x]
            step = max(1, chunk_tokens - (len(offs) - len(spans)))  # leave room for tokens without a span
            fixed.extend(
                (section, spans[i][0], spans[min(i + step, len(spans)) - 1][1]) for i in range(0, len(spans), step)
            )
        ranges = fixed
    return ranges
