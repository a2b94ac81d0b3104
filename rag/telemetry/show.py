"""Reading the OTLP JSON Lines trace files back: spans, grouped into traces, drawn as trees with timings
(``rag trace show``), so an operator reads a slow request without any other tool."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from rag.core.errors import BadRequestError

KINDS = {0: "", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
# Attributes worth a glance on a span's line, in this order (the full set is in the file).
SHOWN = {
    "http.request.method": "method", "url.path": "path", "http.response.status_code": "status",
    "gen_ai.request.top_k": "top_k", "rag.retrieval.hits": "hits", "rag.retrieval.dense_ms": "dense_ms",
    "rag.retrieval.lexical_ms": "lexical_ms", "gen_ai.usage.input_tokens": "input_tokens",
    "gen_ai.usage.cache_read.input_tokens": "cached_tokens", "gen_ai.usage.output_tokens": "output_tokens",
    "gen_ai.response.time_to_first_chunk": "first_chunk_s", "gen_ai.response.finish_reasons": "finish",
    "rag.compression.passages": "passages", "rag.answer.abstained": "abstained",
    "rag.answer.abstain_reason": "reason", "rag.answer.citations": "citations", "file.path": "file",
    "rag.ingest.format": "format", "rag.ingest.pages": "pages", "rag.ingest.ocr_pages": "ocr_pages",
    "rag.ingest.chunks": "chunks", "rag.ingest.outcome": "outcome", "rag.embeddings.inputs": "inputs",
    "error.type": "error"}


@dataclass
class SpanRow:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: bool
    children: list["SpanRow"] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def any_value(value: dict[str, Any]) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value."""
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: any_value(kv.get("value", {})) for kv in value["kvlistValue"].get("values", [])}
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    return None


def trace_files(target: Path) -> list[Path]:
    """The trace files of a telemetry folder (rotated ones too, oldest first), or the one file named."""
    if target.is_dir():
        files = sorted(target.glob("traces.jsonl*"), key=lambda p: (-_rotation(p), p.name))
        if not files:
            raise BadRequestError(f"no traces.jsonl in {target} (is telemetry = \"file\"?)")
        return files
    if not target.is_file():
        raise BadRequestError(f"{target} does not exist")
    return [target]


def _rotation(path: Path) -> int:
    suffix = path.name.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def read_spans(files: Iterable[Path]) -> Iterator[SpanRow]:
    """Every span in the files; a line that is not OTLP JSON (cut by a full disk) is skipped."""
    for path in files:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    request = json.loads(line)
                except ValueError:
                    continue
                for resource in request.get("resourceSpans", []):
                    for scope in resource.get("scopeSpans", []):
                        for span in scope.get("spans", []):
                            yield SpanRow(
                                trace_id=span.get("traceId", ""), span_id=span.get("spanId", ""),
                                parent_id=span.get("parentSpanId", ""), name=span.get("name", ""),
                                kind=KINDS.get(int(span.get("kind", 0)), ""),
                                start_ns=int(span.get("startTimeUnixNano", 0)),
                                end_ns=int(span.get("endTimeUnixNano", 0)),
                                attributes={a["key"]: any_value(a.get("value", {}))
                                            for a in span.get("attributes", [])},
                                error=span.get("status", {}).get("code") in (2, "STATUS_CODE_ERROR"))


def build_traces(spans: Iterable[SpanRow]) -> dict[str, list[SpanRow]]:
    """Trace id -> its root spans (a span whose parent is not in the files is a root), children linked."""
    by_trace: dict[str, dict[str, SpanRow]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, {})[span.span_id] = span
    roots: dict[str, list[SpanRow]] = {}
    for trace_id, members in by_trace.items():
        for span in members.values():
            parent = members.get(span.parent_id)
            if parent is None:
                roots.setdefault(trace_id, []).append(span)
            else:
                parent.children.append(span)
        for span in members.values():
            span.children.sort(key=lambda s: s.start_ns)
        roots[trace_id].sort(key=lambda s: s.start_ns)
    return roots


def pick_traces(roots: dict[str, list[SpanRow]], trace_id: str | None, slowest: int | None,
                latest: int = 3) -> list[tuple[str, list[SpanRow]]]:
    """The traces to show: the one whose id starts with ``trace_id``, the ``slowest`` N, or the ``latest``."""
    def duration(item: tuple[str, list[SpanRow]]) -> int:
        return max(s.end_ns for s in item[1]) - min(s.start_ns for s in item[1])

    items = list(roots.items())
    if trace_id:
        found = [item for item in items if item[0].startswith(trace_id.lower())]
        if not found:
            raise BadRequestError(f"no trace {trace_id} in the files")
        return found[:1]
    if slowest:
        return sorted(items, key=duration, reverse=True)[:slowest]
    return sorted(items, key=lambda item: min(s.start_ns for s in item[1]))[-latest:]


def render_trace(trace_id: str, roots: list[SpanRow]) -> list[str]:
    """One trace as text: a header, then one line per span, indented under its parent, with its duration,
    its start after the trace began, and the attributes that matter."""
    begin = min(s.start_ns for s in roots)
    end = max(s.end_ns for s in roots)
    lines = [f"trace {trace_id}  {(end - begin) / 1e6:.1f} ms"]

    def walk(span: SpanRow, depth: int) -> None:
        shown = [f"{label}={_short(span.attributes[key])}" for key, label in SHOWN.items()
                 if key in span.attributes]
        flag = "  ERROR" if span.error else ""
        kind = f" [{span.kind}]" if span.kind in ("server", "client") else ""
        lines.append(f"{'  ' * depth}{span.name}{kind}  {span.ms:.1f} ms  (+{(span.start_ns - begin) / 1e6:.1f} ms)"
                     f"{flag}{'  ' + ' '.join(shown) if shown else ''}")
        for child in span.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 1)
    return lines


def _short(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
