"""The answer result object: one shape for the CLI (--json), the API and the web app."""

from __future__ import annotations

import msgspec


class Source(msgspec.Struct, kw_only=True):
    number: int  # the [n] used in the prompt and in citations
    document_id: str
    path: str
    title: str
    page: int | None
    section: str | None
    chunk_id: int
    score: float  # fused retrieval score (reciprocal-rank fusion)
    relevance: float = 0.0  # what people are shown: the fused score as a share of the best possible, 0-1,
    #                         in rank order ("relevance 92%" in the web app and `rag ask`)
    found_by: str = ""  # "meaning and keywords" | "meaning" | "keywords": which search found it
    dense_score: float | None
    lexical_score: float | None
    snippet: str
    text: str = ""  # the whole chunk
    highlights: list[str] = []  # the sentences of this chunk that were sent to the model


class Evidence(msgspec.Struct, kw_only=True):
    """A quote supporting the answer: ``sources[source - 1].text[start:end] == quote`` (verified, not generated)."""

    source: int
    quote: str
    start: int
    end: int


class Metrics(msgspec.Struct, kw_only=True):
    embed_ms: float = 0.0
    retrieval_ms: float = 0.0  # embed + search
    compress_ms: float = 0.0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the prefix cache (not prefilled)
    output_tokens: int = 0
    ttft_ms: float = 0.0  # from the question arriving to the first answer token
    tpot_ms: float = 0.0
    total_ms: float = 0.0
    tokens_per_s: float = 0.0


class AnswerResult(msgspec.Struct, kw_only=True):
    question: str
    answer: str
    abstained: bool
    abstain_reason: str | None  # "empty_index" | "weak_evidence" | "model_declined" | "ungrounded" | None
    citations: list[int]
    evidence: list[Evidence] = []  # the quotes that support the answer, in order
    sources: list[Source]
    context: list[str]  # the passages the model saw, "[n] text"
    model: str
    finish_reason: str
    metrics: Metrics
    # What the answer line is: "phrase" (copied from a quote), "command" (a command, option or configuration
    # line, shown as code), "yes_no", "list" (items joined by "; "), "sentences" (cited quotes), "refusal",
    # "chat" (plain chat without the documents).
    answer_kind: str = "phrase"
    # The question's language (ISO 639-1, among rag/answering/replies.toml's): the refusal is in it; quotes and
    # short answers are the document's words, whatever its language.
    language: str = "en"

    def to_dict(self) -> dict:
        return msgspec.to_builtins(self)

    def quotes_text(self) -> str:
        """The evidence as a reader sees it under the answer: one quoted line per quote, with its [n] (nothing
        when the answer is itself made of cited quotes)."""
        if f"[{self.evidence[0].source}]" in self.answer if self.evidence else True:
            return ""
        return "".join(f"\n\n> “{e.quote}” [{e.source}]" for e in self.evidence)
