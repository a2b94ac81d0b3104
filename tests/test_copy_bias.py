"""Copy-aware decoding with the real model: the logit bias toward the passages' tokens (``copy_bias``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from rag.answering.compress import Passage
from rag.answering.prompt import MODEL_ABSTENTION, build_messages, context_text, copy_texts, model_abstained
from rag.answering.service import AnswerRequest, options_from
from rag.core.errors import BadRequestError
from rag.core.settings import Settings
from rag.generation.base import GenerationStats, SamplingOptions
from rag.generation.logits import LogitBias
from rag.generation.ort import LocalGenerator, next_token
from app.runtime import Models, answer_service

CASES = [
    ("Who wrote the Republic?",
     "The Republic is a Socratic dialogue authored by Plato around 375 BC, concerning justice."),
    ("What did the Normans give their name to?",
     "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region in France."),
    ("Who was the first person to walk on Mars?",
     "Apollo 11 landed on the Moon in 1969; Neil Armstrong was the first person to walk on its surface."),
]


def rag_prompt(generator: LocalGenerator, question: str, context: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """The answering layer's prompt for one passage, and its copy tokens (as ``AnswerService.prepare`` makes them)."""
    passages = [Passage(1, context, (context,))]
    ids = np.concatenate([generator.encode(text) for text in copy_texts(passages)])
    return generator.prompt(build_messages(question, passages)).tokens, tuple(int(t) for t in np.unique(ids))


def tokens_of(generator: LocalGenerator, prompt: np.ndarray, options: SamplingOptions) -> list[int]:
    session = generator.start(prompt, options)
    tokens = []
    while not session.done:
        session.step()
        tokens = list(session._recorder._tokens)
    return tokens


@pytest.fixture(scope="module")
def uncached(settings: Settings) -> LocalGenerator:
    return LocalGenerator(settings.generator_path, settings.device, settings.threads, prefix_cache_slots=0)


def test_logit_bias_adds_delta_to_its_ids_only():
    logits = np.zeros((1, 1, 10), dtype=np.float32)
    bias = LogitBias.of([3, 1, 3], 2.5, also=[9])
    assert bias is not None and bias.ids.tolist() == [1, 3, 9]
    out = bias.apply(logits)
    assert out is logits and logits[0, 0].tolist() == [0, 2.5, 0, 2.5, 0, 0, 0, 0, 0, 2.5]
    assert LogitBias.of([1, 2], 0.0) is None and LogitBias.of([], 2.0, also=[9]) is None


def test_copy_bias_is_validated():
    with pytest.raises(BadRequestError):
        SamplingOptions(copy_bias=-1).validate()
    with pytest.raises(BadRequestError):
        SamplingOptions(copy_bias=11).validate()


def test_copy_bias_zero_is_token_for_token_the_plain_path(uncached: LocalGenerator):
    """At copy_bias 0 nothing is biased; and the bias mechanism itself (read logits, write them back, let ORT
    pick) with a zero delta picks exactly what ``generate_next_token`` picks."""
    for question, context in CASES:
        prompt, ids = rag_prompt(uncached, question, context)
        plain = tokens_of(uncached, prompt, SamplingOptions(max_tokens=12))
        assert tokens_of(uncached, prompt, SamplingOptions(max_tokens=12, copy_bias=0.0, copy_tokens=ids)) == plain

        zero = LogitBias(np.asarray(ids, dtype=np.int64), 0.0)
        generator = uncached._new_generator(len(prompt) + 12, SamplingOptions(max_tokens=12))
        generator.append_tokens(prompt)
        through_logits = [next_token(generator, zero) for _ in range(len(plain))]
        assert through_logits == plain


def test_copy_bias_moves_the_reply_toward_the_passage(uncached: LocalGenerator):
    # Measured: unbiased, the model paraphrases ("written by Plato"); at 2 it copies "authored by Plato".
    prompt, ids = rag_prompt(uncached, *CASES[0])
    plain, _ = uncached.generate(prompt, SamplingOptions(max_tokens=16))
    biased, _ = uncached.generate(prompt, SamplingOptions(max_tokens=16, copy_bias=2.0, copy_tokens=ids))
    assert "authored" not in plain and "authored by Plato" in biased
    plain_ids, biased_ids = (set(uncached.encode(text).tolist()) for text in (plain, biased))
    assert len(biased_ids - set(ids)) < len(plain_ids - set(ids))


def test_abstention_reply_is_not_suppressed(uncached: LocalGenerator):
    """The abstention reply's tokens are biased with the passages', so the model can still say it does not
    know while the bias pulls toward an unrelated passage."""
    context = "The bakery on the corner sells bread and cakes every morning."
    passages = [Passage(1, context, (context,))]
    ids = tuple(int(t) for t in np.unique(np.concatenate([uncached.encode(t) for t in copy_texts(passages)])))
    assert set(uncached.encode(MODEL_ABSTENTION).tolist()) <= set(ids)
    prompt = uncached.prompt([{"role": "user", "content": f"Repeat after me: {MODEL_ABSTENTION}"}]).tokens
    plain, _ = uncached.generate(prompt, SamplingOptions(max_tokens=8))
    biased, _ = uncached.generate(prompt, SamplingOptions(max_tokens=8, copy_bias=2.0, copy_tokens=ids))
    # Measured: "I'm not sure." unbiased, the exact abstention reply biased.
    assert "not sure" in plain or model_abstained(plain)
    assert biased.strip() == MODEL_ABSTENTION and model_abstained(biased)


def test_sampling_applies_after_the_bias(uncached: LocalGenerator):
    """ORT GenAI samples (temperature, top-p, top-k) from the biased logits: with a bias far beyond any logit
    gap (requests are held to 10; the generator applies what it is given), every sampled token is favoured."""
    prompt, _ = rag_prompt(uncached, *CASES[1])
    favoured = tuple(int(t) for t in uncached.encode(" Normandy Normans France region"))
    options = SamplingOptions(max_tokens=10, temperature=1.0, top_p=0.95, top_k_sampling=50,
                              copy_bias=100.0, copy_tokens=favoured)
    sampled = [t for _ in range(4) for t in tokens_of(uncached, prompt, options)]  # EOS (biased too) ends a run
    assert sampled and all(t in favoured for t in sampled)


def test_prefix_cache_with_bias_matches_uncached(settings: Settings, uncached: LocalGenerator):
    cached = LocalGenerator(settings.generator_path, settings.device, settings.threads,
                            prefix_cache_slots=2, prefix_cache_tokens=512)
    runs = []
    for question, context in CASES[:2] + CASES[:1]:
        prompt, ids = rag_prompt(cached, question, context)
        options = SamplingOptions(max_tokens=12, copy_bias=2.0, copy_tokens=ids)
        stats = GenerationStats()
        text = "".join(cached.run(prompt, options, stats))
        runs.append((text, stats.cached_tokens, uncached.generate(prompt, options)[0]))
    assert all(text == expected for text, _, expected in runs)
    assert runs[0][1] == 0 and runs[1][1] > 20 and runs[2][1] > 20  # rewound generators were reused


def test_stop_string_and_cancel_with_bias(uncached: LocalGenerator):
    prompt, ids = rag_prompt(uncached, *CASES[0])
    options = SamplingOptions(max_tokens=16, copy_bias=2.0, copy_tokens=ids)
    full, _ = uncached.generate(prompt, options)
    assert "Plato" in full
    stats = GenerationStats()
    cut = "".join(uncached.run(prompt, SamplingOptions(max_tokens=16, copy_bias=2.0, copy_tokens=ids,
                                                       stop=("Plato",)), stats))
    assert cut == full[:full.index("Plato")] and stats.finish_reason == "stop"

    stats = GenerationStats()
    pieces = uncached.run(prompt, options, stats)
    first = next(pieces)
    pieces.close()
    assert first and stats.finish_reason == "cancelled" and stats.output_tokens < 16


def test_service_constrains_rag_answers_only(tmp_path: Path, settings: Settings, embedder, generator):
    """Answers from the documents are constrained to spans of the best evidence sentence (which supersedes the
    copy bias: every allowed token is already a copy); plain chat is neither constrained nor biased."""
    doc = tmp_path / "plato.md"
    doc.write_text("# Plato\n\n" + CASES[0][1] + " It is Plato's best-known work.\n", encoding="utf-8")
    home = tmp_path / "home"
    ingest_paths([doc], EmbeddedIndex(settings.replace(home=home).index_path()),
                 IngestParameters.from_settings(settings, embedder))
    service = answer_service(settings.replace(home=home), Models(embedder, generator))
    try:
        constrained = service.prepare(AnswerRequest(question=CASES[0][0],
                                                    options=options_from(service.settings, copy_bias=2.0)))
        assert not constrained.abstain_early and constrained.sampling.spans
        assert constrained.sampling.copy_bias == 0.0 and constrained.sampling.copy_tokens == ()
        assert constrained.best_sentence and "Plato" in constrained.best_sentence
        for span in constrained.sampling.spans:  # each span is a piece of the best sentence
            assert generator.decode(span.tokens[:max(span.ends)]) in constrained.best_sentence
        chat = service.prepare(AnswerRequest(question="Say hi.", use_context=False,
                                             options=options_from(service.settings, copy_bias=2.0)))
        assert chat.sampling.copy_tokens == () and chat.sampling.spans == ()

        result = service.ask_prepared(constrained)
        assert "Plato" in result.answer and not result.abstained
        assert result.answer in constrained.best_sentence
    finally:
        service.close()


def test_bench_engine_times_the_bias_in_the_same_run(uncached: LocalGenerator):
    from app.bench.engine import bench_engine

    result = bench_engine(uncached, [16], new_tokens=4, warmup=0, repeat=1, copy_bias=2.0)
    assert [row["copy_bias"] for row in result["results"]] == [0.0, 2.0]
    assert all(row["output_tokens_mean"] == 4 for row in result["results"])
    [overhead] = result["copy_bias_overhead"]
    assert overhead["prompt_tokens"] == 16 and overhead["tpot_ms_p50"] > 0 and overhead["overhead"] is not None
