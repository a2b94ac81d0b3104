"""The answer flow, one for every front end (CLI, HTTP API, web app) and for ``eval``/``bench``.

question (or conversation) -> retrieval -> compressed context -> prompt -> streamed tokens -> result.
``prepare`` does the CPU work before generation (retrieval, compression, prompt) and decides
abstention on weak evidence; ``stream`` runs prepare -> generate -> finish over any ``Generator``
(the local one in the CLI, the batching scheduler in the server); ``ask`` is the same, synchronous.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Sequence

import anyio.to_thread
import numpy as np

from rag.embedder import Embedder
from rag.reranker import KeepOrder, Reranker
from rag.store import Store
from rag.answering.answerability import (WEIGHTS, another_group, answerable_score, asked_tokens, lexical_signals,
                                         profile_for, refused_whatever_the_score, searchable_words, shares_a_word,
                                         stems, opposite_in_evidence, technical_word, telling_words, unknown_signals,
                                         versions_not_retrieved)
from rag.answering.compress import (Passage, Sentence, asked_token_bonus, candidate_sentences, commands_of,
                                    default_of_the_entry, dense_gaps, distinct_sentences, evidence_texts, in_context,
                                    log_odds_scale, score_sentences, select_passages)
from rag.answering.english import GOES_ON_ABOUT
from rag.answering.evidence import (DECLINE_REPLY, LIST_ITEMS, MAX_SPAN_TOKENS, SPAN_WEIGHTS, Quote,
                                    about_the_code_above, align, align_part, announces_a_list, candidate_spans,
                                    clean_reply, command_spans, cut_cleanly, defines_the_subject, enumeration,
                                    holds_code_words, holds_the_asked_type,
                                    introduces_code, is_item, of_the_asked_kind, programs_in, restates_the_quote,
                                    sentence_quote, short_answer_messages, variables_in, with_bound,
                                    yes_no_messages, yes_no_spans)
from rag.answering.question import QuestionShape
from rag.answering.language import DEFAULT_LANGUAGE, LanguageDetector, nouns_capitalised, refusal_message, yes_no_word
from rag.answering.prompt import (ABSTENTION_MESSAGE, drop_repeated_tail, grounded_share, model_abstained, refers_back,
                                  resolve_elliptical, subject_questions)
from rag.answering.result import AnswerResult, Evidence, Metrics, Source
from rag.answering.retrieval import Retrieval, Retriever
from rag.answering.telemetry import ChatTrace
from rag.core import bounds, observe
from rag.core.access import RequestContext
from rag.core.errors import BadRequestError
from rag.core.names import IndexName, index_name
from rag.core.settings import Settings
from rag.core.text import is_blank, stem
from rag.generation.base import GenerationStats, Generator, Message, Prompt, SamplingOptions

SNIPPET_CHARS = 240
EXPLANATION_SENTENCES = 2  # the evidence sentences an explain / describe / why question is answered with
# A lower-ranked evidence sentence's phrases are less likely by the ranker's own margin: this times its score below
# the best sentence's (the fitted ranker's scores are log-odds of holding the answer; the lexical score is scaled to
# them). Qwen2.5-Coder-0.5B, answer hit with 1 per rank (before) → this margin ×1 → ×2: dev set 52.7% → 53.0% →
# 53.4%, squad2-dev seed 0 57.5% → 60.0% at ×2, the policies 86.4% → 90.9% (docs/performance.md).
SENTENCE_MARGIN_PRIOR = 2.0
CITATION_LABEL = re.compile(r"\[\d{1,2}\]$")  # an answer made of cited sentences ends with one


@dataclass(frozen=True)
class AnswerOptions:
    # Defaults are the settings' defaults, so library callers and the CLI agree.
    top_k: int = Settings.top_k  # chunks retrieved
    context_tokens: int = Settings.context_tokens
    abstain_threshold: float = Settings.abstain_threshold
    sentence_vectors: bool = Settings.sentence_vectors  # score sentences by embedding too (else lexical only)
    min_grounding: float = Settings.min_grounding
    answerable_threshold: float = Settings.answerable_threshold  # answers scored below are refused
    answer_examples: bool = Settings.answer_examples  # worked examples before a factoid question
    answer_sentences: int = Settings.answer_sentences  # the best sentences a short answer may come from
    span_search: int = Settings.span_search  # the first words whose whole phrases the model scores
    documents: tuple[str, ...] | None = None
    sampling: SamplingOptions = SamplingOptions()

    def validate(self) -> "AnswerOptions":
        bounds.TOP_K.check(self.top_k)
        if not 16 <= self.context_tokens <= 4000:
            raise BadRequestError("context_tokens must be between 16 and 4000")
        if not 0.0 <= self.answerable_threshold <= 1.0:
            raise BadRequestError("answerable_threshold must be between 0 and 1")
        if not 1 <= self.answer_sentences <= 5:
            raise BadRequestError("answer_sentences must be between 1 and 5")
        if not 1 <= self.span_search <= 16:
            raise BadRequestError("span_search must be between 1 and 16")
        if not 0.0 <= self.min_grounding <= 1.0:
            raise BadRequestError("min_grounding must be between 0 and 1")
        self.sampling.validate()
        return self


def options_from(settings: Settings, **overrides: Any) -> AnswerOptions:
    """Defaults from settings, overridden by per-request values that are not None. A setting left at its default
    that the generator's answer profile measures (``answer_examples``, ``answer_sentences``) takes the profile's
    value."""
    profile = profile_for(settings.generator_path.name)

    def pick(name: str, default: Any) -> Any:
        value = overrides.pop(name, None)
        if value is None and hasattr(profile, name) and settings.source(name) == "default":
            return getattr(profile, name)
        return default if value is None else value

    sampling = SamplingOptions(
        max_tokens=pick("max_tokens", settings.max_tokens), temperature=pick("temperature", settings.temperature),
        top_p=pick("top_p", 1.0), top_k_sampling=pick("top_k_sampling", 0), stop=tuple(pick("stop", ())))
    documents: Sequence[str] | None = overrides.pop("documents", None)
    options = AnswerOptions(
        top_k=pick("top_k", settings.top_k), context_tokens=pick("context_tokens", settings.context_tokens),
        abstain_threshold=pick("abstain_threshold", settings.abstain_threshold),
        sentence_vectors=pick("sentence_vectors", settings.sentence_vectors),
        min_grounding=pick("min_grounding", settings.min_grounding),
        answerable_threshold=pick("answerable_threshold", settings.answerable_threshold),
        answer_examples=pick("answer_examples", settings.answer_examples),
        answer_sentences=pick("answer_sentences", settings.answer_sentences),
        span_search=pick("span_search", settings.span_search),
        documents=tuple(documents) if documents else None, sampling=sampling)
    if overrides:
        raise TypeError(f"unknown answer options: {', '.join(sorted(overrides))}")
    return options


@dataclass(frozen=True)
class AnswerRequest:
    """One question, or one conversation whose last user message is the question."""

    question: str = ""
    messages: tuple[Message, ...] = ()
    index: str | IndexName | None = None  # None: the ``index`` setting
    use_context: bool = True  # False: plain chat with the model, no retrieval
    options: AnswerOptions = field(default_factory=AnswerOptions)
    context: RequestContext = RequestContext()  # who asks: retrieval sees only the documents they may see

    @property
    def history(self) -> tuple[str, ...]:
        """The conversation's earlier user questions."""
        users = [m["content"] for m in self.messages if m["role"] == "user" and m["content"].strip()]
        return tuple(users[:-1])

    @property
    def last_answer(self) -> str:
        """The answer line of the turn before the question, without its citation labels ("" for none)."""
        before = next((m["content"] for m in reversed(self.messages[:-1]) if m["role"] == "assistant"), "") \
            if self.messages and self.messages[-1]["role"] == "user" else ""
        return re.sub(r"\s*\[\d{1,2}\]", "", before).strip()

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
    shape: QuestionShape  # the question (as resolved against the conversation), read once
    retrieval: Retrieval | None  # None for plain chat without retrieval
    passages: list[Passage]
    prompt: Prompt | None  # None when abstaining without generation
    started: float
    compress_ms: float
    sampling: SamplingOptions = SamplingOptions()  # the request's, with the spans the answer may copy
    best_sentence: str | None = None  # the top-scored evidence sentence
    # The evidence sentences, best first, as (source number, sentence): the short answer is copied from the
    # first; explanatory questions are answered with the first few; replies are aligned against all.
    ranked: tuple[tuple[int, str], ...] = ()
    explanatory: bool = False
    yes_no: bool = False  # answered "Yes" or "No" with the best sentence as the quote
    # A how-to question's candidate commands, best sentence first: (command, (source, sentence), and the
    # sentence announcing it when the command stands on a line of its own).
    commands: tuple[tuple[str, tuple[int, str], tuple[int, str] | None], ...] = ()
    # A list question's items, as (source, sentence, phrase): the quoted enumeration of one sentence, or the
    # item lines under the sentence that announces them. Answered without generation.
    items: tuple[tuple[int, str, str], ...] = ()
    # What the answerability decision weighs, by name (the evidence's coverage of the question, the model's
    # inclination to decline): filled while preparing and generating, read by ``rag eval``.
    signals: dict[str, float] = field(default_factory=dict)
    withheld: str | None = None  # the answer refused for its answerability score (``rag eval``'s curve reads it)
    language: str = DEFAULT_LANGUAGE  # the question's (the refusal is written in it)

    @property
    def question(self) -> str:
        return self.shape.text

    @property
    def abstain_early(self) -> bool:
        return self.prompt is None and not (self.explanatory and self.ranked) and not self.items


class AnswerService:
    def __init__(self, settings: Settings, store: Store, embedder: Embedder, generator: Generator,
                 instruments: observe.Instruments | None = None, reranker: Reranker = KeepOrder(),
                 languages: LanguageDetector | None = None) -> None:
        self.settings = settings
        self.languages = languages or LanguageDetector()
        self.store = store
        self.embedder = embedder
        self.generator = generator
        self.reranker = reranker
        self._retrievers: dict[str, Retriever] = {}
        self._lock = threading.Lock()
        self.instruments = instruments or observe.instruments()

    # ------------------------------------------------------------------ retrieval
    def retriever(self, index: str | IndexName | None = None) -> Retriever:
        """The retriever of an index, opened once (readers follow new commits by themselves)."""
        name = self.store.index(index_name(index, self.settings.index).value).name  # as spelled on disk
        with self._lock:
            if name in self._retrievers and self._retrievers[name].reader.gone():  # deleted, maybe made anew
                self._retrievers.pop(name).reader.close()
            if name not in self._retrievers:
                self._retrievers[name] = Retriever(self.store.index(name).reader(), self.embedder,
                                                     self.reranker)
            return self._retrievers[name]

    def forget(self, index: str | None = None) -> None:
        """Close the retrievers of ``index`` (whatever its letter case; None: of every index deleted since
        they opened), so that nothing here holds its files."""
        with self._lock:
            for name in list(self._retrievers):
                reader = self._retrievers[name].reader
                if (name.lower() == index.lower()) if index is not None else reader.gone():
                    self._retrievers.pop(name)
                    reader.close()

    def retrieve(self, query: str, index: str | IndexName | None = None, top_k: int | None = None,
                 documents: Sequence[str] | None = None, context: RequestContext = RequestContext()) -> Retrieval:
        query = self.validate_question(query)
        return self.traced_retrieve(index, query, top_k or self.settings.top_k, documents, (), context.groups)

    def traced_retrieve(self, index: str | IndexName | None, question: str, top_k: int, documents: Sequence[str] | None,
                        history: Sequence[str], groups: frozenset[str] | None) -> Retrieval:
        """``Retriever.retrieve`` in a ``retrieval {index}`` span (GenAI conventions), timed into the metrics."""
        name = index_name(index, self.settings.index).value
        with observe.start_span(f"retrieval {name}", {
                observe.OPERATION: "retrieval", observe.DATA_SOURCE: name, observe.REQUEST_TOP_K: top_k,
                "rag.retrieval.follow_up": bool(history)}) as span:
            retrieval = self.retriever(name).retrieve(question, top_k, documents, history=history, groups=groups)
            if span.is_recording():
                self._retrieval_attributes(span, retrieval)
        self.instruments.retrieval_duration.record((retrieval.embed_ms + retrieval.search_ms) / 1000,
                                                   {observe.DATA_SOURCE: name})
        return retrieval

    def _retrieval_attributes(self, span: observe.Span, retrieval: Retrieval) -> None:
        """What the retrieval found and how long each search took, on its span (a recording one)."""
        span.set_attributes({
            "rag.retrieval.hits": len(retrieval.hits), "rag.retrieval.best_dense": round(retrieval.best_dense, 4),
            "rag.retrieval.embed_ms": round(retrieval.embed_ms, 2),
            "rag.retrieval.dense_ms": round(retrieval.dense_ms, 2),
            "rag.retrieval.lexical_ms": round(retrieval.lexical_ms, 2),
            "rag.retrieval.fused_ms": round(retrieval.search_ms - retrieval.dense_ms - retrieval.lexical_ms, 2)})
        if self.settings.telemetry_content:
            span.set_attribute(observe.QUERY_TEXT, retrieval.query)
            span.set_attribute(observe.RETRIEVED_DOCUMENTS,
                               observe.documents_attribute((h.chunk.id, h.score) for h in retrieval.hits))

    def close(self) -> None:
        with self._lock:
            for retriever in self._retrievers.values():
                retriever.reader.close()
            self._retrievers.clear()

    # ------------------------------------------------------------------ the flow
    def prepare(self, request: AnswerRequest) -> PreparedAnswer:
        started = time.perf_counter()
        options = request.options.validate()
        # The generator's prefix cache is the asker's own on this index (its shared fixed prefix aside).
        scope = f"{request.context.principal.key}\0{index_name(request.index, self.settings.index).value}"
        options = dataclasses.replace(options, sampling=dataclasses.replace(options.sampling, cache_scope=scope))
        if not request.use_context:
            question = (request.question or "").strip()
            messages = request.messages or ({"role": "user", "content": question},)
            return PreparedAnswer(request, QuestionShape.of(question), None, [], self.generator.prompt(messages),
                                  started, 0.0, options.sampling)
        question = self.validate_question(request.question)
        # Answerability is decided on the question as asked; the conversation is searched too only when the
        # question refers back to it ("When was it built?"), so "Who won the 2018 World Cup?" asked third in a
        # conversation about the documents is refused as it would be alone. A follow-up that only names what
        # changes ("And in Berlin?") is answered as the whole question it stands for.
        question = resolve_elliptical(question, request.history)
        language = self.languages.detect(question)
        capitals = not nouns_capitalised(language)
        shape = QuestionShape.of(question)
        history = subject_questions(request.history) if refers_back(question) else ()
        retrieval = self.traced_retrieve(request.index, question, options.top_k, options.documents, history,
                                         request.context.groups)
        # A question in another language than the passages found (a German question over English pages, with the
        # multilingual embedder): its words cannot be looked for in them, only its names, numbers and technical
        # tokens; the answerability score then rests on meaning (the dense signals) and those.
        across = bool(retrieval.hits) and self.languages.detect(retrieval.hits[0].chunk.text) != language
        with observe.start_span("compression", {"rag.context_tokens": options.context_tokens}) as span:
            prepared = self._compose(request, shape, retrieval, options, started, history, capitals, across,
                                     language == DEFAULT_LANGUAGE)
            prepared.language = language
            if prepared.signals:
                words = searchable_words(question)
                absent = self.retriever(request.index).absent_words(
                    [w for w in words if technical_word(w)] if across else words, request.context.groups)
                if language != DEFAULT_LANGUAGE:
                    # Compounds and inflections: "Paketfilterregeln", "verrutschte" are in no document as written,
                    # though "Paket…" is; a word whose stem the retrieved passages hold is not unknown (on the
                    # multilingual dev set German questions averaged 2-4 such words, each read as a sign of no
                    # answer). English keeps the exact-word test the answerability weights were fitted on.
                    seen = stems(" ".join(hit.chunk.text for hit in retrieval.hits))
                    absent = [w for w in absent if stem(w) not in seen]
                prepared.signals.update(unknown_signals(question, absent, capitals))
            if span.is_recording():
                span.set_attributes({"rag.compression.passages": len(prepared.passages),
                                     "rag.compression.evidence_sentences": len(prepared.ranked),
                                     "rag.compression.abstain_early": prepared.abstain_early,
                                     "rag.compression.explanatory": prepared.explanatory})
                if prepared.prompt is not None:
                    span.set_attribute("rag.prompt_tokens", prepared.prompt.length)
        return prepared

    def _compose(self, request: AnswerRequest, shape: QuestionShape, retrieval: Retrieval, options: AnswerOptions,
                 started: float, history: Sequence[str] = (), capitals: bool = True,
                 across: bool = False, english: bool = True) -> PreparedAnswer:
        """Evidence sentences and the prompt from the retrieved chunks, or an early abstention."""
        t0 = time.perf_counter()
        question = shape.text
        if not retrieval.hits or retrieval.best_dense < options.abstain_threshold:
            return PreparedAnswer(request, shape, retrieval, [], None, started,
                                  (time.perf_counter() - t0) * 1000, options.sampling)
        texts = evidence_texts(retrieval.hits, shape.subject, asked_tokens(question))
        sentences = candidate_sentences(texts)
        vectors = self.embedder.embed([s.text for s in sentences]) if options.sentence_vectors and sentences \
            else None
        scores = score_sentences(shape, retrieval.query_vector, sentences, vectors, " ".join(history), texts,
                                 dense_gaps(retrieval.hits))
        passages = select_passages(sentences, scores, self.generator.count_tokens, options.context_tokens)
        order = [int(i) for i in np.argsort(-scores, kind="stable")]
        # A follow-up's telling words include those of the questions it refers back to ("What should I use for
        # it then?" after "Is aptitude the recommended tool for a release-to-release upgrade …?").
        asked = " ".join((question, *history))
        # A description's sentence holds the words of the term it describes (``Sentence.described``): "The default
        # is 3 seconds." under "-t seconds" answers "If I don't pass a timeout, how long …?".
        if order and not across and not shares_a_word(asked, sentences[order[0]].described):
            # The fitted ranker's cosine may put first a sentence holding no telling word of the question, which
            # the rule below refuses: the second and third lead instead where they hold one ("How do I book a
            # hotel for a business trip?" over the travel policy) and, for a number asked for, every one (not
            # "eight" universities for "How many people live in Melbourne?"). Not further down: "What is the
            # smallest prime number?" over squad2-dev's article on complexity would be answered from its fourth.
            lead = [i for i in order[1:3] if shares_a_word(asked, sentences[i].described)
                    and (not shape.numeric or telling_words(question) <= stems(sentences[i].text))]
            order = [*lead, *(i for i in order if i not in lead)]
        if shape.yes_no and order and restates_the_quote(question, sentences[order[0]].text):
            # The best sentence is the message the question quotes: a runner-up that does not restate it says what
            # it means ("… does not mean you've run out of disk space." for "Does 'could not create semaphores: No
            # space left on device' mean my disk is full?"; "Contrary to what the hint states, it is not necessary
            # …" for "… must I stop the postmaster …?").
            meaning = next((i for i in order[1:3] if not restates_the_quote(question, sentences[i].text)), None)
            order = [meaning, *(i for i in order if i != meaning)] if meaning is not None else order
        entry_head = order[0] if order else None
        order = default_of_the_entry(shape, asked, sentences, order)
        ranked = tuple((sentences[i].source + 1, sentences[i].text) for i in order[:8])
        best = ranked[0][1] if ranked else None
        by_place = {(s.source + 1, s.text): s for s in sentences}  # a ranked (citation, text) pair's sentence
        # An entry's default put first is judged with the sentence that says what the entry is, which the ranker
        # had put first: "default_toast_compression The default is pglz." alone holds no word of "Unless I change
        # it, which method is used to compress TOASTed values …?".
        heads = {ranked[0]: sentences[entry_head].described} if ranked and order[0] != entry_head else {}

        def about(place: tuple[int, str]) -> str:
            """What the ranked sentence at ``place`` says, as the checks below read it (with its term)."""
            return f"{heads[place]} {place[1]}" if place in heads else by_place[place].described

        if best and not across and not shares_a_word(asked, about(ranked[0])):
            # Evidence that says nothing the question (or, for a follow-up, the questions it refers back to) asks
            # about: found through the conversation only ("How long does it take light from the Sun to reach
            # Earth?" after questions on the documents), or the best of unrelated sentences ("What is the freezing
            # point of water in Fahrenheit?" was answered "The state symbols include the pink heath"); on the dev
            # dumps it changed no other answer.
            return PreparedAnswer(request, shape, retrieval, passages, None, started,
                                  (time.perf_counter() - t0) * 1000, options.sampling)
        # A follow-up asks for something new: not the phrase the turn before answered ("update-alternatives
        # --display x-window-manager" again for "And how do I switch it over to a different one?").
        said = request.last_answer if history and len(request.last_answer.split()) <= REPEATED_WORDS else ""
        commands = commands_for(sentences, order, shape, said, history)
        # A command is less likely as its sentence scores further below the best one, as a short answer's phrase
        # is (``SENTENCE_MARGIN_PRIOR``): the entries of a definition list are sentences of their own, and
        # SmolLM2-135M answered "Which zipapp option compresses …?" with "-o output" of the third-best entry.
        units = log_odds_scale(vectors is not None)
        score_of = {sentences[i].text: float(scores[i]) * units for i in reversed(order)}
        if heads:  # an entry's default scores as its entry does: the other entries' phrases stay less likely
            score_of[ranked[0][1]] = max(score_of[ranked[0][1]], score_of[sentences[entry_head].text])
        lead_of = {s.text: s.lead for s in sentences if s.lead}
        top = score_of[sentences[order[0]].text] if order else 0.0

        def margin(where: tuple[int, str], intro: tuple[int, str] | None) -> float:
            """How far below the best sentence the one showing a command scores, or the one announcing it."""
            said = [score_of[text] for text in (where[1], lead_of.get(where[1]), intro and intro[1])
                    if text in score_of]
            return SENTENCE_MARGIN_PRIOR * max(0.0, top - max(said)) if said else 0.0

        answer_commands = command_spans([(rank, command) for rank, (command, _, _) in enumerate(commands)],
                                        self.generator.encode, [margin(where, intro) for _, where, intro in commands])
        if not answer_commands:
            # None short enough to be offered whole (``COMMAND_TOKENS``; "Which setting in login.defs selects the
            # hashing method …?" over eight passages found only createuser's 136-token session): answered as the
            # other questions are.
            commands = ()
        items = programs_listed(commands) if shape.listing else ()
        if items:
            commands = ()
        elif not commands:
            items = items_for(sentences, order, shape)
        explanatory = shape.explanatory and not commands and not items
        if best and not explanatory and not holds_the_asked_type(best, shape):
            # No number where one is asked for: a close runner-up that holds one and every telling word of the
            # question answers it ("two Major League Soccer teams in Los Angeles"), else nothing does. A signal's
            # name is rarer than a number: a runner-up naming one answers ("This can be triggered by sending the
            # daemon SIGUSR1" after the sentence saying what it triggers).
            runner_up = next((i for i, (_, text) in enumerate(ranked[1:3], 1) if holds_the_asked_type(text, shape)
                              and (shape.signal or telling_words(question) <= stems(text))), None)
            if runner_up is None:
                return PreparedAnswer(request, shape, retrieval, passages, None, started,
                                      (time.perf_counter() - t0) * 1000, options.sampling)
            ranked = (ranked[runner_up], *ranked[:runner_up], *ranked[runner_up + 1:])
            best = ranked[0][1]
        if best and shape.option and not commands and not any(
                holds_code_words(sentences[i].text, question) for i in closest(scores, shape, sentences, vectors)):
            # An option or a setting is asked for, and none of the sentences closest to the question writes a word
            # as code besides the question's own: "Which tar option compresses with zstd?" was answered '".txz" or
            # ".tar.xz"', "Which psql meta-command starts pipeline mode?" "backslash, followed immediately by a
            # command verb" (dev set: 3 more unanswerable questions refused, 3 wrong answers). Closest before the
            # ranker's preference for a sentence naming an option (``asked_token``), which would put one first
            # wherever any candidate names one: "pax" was then the answer to the tar question.
            return PreparedAnswer(request, shape, retrieval, passages, None, started,
                                  (time.perf_counter() - t0) * 1000, options.sampling)
        # A name the question asks about counts as found in a passage's document title too ("PostgreSQL" of
        # the PostgreSQL manual's pages, which rarely say it); the title's words count for the best passage's
        # coverage of the question as well.
        best_hit = retrieval.hits[ranked[0][0] - 1].chunk if best else None
        judged = about(ranked[0]) if best else best  # coverage of the question and cosine, with its term
        signals = lexical_signals(question, judged, f"{best_hit.title}\n{best_hit.text}",
                                  [*texts, *dict.fromkeys(h.chunk.title for h in retrieval.hits)],
                                  retrieval.best_dense, self._cosine(judged, retrieval), capitals,
                                  across) if best_hit else {}
        if best_hit and english and not across:
            others = [hit.chunk.text for hit in retrieval.hits if hit.chunk is not best_hit]
            passage = f"{best_hit.title}\n{best_hit.section or ''}\n{best_hit.text}"
            signals["other_group"] = float(another_group(question, best, best_hit.section or "", passage,
                                                         others) is not None)
            # A yes/no question's evidence may say the opposite of what it asks: its answer is then "No".
            runners_up = [text for _, text in ranked[1:3]]
            signals["opposite_in_evidence"] = float(not shape.yes_no
                                                    and opposite_in_evidence(question, best, runners_up) is not None)
            signals["versions_not_retrieved"] = float(versions_not_retrieved(
                question, " ".join([*texts, *dict.fromkeys(h.chunk.title for h in retrieval.hits)])))
        prompt, sampling = None, options.sampling
        decline = tuple(int(t) for t in self.generator.encode(DECLINE_REPLY))
        yes_no = bool(best) and not explanatory and not commands and shape.yes_no
        if items:
            pass  # the items are the answer: nothing to generate
        elif commands:
            # A definition list's entry is shown by its term lines alone, the prompt the how-to answers were
            # measured with before entries were read whole (the quote keeps the description). Not what kept the
            # zipapp test's "-c, --compress": with this alone SmolLM2-135M still said "-o output"; the margin did.
            terms = {s.text: " ".join(s.terms) for s in sentences if s.terms}
            context = " ".join(dict.fromkeys(terms.get(text, text) for _, (_, text), intro in commands
                                             for text in ((intro[1],) if intro else ()) + (text,)))
            prompt = self.generator.prompt(short_answer_messages(question, context, options.answer_examples, history))
            sampling = dataclasses.replace(sampling, spans=tuple(answer_commands), decline=decline,
                                           span_search=SPAN_WEIGHTS.search(options.span_search),
                                           max_tokens=min(sampling.max_tokens,
                                                          max(len(s.tokens) for s in answer_commands) + 1))
        elif yes_no:
            prompt = self.generator.prompt(yes_no_messages(question, best, history))
            sampling = dataclasses.replace(sampling, spans=tuple(yes_no_spans(best, shape, self.generator.encode)),
                                           max_tokens=min(sampling.max_tokens, 4), decline=decline)
        elif best and not explanatory:
            # The model picks the phrase, and so the sentence, among the best ``answer_sentences`` ones that
            # hold the type asked for; a lower-ranked sentence's starts are less likely.
            chosen = [text for _, text in ranked[:options.answer_sentences]
                      if text == best or holds_the_asked_type(text, shape)]
            prompt = self.generator.prompt(short_answer_messages(question, " ".join(chosen), options.answer_examples,
                                                                 history))
            span_shape = shape.with_earlier(tuple(history))
            spans = [dataclasses.replace(span, prior=span.prior - SENTENCE_MARGIN_PRIOR * max(0.0, score_of[best]
                                                                                           - score_of[text]))
                     for text in chosen for span in candidate_spans(text, span_shape, self.generator.encode,
                                                                    repeated=said)]
            # Declining is not offered as a span (the small model then declined 38% of answerable dev questions,
            # 10% without); it is measured (``decline``) for the answerability decision.
            sampling = dataclasses.replace(sampling, spans=tuple(spans),
                                           span_search=SPAN_WEIGHTS.search(options.span_search),
                                           max_tokens=min(sampling.max_tokens, MAX_SPAN_TOKENS + 1), decline=decline)
        return PreparedAnswer(request, shape, retrieval, passages, prompt, started,
                              (time.perf_counter() - t0) * 1000, sampling, best, ranked, explanatory, yes_no,
                              commands, items, signals)

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
        """``stream`` for an answer already prepared. Plain chat streams its tokens; an answer from the
        documents is verified against the passages first, so what streams is exactly the ``answer`` of the
        result (a short phrase: the whole wait is the ~0.1 s of decoding it)."""
        stats = stats if stats is not None else GenerationStats()
        pieces: list[str] = []
        if prepared.prompt is not None:
            trace = ChatTrace(self.generator, prepared.sampling, prepared.prompt.messages, self.instruments,
                              self.settings.telemetry_content)
            tokens = self.generator.stream(prepared.prompt, prepared.sampling, stats)
            error: BaseException | None = None
            try:
                while True:
                    with trace.current():
                        try:
                            piece = await tokens.__anext__()
                        except StopAsyncIteration:
                            break
                    trace.chunk()
                    pieces.append(piece)
                    if prepared.retrieval is None:
                        yield piece
            except BaseException as exc:
                error = exc
                raise
            finally:
                await tokens.aclose()
                trace.end(stats, "".join(pieces), error)
        if stats.decline_margin is not None:
            prepared.signals["decline_margin"] = stats.decline_margin
        result = self.finish(prepared, "".join(pieces), None if prepared.prompt is None else stats)
        observe.record_outcome(result.abstained, result.abstain_reason, len(result.citations), len(result.evidence))
        if prepared.retrieval is not None and not result.abstained:
            yield result.answer
        yield result

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
        if is_blank(question):
            raise BadRequestError("the question is empty")
        if self.generator.count_tokens(question) > self.settings.max_question_tokens:
            raise BadRequestError(f"the question is longer than {self.settings.max_question_tokens} tokens")
        return question

    def finish(self, prepared: PreparedAnswer, reply: str, stats: GenerationStats | None) -> AnswerResult:
        total_ms = (time.perf_counter() - prepared.started) * 1000
        options = prepared.request.options
        stats = stats or GenerationStats()
        reply = drop_repeated_tail(reply).strip()
        finish_reason = stats.finish_reason if stats.output_tokens else "stop"
        quotes: list[Quote] = []
        r = prepared.retrieval
        if r is None:
            answer, abstained, reason = reply, False, None
            if finish_reason == "length" and reply:  # plain chat cut by the limit: end at a word, say so
                answer = cut_cleanly(reply)
        elif prepared.abstain_early and not r.hits:  # nothing to search: say so, and what to do
            answer, abstained, reason = empty_index_message(r.index), True, "empty_index"
        elif prepared.abstain_early:
            answer, abstained, reason = ABSTENTION_MESSAGE, True, "weak_evidence"
        elif prepared.items:
            # each sentence quoted once, however many of the items it names
            quotes = [q for q in (self._quote(r, n, text) for n, text in dict.fromkeys(
                (n, text) for n, text, _ in prepared.items)) if q is not None]
            answer, abstained, reason = list_answer([phrase for _, _, phrase in prepared.items]), False, None
            finish_reason = "stop"
        elif prepared.explanatory:
            picked = distinct_sentences(prepared.ranked, EXPLANATION_SENTENCES)
            if picked:  # the best sentence with what it leans on, or what leans on it
                first = in_context(*picked[0], r.hits[picked[0][0] - 1].chunk.text, reasons=not prepared.shape.howto)
                picked = [*first, *(p for p in picked[1:] if p not in first)]
            quotes = [q for q in (self._quote(r, n, text) for n, text in picked) if q is not None]
            answer, abstained, reason = " ".join(f"{q.quote} [{q.source}]" for q in quotes), False, None
            finish_reason = "stop"
        else:
            answer, abstained, reason, quotes = self._short_answer(prepared, reply, options.min_grounding)
            finish_reason = "stop"  # a verified span or a whole quote: never a cut reply
            for stop in options.sampling.stop:  # the caller's stop strings hold for the answer it gets
                answer = answer.split(stop)[0].rstrip() if answer.find(stop) > 0 else answer
        if r is not None and not abstained and prepared.signals:
            score = answerable_score(prepared.signals, WEIGHTS)
            prepared.signals["score"] = score
            # Evidence found, but it does not answer this question; a sentence that says what a definition
            # question's subject is ("…the famed Viking ruler Rollo" for "Who was Rollo?") answers it, however
            # far its words are from the question's.
            if (score < options.answerable_threshold or refused_whatever_the_score(prepared.signals)) \
                    and not defines_the_subject(prepared.shape, prepared.best_sentence):
                prepared.withheld = answer
                answer, abstained, reason, quotes = ABSTENTION_MESSAGE, True, "unanswerable", []
        language = prepared.language
        if abstained and reason != "empty_index":  # the refusal in the question's language
            answer = refusal_message(language)
        kind = answer_kind(prepared, answer, abstained)
        if kind == "yes_no":  # "Ja" to a German question; the quote stays the document's words
            answer = yes_no_word(answer, language)
        embed_ms, search_ms = (r.embed_ms, r.search_ms) if r is not None else (0.0, 0.0)
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
            citations=list(dict.fromkeys(q.source for q in quotes)),
            evidence=[Evidence(source=q.source, quote=q.quote, start=q.start, end=q.end) for q in quotes],
            sources=sources(r, prepared.passages) if r is not None else [],
            context=[f"[{p.number}] {p.text}" for p in prepared.passages],
            model=self.generator.model_id, finish_reason=finish_reason, metrics=metrics, answer_kind=kind,
            language=language)

    def _short_answer(self, prepared: PreparedAnswer, reply: str,
                      min_grounding: float) -> tuple[str, bool, str | None, list[Quote]]:
        """The reply aligned to the evidence: the phrase as the source spells it and the sentence holding it.
        A reply no evidence sentence holds (a generator that could not be constrained, or degenerate output
        such as bare labels) is replaced by the best quote itself; a declining reply is an abstention."""
        text = clean_reply(reply)
        if model_abstained(text) and text:
            return ABSTENTION_MESSAGE, True, "model_declined", []
        if min_grounding and text and grounded_share(text, prepared.question, prepared.passages) < min_grounding:
            return ABSTENTION_MESSAGE, True, "ungrounded", []
        r = prepared.retrieval
        # A command ending in a quoted argument is matched as decoded too: cleaning takes its closing quote off
        # ("aptitude purge '~c'").
        decoded = " ".join(reply.split())
        quoted_end = decoded[-1:] in ("'", '"', "’", "”")
        command = next((c for c in prepared.commands if c[0] == text or (quoted_end and c[0] == decoded)), None) \
            if text else None
        if command is not None:
            quotes = [self._quote(r, *where) for where in (command[2], command[1]) if where is not None]
            return command[0], False, None, [q for q in quotes if q is not None]
        if prepared.yes_no and text in ("Yes", "No"):
            source, sentence = prepared.ranked[0]
            quote = self._quote(r, source, sentence)
            return text, False, None, [quote] if quote is not None else []
        found = (align(text, prepared.ranked) or align_part(text, prepared.ranked, prepared.question)) if text \
            else None
        if found is not None:
            source, sentence, phrase = found
            quote = self._quote(r, source, sentence)
            if quote is not None:
                return with_bound(phrase, sentence), False, None, [quote]
        source, sentence = prepared.ranked[0]
        quote = self._quote(r, source, sentence)
        return sentence, False, None, [quote] if quote is not None else []

    def _cosine(self, sentence: str, retrieval: Retrieval) -> float:
        """How close in meaning ``sentence`` is to the question as searched (one embedding, ~5 ms)."""
        return float(self.embedder.embed([sentence])[0] @ retrieval.query_vector)

    @staticmethod
    def _quote(retrieval: Retrieval | None, source: int, sentence: str) -> Quote | None:
        if retrieval is None or not 1 <= source <= len(retrieval.hits):
            return None
        return sentence_quote(source, retrieval.hits[source - 1].chunk.text, sentence)


REPEATED_WORDS = 8  # an answer line this short is a phrase a follow-up does not get again (longer: sentences)
COMMAND_SENTENCES = 3  # the best-ranked sentences whose commands a how-to question may be answered with


def commands_for(sentences: Sequence[Sentence], order: Sequence[int], question: QuestionShape, said: str = "",
                 earlier: Sequence[str] = ()) -> tuple[tuple[str, tuple[int, str], tuple[int, str] | None], ...]:
    """A how-to question's candidate commands from its best sentences (``order``: sentence indices, best first):
    the code each shows, or the code line right under a sentence that announces one ("…the following command."
    then "# dpkg --configure -a"). Not what the question or, for a follow-up, the ``earlier`` questions it refers
    back to write ("pg_dump" for "Which option makes it write a custom-format archive?" after "What does the pg_dump
    utility do?"), nor the answer the turn before gave (``said``). Empty for any other question."""
    if not question.howto:
        return ()
    following = {(s.source, s.position): s for s in sentences}
    found: dict[str, tuple[tuple[int, str], tuple[int, str] | None]] = {}
    for i in order[:COMMAND_SENTENCES]:
        sentence = sentences[i]
        where = (sentence.source + 1, sentence.text)
        for command in commands_of(sentence):
            found.setdefault(command, (where, None))
        for program in programs_in(sentence.text) if question.command else ():  # "lsmod(8)" for "Which command …?"
            found.setdefault(program, (where, None))
        for variable in variables_in(sentence.text) if question.variable else ():
            found.setdefault(variable, (where, None))
        after = following.get((sentence.source, sentence.position + 1))
        if after is not None and introduces_code(sentence.text):
            for command in commands_of(after):
                found.setdefault(command, ((after.source + 1, after.text), where))
        # The code line above a sentence about it, for a procedure asked for (not for a setting: "apache2ctl -k
        # graceful-stop" answered "… what setting caps how long the parent waits …?").
        before = following.get((sentence.source, sentence.position - 1))
        if question.procedure and before is not None and before.line \
                and about_the_code_above(sentence.text, before.text):
            found.setdefault(before.text, ((before.source + 1, before.text), where))
        for term in reversed(sentence.terms):  # the options or settings a definition list's entry names
            found.setdefault(term, (where, None))
    # A procedure is answered by the command line, not by one of its arguments the sentence announcing it names:
    # "mount -t iso9660 -o ro,loop cd.iso /cdrom", not "cd.iso" of "If "cd.iso" contains an ISO9660 image, then
    # the following manually mounts it to "/cdrom"."
    lines = [command.split() for command in found if len(command.split()) > 1] if question.procedure else []
    asked = " ".join((question.text, *earlier))
    return tuple((command, where, intro) for command, (where, intro) in found.items()
                 if of_the_asked_kind(command, question, whole=True)
                 and not any(command in line for line in lines) and not names_it(asked, command)
                 and command.casefold() != said.casefold())


def names_it(question: str, code: str) -> bool:
    """The question itself writes ``code`` (as a whole token, a variable with or without its "$"): it is what is
    asked about, not the answer ("How do I change which program /usr/bin/editor launches?" was answered
    "/usr/bin/editor"; "$LANG" is no answer to "Which variables override $LANG?", nor "$LC_*" to "Which variable
    takes precedence over both LANG and the LC_* settings?")."""
    name = code[1:] if code.startswith("$") and len(code) > 1 else code
    return re.search(rf"(?<![\w/.$-])\$?{re.escape(name)}(?![\w/-])", question, re.IGNORECASE) is not None


def closest(scores: np.ndarray, question: QuestionShape, sentences: Sequence[Sentence],
            vectors: np.ndarray | None) -> list[int]:
    """The ``COMMAND_SENTENCES`` best sentences by their scores without the ranker's ``asked_token`` term, each with
    the next sentence of its passage where that one goes on about it ("If you include the -X parameter when calling
    it, …" after "… the easiest way to produce a standalone hot backup is to use the pg_basebackup tool.")."""
    plain = scores - asked_token_bonus(question, sentences, vectors is not None)
    best = [int(i) for i in np.argsort(-plain, kind="stable")[:COMMAND_SENTENCES]]
    at = {(sentence.source, sentence.position): k for k, sentence in enumerate(sentences)}
    following = (at.get((sentences[i].source, sentences[i].position + 1)) for i in best)
    return [*best, *(k for k in following if k is not None and GOES_ON_ABOUT.search(sentences[k].text))]


def answer_kind(prepared: PreparedAnswer, answer: str, abstained: bool) -> str:
    """What the answer line is (``AnswerResult.answer_kind``)."""
    if prepared.retrieval is None:
        return "chat"
    if abstained:
        return "refusal"
    if prepared.items:
        return "list"
    if prepared.explanatory or CITATION_LABEL.search(answer):
        return "sentences"
    if any(command == answer for command, _, _ in prepared.commands):
        return "command"
    if prepared.yes_no and answer in ("Yes", "No"):
        return "yes_no"
    return "phrase"


def programs_listed(commands: Sequence[tuple[str, tuple[int, str], tuple[int, str] | None]]
                    ) -> tuple[tuple[int, str, str], ...]:
    """For a question asking for several ("Which commands save the netfilter rules and restore them at boot?"):
    the commands the best one's sentence names with it, as a list's items ("iptables-save(8)",
    "iptables-restore(8)"), where it names two or more; else nothing."""
    if not commands:
        return ()
    where = commands[0][1]
    same = [(where[0], where[1], command) for command, at, intro in commands if at == where and intro is None]
    return tuple(same[:LIST_ITEMS]) if len(same) >= 2 else ()


def items_for(sentences: Sequence[Sentence], order: Sequence[int], question: QuestionShape) -> tuple[tuple[int, str, str], ...]:
    """A list question's answer from its best sentences (``order``): the first that lists quoted items, or the
    item lines right under one that announces them ("…you need to make following actions."). Another question
    (not a yes/no, number or explanation one) is answered so where its best sentence announces a list in words
    ("LVM requires the following." for "What does LVM need on a Debian system?"). Empty when none does."""
    if question.wants_items:
        candidates = order[:COMMAND_SENTENCES]
    elif question.yes_no or question.explains or question.numeric or not order \
            or not announces_a_list(sentences[order[0]].text):
        return ()
    else:
        candidates = order[:1]
    at = {(s.source, s.position): s for s in sentences}
    for i in candidates:
        sentence = sentences[i]
        listed = enumeration(sentence.text, identifiers=question.listing)
        if listed and of_the_asked_kind(listed, question) and question.wants_items:
            return ((sentence.source + 1, sentence.text, listed),)
        if introduces_code(sentence.text):
            lines = []
            while len(lines) < LIST_ITEMS:
                following = at.get((sentence.source, sentence.position + 1 + len(lines)))
                if following is None or not following.line or not is_item(following.text) \
                        or introduces_code(following.text) \
                        or (lines and following.text.endswith(".") != lines[0][2].endswith(".")):
                    break  # the list ends where the lines stop looking like its items
                lines.append((following.source + 1, following.text, following.text))
            if len(lines) >= 2:
                return tuple(lines)
    return ()


def list_answer(items: Sequence[str]) -> str:
    """A list's items as one answer line, joined by "; ", an item's closing full stop left out ("… the owner
    information; Splitting the archive file …", not "information.; Splitting")."""
    return "; ".join(item[:-1] if item.endswith(".") and not item.endswith("..") else item for item in items)


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

