"""The answer flow, one for every front end (CLI, HTTP API, web app) and for ``eval``/``bench``.

question (or conversation) -> retrieval -> compressed context -> prompt -> streamed tokens -> result.
``prepare`` does the CPU work before generation (retrieval, compression, prompt) and decides
abstention on weak evidence; ``stream`` runs prepare -> generate -> finish over any ``Generator``
(the local one in the CLI, the batching scheduler in the server); ``ask`` is the same, synchronous.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

import anyio.to_thread
import numpy as np

from ingest.embedder import Embedder
from ingest.store import Store
from rag.answering.compress import Passage, Sentence, candidate_sentences, score_sentences, select_passages
from rag.answering.prompt import (ABSTENTION_MESSAGE, build_messages, cited_numbers, copy_texts,
                                  drop_repeated_tail, grounded_share, model_abstained)
from rag.answering.result import AnswerResult, Metrics, Source
from rag.answering.retrieval import Retrieval, Retriever
from rag.core.errors import BadRequestError
from rag.core.names import validate_index_name
from rag.core.settings import Settings
from rag.generation.base import GenerationStats, Generator, Message, Prompt, SamplingOptions

SNIPPET_CHARS = 240


@dataclass(frozen=True)
class AnswerOptions:
    # Defaults are the settings' defaults, so library callers and the CLI agree.
    top_k: int = Settings.top_k  # chunks retrieved
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


def options_from(settings: Settings, **overrides: Any) -> AnswerOptions:
    """Defaults from settings, overridden by per-request values that are not None."""
    def pick(name: str, default: Any) -> Any:
        value = overrides.pop(name, None)
        return default if value is None else value

    sampling = SamplingOptions(
        max_tokens=pick("max_tokens", settings.max_tokens), temperature=pick("temperature", settings.temperature),
        top_p=pick("top_p", 1.0), top_k_sampling=pick("top_k_sampling", 0), stop=tuple(pick("stop", ())),
        copy_bias=pick("copy_bias", settings.copy_bias))
    documents: Sequence[str] | None = overrides.pop("documents", None)
    options = AnswerOptions(
        top_k=pick("top_k", settings.top_k), context_tokens=pick("context_tokens", settings.context_tokens),
        abstain_threshold=pick("abstain_threshold", settings.abstain_threshold),
        sentence_vectors=pick("sentence_vectors", settings.sentence_vectors),
        min_grounding=pick("min_grounding", settings.min_grounding),
        documents=tuple(documents) if documents else None, sampling=sampling)
    if overrides:
        raise TypeError(f"unknown answer options: {', '.join(sorted(overrides))}")
    return options


@dataclass(frozen=True)
class AnswerRequest:
    """One question, or one conversation whose last user message is the question."""

    question: str = ""
    messages: tuple[Message, ...] = ()
    index: str | None = None
    use_context: bool = True  # False: plain chat with the model, no retrieval
    options: AnswerOptions = field(default_factory=AnswerOptions)

    @property
    def history(self) -> tuple[str, ...]:
        """The conversation's earlier user questions (retrieval folds a follow-up into them)."""
        users = [m["content"] for m in self.messages if m["role"] == "user" and m["content"].strip()]
        return tuple(users[:-1])

    @classmethod
    def conversation(cls, messages: Sequence[Message], **kwargs: Any) -> "AnswerRequest":
        question = next((m["content"] for m in reversed(messages)
                         if m["role"] == "user" and m["content"].strip()), "")
        if not question:
            raise BadRequestError("messages contain no non-empty user message")
        return cls(question=question, messages=tuple(messages), **kwargs)


@dataclass
class PreparedAnswer:
    request: AnswerRequest
    question: str
    retrieval: Retrieval | None  # None for plain chat without retrieval
    passages: list[Passage]
    prompt: Prompt | None  # None when abstaining without generation
    started: float
    compress_ms: float
    sampling: SamplingOptions = SamplingOptions()  # the request's, with the copy-bias tokens of its passages
    best_sentence: str | None = None  # the top-scored sentence sent to the model

    @property
    def abstain_early(self) -> bool:
        return self.prompt is None


class AnswerService:
    def __init__(self, settings: Settings, store: Store, embedder: Embedder, generator: Generator) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.generator = generator
        self._retrievers: dict[str, Retriever] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ retrieval
    def retriever(self, index: str | None = None) -> Retriever:
        """The retriever of an index, opened once (readers follow new commits by themselves)."""
        name = validate_index_name(index or self.settings.index)
        with self._lock:
            if name not in self._retrievers:
                self._retrievers[name] = Retriever(self.store.index(name).reader(), self.embedder)
            return self._retrievers[name]

    def retrieve(self, query: str, index: str | None = None, top_k: int | None = None,
                 documents: Sequence[str] | None = None) -> Retrieval:
        query = self.validate_question(query)
        return self.retriever(index).retrieve(query, top_k or self.settings.top_k, documents)

    def close(self) -> None:
        with self._lock:
            for retriever in self._retrievers.values():
                retriever.reader.close()
            self._retrievers.clear()

    # ------------------------------------------------------------------ the flow
    def prepare(self, request: AnswerRequest) -> PreparedAnswer:
        started = time.perf_counter()
        options = request.options.validate()
        if not request.use_context:
            question = (request.question or "").strip()
            messages = request.messages or ({"role": "user", "content": question},)
            return PreparedAnswer(request, question, None, [], self.generator.prompt(messages), started, 0.0,
                                  options.sampling)
        question = self.validate_question(request.question)
        retrieval = self.retriever(request.index).retrieve(question, options.top_k, options.documents,
                                                           history=request.history)
        t0 = time.perf_counter()
        passages: list[Passage] = []
        prompt = None
        sampling = options.sampling
        best = None
        if retrieval.hits and retrieval.best_dense >= options.abstain_threshold:
            sentences = candidate_sentences([h.chunk.text for h in retrieval.hits])
            vectors = self.embedder.embed([s.text for s in sentences]) if options.sentence_vectors else None
            scores = score_sentences(retrieval.query, retrieval.query_vector, sentences, vectors)
            passages = select_passages(sentences, scores, self.generator.count_tokens, options.context_tokens)
            prompt = self.generator.prompt(build_messages(question, passages))
            best = best_sentence(sentences, scores, passages)
            if sampling.copy_bias:
                ids = np.concatenate([self.generator.encode(text) for text in copy_texts(passages)])
                copy_tokens = tuple(int(t) for t in np.unique(ids))
                sampling = dataclasses.replace(sampling, copy_tokens=copy_tokens)
        return PreparedAnswer(request, question, retrieval, passages, prompt, started,
                              (time.perf_counter() - t0) * 1000, sampling, best)

    async def stream(self, request: AnswerRequest,
                     stats: GenerationStats | None = None) -> AsyncIterator[str | AnswerResult]:
        """Text pieces as they are generated, then the ``AnswerResult``. Closing it cancels generation.
        ``stats``, when given, is filled as tokens are generated, so a caller also learns what a stream
        closed early cost."""
        prepared = await anyio.to_thread.run_sync(self.prepare, request)
        events = self.generate(prepared, stats)
        try:
            async for item in events:
                yield item
        finally:
            await events.aclose()  # a reader that stops early cancels the generation

    async def generate(self, prepared: PreparedAnswer,
                       stats: GenerationStats | None = None) -> AsyncIterator[str | AnswerResult]:
        """``stream`` for an answer already prepared."""
        stats = stats if stats is not None else GenerationStats()
        pieces: list[str] = []
        if not prepared.abstain_early:
            tokens = self.generator.stream(prepared.prompt, prepared.sampling, stats)
            try:
                async for piece in tokens:
                    pieces.append(piece)
                    yield piece
            finally:
                await tokens.aclose()
        yield self.finish(prepared, "".join(pieces), None if prepared.abstain_early else stats)

    async def answer(self, request: AnswerRequest) -> AnswerResult:
        """The whole answer; cancelling the awaiting task (a client that left) cancels generation."""
        return await final_result(self.stream(request))

    def ask(self, request: AnswerRequest) -> AnswerResult:
        """``answer`` for synchronous callers (CLI, eval, bench)."""
        return asyncio.run(self.answer(request))

    def ask_prepared(self, prepared: PreparedAnswer) -> AnswerResult:
        """The answer to a prepared request, synchronously (eval reads the prepared evidence too)."""
        return asyncio.run(final_result(self.generate(prepared)))

    def validate_question(self, question: str) -> str:
        question = (question or "").strip()
        if not question:
            raise BadRequestError("the question is empty")
        if self.generator.count_tokens(question) > self.settings.max_question_tokens:
            raise BadRequestError(f"the question is longer than {self.settings.max_question_tokens} tokens")
        return question

    def finish(self, prepared: PreparedAnswer, reply: str, stats: GenerationStats | None) -> AnswerResult:
        total_ms = (time.perf_counter() - prepared.started) * 1000
        options = prepared.request.options
        reply = drop_repeated_tail(reply).strip()
        if prepared.retrieval is None:
            answer, abstained, reason, citations = reply, False, None, []
        elif prepared.abstain_early and not prepared.retrieval.hits:  # nothing to search: say so, and what to do
            answer, abstained, reason, citations = empty_index_message(prepared.retrieval.index), True, "empty_index", []
        elif prepared.abstain_early:
            answer, abstained, reason, citations = ABSTENTION_MESSAGE, True, "weak_evidence", []
        elif model_abstained(reply):
            answer, abstained, reason, citations = ABSTENTION_MESSAGE, True, "model_declined", []
        elif options.min_grounding and \
                grounded_share(reply, prepared.question, prepared.passages) < options.min_grounding:
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
            citations=citations, sources=sources(r, prepared.passages) if r is not None else [],
            context=[f"[{p.number}] {p.text}" for p in prepared.passages],
            model=self.generator.model_id, finish_reason=stats.finish_reason if stats.output_tokens else "stop",
            metrics=metrics)


def empty_index_message(index: str) -> str:
    """What an answer from an index without documents says (the web app, `rag ask`, the API alike)."""
    return (f"There are no documents in index {index!r} yet, so there is nothing to answer from. Add some on the "
            f"web app's Documents page, with `rag ingest PATH --index {index}`, or with POST /v1/documents.")


async def final_result(events: AsyncIterator[str | AnswerResult]) -> AnswerResult:
    """Read an answer stream to its result; the stream is closed (generation cancelled) if the reader is."""
    try:
        async for item in events:
            if isinstance(item, AnswerResult):
                return item
    finally:
        await events.aclose()
    raise AssertionError("the answer stream ended without a result")


def best_sentence(sentences: Sequence[Sentence], scores: np.ndarray, passages: Sequence[Passage]) -> str | None:
    """The highest-scored sentence the model was shown (the head of it, when only that fitted)."""
    shown = {text for p in passages for text in p.sentences}
    for i in np.argsort(-scores, kind="stable"):
        if sentences[int(i)].text in shown:
            return sentences[int(i)].text
    return passages[0].sentences[0] if passages and passages[0].sentences else None


def sources(retrieval: Retrieval, passages: Sequence[Passage] = ()) -> list[Source]:
    """The retrieved chunks as numbered sources, each with the sentences of it the model saw."""
    sent = {p.number: list(p.sentences) for p in passages}
    return [Source(number=n, document_id=h.chunk.doc_id, path=h.chunk.path, title=h.chunk.title,
                   page=h.chunk.page, section=h.chunk.section, chunk_id=h.chunk.id, score=round(h.score, 5),
                   relevance=round(h.relevance, 3), found_by=h.found_by,
                   dense_score=None if h.dense_score is None else round(h.dense_score, 4),
                   lexical_score=None if h.lexical_score is None else round(h.lexical_score, 4),
                   snippet=h.chunk.text[:SNIPPET_CHARS], text=h.chunk.text, highlights=sent.get(n, []))
            for n, h in enumerate(retrieval.hits, 1)]

