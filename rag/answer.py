"""The answer pipeline: question -> hits -> compressed context -> prompt -> tokens -> result.

``AnswerService.prepare`` does the CPU work before generation (retrieval,
compression, prompt) and decides abstention on weak evidence; generation is done
by whoever holds the generator (``LocalGenerator.stream`` for the CLI, the batching
engine for the API); ``finish`` turns the reply into an ``AnswerResult``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ingest.embedder import Embedder
from rag.compress import Passage, candidate_sentences, score_sentences, select_passages, split_sentences
from rag.errors import BadRequestError
from rag.generator import GenerationStats, LocalGenerator, SamplingOptions
from rag.prompt import (ABSTENTION_MESSAGE, build_messages, cited_numbers, drop_repeated_tail, grounded_share,
                        model_abstained)
from rag.result import AnswerResult, Metrics, Source
from rag.retrieval import Retrieval, Retriever
from rag.settings import Settings

SNIPPET_CHARS = 240


@dataclass(frozen=True)
class AnswerOptions:
    # Defaults are the settings' defaults, so library callers and the CLI agree.
    top_k: int = Settings.top_k
    context_tokens: int = Settings.context_tokens
    abstain_threshold: float = Settings.abstain_threshold
    sentence_vectors: bool = Settings.sentence_vectors  # score sentences by embedding too (else lexical only)
    min_grounding: float = Settings.min_grounding
    documents: tuple[str, ...] | None = None
    sampling: SamplingOptions = SamplingOptions()

    def validate(self) -> "AnswerOptions":
        if not 1 <= self.top_k <= 50:
            raise BadRequestError("top_k must be between 1 and 50")
        if not 16 <= self.context_tokens <= 4000:
            raise BadRequestError("context_tokens must be between 16 and 4000")
        if not 0.0 <= self.min_grounding <= 1.0:
            raise BadRequestError("min_grounding must be between 0 and 1")
        self.sampling.validate()
        return self


@dataclass
class PreparedAnswer:
    question: str
    options: AnswerOptions
    retrieval: Retrieval | None  # None for plain chat without retrieval
    passages: list[Passage]
    prompt_tokens: np.ndarray | None  # None when abstaining without generation
    started: float
    compress_ms: float

    @property
    def abstain_early(self) -> bool:
        return self.prompt_tokens is None


class AnswerService:
    def __init__(self, retriever: Retriever | None, embedder: Embedder, generator: LocalGenerator,
                 max_question_tokens: int = 256) -> None:
        """``retriever`` may be None for a service that only runs plain chat turns."""
        self.retriever = retriever
        self.embedder = embedder
        self.generator = generator
        self.max_question_tokens = max_question_tokens

    def prepare(self, question: str, options: AnswerOptions) -> PreparedAnswer:
        started = time.perf_counter()
        question = self.validate_question(question)
        options.validate()
        if self.retriever is None:
            raise BadRequestError("this service has no index to retrieve from")
        retrieval = self.retriever.retrieve(question, options.top_k, options.documents)
        t0 = time.perf_counter()
        passages: list[Passage] = []
        tokens = None
        if retrieval.hits and retrieval.best_dense >= options.abstain_threshold:
            sentences = candidate_sentences([h.chunk.text for h in retrieval.hits])
            vectors = self.embedder.embed([s.text for s in sentences]) if options.sentence_vectors else None
            scores = score_sentences(question, retrieval.query_vector, sentences, vectors)
            passages = select_passages(sentences, scores, self._count_tokens, options.context_tokens)
            tokens = self._prompt_tokens(build_messages(question, passages))
        return PreparedAnswer(question, options, retrieval, passages, tokens, started,
                              (time.perf_counter() - t0) * 1000)

    def prepare_plain(self, messages: Sequence[dict[str, str]], options: AnswerOptions) -> PreparedAnswer:
        """A chat turn without retrieval (``use_context: false``)."""
        started = time.perf_counter()
        options.validate()
        question = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        return PreparedAnswer(question, options, None, [], self._prompt_tokens(messages), started, 0.0)

    def _prompt_tokens(self, messages: Sequence[dict[str, str]]) -> np.ndarray:
        tokens = self.generator.encode(self.generator.chat_prompt(messages))
        if len(tokens) >= self.generator.context_length:
            raise BadRequestError(f"the prompt ({len(tokens)} tokens) does not fit the model's "
                                  f"{self.generator.context_length}-token context")
        return tokens

    def validate_question(self, question: str) -> str:
        question = (question or "").strip()
        if not question:
            raise BadRequestError("the question is empty")
        if len(self.generator.encode(question)) > self.max_question_tokens:
            raise BadRequestError(f"the question is longer than {self.max_question_tokens} tokens")
        return question

    def _count_tokens(self, text: str) -> int:
        return len(self.generator.encode(text))

    def finish(self, prepared: PreparedAnswer, reply: str, stats: GenerationStats | None) -> AnswerResult:
        total_ms = (time.perf_counter() - prepared.started) * 1000
        reply = drop_repeated_tail(reply).strip()
        if prepared.retrieval is None:
            answer, abstained, reason, citations = reply, False, None, []
        elif prepared.abstain_early:
            answer, abstained, reason, citations = ABSTENTION_MESSAGE, True, "weak_evidence", []
        elif model_abstained(reply):
            answer, abstained, reason, citations = ABSTENTION_MESSAGE, True, "model_declined", []
        elif prepared.options.min_grounding and \
                grounded_share(reply, prepared.question, prepared.passages) < prepared.options.min_grounding:
            # Mostly words of the model's own; on SQuAD2 dev at 0.2, 30 of the 31 answers withheld were wrong.
            answer, abstained, reason, citations = ABSTENTION_MESSAGE, True, "ungrounded", []
        else:
            answer, abstained, reason = reply, False, None
            citations = cited_numbers(reply, prepared.passages)
        r = prepared.retrieval
        embed_ms, search_ms = (r.embed_ms, r.search_ms) if r is not None else (0.0, 0.0)
        stats = stats or GenerationStats()
        gen_start_ms = embed_ms + search_ms + prepared.compress_ms
        metrics = Metrics(
            embed_ms=round(embed_ms, 2), retrieval_ms=round(embed_ms + search_ms, 2),
            compress_ms=round(prepared.compress_ms, 2), prompt_tokens=stats.prompt_tokens,
            cached_prompt_tokens=stats.cached_tokens, output_tokens=stats.output_tokens,
            ttft_ms=round(gen_start_ms + stats.ttft_s * 1000, 2) if stats.output_tokens else 0.0,
            tpot_ms=round(stats.tpot_s * 1000, 2), total_ms=round(total_ms, 2),
            tokens_per_s=round(stats.tokens_per_s, 1))
        return AnswerResult(
            question=prepared.question, answer=answer, abstained=abstained, abstain_reason=reason,
            citations=citations, sources=self.sources(r, prepared.passages) if r is not None else [],
            context=[f"[{p.number}] {p.text}" for p in prepared.passages],
            model=self.generator.model_id, finish_reason=stats.finish_reason if stats.output_tokens else "stop",
            metrics=metrics)

    @staticmethod
    def sources(retrieval: Retrieval, passages: Sequence[Passage] = ()) -> list[Source]:
        given = {p.number: split_sentences(p.text) for p in passages}
        return [Source(number=n, document_id=h.chunk.doc_id, path=h.chunk.path, title=h.chunk.title,
                       page=h.chunk.page, section=h.chunk.section, chunk_id=h.chunk.id, score=round(h.score, 5),
                       dense_score=None if h.dense_score is None else round(h.dense_score, 4),
                       lexical_score=None if h.lexical_score is None else round(h.lexical_score, 4),
                       snippet=h.chunk.text[:SNIPPET_CHARS], text=h.chunk.text, highlights=given.get(n, []))
                for n, h in enumerate(retrieval.hits, 1)]

    def stream(self, question: str, options: AnswerOptions) -> Iterator[str | AnswerResult]:
        """Text pieces as they are generated, then the final result (in-process generation)."""
        prepared = self.prepare(question, options)
        if prepared.abstain_early:
            yield self.finish(prepared, "", None)
            return
        stats = GenerationStats()
        pieces: list[str] = []
        for piece in self.generator.stream(prepared.prompt_tokens, options.sampling, stats):
            pieces.append(piece)
            yield piece
        yield self.finish(prepared, "".join(pieces), stats)

    def ask(self, question: str, options: AnswerOptions) -> AnswerResult:
        result = None
        for item in self.stream(question, options):
            if isinstance(item, AnswerResult):
                result = item
        assert result is not None
        return result


def answer_options_from(settings, **overrides) -> AnswerOptions:
    """Defaults from settings, overridden by per-request values that are not None."""
    sampling = SamplingOptions(
        max_tokens=_first(overrides.pop("max_tokens", None), settings.max_tokens),
        temperature=_first(overrides.pop("temperature", None), settings.temperature),
        top_p=_first(overrides.pop("top_p", None), 1.0),
        top_k=_first(overrides.pop("top_k_sampling", None), 0),
        stop=tuple(overrides.pop("stop", None) or ()))
    documents: Sequence[str] | None = overrides.pop("documents", None)
    return AnswerOptions(
        top_k=_first(overrides.pop("top_k", None), settings.top_k),
        context_tokens=_first(overrides.pop("context_tokens", None), settings.context_tokens),
        abstain_threshold=_first(overrides.pop("abstain_threshold", None), settings.abstain_threshold),
        sentence_vectors=_first(overrides.pop("sentence_vectors", None), settings.sentence_vectors),
        min_grounding=_first(overrides.pop("min_grounding", None), settings.min_grounding),
        documents=tuple(documents) if documents else None, sampling=sampling, **overrides)


def _first(value, default):
    return default if value is None else value
