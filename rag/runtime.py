"""The composition root: build the components named by the settings, once, and wire the answer service.

Every front end (CLI, HTTP API, eval, bench) gets its store, embedder, generator and answer
service from here, so each component is chosen by settings in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.embedder import Embedder
from ingest.store import Store, StoredIndex
from ingest.store.embedded import EmbeddedStore
from ingest.uploads import Uploads
from rag.answering.prompt import build_messages
from rag.answering.service import AnswerService
from rag.core.names import validate_index_name
from rag.core.settings import Settings
from rag.generation.base import Generator, SamplingOptions
from rag.generation.ort import LocalGenerator


def open_store(settings: Settings) -> Store:
    return EmbeddedStore(settings.indexes_dir)


def open_index(settings: Settings, name: str | None = None) -> StoredIndex:
    return open_store(settings).index(validate_index_name(name or settings.index))


def open_uploads(settings: Settings) -> Uploads:
    return Uploads(settings.home / "uploads")


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
        self.generator.generate(self.generator.prompt(build_messages("Say hi.", [])).tokens,
                                SamplingOptions(max_tokens=2))


def answer_service(settings: Settings, models: Models, generator: Generator | None = None,
                   store: Store | None = None) -> AnswerService:
    """The one place an ``AnswerService`` is built: the local generator unless another (the server's
    scheduler) is given, the configured store unless another (eval's scratch store) is given."""
    return AnswerService(settings, store or open_store(settings), models.embedder, generator or models.generator)
