"""The answer pipeline end to end: retrieval, compression, prompt, generation, result, eval and CLI.

Real models and a real index (two SQuAD documents ingested once per module); no mocks.
Generations are kept short (``max_tokens`` <= 24) so the module stays fast on a small CPU.
"""

from __future__ import annotations

import dataclasses
import json
import re
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from conftest import SQUAD_DOCS, SQUAD_QUESTIONS
from helpers import cli_env
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from rag.core.access import RequestContext
from rag.answering.service import AnswerOptions, AnswerRequest, AnswerService, closest, options_from
from rag.answering.answerability import missing_names, names
from rag.answering import compress
from rag.answering.compress import (Passage, Sentence, candidate_sentences, names_an_asked_token, score_sentences,
                                    select_passages, split_sentences, states_a_default)
from rag.answering.evidence import files_in
from rag.core.errors import BadRequestError, ConfigError
from rag.core.records import ChunkRecord
from rag.reranker import KeepOrder, load_reranker
from app.bench.evaluate import contains_answer, evaluate, normalise_answer
from rag.generation.base import SamplingOptions
from rag.answering.question import QuestionShape
from rag.answering.prompt import ABSTENTION_MESSAGE, drop_repeated_tail, grounded_share, model_abstained
from rag.answering.result import AnswerResult
from rag.answering.retrieval import RRF_K, Retriever, rrf_fuse
from app.runtime import Models, answer_service
from rag.core.settings import Settings

DOC_NAMES = ("normans.md", "victoria_australia.md")
ROLLO_QUESTION = "Who was the leader of the Normans who swore fealty to King Charles III?"
VICTORIA_QUESTION = "What is the capital of Victoria?"
OFF_TOPIC_QUESTION = "What is the airspeed of an unladen swallow in kilometres per hour?"
SHORT = 16  # max_tokens for generations in this module
CLI_TIMEOUT_S = 240


# --------------------------------------------------------------------------- helpers
def squad_rows() -> list[dict]:
    return [json.loads(line) for line in SQUAD_QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]


def first_questions(document: str, count: int, unanswerable: bool = False) -> list[dict]:
    """The first ``count`` questions about ``document`` in file order (deterministic)."""
    rows = [r for r in squad_rows() if r["document"] == document and r["unanswerable"] == unanswerable
            and (unanswerable or r["answers"])]
    assert len(rows) >= count, (document, len(rows))
    return rows[:count]


def options(**overrides) -> AnswerOptions:
    sampling = SamplingOptions(max_tokens=overrides.pop("max_tokens", SHORT))
    return AnswerOptions(sampling=sampling, **overrides)




def run_cli(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True,
                          env=cli_env(settings, **env), timeout=CLI_TIMEOUT_S, cwd=Path(__file__).parent.parent)


def consume_in_order(text: str, sentences: list[str]) -> list[int]:
    """Positions of the ``sentences`` that, joined by spaces in increasing order, make up ``text``.

    Fails if ``text`` is not such a concatenation (wrong source, or out of reading order).
    """
    positions, rest = [], text
    for position, sentence in enumerate(sentences):
        if rest.startswith(sentence):
            positions.append(position)
            rest = rest[len(sentence):].lstrip(" ")
            if not rest:
                return positions
    raise AssertionError(f"passage is not its source's sentences in reading order; left over: {rest[:120]!r}")


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def rag_home(tmp_path_factory: pytest.TempPathFactory, settings: Settings, embedder) -> Path:
    """A scratch home whose default index (home/indexes/default) holds two SQuAD documents."""
    if not SQUAD_DOCS.is_dir() or not SQUAD_QUESTIONS.is_file():
        pytest.skip(f"SQuAD data not found at {SQUAD_DOCS.parent}")
    home = tmp_path_factory.mktemp("rag-home")
    root = settings.replace(home=home).index_path()
    summary = ingest_paths([SQUAD_DOCS / n for n in DOC_NAMES], EmbeddedIndex(root),
                           IngestParameters.from_settings(settings, embedder))
    assert summary.ok and summary.count("added") == len(DOC_NAMES), summary.as_dict()
    assert summary.chunks_written > 10
    return home


@pytest.fixture(scope="module")
def index_root(rag_home: Path) -> Path:
    return rag_home / "indexes" / "default"


@pytest.fixture(scope="module")
def service(rag_home: Path, settings: Settings, embedder, generator):
    svc = answer_service(settings.replace(home=rag_home), Models(embedder, generator))
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def retriever(service: AnswerService) -> Retriever:
    return service.retriever()


def ask(service: AnswerService, question: str, options: AnswerOptions) -> AnswerResult:
    # As the CLI asks (``rag ask``): the operator, who sees every document (a context made without one sees
    # public documents only, and gets BM25 over what it searches: other lexical scores).
    return service.ask(AnswerRequest(question=question, options=options, context=RequestContext.local()))


async def collect(events) -> list:
    return [item async for item in events]


@pytest.fixture(scope="module")
def doc_ids(retriever: Retriever) -> dict[str, str]:
    """File name -> document id."""
    return {Path(d.path).name: d.id for d in retriever.reader.documents()}


@pytest.fixture(scope="module")
def rollo_result(service: AnswerService) -> AnswerResult:
    return ask(service, ROLLO_QUESTION, options())


@pytest.fixture(scope="module")
def count_tokens(generator):
    return lambda text: len(generator.encode(text))


# --------------------------------------------------------------------------- 1. retrieval finds known passages
def test_retrieval_finds_rollo_passage(retriever: Retriever):
    retrieval = retriever.retrieve(ROLLO_QUESTION, 5)
    assert len(retrieval.hits) == 5
    top3 = retrieval.hits[:3]
    assert any(Path(h.chunk.path).name == "normans.md" and "Rollo" in h.chunk.text for h in top3), \
        [(h.chunk.path, h.chunk.text[:80]) for h in top3]
    scores = [h.score for h in retrieval.hits]
    assert scores == sorted(scores, reverse=True)
    assert retrieval.best_dense > 0.3 and retrieval.embed_ms > 0 and retrieval.search_ms > 0
    assert retrieval.query_vector.shape == (retriever.embedder.dimension,)


def test_retrieval_finds_victoria_passage(retriever: Retriever):
    retrieval = retriever.retrieve(VICTORIA_QUESTION, 5)
    top = retrieval.hits[0]
    assert Path(top.chunk.path).name == "victoria_australia.md", top.chunk.path
    assert any("Melbourne" in h.chunk.text for h in retrieval.hits[:3])


def test_retrieval_document_filter(retriever: Retriever, doc_ids: dict[str, str]):
    victoria = doc_ids["victoria_australia.md"]
    hits = retriever.retrieve(ROLLO_QUESTION, 5, doc_ids=[victoria]).hits
    assert hits and {h.chunk.doc_id for h in hits} == {victoria}


# --------------------------------------------------------------------------- 2. hybrid vs each side
def recall_at_5(retriever: Retriever, questions: list[dict], mode: str) -> float:
    found = 0
    for q in questions:
        hits = retriever.retrieve(q["question"], 5, mode=mode).hits
        found += any(Path(h.chunk.path).name == q["document"] and contains_answer(h.chunk.text, q["answers"])
                     for h in hits)
    return found / len(questions)


def test_hybrid_recall_at_least_each_side(retriever: Retriever):
    # The first 15 answerable questions of each ingested document, in file order (the first 30
    # of the file are all about normans.md, so this covers both documents deterministically).
    questions = [q for name in DOC_NAMES for q in first_questions(name, 15)]
    assert len(questions) == 30
    recall = {mode: recall_at_5(retriever, questions, mode) for mode in ("hybrid", "dense", "lexical")}
    print(f"recall@5 over {len(questions)} questions: {recall}")
    assert all(0.0 <= r <= 1.0 for r in recall.values())
    # Fusion may lose a single question that one side ranked 5th and the other did not find at all,
    # so allow one question (1/30) of slack against the better side.
    assert recall["hybrid"] >= max(recall["dense"], recall["lexical"]) - 1 / 30, recall
    assert recall["hybrid"] >= 0.8, recall


def test_retrieval_modes_use_their_side_only(retriever: Retriever):
    dense = retriever.retrieve(ROLLO_QUESTION, 5, mode="dense").hits
    lexical = retriever.retrieve(ROLLO_QUESTION, 5, mode="lexical").hits
    assert dense and all(h.lexical_score is None and h.dense_score is not None for h in dense)
    assert lexical and all(h.dense_score is None and h.lexical_score is not None for h in lexical)


# --------------------------------------------------------------------------- 3. rrf_fuse
class ReverseAll:
    """A reranker that sees twice the candidates and turns their order round."""

    def candidates(self, k: int) -> int:
        return 2 * k

    def rerank(self, query: str, chunks: Sequence[ChunkRecord]) -> list[int]:
        return list(range(len(chunks)))[::-1]


def test_the_reranker_orders_the_fused_candidates(retriever: Retriever):
    """Retrieval hands the reranker the fused candidates it asks for and keeps the first k of its order; the
    default keeps the fused order (the ``none`` setting)."""
    fused = retriever.retrieve(ROLLO_QUESTION, 6).hits
    reranked = Retriever(retriever.reader, retriever.embedder, ReverseAll()).retrieve(ROLLO_QUESTION, 3).hits
    assert isinstance(retriever.reranker, KeepOrder) and len(fused) == 6
    assert [h.chunk.id for h in reranked] == [h.chunk.id for h in fused[::-1][:3]]
    assert isinstance(load_reranker(Settings()), KeepOrder)
    with pytest.raises(ConfigError, match="reranker must be one of none"):
        load_reranker(Settings(reranker="nope"))


def test_rrf_fuse_orders_by_summed_reciprocal_rank():
    fused = rrf_fuse([[1, 2, 3], [3, 1]], 10)
    assert [i for i, _ in fused] == [1, 3, 2]
    scores = dict(fused)
    assert scores[1] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert scores[3] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    assert scores[2] == pytest.approx(1 / (RRF_K + 2))
    # An item found by both sides beats one found first by a single side.
    assert [i for i, _ in rrf_fuse([[7, 8], [8, 9]], 3)][0] == 8


def test_rrf_fuse_ties_are_deterministic():
    # Same rank on different sides -> equal scores -> ties broken by ascending id, whatever the input order.
    assert rrf_fuse([[5], [2]], 5) == rrf_fuse([[2], [5]], 5) == [(2, pytest.approx(1 / 61)), (5, pytest.approx(1 / 61))]
    a = rrf_fuse([[10, 4, 6], [6, 4, 10]], 3)
    b = rrf_fuse([[6, 4, 10], [10, 4, 6]], 3)
    assert a == b
    # 6 and 10 tie on 1/61 + 1/63, which is just above 4's 2/62.
    assert dict(a)[6] == dict(a)[10] > dict(a)[4]
    assert [i for i, _ in a] == [6, 10, 4]


def test_rrf_fuse_cuts_at_k_and_handles_empty():
    fused = rrf_fuse([list(range(20)), list(range(19, -1, -1))], 4)
    assert len(fused) == 4
    assert rrf_fuse([list(range(20))], 0) == []
    assert rrf_fuse([[], []], 5) == []
    assert [i for i, _ in rrf_fuse([[3, 1, 2]], 2)] == [3, 1]
    # A smaller rrf_k sharpens the rank differences but keeps the order.
    assert [i for i, _ in rrf_fuse([[3, 1, 2]], 3, rrf_k=1)] == [3, 1, 2]
    assert rrf_fuse([[3]], 1, rrf_k=1) == [(3, pytest.approx(0.5))]


# --------------------------------------------------------------------------- 4. compression
@pytest.fixture(scope="module")
def rollo_sentences(retriever: Retriever, embedder):
    retrieval = retriever.retrieve(ROLLO_QUESTION, 5)
    sentences = candidate_sentences([h.chunk.text for h in retrieval.hits])
    vectors = embedder.embed([s.text for s in sentences])
    scores = score_sentences(QuestionShape.of(ROLLO_QUESTION), retrieval.query_vector, sentences, vectors)
    return retrieval, sentences, scores


@pytest.mark.parametrize("budget", [40, 100, 250])
def test_select_passages_respects_budget(rollo_sentences, count_tokens, budget: int):
    _, sentences, scores = rollo_sentences
    passages = select_passages(sentences, scores, count_tokens, budget)
    assert passages
    assert sum(count_tokens(p.text) for p in passages) <= budget


@pytest.mark.parametrize("budget", [40, 100, 250])
def test_select_passages_citations_and_reading_order(rollo_sentences, count_tokens, budget: int):
    retrieval, sentences, scores = rollo_sentences
    passages = select_passages(sentences, scores, count_tokens, budget)
    numbers = [p.number for p in passages]
    assert numbers == sorted(set(numbers)), "one passage per source, in source order"
    assert all(1 <= n <= len(retrieval.hits) for n in numbers)
    for p in passages:
        own = [s.text for s in sentences if s.source == p.number - 1]
        # Every sentence of passage [n] comes from hit n-1, in the order it has there.
        if budget > 40:
            consume_in_order(p.text, own)
        hit_text = " ".join(retrieval.hits[p.number - 1].chunk.text.split())
        first_words = " ".join(p.text.split()[:5])
        assert first_words in hit_text, (p.number, p.text[:80])


def test_best_sentence_kept_under_tight_budget(rollo_sentences, count_tokens):
    _, sentences, scores = rollo_sentences
    best = sentences[int(np.argmax(scores))]
    assert "Rollo" in best.text, "the sentence naming Rollo should score highest"
    budget = count_tokens(best.text) + 4 + 5  # room for the best sentence and little else
    passages = select_passages(sentences, scores, count_tokens, budget)
    assert any(best.text in p.text for p in passages)
    assert sum(count_tokens(p.text) for p in passages) <= budget


def test_overlong_sentence_truncated_not_dropped(count_tokens):
    long = ("The Norman conquest of England brought " + ", ".join(f"castle number {i}" for i in range(40))
            + " to the kingdom.")
    assert count_tokens(long) > 100
    passages = select_passages([Sentence(long, 0, 0)], np.array([1.0]), count_tokens, 30)
    assert len(passages) == 1 and passages[0].number == 1
    text = passages[0].text
    assert text and long.startswith(text) and len(text) < len(long)
    assert count_tokens(text) <= 30


def test_truncated_sentence_counts_against_budget(count_tokens):
    long = "Rollo " + " ".join(f"word{i}" for i in range(120)) + "."
    sentences = [Sentence(long, 0, 0), Sentence("Rollo swore fealty.", 1, 0), Sentence("He ruled Normandy.", 1, 1)]
    passages = select_passages(sentences, np.array([1.0, 0.5, 0.4]), count_tokens, 30)
    assert sum(count_tokens(p.text) for p in passages) <= 30


def test_select_passages_max_sentences_and_empty(count_tokens):
    sentences = [Sentence(f"Fact number {i} is here.", i % 3, i) for i in range(20)]
    scores = np.linspace(1.0, 0.0, 20)
    passages = select_passages(sentences, scores, count_tokens, 4000, max_sentences=5)
    assert sum(len(split_sentences(p.text)) for p in passages) == 5
    assert select_passages([], np.zeros(0), count_tokens, 100) == []


def test_split_sentences():
    assert split_sentences("It cost 3.5 million. Then it fell.") == ["It cost 3.5 million.", "Then it fell."]
    assert split_sentences("Rates rose 2.75 per cent in 2010. In 2011 they fell!") == [
        "Rates rose 2.75 per cent in 2010.", "In 2011 they fell!"]
    # An abbreviation followed by a lower-case word does not end a sentence.
    assert split_sentences("He arrived at 5 p.m. on Monday. He left e.g. early.") == [
        "He arrived at 5 p.m. on Monday.", "He left e.g. early."]
    assert split_sentences("Who? Rollo.\nThe end") == ["Who?", "Rollo.", "The end"]
    assert split_sentences("") == [] and split_sentences("   ") == []


def test_split_sentences_keeps_closing_quotes():
    assert split_sentences('He shouted "Stop." Then he left.') == ['He shouted "Stop."', "Then he left."]


def test_candidate_and_score_sentences():
    chunks = ["Rollo led the Normans. They settled in Normandy.", "Melbourne is the capital of Victoria."]
    sentences = candidate_sentences(chunks)
    assert [(s.source, s.position) for s in sentences] == [(0, 0), (0, 1), (1, 0)]
    scores = score_sentences(QuestionShape.of("Who led the Normans?"), np.zeros(4, dtype=np.float32), sentences, None)
    assert scores.shape == (3,) and int(np.argmax(scores)) == 0
    assert scores[2] < scores[1]  # no overlap, lower-ranked source


def test_with_sentence_vectors_the_fitted_ranker_weighs_what_the_question_asks_for(embedder):
    """The fitted ranker (``SentenceWeights``): a how-to question's best sentence is the one showing the command,
    a how-many question's the one holding a number, over sentences sharing as many of the question's words."""
    howto = QuestionShape.of("How do I check the file system on the next boot?")
    chunks = ["The file system check on boot is slow for large disks.",
              'To check the file system on the next boot, run "touch /forcefsck" as root.']
    sentences = candidate_sentences(chunks)
    vectors = embedder.embed([s.text for s in sentences])
    query = embedder.embed([howto.text])[0]
    fitted = score_sentences(howto, query, sentences, vectors, "", chunks, [0.0, 0.0])
    assert int(np.argmax(fitted)) == 1
    counting = QuestionShape.of("How many seats does the parliament have?")
    chunks = ["The parliament has seats for the members of both houses.", "The parliament has 128 seats."]
    sentences = candidate_sentences(chunks)
    vectors = embedder.embed([s.text for s in sentences])
    fitted = score_sentences(counting, embedder.embed([counting.text])[0], sentences, vectors, "", chunks, [0.0, 0.0])
    assert int(np.argmax(fitted)) == 1
    # A passage the vector search ranked far below the best one pulls its sentences down.
    far = score_sentences(counting, embedder.embed([counting.text])[0], sentences, vectors, "", chunks, [0.0, -0.5])
    assert far[1] < fitted[1] and far[0] == pytest.approx(fitted[0])


def test_the_fitted_ranker_prefers_a_sentence_naming_the_option_or_file_asked_for(embedder):
    """An option or a file asked for (``asked_token``): the sentence naming one the question does not comes first,
    over one sharing more of the question's words; without that term the other would. The option rule that refuses
    reads the sentences closest to the question before that term (``closest``)."""
    cases = [("Which option makes createuser prompt for the password?",
              ["createuser prompts for a password when the server asks for one.",
               "With \"--pwprompt\" it asks for the new role's password."]),
             ("Where does the journal keep its logs?",
              ["The journal keeps logs of the system and of the kernel in binary form.",
               'Persistent logs go to "/var/log/journal".'])]
    for question, chunks in cases:
        shape = QuestionShape.of(question)
        sentences = candidate_sentences(chunks)
        vectors = embedder.embed([s.text for s in sentences])
        scores = score_sentences(shape, embedder.embed([question])[0], sentences, vectors, "", chunks, [0.0, 0.0])
        assert [names_an_asked_token(s.text, shape) for s in sentences] == [False, True], question
        assert int(np.argmax(scores)) == 1, (question, scores)
        assert closest(scores, shape, sentences, vectors)[0] == 0, (question, scores)
    assert files_in('Settings go to "postgresql.auto.conf" in /var/lib/postgresql, e.g. at start.') == [
        "postgresql.auto.conf", "/var/lib/postgresql"]
    assert QuestionShape.of("In which file is it set?").file and not QuestionShape.of("Which option is it?").file


def test_the_fitted_ranker_lifts_a_line_ending_without_punctuation_unless_an_explanation_is_asked(embedder,
                                                                                                 monkeypatch):
    """A line ending without punctuation (``unpunctuated``: a code line, a list item) is lifted over the sentence
    announcing it, which shares more of the question's words ("LogLevel info rewrite:trace5" under "This sets the
    main LogLevel to info, …:"; the nine unseen sets' best sentence 303 → 312 of 702); without that term the
    announcing sentence would come first. An explanation asked for (not how to do something) is answered in prose: no lift."""
    question = "What do I put in the configuration to log at level info but trace mod_rewrite at trace5?"
    chunks = ["This sets the main LogLevel to info, but turns it up to trace5 for mod_rewrite:\n\n"
              "LogLevel info rewrite:trace5\n"]
    shape = QuestionShape.of(question)
    sentences = candidate_sentences(chunks)
    vectors = embedder.embed([s.text for s in sentences])
    query = embedder.embed([question])[0]
    assert [compress.unpunctuated(s.text) for s in sentences] == [False, True]
    assert int(np.argmax(score_sentences(shape, query, sentences, vectors, "", chunks, [0.0]))) == 1
    why = QuestionShape.of("Why does this configuration trace mod_rewrite at trace5?")
    lifted = compress.sentence_features(why, query, sentences, vectors, "", chunks, [0.0])
    assert not lifted[:, [f.name for f in dataclasses.fields(compress.SentenceWeights)].index("unpunctuated")].any()
    monkeypatch.setattr(compress, "FITTED", dataclasses.replace(compress.FITTED, unpunctuated=0.0))
    assert int(np.argmax(score_sentences(shape, query, sentences, vectors, "", chunks, [0.0]))) == 0
    assert not any(compress.unpunctuated(line) for line in ("is this:", "It is done.", 'He said "no"', "(see below)"))


def test_the_fitted_ranker_prefers_a_sentence_stating_the_default_asked_for(embedder, monkeypatch):
    """A default asked for (``default_stated``): the sentence that states one comes first, over one sharing more
    of the question's words; without that term the other would. How to make something the default is no such
    question."""
    question = "Where does the server send its log messages by default?"
    chunks = ["Log messages can also be sent to syslog: set log_destination to syslog.",
              "The default is to log to stderr only."]
    shape = QuestionShape.of(question)
    sentences = candidate_sentences(chunks)
    vectors = embedder.embed([s.text for s in sentences])
    query = embedder.embed([question])[0]
    assert [states_a_default(s.text, shape) for s in sentences] == [False, True]
    assert int(np.argmax(score_sentences(shape, query, sentences, vectors, "", chunks, [0.0, 0.0]))) == 1
    monkeypatch.setattr(compress, "FITTED", dataclasses.replace(compress.FITTED, default_stated=0.0))
    assert int(np.argmax(score_sentences(shape, query, sentences, vectors, "", chunks, [0.0, 0.0]))) == 0
    assert not states_a_default(chunks[1], QuestionShape.of("How do I make the server log to syslog by default?"))
    for stated in ("5432 by default.", "Defaults to 60 seconds.", "trust is the default for ease of installation.",
                   "Output a plain-text SQL script file (the default)."):
        assert states_a_default(stated, shape), stated
    assert not states_a_default("The defaults of each setting are listed below.", shape)


def test_the_names_a_question_asks_about_and_where_they_are_missing():
    """Capitals that open a sentence of the question, and function words, name nothing; a name the document's
    title holds is not missing (the PostgreSQL manual's pages rarely say "PostgreSQL")."""
    assert names("udev is not loading modules because modules.dep is broken. How do I fix it?") == []
    assert names("Which URL opens the CUPS web configuration? Is it OK over TLS?") == ["cups", "tls"]
    assert names("What was the default ssl_min_protocol_version in PostgreSQL 12?") == ["postgresql", "12"]
    question = "What was the default ssl_min_protocol_version in PostgreSQL 12?"
    page = "The default is TLSv1.2, in PostgreSQL 15."
    assert missing_names(question, page) == 1  # the version asked about is not the page's
    port = "Which TCP port does PostgreSQL listen on?"
    assert missing_names(port, "Connections\nThe TCP port is 5432.") == 1
    assert missing_names(port, "PostgreSQL 15 manual\nThe TCP port is 5432.") == 0


# --------------------------------------------------------------------------- 5. prompt helpers
def test_model_abstained():
    assert model_abstained("I don't know.")
    assert model_abstained("The context does not mention it.")
    assert model_abstained("   ")
    assert not model_abstained("Rollo")
    assert not model_abstained("Rollo [1]")


def test_grounded_share():
    passages = [Passage(1, "Rollo agreed to swear fealty to King Charles III of West Francia.")]
    question = "Who swore fealty to Charles III?"
    assert grounded_share("Rollo [1]", question, passages) == 1.0
    assert grounded_share("King Charles III", question, passages) == 1.0  # adds no words of its own
    assert grounded_share("Rollo, a Viking chieftain", question, passages) == 1 / 3  # rollo of rollo/viking/chieftain
    assert grounded_share("Paris is the capital of France.", question, passages) == 0.0


def test_drop_repeated_tail():
    loop = "The answer to this question is: [1]\n\n"
    assert drop_repeated_tail("Melbourne [1]." + "\n\n" + loop + loop) == "Melbourne [1].\n\n" + loop
    assert drop_repeated_tail(loop * 3) == loop
    assert drop_repeated_tail("Rollo was a Viking leader [2].") == "Rollo was a Viking leader [2]."
    assert drop_repeated_tail("ha ha ha") == "ha ha ha"  # blocks under 12 characters stay


def test_normalise_and_contains_answer():
    assert normalise_answer("The  Normans, of France!") == "normans of france"
    assert contains_answer("It was founded by the Normans.", ["normans"])
    assert not contains_answer("Nothing here", ["Rollo", ""])
    # An option is compared as written: "-L" is another option than "-l", "-Xs" is not "-X".
    assert contains_answer("Run pg_restore -l db.dump", ["-l", "--list"])
    assert not contains_answer("pg_restore -L db.list db.dump", ["-l", "--list"])
    assert not contains_answer("-Xs", ["-X"]) and contains_answer('use "-u" here', ['"-u"'])
    assert contains_answer("ls --time-style=+%d", ["--time-style"])


# --------------------------------------------------------------------------- 6. abstention
def test_off_topic_question_abstains_without_generation(service: AnswerService):
    result = ask(service, OFF_TOPIC_QUESTION, options())
    assert result.abstained and result.abstain_reason == "weak_evidence"
    assert result.answer == ABSTENTION_MESSAGE
    assert result.sources, "sources are still reported when abstaining"
    assert result.metrics.output_tokens == 0 and result.metrics.prompt_tokens == 0
    assert result.citations == [] and result.context == []


def test_abstention_threshold_option(service: AnswerService):
    # The same answerable question abstains when the evidence threshold is set above any cosine.
    result = ask(service, ROLLO_QUESTION, options(abstain_threshold=1.01))
    assert result.abstained and result.abstain_reason == "weak_evidence" and result.metrics.output_tokens == 0


# --------------------------------------------------------------------------- 7. streaming
def test_stream_yields_pieces_then_result(service: AnswerService):
    # An answer from the documents is verified before it streams: one piece, exactly the result's answer.
    items = asyncio.run(collect(service.stream(AnswerRequest(question=VICTORIA_QUESTION, options=options()))))
    *pieces, result = items
    assert isinstance(result, AnswerResult)
    if result.abstained:
        assert pieces == [] and result.answer == ABSTENTION_MESSAGE
    else:
        assert pieces == [result.answer] and result.metrics.output_tokens >= 1
    # Plain chat (no retrieval) streams token by token.
    items = asyncio.run(collect(service.stream(AnswerRequest(question="Say hello to the reader.", use_context=False,
                                                             options=options()))))
    *pieces, result = items
    assert len(pieces) >= 2 and all(isinstance(p, str) and p for p in pieces)
    assert result.answer == "".join(pieces).strip() or result.finish_reason == "length"


# --------------------------------------------------------------------------- 8. result fields
def test_result_fields(rollo_result: AnswerResult, generator, doc_ids: dict[str, str]):
    r = rollo_result
    assert r.question == ROLLO_QUESTION
    assert r.answer.strip()
    assert r.model == generator.model_id
    assert len(r.sources) == 5
    assert [s.number for s in r.sources] == [1, 2, 3, 4, 5]
    for s in r.sources:
        assert s.document_id in doc_ids.values()
        assert Path(s.path).name in DOC_NAMES and s.title
        assert isinstance(s.chunk_id, int) and s.score > 0 and s.snippet
    assert r.sources[0].document_id == doc_ids["normans.md"]
    assert r.context and all(re.match(r"\[\d+\] \S", c) for c in r.context), r.context
    assert any("Rollo" in c for c in r.context)
    numbers = [int(re.match(r"\[(\d+)\]", c).group(1)) for c in r.context]
    assert all(1 <= n <= len(r.sources) for n in numbers)
    assert all(n in numbers for n in r.citations)
    m = r.metrics
    assert m.retrieval_ms > 0 and m.prompt_tokens > 0 and 0 < m.output_tokens <= SHORT
    assert m.ttft_ms > 0 and m.total_ms >= m.ttft_ms
    assert r.finish_reason in ("stop", "length")
    data = r.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) >= {"answer", "sources", "metrics", "context", "citations", "abstained"}


def test_prepare_finish_split(service: AnswerService):
    prepared = service.prepare(AnswerRequest(question=ROLLO_QUESTION, options=options()))
    assert not prepared.abstain_early and prepared.passages and prepared.prompt is not None
    result = service.finish(prepared, "  rollo [1]  ", None)
    # Aligned to the evidence: spelled as the source spells it, cited by the source that holds it.
    assert result.answer == "Rollo" and not result.abstained
    assert result.evidence and "Rollo" in result.evidence[0].quote
    assert result.citations == [result.evidence[0].source]
    declined = service.finish(prepared, "I don't know.", None)
    assert declined.abstained and declined.abstain_reason == "model_declined"
    assert declined.answer == ABSTENTION_MESSAGE
    # With min_grounding, a reply made of the model's own words is withheld; one from the passages is not.
    strict = service.prepare(AnswerRequest(question=ROLLO_QUESTION, options=options(min_grounding=0.2)))
    invented = service.finish(strict, "A famous painter who lived in Florence during the Renaissance.", None)
    assert invented.abstained and invented.abstain_reason == "ungrounded" and invented.answer == ABSTENTION_MESSAGE
    assert invented.sources, "sources are still reported when abstaining"
    copied = " ".join(strict.passages[0].text.split()[:8])
    assert not service.finish(strict, copied, None).abstained
    unsupported = service.finish(prepared, "A famous painter who lived in Florence.", None)  # default: no grounding
    assert not unsupported.abstained and unsupported.answer == prepared.ranked[0][1]  # replaced by the best quote


# --------------------------------------------------------------------------- 9. options validation
def test_options_validation(service: AnswerService, settings: Settings):
    with pytest.raises(BadRequestError, match="top_k"):
        ask(service, ROLLO_QUESTION, options(top_k=0))
    with pytest.raises(BadRequestError, match="top_k"):
        ask(service, ROLLO_QUESTION, options_from(settings, top_k=0, max_tokens=4))
    with pytest.raises(BadRequestError, match="context_tokens"):
        ask(service, ROLLO_QUESTION, options(context_tokens=5))
    with pytest.raises(BadRequestError, match="max_tokens"):
        ask(service, ROLLO_QUESTION, AnswerOptions(sampling=SamplingOptions(max_tokens=0)))
    for empty in ("", "   \n\t"):
        with pytest.raises(BadRequestError, match="empty"):
            ask(service, empty, options())
    with pytest.raises(BadRequestError, match="longer than"):
        ask(service, "Normans " * (service.settings.max_question_tokens + 10), options())


def test_options_from(settings: Settings):
    defaults = options_from(settings)
    assert defaults.top_k == settings.top_k and defaults.context_tokens == settings.context_tokens
    assert defaults.sampling.max_tokens == settings.max_tokens and defaults.documents is None
    custom = options_from(settings, top_k=3, max_tokens=8, temperature=0.0, documents=["abc"])
    assert custom.top_k == 3 and custom.sampling.max_tokens == 8 and custom.documents == ("abc",)


def test_documents_filter_restricts_sources(service: AnswerService, settings: Settings, doc_ids: dict[str, str]):
    victoria = doc_ids["victoria_australia.md"]
    result = ask(service, VICTORIA_QUESTION, options_from(settings, documents=[victoria], max_tokens=8))
    assert result.sources and {s.document_id for s in result.sources} == {victoria}
    normans_only = ask(service, VICTORIA_QUESTION, options_from(
        settings, documents=[doc_ids["normans.md"]], max_tokens=8))
    assert normans_only.sources and {s.document_id for s in normans_only.sources} == {doc_ids["normans.md"]}


# --------------------------------------------------------------------------- 10. eval
@pytest.fixture(scope="module")
def eval_set(tmp_path_factory: pytest.TempPathFactory, rag_home: Path) -> tuple[Path, Path]:
    """12 answerable + 4 unanswerable questions about the two documents, and a docs dir holding them."""
    base = tmp_path_factory.mktemp("eval")
    docs = base / "docs"
    docs.mkdir()
    for name in DOC_NAMES:
        (docs / name).write_bytes((SQUAD_DOCS / name).read_bytes())
    rows = [q for name in DOC_NAMES for q in first_questions(name, 6) + first_questions(name, 2, unanswerable=True)]
    questions = base / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return questions, docs


def test_evaluate_is_deterministic(settings: Settings, eval_set: tuple[Path, Path]):
    questions, docs = eval_set
    quiet = lambda *a, **k: None  # noqa: E731
    first = evaluate(settings, questions, docs, None, 5, 0, 0, log=quiet)
    second = evaluate(settings, questions, docs, None, 5, 0, 0, log=quiet)
    assert first["questions"] == 16 and first["answerable"] == 12 and first["k"] == 5
    keys = ("recall@5", "recall@5_dense", "recall@5_lexical")
    assert {k: first[k] for k in keys} == {k: second[k] for k in keys}
    assert all(0.0 <= first[k] <= 1.0 for k in keys)
    assert first["recall@5"] >= 0.75, first
    assert "accuracy" not in first  # no answers requested


def test_eval_cli_json(settings: Settings, eval_set: tuple[Path, Path], tmp_path: Path):
    questions, docs = eval_set
    # The off-topic questions (110 answers more) are measured by test_eval_reports_reader_metrics_and_dumps.
    proc = run_cli(settings, "--home", str(tmp_path), "eval", "--questions", str(questions), "--docs", str(docs),
                   "--answers", "2", "--no-off-topic", "--json", RAG_MAX_TOKENS="16")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    for key in ("recall@5", "accuracy", "abstention_unanswerable", "false_abstention", "ttft_ms_p50",
                "total_ms_p50"):
        assert key in report, (key, sorted(report))
    assert report["answerable"] == 12 and report["answered_answerable"] == 2 and report["answered_unanswerable"] == 2
    for key in ("recall@5", "accuracy", "abstention_unanswerable", "false_abstention"):
        assert 0.0 <= report[key] <= 1.0, (key, report[key])
    assert report["total_ms_p50"] > 0


def test_eval_rejects_bad_questions_file(settings: Settings, eval_set: tuple[Path, Path], tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answers": ["x"]}\n', encoding="utf-8")
    with pytest.raises(BadRequestError, match="bad.jsonl:1"):
        evaluate(settings, bad, eval_set[1], None, 5, 0, 0, log=lambda *a, **k: None)


# --------------------------------------------------------------------------- 11. rag ask CLI
def test_ask_cli_streams_answer_and_sources(settings: Settings, rag_home: Path, rollo_result: AnswerResult):
    # Same question and options as the in-process ``rollo_result`` (greedy), so the text must match.
    proc = run_cli(settings, "--home", str(rag_home), "ask", ROLLO_QUESTION, "--max-tokens", str(SHORT), "--top-k", "5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer_part, sep, sources_part = proc.stdout.partition("\n\n")
    assert sep, proc.stdout
    if rollo_result.abstained:
        assert ABSTENTION_MESSAGE in answer_part
    else:
        # The answer first, then its quotes, each with its source number.
        answer_line, *quote_lines = answer_part.splitlines()
        assert answer_line.strip() == rollo_result.answer.strip()
        flat_quotes = " ".join(" ".join(quote_lines).split())
        for quote in rollo_result.evidence:
            assert " ".join(quote.quote.split()) in flat_quotes and f"[{quote.source}]" in flat_quotes
    source_lines = [line for line in sources_part.splitlines() if line.strip()]
    flat = "".join(sources_part.split())
    assert [f"[{n}]" in flat for n in range(1, 7)] == [True] * 5 + [False]
    assert "normans.md" in flat and "score" not in flat
    # One relevance measure, in rank order, the same figures the API and the web app get.
    shown = [int(m) for m in re.findall(r"\(relevance (\d+)%\)$", sources_part, re.MULTILINE)]
    assert shown == [round(s.relevance * 100) for s in rollo_result.sources] and shown == sorted(shown, reverse=True)
    assert all(0 < s.relevance <= 1 for s in rollo_result.sources)
    assert all(len(line) > 80 for line in source_lines)  # not a terminal: one source per line, never wrapped
    starred = [int(m) for m in re.findall(r"^\*\[(\d+)\]", sources_part, re.MULTILINE)]
    assert starred == sorted(rollo_result.citations), (source_lines, rollo_result.citations)
    assert "TTFT" in proc.stderr and "retrieval" in proc.stderr


def test_ask_cli_json(settings: Settings, rag_home: Path):
    proc = run_cli(settings, "--home", str(rag_home), "ask", VICTORIA_QUESTION, "--max-tokens", "8", "--json",
                   "--k", "4")  # the old name of --top-k still works
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert {"answer", "sources", "metrics", "evidence"} <= set(data)
    assert data["answer"].strip() and data["sources"]
    assert Path(data["sources"][0]["path"]).name == "victoria_australia.md"
    assert data["metrics"]["retrieval_ms"] > 0
    assert len(data["sources"]) == 4
    relevance = [s["relevance"] for s in data["sources"]]
    assert relevance == sorted(relevance, reverse=True) and all(0 < r <= 1 for r in relevance)
    assert all(s["found_by"] in ("meaning and keywords", "meaning", "keywords") for s in data["sources"])


def test_ask_cli_on_an_empty_index_says_so_and_how_to_add_documents(settings: Settings, embedder, tmp_path: Path):
    from rag.store.embedded import EmbeddedIndex as Index

    home = tmp_path / "home"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("# Note\n\nThe harbour opens at nine.\n", encoding="utf-8")
    index = Index(settings.replace(home=home).index_path())
    assert ingest_paths([docs], index, IngestParameters.defaults(embedder)).count("added") == 1
    deleted = run_cli(settings, "--home", str(home), "documents", "delete", str(docs / "note.md"))
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stderr.rstrip().endswith(", 1 chunk)")  # not "1 chunks"
    proc = run_cli(settings, "--home", str(home), "ask", "When does the harbour open?", "--top-k", "3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "There are no documents in index 'default' yet" in proc.stdout
    assert "rag ingest PATH" in proc.stdout and "Documents page" in proc.stdout
    assert "the index holds no documents" in proc.stderr
    assert "0 tok" not in proc.stderr and "TTFT" not in proc.stderr
    data = json.loads(run_cli(settings, "--home", str(home), "ask", "When does it open?", "--json").stdout)
    assert data["abstained"] and data["abstain_reason"] == "empty_index" and data["sources"] == []


def test_a_mistyped_index_gets_did_you_mean_and_the_list(settings: Settings, rag_home: Path):
    proc = run_cli(settings, "--home", str(rag_home), "index", "info", "--index", "defualt")
    assert proc.returncode == 2
    assert "did you mean 'default'?" in proc.stderr and "existing indexes: default" in proc.stderr
    far = run_cli(settings, "--home", str(rag_home), "documents", "list", "--index", "zzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr and "existing indexes: default" in far.stderr


def test_index_info_shows_size_on_disk_in_readable_units(settings: Settings, rag_home: Path, index_root: Path):
    proc = run_cli(settings, "--home", str(rag_home), "index", "info")
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "size on disk" in line)
    size = float(re.search(r"([\d.]+) (kB|MB)", row).group(1))
    on_disk = sum(p.stat().st_size for p in index_root.rglob("*") if p.is_file())
    unit = 1e3 if "kB" in row else 1e6
    assert size == pytest.approx(on_disk / unit, rel=0.2), (row, on_disk)
    assert "size_bytes" not in proc.stdout


def test_ask_cli_missing_index(settings: Settings, tmp_path: Path):
    proc = run_cli(settings, "--home", str(tmp_path), "ask", ROLLO_QUESTION, "--index", "nope", "--max-tokens", "4")
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ask_cli_prints_sources_literally(settings: Settings, embedder, tmp_path: Path):
    # Markup and emoji codes in a document's title, path and text are printed as they are.
    docs = tmp_path / "docs [b]"
    docs.mkdir()
    (docs / "rocket :x:.md").write_text(
        "# Rocket [/bold] notes :rocket: [red]x\n\nThe zorblat rocket :rocket: launches from the "
        "[bold]harbour[/bold] every Tuesday at noon.\n", encoding="utf-8")
    home = tmp_path / "home"
    summary = ingest_paths([docs], EmbeddedIndex(settings.replace(home=home).index_path()),
                           IngestParameters.defaults(embedder))
    assert summary.count("added") == 1
    proc = run_cli(settings, "--home", str(home), "ask", "When does the zorblat rocket launch?", "--max-tokens", "4",
                   COLUMNS="200")
    assert proc.returncode == 0, proc.stderr[-2000:]
    source_line = next(line for line in proc.stdout.splitlines() if re.match(r"[* ]\[1\] ", line))
    quote_line = next(line for line in proc.stdout.splitlines() if line.startswith("  “"))
    assert "[bold]harbour[/bold]" in quote_line and ":rocket:" in quote_line  # the quote, literally too
    assert "Rocket [/bold] notes :rocket: [red]x" in source_line
    assert str(docs / "rocket :x:.md") in source_line
    assert "\N{ROCKET}" not in proc.stdout and "\N{CROSS MARK}" not in proc.stdout


# --------------------------------------------------------------------------- follow-up questions
def test_followup_retrieves_with_the_conversation(retriever: Retriever, service: AnswerService):
    first, followup = "Where was the first settlement in Victoria?", "When was it first settled?"
    alone = retriever.retrieve(followup, 1).hits[0]
    assert "1803" not in alone.chunk.text  # the pronoun alone does not find the passage
    with_history = retriever.retrieve(followup, 1, history=(first,)).hits[0]
    assert "1803" in with_history.chunk.text and with_history.chunk.path.endswith("victoria_australia.md")
    # The same through the answer flow: a conversation's earlier question reaches retrieval.
    messages = [{"role": "user", "content": first}, {"role": "assistant", "content": "In Victoria."},
                {"role": "user", "content": followup}]
    request = AnswerRequest.conversation(messages, options=options(top_k=1))
    assert request.history == (first,)
    assert "1803" in service.prepare(request).retrieval.hits[0].chunk.text


def test_topic_change_is_not_pulled_back_to_the_earlier_question(retriever: Retriever):
    question = "Who was the leader of the Normans who swore fealty to King Charles III?"
    hits = retriever.retrieve(question, 3, history=("What percentage of Victorians are Christian?",)).hits
    assert "Rollo" in hits[0].chunk.text


def test_followup_pairs_replace_a_shared_name_with_a_pronoun():
    from app.bench.evaluate import followup_pairs, load_questions, pronoun_followup

    assert pronoun_followup("When did Edward return?", "Who was Edward's brother?", "Normans") == "When did it return?"
    assert pronoun_followup("What did the Normans build?", "Who led the Normans?", "") == "What did they build?"
    assert pronoun_followup("What is the capital?", "Who led the Normans?", "Normans") is None
    pairs = followup_pairs(load_questions(SQUAD_QUESTIONS), 50, seed=0)
    assert len(pairs) == 50 and all(p["followup"] != p["original"] for p in pairs)
    assert all(p["unrelated_first"] and p["document"] for p in pairs)


def test_a_description_sentence_carries_its_term_and_identifiers_stay_whole():
    """In a definition list ("autovacuum_max_workers (integer)" over its description) each sentence of the
    description holds the term's words too, so "The default is three." answers "What is the default value of
    autovacuum_max_workers?" and not the same sentence of the setting above it; a snake_case name is matched
    whole, not by its first five letters (every autovacuum_* setting shared the stem "autov")."""
    from rag.answering.question import QuestionShape
    from rag.core.text import stem
    chunk = ("autovacuum_naptime (integer)\n\nSpecifies the minimum delay between autovacuum runs. The default is one "
             "minute (1min).\n\nautovacuum_max_workers (integer)\n\nSpecifies the maximum number of autovacuum "
             "processes. The default is three.")
    sentences = candidate_sentences([chunk])
    # each entry's term line reads with the first sentence of its description (``Sentence.terms``)
    assert [s.term for s in sentences] == ["autovacuum_naptime"] * 2 + ["autovacuum_max_workers"] * 2
    assert sentences[2].text == ("autovacuum_max_workers (integer)  Specifies the maximum number of autovacuum "
                                 "processes.") and sentences[2].terms == ("autovacuum_max_workers",)
    assert stem("autovacuum_max_workers") == "autovacuum_max_workers" and stem("Workers") == "worke"
    scores = score_sentences(QuestionShape.of("What is the default value of autovacuum_max_workers?"),
                             np.zeros(3, dtype=np.float32), sentences, None)
    assert sentences[int(np.argmax(scores))].text == "The default is three."
    # psql's meta-commands are terms too, their arguments in brackets
    psql = candidate_sentences(["\\timing [ on | off ]\n\nWith a parameter, turns displaying of how long each SQL "
                                "statement takes on or off."])
    assert [s.term for s in psql] == ["\\timing"] and psql[0].terms == ("\\timing",)
    assert QuestionShape.of("Which psql meta-command shows how long each statement takes?").howto
