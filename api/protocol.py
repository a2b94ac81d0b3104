"""Wire schemas: the request and response bodies of every endpoint (the OpenAPI schema is made from these)."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import msgspec

from ingest.pipeline import FileOutcome
from rag.core.records import DocumentRecord
from rag.answering.result import AnswerResult, Evidence, Metrics, Source
from rag.core import bounds
from rag.core.durations import PATTERN as DURATION_PATTERN
from rag.core.names import INDEX_NAME_PATTERN
from rag.core.text import WRITTEN

Text = Annotated[str, msgspec.Meta(max_length=20_000)]
# Rules the service checks itself (with messages of its own) are stated in the schema too, so it tells the
# whole truth: ``extra_json_schema`` documents without msgspec enforcing.
NOT_BLANK = WRITTEN  # rag.core.text: what the server itself counts as written
Question = Annotated[str, msgspec.Meta(max_length=20_000, extra_json_schema={
    "pattern": NOT_BLANK, "description": "not blank; at most the server's max_question_tokens (256) tokens"})]
USER_TURN = {  # a user message with text: the question of a chat
    "type": "object", "required": ["role", "content"],
    "properties": {"role": {"const": "user"}, "content": {"anyOf": [
        {"type": "string", "pattern": NOT_BLANK},
        {"type": "array", "contains": {"type": "object", "required": ["type", "text"], "properties": {
            "type": {"const": "text"}, "text": {"type": "string", "pattern": NOT_BLANK}}}}]}}}
MaxTokens = Annotated[int, msgspec.Meta(**bounds.MAX_TOKENS.schema())]
Temperature = Annotated[float, msgspec.Meta(**bounds.TEMPERATURE.schema())]
TopP = Annotated[float, msgspec.Meta(**bounds.TOP_P.schema())]
SamplingTopK = Annotated[int, msgspec.Meta(**bounds.TOP_K_SAMPLING.schema())]
StopString = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
IndexName = Annotated[str, msgspec.Meta(pattern=INDEX_NAME_PATTERN)]
# ``top_k`` has two meanings, side by side (docs/api.md, "top_k: two meanings"): retrieval depth on /v1/ask and
# /v1/retrieve, sampling top-k on the seed-compatible /v1/chat, whose meaning is kept.
RetrievalTopK = Annotated[int, msgspec.Meta(**bounds.TOP_K.schema(), description=(
    "retrieval depth: how many chunks are retrieved (default: the server's top_k setting, `rag ask --top-k`). "
    "On /v1/chat, top_k means sampling top-k instead; there the depth is the server's setting."))]
ChatSamplingTopK = Annotated[int, msgspec.Meta(**bounds.TOP_K_SAMPLING.schema(), description=(
    "sampling top-k, as in the seed backend (0 = off). Not the retrieval depth: the chunks retrieved come from "
    "the server's top_k setting (on /v1/ask and /v1/retrieve, top_k is that depth; top_k_sampling is this)."))]


class AskRequest(msgspec.Struct, forbid_unknown_fields=True):
    question: Question
    index: IndexName | None = None
    top_k: RetrievalTopK | None = None
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k_sampling: SamplingTopK | None = None
    documents: list[str] | None = None
    stream: bool = False


class ContentPart(msgspec.Struct):
    """One part of an OpenAI-style list content; only ``text`` parts are understood."""

    type: Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["text"]})]
    text: Text | None = None


class ChatMessage(msgspec.Struct):
    role: Annotated[str, msgspec.Meta(pattern=r"^(system|user|assistant|developer|tool)$")]
    content: Text | Annotated[list[ContentPart], msgspec.Meta(max_length=100)] | None = None


Messages = Annotated[list[ChatMessage], msgspec.Meta(min_length=1, max_length=100, extra_json_schema={
    "contains": USER_TURN, "description": "the last user message with text is the question"})]


class ChatRequest(msgspec.Struct):
    """The seed backend's /v1/chat body (+ retrieval controls). As in the seed, ``top_k`` here is sampling
    top-k (the number of chunks retrieved is the ``top_k`` setting)."""

    messages: Messages
    temperature: Temperature | None = None
    max_tokens: MaxTokens | None = None
    top_p: TopP | None = None
    top_k: ChatSamplingTopK | None = None
    use_context: bool = True
    index: IndexName | None = None
    documents: list[str] | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ChatCompletionRequest(msgspec.Struct):
    """OpenAI's chat completion body; fields we do not use are accepted and ignored."""

    messages: Messages
    model: str | None = None
    stream: bool = False
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=1)] = 1
    stop: StopString | Annotated[list[StopString], msgspec.Meta(max_length=4)] | None = None
    stream_options: StreamOptions | None = None
    use_context: bool = True
    index: IndexName | None = None
    documents: list[str] | None = None


class RetrieveRequest(msgspec.Struct, forbid_unknown_fields=True):
    query: Question
    top_k: RetrievalTopK | None = None
    documents: list[str] | None = None
    index: IndexName | None = None


class ErrorBody(msgspec.Struct):
    type: str
    message: str


class ErrorResponse(msgspec.Struct):
    error: ErrorBody


# --------------------------------------------------------------------------- responses
AskResponse = AnswerResult


class RetrieveMetrics(msgspec.Struct):
    embed_ms: float
    search_ms: float


class RetrieveResponse(msgspec.Struct):
    query: str
    chunks: list[Source]
    metrics: RetrieveMetrics


class SeedMetrics(msgspec.Struct):
    ttft: float
    total_latency: float
    tokens_per_second: float
    output_tokens_per_second: float
    input_tokens: int
    output_tokens: int
    tpot: float
    model: str


class ChatResponse(msgspec.Struct):
    content: str
    metrics: SeedMetrics
    sources: list[Source]
    citations: list[int]
    abstained: bool
    evidence: list[Evidence] = []  # quotes supporting the answer: sources[source-1].text[start:end] == quote


class AssistantMessage(msgspec.Struct):
    role: str
    content: str


class Choice(msgspec.Struct):
    index: int
    message: AssistantMessage
    finish_reason: str


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int


class Usage(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class ChatCompletion(msgspec.Struct):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    sources: list[Source]
    citations: list[int]
    abstained: bool
    answer: str = ""  # the direct answer alone (the message's content adds its quotes)
    evidence: list[Evidence] = []  # quotes supporting the answer: sources[source-1].text[start:end] == quote


class ModelCard(msgspec.Struct):
    id: str
    object: str
    created: int
    owned_by: str


class ModelList(msgspec.Struct):
    object: str
    data: list[ModelCard]


class DocumentInfo(msgspec.Struct):
    """A document as people see it: ``path`` as the user or the file system spelled it (delete and lookups
    take that spelling or any other the file system takes for the same file)."""

    id: str
    path: str
    title: str
    kind: str
    sha256: str
    pages: int | None
    bytes: int
    chunks: int
    ingested_at: str
    access_groups: str  # comma-separated document groups; "" = public
    origin: str = "ingest"  # upload (the web app or POST /v1/documents) | folder (a followed folder) | ingest (rag ingest)
    folder: str | None = None  # the followed folder it comes from (a sync adds it again); null: not from one
    source_id: str | None = None  # that folder's source id (/v1/sources)

    @classmethod
    def of(cls, record: DocumentRecord) -> "DocumentInfo":
        return cls(record.id, record.display_path, record.title, record.kind, record.sha256, record.pages,
                   record.bytes, record.chunks, record.ingested_at, record.access_groups)


class DocumentList(msgspec.Struct):
    index: str
    documents: list[DocumentInfo]


class FileFormat(msgspec.Struct):
    kind: str  # DocumentRecord.kind
    label: str  # what people call it: "Word", "e-mail"
    suffixes: list[str]


class FormatList(msgspec.Struct):
    """The file formats an upload may have, from the ingest format registry (the one source of truth)."""

    formats: list[FileFormat]
    accept: str  # every suffix, comma-separated: an <input type=file accept=...> value


class FileResult(msgspec.Struct):
    """One file's outcome on the wire: ``ingest.pipeline.FileOutcome`` field by field (``of``), its path as
    ``file``. An upload's reply lists every field, null where there is none."""

    file: str
    status: str  # added | updated | unchanged | renamed | removed | skipped | failed
    document_id: str | None = None
    chunks: int = 0
    reason: str | None = None
    reason_type: str | None = None
    warning: str | None = None  # e.g. a page that needs OCR while Tesseract is not installed
    renamed_from: str | None = None  # the file name as sent, when it was changed to be stored safely

    @classmethod
    def of(cls, outcome: FileOutcome) -> "FileResult":
        fields = dataclasses.asdict(outcome)
        fields["file"] = fields.pop("path")
        return cls(**fields)


class JobFileResult(FileResult, omit_defaults=True):
    """The same, as a job lists its files: fields without a value are left out."""


class UploadResponse(msgspec.Struct, omit_defaults=True):
    index: str
    files: list[FileResult]
    error: ErrorBody | None = None  # set when no file was accepted (status 413 or 422)


class DeleteResponse(msgspec.Struct):
    deleted: str
    path: str
    chunks: int


class IndexSummary(msgspec.Struct):
    name: str
    documents: int
    chunks: int


class HealthResponse(msgspec.Struct, omit_defaults=True):
    status: str  # ok | loading | failed
    backend: str
    scheduler: str | None
    device: str
    generator: str
    embedder: str
    index: IndexSummary | None = None  # the default index, to a caller with a role there only
    reason: str | None = None
    upstream: str | None = None  # host of the remote generator (backend "openai-remote")
    store: str | None = None  # "embedded" | "postgresql"
    providers: list[str] | None = None  # execution providers usable here, best first (as `rag info`)


class IndexDeleted(msgspec.Struct):
    deleted: str
    documents: int
    chunks: int


class IndexList(msgspec.Struct):
    default: str | None  # the default index, to a caller with a role there only (null otherwise)
    indexes: list[IndexSummary]


class LastSyncInfo(msgspec.Struct):
    """How a source's last sync went (``status``: ok, failed = some files failed, error = nothing changed)."""

    started_at: str
    seconds: float
    status: str
    added: int
    updated: int
    unchanged: int
    renamed: int
    removed: int
    failed: int
    chunks_embedded: int
    error: str | None = None
    failures: list[dict[str, str]] = msgspec.field(default_factory=list)


class SourceStatus(msgspec.Struct):
    """A folder the index follows (`rag sources add`), and its last sync."""

    id: str
    index: str
    path: str
    glob: str | None
    groups: str | None
    added_at: str
    every_s: int | None  # `rag serve` syncs it this often; null: only on request
    files: int
    last: LastSyncInfo | None


class SourceList(msgspec.Struct):
    index: str
    sources: list[SourceStatus]


# --------------------------------------------------------------------------- jobs
class JobStatus(msgspec.Struct):
    """An upload or a sync that runs in the background (GET /v1/jobs/{id}; its events: /v1/jobs/{id}/events)."""

    id: str
    kind: str  # upload | sync
    index: str
    state: str  # queued | running | done | failed | cancelled | interrupted
    progress: float  # 0..1, never decreasing
    files_total: int
    files_done: int
    chunks: int
    ocr_pages_done: int
    current_file: str | None
    current_file_page: int  # OCR: the page being read of the current file, and its pages
    current_file_pages: int
    created_at: str
    started_at: str | None
    finished_at: str | None
    elapsed_s: float
    eta_s: float | None
    files: list[JobFileResult]
    summary: dict[str, int]
    error: ErrorBody | None
    names: list[str]  # an upload's files, as sent
    source: str | None  # a sync's source id
    retry_of: str | None
    can_retry: bool  # interrupted, failed or cancelled, and (an upload) its files are still kept


class JobList(msgspec.Struct):
    index: str
    jobs: list[JobStatus]


# --------------------------------------------------------------------------- Server-Sent Events
# One JSON object per ``data:`` line (api/sse.py); the OpenAPI schema describes each event with these.
class TokenEvent(msgspec.Struct):
    token: str


class AskDoneEvent(msgspec.Struct):
    done: bool
    answer: str
    abstained: bool
    abstain_reason: str | None
    citations: list[int]
    sources: list[Source]
    metrics: Metrics
    evidence: list[Evidence] = []
    answer_kind: str = "phrase"  # as in AnswerResult: "command" answers are shown as code
    language: str = "en"  # as in AnswerResult: the question's (the refusal is in it)


class SeedDoneEvent(msgspec.Struct, omit_defaults=True):
    done: bool
    token: str  # "[DONE]"
    answer: str
    metrics: SeedMetrics
    sources: list[Source]
    citations: list[int]
    abstained: bool
    evidence: list[Evidence] = []
    abstain_reason: str | None = None  # as in AnswerResult ("empty_index": the index holds no documents)
    content: str | None = None  # the abstention message, when it abstained
    answer_kind: str = "phrase"  # as in AnswerResult: "command" answers are shown as code
    language: str = "en"  # as in AnswerResult: the question's (the refusal is in it)


class Delta(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChunkChoice(msgspec.Struct):
    index: int
    delta: Delta
    finish_reason: str | None


class ChatCompletionChunk(msgspec.Struct, omit_defaults=True):
    id: str
    object: str  # "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    sources: list[Source] | None = None  # on the chunk with the finish_reason
    citations: list[int] | None = None
    abstained: bool | None = None
    answer: str | None = None  # on the chunk with the finish_reason: the direct answer alone
    evidence: list[Evidence] | None = None
    usage: Usage | None = None  # the last chunk, with stream_options.include_usage


# The events of each stream (any one of these per event; msgspec cannot make a union of untagged Structs).
ASK_EVENTS = (TokenEvent, AskDoneEvent, ErrorResponse)
SEED_EVENTS = (TokenEvent, SeedDoneEvent, ErrorResponse)
OPENAI_EVENTS = (ChatCompletionChunk, ErrorResponse)  # then the literal "[DONE]"
JOB_EVENTS = (JobStatus,)


# --------------------------------------------------------------------------- access control (docs/access.md)
KeyName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")]
Grant = Annotated[str, msgspec.Meta(pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$")]


class RoleGrant(msgspec.Struct):
    index: str  # an index name, or "*" for every index
    role: str  # reader | editor | admin


class Me(msgspec.Struct):
    name: str
    roles: list[RoleGrant]
    groups: list[str]  # document groups it sees besides public ones; ["*"]: every document; []: public only
    sees: str  # the same in words: "all groups", "public only", "public + finance, hr"
    authenticated: bool  # false: the server has no key at all (open on loopback)


class KeyCreateRequest(msgspec.Struct, forbid_unknown_fields=True):
    name: KeyName
    role: Annotated[str, msgspec.Meta(pattern=r"^(reader|editor|admin)$")]
    indexes: Annotated[list[Grant], msgspec.Meta(max_length=64)] = []  # empty: "*"
    expires: Annotated[str, msgspec.Meta(pattern=DURATION_PATTERN)] | None = None  # "90d" (rag.core.durations)
    # Document groups the key sees besides public ones: ["*"] every document; left out or []: public only.
    groups: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
                      msgspec.Meta(max_length=64)] = []


class KeyInfo(msgspec.Struct):
    name: str
    roles: list[RoleGrant]
    groups: list[str]  # ["*"]: every document; []: public only
    sees: str  # "all groups", "public only", "public + finance, hr"
    created: float
    expires: float | None
    state: str  # active | expired | revoked


class KeyCreated(KeyInfo):
    key: str = ""  # shown once


class KeyList(msgspec.Struct):
    keys: list[KeyInfo]


# --------------------------------------------------------------------------- conversations (the web app's)
ShortText = Annotated[str, msgspec.Meta(max_length=2_000)]
ConversationTitle = Annotated[str, msgspec.Meta(max_length=200)]


class SavedSource(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """A source of a saved answer, as the web app showed it. ``deleted`` is set by the server when it is read
    back: the document is no longer in the index (or no longer visible to the reader), so its passage is not
    sent again."""

    number: Annotated[int, msgspec.Meta(ge=0, le=1000)]
    document_id: Annotated[str, msgspec.Meta(max_length=200)] = ""
    path: ShortText = ""
    title: ShortText = ""
    page: Annotated[int, msgspec.Meta(ge=0)] | None = None
    section: ShortText | None = None
    text: Text = ""
    snippet: Text = ""
    highlights: Annotated[list[Text], msgspec.Meta(max_length=50)] = []
    found_by: Annotated[str, msgspec.Meta(max_length=100)] = ""
    deleted: bool = False


class SavedEvidence(msgspec.Struct, forbid_unknown_fields=True):
    source: Annotated[int, msgspec.Meta(ge=0, le=1000)]
    quote: Text
    start: Annotated[int, msgspec.Meta(ge=0)]
    end: Annotated[int, msgspec.Meta(ge=0)]


class SavedTurn(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """One question and its answer as the web app shows it (the answer itself is made by /v1/chat/stream)."""

    question: Text
    answer: Text = ""
    state: Annotated[str, msgspec.Meta(pattern=r"^(done|stopped|error)$")] = "done"
    error: ShortText | None = None
    abstained: bool = False
    abstain_reason: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    index: IndexName | None = None  # the index it was asked of (null: the server's default)
    citations: Annotated[list[Annotated[int, msgspec.Meta(ge=0, le=1000)]], msgspec.Meta(max_length=100)] = []
    sources: Annotated[list[SavedSource], msgspec.Meta(max_length=50)] = []
    evidence: Annotated[list[SavedEvidence], msgspec.Meta(max_length=50)] = []
    timing: dict[Annotated[str, msgspec.Meta(max_length=40)], Annotated[float, msgspec.Meta(ge=0)]] = {}


class ConversationWrite(msgspec.Struct, forbid_unknown_fields=True):
    """A new conversation (POST), or all of one (PUT): its title and turns."""

    title: ConversationTitle = ""
    turns: Annotated[list[SavedTurn], msgspec.Meta(max_length=500)] = []


class ConversationRename(msgspec.Struct, forbid_unknown_fields=True):
    title: Annotated[str, msgspec.Meta(min_length=1, max_length=200, extra_json_schema={"pattern": NOT_BLANK})]


class ConversationSummary(msgspec.Struct):
    id: str
    title: str
    created: float
    updated: float
    turns: int  # how many


class Conversation(msgspec.Struct):
    id: str
    title: str
    created: float
    updated: float
    turns: list[SavedTurn]


class ConversationList(msgspec.Struct):
    conversations: list[ConversationSummary]  # the caller's own, the last changed first


class ConversationsDeleted(msgspec.Struct):
    deleted: int
