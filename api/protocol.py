"""Wire schemas (request bodies) for every endpoint. Responses are built from ``rag.result``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import msgspec
from litestar.datastructures import UploadFile

Text = Annotated[str, msgspec.Meta(max_length=20_000)]
TopK = Annotated[int, msgspec.Meta(ge=1, le=50)]
MaxTokens = Annotated[int, msgspec.Meta(ge=1, le=4096)]
Temperature = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
SamplingTopK = Annotated[int, msgspec.Meta(ge=0, le=1000)]
StopString = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
IndexName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class AskRequest(msgspec.Struct, forbid_unknown_fields=True):
    question: Text
    index: IndexName | None = None
    top_k: TopK | None = None
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k_sampling: SamplingTopK | None = None
    documents: list[str] | None = None
    stream: bool = False


class ContentPart(msgspec.Struct):
    """One part of an OpenAI-style list content; only ``text`` parts are understood."""

    type: str
    text: Text | None = None


class ChatMessage(msgspec.Struct):
    role: Annotated[str, msgspec.Meta(pattern=r"^(system|user|assistant|developer|tool)$")]
    content: Text | Annotated[list[ContentPart], msgspec.Meta(max_length=100)] | None = None


class ChatRequest(msgspec.Struct):
    """The seed backend's /v1/chat body (+ retrieval controls)."""

    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1, max_length=100)]
    temperature: Temperature | None = None
    max_tokens: MaxTokens | None = None
    top_p: TopP | None = None
    top_k: SamplingTopK | None = None
    use_context: bool = True
    index: IndexName | None = None
    documents: list[str] | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class ChatCompletionRequest(msgspec.Struct):
    """OpenAI's chat completion body; fields we do not use are accepted and ignored."""

    messages: Annotated[list[ChatMessage], msgspec.Meta(min_length=1, max_length=100)]
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
    query: Text
    top_k: TopK | None = None
    documents: list[str] | None = None
    index: IndexName | None = None


@dataclass
class UploadForm:
    """``POST /v1/documents`` multipart body: one or more files in the field ``data``."""

    data: list[UploadFile] = field(default_factory=list)


class ErrorBody(msgspec.Struct):
    type: str
    message: str


class ErrorResponse(msgspec.Struct):
    error: ErrorBody
