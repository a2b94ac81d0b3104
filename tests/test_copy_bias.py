"""Logits steps with the real model: the logit bias ``rag bench engine --copy-bias`` times, and the span
constraint answers from the documents are decoded under."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
from rag.answering.evidence import short_answer_messages
from rag.answering.service import AnswerRequest, options_from
from rag.core.settings import Settings
from rag.generation.base import SamplingOptions
from rag.generation.logits import LogitBias
from rag.generation.ort import LocalGenerator, next_token
from app.runtime import Models, answer_service

CASES = [
    ("Who wrote the Republic?",
     "The Republic is a Socratic dialogue authored by Plato around 375 BC, concerning justice."),
    ("What did the Normans give their name to?",
     "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region in France."),
]


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


def test_a_zero_bias_through_the_logits_picks_what_the_plain_path_picks(uncached: LocalGenerator):
    """The logits step itself (read the logits, write them back, let ORT pick) with a zero delta picks exactly
    what ``generate_next_token`` picks: what the bench engine times is the step's cost, not another reply."""
    for question, context in CASES:
        prompt = uncached.prompt(short_answer_messages(question, context, examples=False)).tokens
        plain = tokens_of(uncached, prompt, SamplingOptions(max_tokens=12))
        ids = np.unique(uncached.encode(context)).astype(np.int64)
        generator = uncached._new_generator(len(prompt) + 12, SamplingOptions(max_tokens=12))
        generator.append_tokens(prompt)
        assert [next_token(generator, LogitBias(ids, 0.0)) for _ in range(len(plain))] == plain


def test_service_constrains_rag_answers_only(tmp_path: Path, settings: Settings, embedder, generator):
    """Answers from the documents are constrained to spans of the best evidence sentence; plain chat is not
    constrained."""
    doc = tmp_path / "plato.md"
    doc.write_text("# Plato\n\n" + CASES[0][1] + " It is Plato's best-known work.\n", encoding="utf-8")
    home = tmp_path / "home"
    ingest_paths([doc], EmbeddedIndex(settings.replace(home=home).index_path()),
                 IngestParameters.from_settings(settings, embedder))
    service = answer_service(settings.replace(home=home), Models(embedder, generator))
    try:
        constrained = service.prepare(AnswerRequest(question=CASES[0][0], options=options_from(service.settings)))
        assert not constrained.abstain_early and constrained.sampling.spans
        assert constrained.best_sentence and "Plato" in constrained.best_sentence
        for span in constrained.sampling.spans:  # each span is a piece of the best sentence
            assert generator.decode(span.tokens[:max(span.ends)]) in constrained.best_sentence
        chat = service.prepare(AnswerRequest(question="Say hi.", use_context=False, options=options_from(service.settings)))
        assert chat.sampling.spans == ()

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
