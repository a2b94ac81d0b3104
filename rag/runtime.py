"""Load the models and the index once and wire the answer service (CLI and API share this)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ingest.embedder import Embedder
from ingest.store import IndexReader, validate_index_name
from rag.answer import AnswerService
from rag.generator import LocalGenerator, SamplingOptions
from rag.prompt import build_messages
from rag.retrieval import Retriever
from rag.settings import Settings


def load_embedder(settings: Settings) -> Embedder:
    return Embedder(settings.embedder_path, settings.threads, settings.embed_batch_size)


def load_generator(settings: Settings) -> LocalGenerator:
    return LocalGenerator(settings.generator_path, settings.device, settings.threads,
                          settings.prefix_cache_slots, settings.prefix_cache_tokens)


@dataclass
class Models:
    embedder: Embedder
    generator: LocalGenerator

    @classmethod
    def load(cls, settings: Settings) -> "Models":
        return cls(load_embedder(settings), load_generator(settings))

    def warm_up(self) -> None:
        """Run each model once so the first user request does not pay for lazy initialisation; this also
        leaves the answer prompt's fixed system part in the generator's prefix cache."""
        self.embedder.embed(["warm-up sentence one.", "a second, somewhat longer warm-up sentence."])
        tokens = self.generator.encode(self.generator.chat_prompt(build_messages("Say hi.", [])))
        self.generator.generate(tokens, SamplingOptions(max_tokens=2))


def answer_service(settings: Settings, models: Models, index: str | None = None,
                   index_root: Path | None = None) -> AnswerService:
    root = index_root or settings.index_path(validate_index_name(index or settings.index))
    reader = IndexReader(root)
    return AnswerService(Retriever(reader, models.embedder), models.embedder, models.generator,
                         settings.max_question_tokens)
