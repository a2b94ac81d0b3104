"""The one settings object.

Precedence (lowest first): built-in defaults, ``rag.toml`` (in the home dir, or the
file named by ``RAG_CONFIG``), ``RAG_*`` environment variables, explicit overrides
(CLI flags). Every field is documented in docs/cli.md (``rag config`` prints them).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from rag.core import paths
from rag.core.errors import BadRequestError, ConfigError
from rag.core.ladder import AUTO, Choice, resolve_generator
from rag.core.names import access_groups, validate_index_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEVICES = ("auto", "cpu", "cuda", "dml")
SCHEDULERS = ("auto", "batched", "interleaved", "engine")
COMMAND_LINE_ENV = "RAG_COMMAND_LINE"  # JSON: the flags of `rag serve`, for its worker processes
DEFAULT_GENERATOR = "smollm2-135m-instruct-int4"  # the smallest rung (rag/core/ladder.py); the tests' model
DEFAULT_EMBEDDER = "all-minilm-l6-v2-int8"


def resolve_threads(threads: int) -> int:
    """Intra-op threads to ask ONNX Runtime for: 0 means every core (onnxruntime-genai would use one)."""
    return threads if threads > 0 else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Settings:
    home: Path = field(default=PROJECT_ROOT, metadata={"doc": "holds models/ and indexes/"})
    generator: str = field(default=AUTO, metadata={
        "doc": "auto = the largest model of the ladder this machine runs (rag/core/ladder.py; `rag info` says "
               "which and why); or smollm2-135m, qwen25-coder-0.5b, qwen25-coder-1.5b, or a folder under models/"})
    generator_dir: Path | None = field(
        default=None, metadata={"doc": "ORT GenAI model dir; overrides generator (default: models/ + the "
                                       "generator setting's choice)"}
    )
    embedder_dir: Path | None = field(
        default=None, metadata={"doc": f"ONNX embedder dir (default: models/{DEFAULT_EMBEDDER})"}
    )
    device: str = field(default="auto", metadata={
        "doc": "auto | cpu | cuda | dml; auto takes CUDA > DirectML > CPU among the usable ones (`rag info`)"})
    threads: int = field(default=0, metadata={"doc": "intra-op threads, 0 = number of cores"})
    index: str = field(default="default", metadata={"doc": "index name under indexes/"})
    chunk_tokens: int = field(default=200, metadata={"doc": "chunk size in embedder tokens"})
    chunk_overlap: int = field(default=30, metadata={"doc": "chunk overlap in embedder tokens"})
    embed_batch_size: int = field(default=4, metadata={"doc": "chunks per embedder batch (batches run one per core)"})
    ocr_languages: str = field(
        default="eng", metadata={"doc": "Tesseract languages for scanned pages and images, e.g. eng+deu"})
    tesseract_cmd: Path | None = field(
        default=None, metadata={"doc": "the tesseract executable, when it is not on PATH"})
    max_pages_per_file: int = field(
        default=2000, metadata={"doc": "a file with more pages, slides, sheets or image frames fails (0 = no cap)"})
    max_rows_per_file: int = field(
        default=200_000, metadata={"doc": "a spreadsheet or CSV with more rows fails (0 = no cap)"})
    max_unzipped_mb: int = field(
        default=512, metadata={"doc": "an Office file (a zip) that unpacks to more fails (zip bombs; 0 = no cap)"})
    load_timeout_s: float = field(
        default=600.0, metadata={"doc": "seconds one file may take to load (OCR included) before it fails; 0 = none"})
    top_k: int = field(default=5, metadata={"doc": "chunks retrieved per question"})
    reranker: str = field(default="none", metadata={
        "doc": "the step after fusion that may reorder the retrieved chunks (rag/reranker.py); none keeps the "
               "fused order"})
    context_tokens: int = field(default=100, metadata={"doc": "prompt context budget (tokens)"})
    sentence_vectors: bool = field(
        default=True, metadata={"doc": "rank context sentences by embedding too, with the fitted ranker (else word "
                                     "overlap only)"})
    prefix_cache_slots: int = field(
        default=4, metadata={"doc": "idle generators kept with their KV cache to reuse shared prompt prefixes; 0 = off"})
    prefix_cache_tokens: int = field(
        default=1024, metadata={"doc": "KV window of a cached generator (about 46 KB per token); longer requests skip it"})
    max_tokens: int = field(default=64, metadata={"doc": "max new tokens per answer"})
    temperature: float = field(default=0.0, metadata={"doc": "0 = greedy"})
    abstain_threshold: float = field(
        default=0.35, metadata={"doc": "best dense score under which the answer is an abstention"}
    )
    answerable_threshold: float = field(
        default=0.2, metadata={"doc": "an answer whose answerability score (0-1: how likely the documents answer "
                                      "the question, from the evidence's coverage and the model's own judgement) is "
                                      "below this is refused (0 = never refuse on it)"})
    answer_examples: bool = field(
        default=True, metadata={"doc": "show the model three worked examples before a factoid question (the "
                                       "default 135M model needs them; a 1.5B model answers as well without)"})
    answer_sentences: int = field(
        default=1, metadata={"doc": "the best evidence sentences a short answer may be copied from (the model "
                                    "picks among them)"})
    span_search: int = field(
        default=8, metadata={"doc": "a short answer is the best-scored whole phrase among those starting with the "
                                    "model's this many likeliest first tokens (1 = token by token, 1-16)"})
    min_grounding: float = field(
        default=0.0, metadata={"doc": "share of the reply's own content words that must occur in the passages, "
                                      "else the answer is an abstention (0 = off)"})
    max_question_tokens: int = field(default=256, metadata={"doc": "longest accepted question"})
    host: str = field(default="127.0.0.1", metadata={"doc": "API bind address"})
    port: int = field(default=8000, metadata={"doc": "API port"})
    api_key: str | None = field(default=None, metadata={"doc": "bearer token required when set"})
    max_upload_mb: int = field(default=50, metadata={"doc": "per-file upload limit"})
    job_wait_s: float = field(
        default=0.8, metadata={"doc": "how long an upload or a \"sync now\" request waits for its work before "
                                      "answering 202 with a job to follow (GET /v1/jobs/{id}); 0: always a job"})
    max_queue: int = field(default=32, metadata={"doc": "waiting generations before 503"})
    scheduler: str = field(default="auto", metadata={
        "doc": "how the server shares the local model between concurrent requests: auto (batched where the model "
               "allows it), batched, interleaved (taking turns) or engine (ORT GenAI's og.Engine)"})
    log_file: Path | None = field(default=None, metadata={"doc": "rotating JSON log file"})
    # Scaling out (docs/scaling.md, "Scaling out"): each part can move onto an existing engine.
    store_url: str | None = field(
        default=None, metadata={"doc": "postgresql://… : keep indexes in PostgreSQL + pgvector (unset = the "
                                       "embedded FAISS + SQLite store under indexes/)"})
    store_pool_size: int = field(default=8, metadata={"doc": "PostgreSQL connections per process (server pool)"})
    uploads_dir: Path | None = field(
        default=None, metadata={"doc": "where uploaded originals are kept (default: home/uploads); replicas share "
                                       "one folder, mounted at the same path on each"})
    generator_url: str | None = field(
        default=None, metadata={"doc": "http://host:port/v1 of an OpenAI-compatible server that generates "
                                       "instead of the local model (vLLM, llama.cpp server, Ollama, rag serve)"})
    generator_model: str | None = field(
        default=None, metadata={"doc": "model name sent to generator_url (default: the first of its /models)"})
    generator_api_key: str | None = field(default=None, metadata={"doc": "bearer token for generator_url"})
    generator_timeout_s: float = field(
        default=60.0, metadata={"doc": "remote generator: longest wait to connect, for the first token or between two"})
    generator_context: int = field(
        default=2048, metadata={"doc": "remote generator: the model's context window in tokens"})
    generator_tokenizer: Path | None = field(
        default=None, metadata={"doc": "remote generator: the model's tokenizer.json for exact token counts "
                                       "(default: the embedder's tokenizer, an approximation)"})
    generator_extra_body: str = field(
        default='{"use_context": false}',
        metadata={"doc": "remote generator: JSON object merged into each request (the default stops an upstream "
                         "rag serve from retrieving again; other servers ignore the field; {} for strict ones)"})
    # Access control (docs/access.md, "Access control"): keys, tokens, the browser guard, the audit trail.
    allowed_hosts: str = field(
        default="", metadata={"doc": "comma-separated host names accepted in Host and Origin besides localhost and "
                                     "the bound address (the public name behind a reverse proxy); * = any Host"})
    jwt_jwks: str | None = field(
        default=None, metadata={"doc": "JWKS file or https:// URL: accept signed JWT bearer tokens besides API "
                                       "keys (needs jwt_issuer and jwt_audience)"})
    jwt_issuer: str | None = field(default=None, metadata={"doc": "required `iss` of accepted tokens"})
    jwt_audience: str | None = field(default=None, metadata={"doc": "required `aud` of accepted tokens"})
    jwt_skip_iss_aud: bool = field(
        default=False, metadata={"doc": "accept tokens without an issuer or audience check (unsafe; logged)"})
    jwt_groups_claim: str = field(default="groups", metadata={"doc": "the token claim listing the user's groups"})
    jwt_groups: dict | None = field(
        default=None, metadata={"doc": "rag.toml table [jwt_groups.NAME] roles = [\"index=role\", …], "
                                       "groups = [document groups]: what a token's group grants"})
    folder_groups: dict | None = field(
        default=None, metadata={"doc": "rag.toml table [folder_groups] \"/abs/folder\" = \"group,group\": documents "
                                       "ingested or synced from under a folder get its groups (the deepest folder "
                                       "wins) unless --groups says otherwise; \"\" = public"})
    audit: bool = field(default=True, metadata={"doc": "append one hash-chained record per answer, retrieval, "
                                                      "upload, delete and key change"})
    audit_dir: Path | None = field(default=None, metadata={"doc": "where the audit trail's files are kept (default: "
                                                                  "home/audit); with store_url, the table rag.audit"})
    audit_questions: str = field(default="sha256", metadata={"doc": "full | sha256 | none: how questions are recorded"})
    audit_max_mb: int = field(default=64, metadata={"doc": "an audit file this large is closed and a new one started"})
    audit_key_file: Path | None = field(
        default=None, metadata={"doc": "the audit trail's HMAC key (made on first use, owner-only; default: "
                                       "home/audit.key): keep it apart from the trail; replicas share one"})
    # OpenTelemetry (docs/telemetry.md, "Telemetry"): traces, metrics and logs with the GenAI conventions.
    telemetry: str = field(default="file", metadata={
        "doc": "off | file | otlp: OTLP JSON Lines files under telemetry_dir, or OTLP/HTTP to otlp_endpoint"})
    telemetry_dir: Path | None = field(
        default=None, metadata={"doc": "where the telemetry files go (default: home/telemetry)"})
    telemetry_max_mb: int = field(
        default=20, metadata={"doc": "a telemetry file this large is rotated (traces, metrics, logs each)"})
    telemetry_files: int = field(default=5, metadata={"doc": "rotated telemetry files kept per signal"})
    telemetry_content: bool = field(
        default=False, metadata={"doc": "record questions, retrieved chunk ids and messages in spans (off: none)"})
    otlp_endpoint: str = field(
        default="http://localhost:4318", metadata={"doc": "OTLP/HTTP collector for telemetry = otlp"})
    # Not a setting: where each non-default value came from (a rag.toml path, "env RAG_...", "command line").
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False,
                                       metadata={"internal": True})

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def indexes_dir(self) -> Path:
        return self.home / "indexes"

    @property
    def audit_path(self) -> Path:
        return self.audit_dir or self.home / "audit"

    @property
    def audit_key_path(self) -> Path:
        return self.audit_key_file or self.home / "audit.key"

    @property
    def telemetry_path(self) -> Path:
        return self.telemetry_dir or self.home / "telemetry"

    @property
    def uploads_path(self) -> Path:
        return self.uploads_dir or self.home / "uploads"

    @property
    def jobs_path(self) -> Path:
        """Upload and sync jobs (their progress, and an upload's files until it ends)."""
        return self.home / "jobs"

    @property
    def generator_choice(self) -> Choice:
        """Which generator folder the ``generator`` setting picks and why (``generator_dir`` aside)."""
        return resolve_generator(self.generator, self.models_dir)

    @property
    def generator_path(self) -> Path:
        return self.generator_dir or self.models_dir / self.generator_choice.model

    @property
    def embedder_path(self) -> Path:
        return self.embedder_dir or self.models_dir / DEFAULT_EMBEDDER

    def index_path(self, name: str | None = None) -> Path:
        return self.indexes_dir / (name or self.index)

    def replace(self, **changes: Any) -> "Settings":
        return load_settings(base=self, overrides=changes)

    def command_line(self) -> dict[str, Any]:
        """The settings given as flags, as JSON values: what a server's worker processes need besides the
        environment and rag.toml they read themselves (``COMMAND_LINE_ENV``)."""
        return {key: str(value) if isinstance(value, Path) else value
                for key, value in dataclasses.asdict(self).items() if self.sources.get(key) == "command line"}

    def source(self, name: str) -> str:
        """Where setting ``name`` came from: "default", a rag.toml path, a RAG_* variable or "command line"."""
        return self.sources.get(name, "default")

    def as_dict(self) -> dict[str, Any]:
        """Effective values (model dirs resolved to the paths used), the API key masked."""
        out: dict[str, Any] = {}
        for f in settings_fields():
            value = getattr(self, f.name)
            if f.name in ("api_key", "generator_api_key") and value:
                value = "***"
            if f.name == "store_url" and value:
                value = re.sub(r"(//[^:/@]*:)[^@]*@", r"\1***@", value)  # a password in the URL
            out[f.name] = str(value) if isinstance(value, Path) else value
        out["generator_dir"] = str(self.generator_path)
        out["embedder_dir"] = str(self.embedder_path)
        return out


def settings_fields() -> tuple[dataclasses.Field, ...]:
    """The fields of Settings that are settings (not the bookkeeping ``sources``)."""
    return tuple(f for f in fields(Settings) if not f.metadata.get("internal"))


def _coerce(name: str, raw: Any, target: Any) -> Any:
    if raw is None or raw == "":
        return None if "None" in str(target) else raw
    kind = str(target)
    try:
        if "Path" in kind:
            return Path(raw).expanduser()
        if kind.startswith("bool"):
            if isinstance(raw, bool):
                return raw
            if str(raw).strip().lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).strip().lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("dict"):
            value = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(value, dict):
                raise ValueError(raw)
            return value
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name!r}: cannot read {raw!r} as {kind}") from exc


def toml_hint(exc: Exception) -> str:
    """What to do about a TOML error a Windows path causes: ``"C:\\Shares\\HR"`` is a basic string, whose
    backslashes start escapes."""
    if isinstance(exc, tomllib.TOMLDecodeError) and "escape" in str(exc).lower():
        return (" (a Windows path in double quotes: write it in single quotes, 'C:\\Shares\\HR', or double "
                "each backslash)")
    return ""


def passed_command_line(environ: Mapping[str, str]) -> dict[str, Any]:
    """The flags of the `rag serve` that started this worker process (``COMMAND_LINE_ENV``); none elsewhere."""
    if not environ.get(COMMAND_LINE_ENV):
        return {}
    try:
        passed = json.loads(environ[COMMAND_LINE_ENV])
    except ValueError as exc:
        raise ConfigError(f"{COMMAND_LINE_ENV} is not JSON: {exc}") from exc
    if not isinstance(passed, dict):
        raise ConfigError(f"{COMMAND_LINE_ENV} must hold a JSON object of settings, not {type(passed).__name__}")
    return {key: value for key, value in passed.items() if value is not None}


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    base: Settings | None = None,
) -> Settings:
    """Merge the layers; with ``base`` (see Settings.replace) only ``overrides`` go on top of it."""
    environ = os.environ if environ is None else environ
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    known = {f.name: f.type for f in settings_fields()}
    values: dict[str, Any] = {} if base is None else dataclasses.asdict(base)
    sources: dict[str, str] = dict(values.pop("sources", {}))

    def apply(layer: Mapping[str, Any], source: Callable[[str], str]) -> None:
        for key, raw in layer.items():
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                raise ConfigError(f"unknown setting {key!r} ({source(key)}){hint}")
            values[key] = _coerce(key, raw, known[key])
            sources[key] = source(key)

    if base is None:  # a base already holds its config file and environment
        # A server's worker process gets the flags of its `rag serve` (``--home`` included: it names the
        # rag.toml to read) through the environment; its own overrides, if any, go on top of them.
        overrides = {**passed_command_line(environ), **overrides}
        home = Path(overrides.get("home") or environ.get("RAG_HOME") or PROJECT_ROOT).expanduser()
        named = environ.get("RAG_CONFIG")
        config_file = Path(named).expanduser() if named else home / "rag.toml"
        if named and not config_file.is_file():
            state = "is not a file" if config_file.exists() else "does not exist"
            raise ConfigError(f"RAG_CONFIG names {config_file}, which {state}")
        if config_file.is_file():
            try:  # utf-8-sig: Notepad (Windows PowerShell's Out-File too) starts the file with a BOM
                data = tomllib.loads(config_file.read_text(encoding="utf-8-sig"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{config_file}: {exc}{toml_hint(exc)}") from exc
            apply(data, lambda key: str(config_file))  # a typo there must not pass unnoticed
        # Every RAG_* variable but RAG_CONFIG names a setting: a typo (RAG_TOPK) is an error, not ignored.
        env = {k[4:].lower(): v for k, v in environ.items()
               if k.startswith("RAG_") and k not in ("RAG_CONFIG", COMMAND_LINE_ENV)}
        apply(env, lambda key: f"env RAG_{key.upper()}")
    apply(overrides, lambda key: "command line")

    settings = Settings(**values, sources=sources)
    try:
        validate_index_name(settings.index)
    except BadRequestError as exc:
        raise ConfigError(f"setting 'index': {exc.message}") from exc
    if not re.match(r"^[a-z0-9][a-z0-9._-]{0,79}$", settings.generator):
        raise ConfigError(f"generator must be auto, a ladder name or a folder name under models/, "
                          f"not {settings.generator!r}")
    if settings.device not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)}, not {settings.device!r}")
    if settings.scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler must be one of {', '.join(SCHEDULERS)}, not {settings.scheduler!r}")
    if settings.chunk_tokens < 1:
        raise ConfigError(f"chunk_tokens must be positive, not {settings.chunk_tokens}")
    if settings.chunk_overlap < 0:
        raise ConfigError(f"chunk_overlap must not be negative, not {settings.chunk_overlap}")
    if settings.chunk_overlap >= settings.chunk_tokens:
        raise ConfigError(f"chunk_overlap ({settings.chunk_overlap}) must be smaller than chunk_tokens "
                          f"({settings.chunk_tokens})")
    for name in ("max_pages_per_file", "max_rows_per_file", "max_unzipped_mb", "load_timeout_s"):
        if getattr(settings, name) < 0:
            raise ConfigError(f"{name} must not be negative (0 = no limit), not {getattr(settings, name)}")
    if not settings.ocr_languages.strip():
        raise ConfigError("ocr_languages must name at least one Tesseract language, e.g. eng")
    if settings.prefix_cache_slots < 0 or settings.prefix_cache_tokens < 1:
        raise ConfigError("prefix_cache_slots must be >= 0 and prefix_cache_tokens >= 1")
    if settings.store_url is not None and not settings.store_url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(f"store_url must be a postgresql:// URL, not {settings.store_url!r}")
    if settings.generator_url is not None and not settings.generator_url.startswith(("http://", "https://")):
        raise ConfigError(f"generator_url must be an http(s):// URL, not {settings.generator_url!r}")
    if settings.generator_timeout_s <= 0 or settings.generator_context < 16 or settings.store_pool_size < 1:
        raise ConfigError("generator_timeout_s must be > 0, generator_context >= 16, store_pool_size >= 1")
    if settings.audit_questions not in ("full", "sha256", "none"):
        raise ConfigError(f"audit_questions must be full, sha256 or none, not {settings.audit_questions!r}")
    if settings.telemetry not in ("off", "file", "otlp"):
        raise ConfigError(f"telemetry must be off, file or otlp, not {settings.telemetry!r}")
    if settings.telemetry_max_mb < 1 or settings.telemetry_files < 1:
        raise ConfigError("telemetry_max_mb and telemetry_files must be at least 1")
    if not settings.otlp_endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"otlp_endpoint must be an http(s):// URL, not {settings.otlp_endpoint!r}")
    if not 0 <= settings.job_wait_s <= 60:
        raise ConfigError(f"job_wait_s must be between 0 and 60 seconds, not {settings.job_wait_s}")
    if settings.audit_max_mb < 1:
        raise ConfigError(f"audit_max_mb must be at least 1, not {settings.audit_max_mb}")
    parse_folder_groups(settings.folder_groups)
    try:
        extra = json.loads(settings.generator_extra_body)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise ConfigError(f"generator_extra_body must be a JSON object, not {settings.generator_extra_body!r}")
    return settings


def parse_folder_groups(table: Mapping[str, Any] | None) -> tuple[tuple[Path, str], ...]:
    """The ``folder_groups`` table as (absolute folder, stored groups) pairs. A folder's groups are a string
    (``"hr,managers"``; ``""``: public) or a list of strings."""
    pairs = []
    for folder, value in (table or {}).items():
        path = Path(folder).expanduser()
        if not path.is_absolute():
            raise ConfigError(f"folder_groups: {folder!r} is not an absolute path; name folders in full, "
                              "e.g. \"/srv/share/finance\" = \"finance\"")
        if (drive := paths.unreachable_drive_here(path)) is not None:
            raise ConfigError(f"folder_groups: {folder!r} is on drive {drive}, which this session does not have (a "
                              "network drive mapped for a user is not there for a service or an elevated session): "
                              "its files would never get these groups; name the folder by its UNC path, "
                              "e.g. \"\\\\server\\share\\HR\"")
        if isinstance(value, str):
            names = value.split(",")
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            names = value
        else:
            raise ConfigError(f"folder_groups: the groups of {folder!r} must be a string such as \"hr,managers\" "
                              f"or a list of strings, not {value!r}")
        try:
            pairs.append((path, access_groups(names)))
        except BadRequestError as exc:
            raise ConfigError(f"folder_groups: {folder!r}: {exc.message}") from exc
    return tuple(pairs)
