"""The composition root: build the components named by the settings, once, and wire the answer service and
the application's services (``app.services``: ``open_services`` builds them whole for a server).

Every front end (CLI, HTTP API, eval, bench) gets its store, embedder, generator and answer
service from here, so each component is chosen by settings in exactly one place.
"""

from __future__ import annotations

import importlib.util
import logging
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, cast

from app.services import (Answers, Auditor, Documents, Jobs, Keys, Services, SourceScheduler, Sources)
from app.services.answers import AnswerMetrics, Answering
from app.services.jobs import interrupted_jobs
from ingest.jobs import JobRunner
from rag.embedder import Embedder
from rag.store import EMBEDDED, POSTGRESQL, Store, StoredIndex, store_kind
from rag.store.embedded import EmbeddedStore
from rag.store.conversations import ConversationStore, PostgresConversationStore, SqliteConversationStore
from rag.store.keys import KeyStore, PostgresKeyStore, SqliteKeyStore
from ingest.jobs import JobStore
from ingest.uploads import Uploads
from rag.answering.language import LanguageDetector
from rag.answering.evidence import short_answer_messages
from rag.answering.service import AnswerService
from rag.core import observe
from rag.store.audit_files import AuditLog, AuditTrail, load_key, open_file_key
from rag.core.errors import ConfigError, ModelError
from rag.core.files import make_private_folder
from rag.core.names import IndexName, index_name
from rag.core.settings import Settings
from rag.core.text import public_host
from rag.generation.base import Generator, SamplingOptions
from rag.generation.ort import LocalGenerator
from rag.generation.prefix_cache import common_prefix_length
from rag.generation.scheduler import GenerationScheduler
from rag.reranker import load_reranker

log = logging.getLogger("rag.access")


def open_store(settings: Settings) -> Store:
    """The embedded FAISS + SQLite store under indexes/, or PostgreSQL + pgvector with ``store_url``."""
    if store_kind(settings) == POSTGRESQL:
        return _postgres_store(settings)
    make_private_folder(settings.home)
    return EmbeddedStore(settings.indexes_dir)


def postgres_packages_missing(name: str | None) -> ConfigError:
    return ConfigError(f"store_url needs the PostgreSQL packages ({name} is missing): "
                       "pip install 'offline-rag[postgres]'")


def _postgres_store(settings: Settings) -> Store:
    from rag.store.postgres import PostgresStore  # lazy: only with store_url (the postgres extra)

    # Looked up, not imported: the drivers are rag.store's to import (an import-linter contract).
    missing = next((m for m in ("psycopg", "psycopg_pool", "pgvector") if importlib.util.find_spec(m) is None), None)
    if missing:
        raise postgres_packages_missing(missing)
    return PostgresStore(settings.store_url or "", settings.store_pool_size)


def open_audit(settings: Settings, chain: str | None = None) -> AuditLog | None:
    """The audit trail's writer for this process (None with ``audit = false``); ``chain``: a named chain that
    several processes share (``keys``: every ``rag keys`` command) instead of one of its own."""
    if not settings.audit:
        return None
    return open_audit_trail(settings, writing=True, chain=chain)


def open_audit_trail(settings: Settings, writing: bool = False, chain: str | None = None) -> AuditLog:
    """The audit trail: one table in the PostgreSQL store with ``store_url`` (replicas share one chain), else
    files under ``audit_dir``, a chain per process. Its records are MACs under the key in ``audit_key_file``,
    made by the first writer of a trail that never had one (a reader only checks with it); a writer whose key
    is gone while its trail was keyed does not start (ConfigError)."""
    if writing:
        make_private_folder(settings.home)
    key = load_key(settings.audit_key_path)
    if store_kind(settings) == POSTGRESQL:
        try:
            from rag.store.audit_postgres import PostgresAuditTrail  # lazy: the postgres extra is optional
        except ImportError as exc:
            raise postgres_packages_missing(exc.name) from exc
        trail = PostgresAuditTrail(settings.store_url or "", key)
        if writing and key is None:
            try:
                trail.open_key(settings.audit_key_path)
            except BaseException:
                trail.close()
                raise
        return trail
    make_private_folder(settings.home)
    make_private_folder(settings.audit_path)
    if writing:
        key = open_file_key(settings.audit_key_path, settings.audit_path)
    size = settings.audit_max_mb * 1024 * 1024
    if chain is not None:
        files = AuditTrail(settings.audit_path, size, settings.audit_questions, chain=chain, key=key, shared=True)
    else:
        files = AuditTrail(settings.audit_path, size, settings.audit_questions, key=key)
    if writing:
        files.open_heads()
    return files


def open_keys(settings: Settings) -> KeyStore:
    """The API keys' table: in the PostgreSQL store with ``store_url`` (replicas share it), else in the home.
    Keys stored without groups (made when that meant every document) get the explicit grant ``*``, said once:
    by the first process that opens the table after the change."""
    store: KeyStore
    if store_kind(settings) == POSTGRESQL:
        try:
            store = PostgresKeyStore(settings.store_url or "")
        except ImportError as exc:
            raise postgres_packages_missing(exc.name) from exc
    else:
        store = SqliteKeyStore(settings.home)
    migrated = store.migrate_implicit_groups()
    if migrated:
        log.warning("%d API key(s) made before every document was an explicit grant keep seeing every document: "
                    "they now hold the document groups '*' (%s). A key made without --groups sees public documents "
                    "only; narrow these with rag keys revoke and rag keys create --groups.", len(migrated),
                    ", ".join(migrated), extra={"fields": {"keys": migrated}})
    return store


def open_conversations(settings: Settings) -> ConversationStore:
    """The web app's conversations, per principal: in the PostgreSQL store with ``store_url``, else in the home."""
    if store_kind(settings) == POSTGRESQL:
        try:
            return PostgresConversationStore(settings.store_url or "")
        except ImportError as exc:
            raise postgres_packages_missing(exc.name) from exc
    return SqliteConversationStore(settings.home)


@contextmanager
def scratch_store(settings: Settings, folder: Path) -> Iterator[tuple[Store, str]]:
    """A store and an index name for a throwaway index (``rag eval``): the embedded store in ``folder``, or,
    with ``store_url``, a uniquely named index in that database, dropped afterwards."""
    if store_kind(settings) == EMBEDDED:
        yield EmbeddedStore(folder), settings.index
        return
    store = _postgres_store(settings)
    name = f"scratch-{uuid.uuid4().hex[:12]}"
    try:
        yield store, name
    finally:
        store.close()
        store.drop(name)


def open_index(settings: Settings, name: str | IndexName | None = None) -> StoredIndex:
    """An index of the configured store: ``name``, else the ``index`` setting (a command's ``--index``)."""
    return open_store(settings).index(index_name(name, settings.index).value)


def open_uploads(settings: Settings) -> Uploads:
    return Uploads(settings.uploads_path)


def delete_index(settings: Settings, store: Store, name: str) -> None:
    """Delete an index and the uploaded originals kept for it (``uploads/<index>/``)."""
    documents(settings, store).delete_index(name)


def documents(settings: Settings, store: Store, audit: Auditor | None = None) -> Documents:
    """The documents service over ``store`` (a command's: nothing else of this process holds an index)."""
    return Documents(settings, store, open_uploads(settings), audit or Auditor(None))


def open_jobs(settings: Settings) -> JobStore:
    return JobStore(settings.jobs_path)


def load_embedder(settings: Settings) -> Embedder:
    return Embedder(settings.embedder_path, settings.threads, settings.embed_batch_size)


def load_generator(settings: Settings) -> LocalGenerator:
    """The local ORT GenAI model (``rag models check`` and ``rag bench engine`` measure this one)."""
    return LocalGenerator(settings.generator_path, settings.device, settings.threads,
                          settings.prefix_cache_slots, settings.prefix_cache_tokens)


def load_answer_generator(settings: Settings, embedder: Embedder) -> Generator:
    """The generator answers come from: an OpenAI-compatible server with ``generator_url`` (its token counts
    from ``generator_tokenizer``, else from the embedder's tokenizer), else the local model."""
    if settings.generator_url:
        from rag.generation.remote import RemoteGenerator, TokenCounter  # lazy: only with generator_url

        counter = TokenCounter.from_file(settings.generator_tokenizer or embedder.path / "tokenizer.json")
        return RemoteGenerator(settings.generator_url, counter, model=settings.generator_model,
                               api_key=settings.generator_api_key, timeout_s=settings.generator_timeout_s,
                               context_length=settings.generator_context,
                               extra_body=settings.generator_extra_body)
    return load_generator(settings)


def generation_backend(settings: Settings) -> tuple[str, str | None]:
    """Which backend answers (for /healthz and the logs), and the host of a remote one."""
    if settings.generator_url:
        return "openai-remote", public_host(settings.generator_url)
    return "onnx-genai", None


@dataclass
class Models:
    embedder: Embedder
    generator: Generator  # a LocalGenerator, or a RemoteGenerator with ``generator_url``
    languages: LanguageDetector = field(default_factory=LanguageDetector)  # the question's, for the refusal

    @classmethod
    def load(cls, settings: Settings) -> "Models":
        embedder = load_embedder(settings)
        return cls(embedder, load_answer_generator(settings, embedder))

    @property
    def local_generator(self) -> LocalGenerator | None:
        return None if self.generator.remote else cast(LocalGenerator, self.generator)

    def serving_generator(self, max_queue: int, mode: str = "auto") -> tuple[Generator, GenerationScheduler | None]:
        """What a server answers with: the local model behind a scheduler (requests take turns or batch),
        or a remote generator as it is (its own server queues and batches)."""
        local = self.local_generator
        if local is None:
            return self.generator, None
        scheduler = GenerationScheduler(local, max_queue, mode)
        return scheduler, scheduler

    def warm_up(self, answer_examples: bool = True) -> None:
        """Run each model once so the first user request does not pay for lazy initialisation; this also
        leaves the short-answer prompt's fixed part (instruction and worked examples) in the generator's prefix
        cache: without it the first factoid answer after start prefilled 256 of its 259 prompt tokens (TTFT
        288 ms; 96 ms with it, `rag trace show`)."""
        self.embedder.embed(["warm-up sentence one.", "a second, somewhat longer warm-up sentence."])
        self.languages.load()
        local = self.local_generator
        if local is not None:
            messages = short_answer_messages("What warms up?", "The model warms up.", answer_examples)
            tokens = local.prompt(messages).tokens
            other = local.prompt(short_answer_messages("Which fish swims?", "A fish swims.", answer_examples)).tokens
            # The fixed part every answer prompt starts with: the one part askers of other scopes share.
            local.prefix_cache.shared_tokens = common_prefix_length(tokens, other)
            local.generate(tokens, SamplingOptions(max_tokens=2))
        elif hasattr(self.generator, "warm_up"):
            self.generator.warm_up()  # a remote generator learns its model name


def answer_service(settings: Settings, models: Models, generator: Generator | None = None,
                   store: Store | None = None, instruments: observe.Instruments | None = None) -> AnswerService:
    """The one place an ``AnswerService`` is built: the local generator unless another (the server's
    scheduler) is given, the configured store unless another (eval's scratch store) is given; it records into
    the process's metric instruments unless others (an app's own) are given; the reranker is the one the
    ``reranker`` setting names."""
    return AnswerService(settings, store or open_store(settings), models.embedder, generator or models.generator,
                         instruments, load_reranker(settings), models.languages)


def open_services(settings: Settings, metrics: AnswerMetrics) -> Services:
    """Everything a server does, over components opened once: the store (what deletes and restores left
    swept), uploads (stale staged files removed), jobs (old ones pruned; those a stop interrupted named in
    the log), keys, the audit trail, conversations. The models load later (``load_answering``)."""
    store = open_store(settings)
    if swept := store.sweep():
        log.info("removed what deletes and restores left in the store: %s", ", ".join(swept))
    uploads = open_uploads(settings)
    uploads.remove_stale_staged()
    job_store = open_jobs(settings)
    job_store.prune()
    if interrupted := interrupted_jobs(job_store):
        logging.getLogger("rag.api").warning(
            "%d job(s) were interrupted by a stop of the server: %s; see them with GET /v1/jobs and run them "
            "again with POST /v1/jobs/{id}/retry (or the documents page)", len(interrupted),
            ", ".join(f"{j.kind} {j.id} on {j.index}" for j in interrupted))
    runner = JobRunner(job_store)
    keys = open_keys(settings)
    audit = Auditor(open_audit(settings), settings.audit_questions)
    answers = Answers(metrics, audit)
    docs = Documents(settings, store, uploads, audit, release=answers.forget)
    sources = Sources(settings)
    jobs = Jobs(settings, job_store, runner, docs, sources, audit, answers.embedder)
    return Services(settings=settings, audit=audit, documents=docs, sources=sources, jobs=jobs,
                    keys=Keys(keys, audit), answers=answers, conversations=open_conversations(settings),
                    schedule=SourceScheduler(jobs, docs, answers))


def load_answering(settings: Settings, services: Services) -> None:
    """Load the models (once, off the event loop), then answer and run the scheduled syncs; a failure is the
    answers' status (``/healthz`` says it)."""
    try:
        models = Models.load(settings)
        generator, scheduler = models.serving_generator(settings.max_queue, settings.scheduler)
        models.warm_up(settings.answer_examples)
        service = answer_service(settings, models, generator=generator, store=services.documents.store,
                                 instruments=services.answers.metrics.instruments)
        services.answers.ready_with(Answering(service, models.embedder, models.generator, scheduler))
        services.start_schedule()
    except ModelError as exc:
        services.answers.failed(exc.message)
    except Exception as exc:  # noqa: BLE001 - it runs in a background thread: report it on /healthz
        logging.getLogger("rag.api").exception("loading the models failed")
        services.answers.failed(f"loading the models failed: {exc}")
