"""What the OpenAPI schema says beyond the handlers' own types: every error status a route can answer
(always in the one error shape, ``ErrorResponse``), the Server-Sent Events of streaming answers, and the
multipart upload body (read by the handler itself, so that a bad part gets a message of its own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, RequestBody, Schema

from api.protocol import (AskRequest, ChatCompletionRequest, ChatRequest, ErrorResponse, HealthResponse,
                          RetrieveRequest, UploadResponse)

REQUEST_BODIES = (AskRequest, RetrieveRequest, ChatRequest, ChatCompletionRequest)
EVENT_STREAM = "text/event-stream"
ERRORS = {
    400: "Invalid request: a body that is not valid JSON (or not UTF-8, or nested too deeply), a field of the "
         "wrong type or out of range, an unknown field, an empty or too long question, a bad index name",
    401: "Missing or wrong bearer token (only when the server has an API key, RAG_API_KEY)",
    404: "No such index (`index_not_found`) or document (`document_not_found`)",
    409: "The index is being written by another process (`index_locked`) or was built with another "
         "embedder (`embedder_mismatch`)",
    413: "The request body is larger than the server accepts (`payload_too_large`)",
    500: "A bug in the server (`internal_error`); the server log has the traceback",
    503: "The models are still loading or failed to load (`model_unavailable`), or the generation queue is "
         "full (`overloaded`, with Retry-After)",
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The documented error responses for ``statuses`` (401 and 500 are added: every route can answer them)."""
    return {status: ResponseSpec(ErrorResponse, description=ERRORS[status], generate_examples=False)
            for status in sorted({*statuses, 401, 500})}


ANSWER_ERRORS = errors(400, 404, 413, 503)
UPLOAD_RESPONSES = {
    **errors(400, 409, 503),
    413: ResponseSpec(ErrorResponse, generate_examples=False,
                      description="The body is over the upload limit, or every file is over RAG_MAX_UPLOAD_MB "
                                  "(then the body also has `index` and `files`, as in 200)"),
    422: ResponseSpec(UploadResponse, generate_examples=False,
                      description="No file was accepted (unsupported type, unreadable, encrypted, no text): "
                                  "`files` says why for each, `error` for the first"),
}
HEALTH_RESPONSES = {503: ResponseSpec(HealthResponse, generate_examples=False,
                                      description="Models loading (`status: loading`) or failed (`failed`)")}

ASK_EVENTS = """With `"stream": true` the answer comes as Server-Sent Events, one JSON object per `data:` line:
`{"token": str}` for each piece of the answer, then one `{"done": true, "answer", "abstained",
"abstain_reason", "citations", "sources", "metrics"}` (the fields of the non-streaming answer).
An error after the stream started ends it with `{"error": {"type", "message"}}`."""
SEED_EVENTS = """Server-Sent Events, one JSON object per `data:` line: `{"token": str}` for each piece of the
answer, then `{"done": true, "token": "[DONE]", "answer", "metrics", "sources", "citations", "abstained"}`
(and `"content"`, the abstention message, when it abstained). An error after the stream started ends it with
`{"error": {"type", "message"}}`."""
OPENAI_EVENTS = """With `"stream": true`, OpenAI's chat.completion.chunk objects as Server-Sent Events
(`data: {"id", "object": "chat.completion.chunk", "created", "model", "choices": [{"index", "delta",
"finish_reason"}]}`); the last chunk with a finish_reason also has `sources`, `citations`, `abstained`; with
`stream_options.include_usage` a final chunk has `usage` and empty `choices`; then `data: [DONE]`.
An error after the stream started is sent as `{"error": {"type", "message"}}` before `[DONE]`."""
EVENT_SCHEMA = Schema(type=OpenAPIType.STRING, description="`data: <JSON>` lines, each followed by a blank line")


def event_stream_only(description: str) -> dict[int, ResponseSpec]:
    """The 200 of a route that always streams."""
    return {200: ResponseSpec(str, media_type=EVENT_STREAM, description=description, generate_examples=False)}


def json_or_event_stream(description: str) -> type[Operation]:
    """An operation whose 200 is JSON, or (with ``stream``) Server-Sent Events."""

    @dataclass
    class JsonOrEventStream(Operation):
        def __post_init__(self) -> None:
            ok: Any = self.responses["200"] if self.responses else None
            ok.content[EVENT_STREAM] = OpenAPIMediaType(schema=EVENT_SCHEMA)
            ok.description = description

    return JsonOrEventStream


@dataclass
class MultipartUpload(Operation):
    """POST /v1/documents: one or more files in the multipart field ``data``."""

    def __post_init__(self) -> None:
        files = Schema(type=OpenAPIType.ARRAY, min_items=1, description="the files; each part needs a file name",
                       items=Schema(type=OpenAPIType.STRING, format="binary"))  # type: ignore[arg-type]
        self.request_body = RequestBody(required=True, content={"multipart/form-data": OpenAPIMediaType(
            schema=Schema(type=OpenAPIType.OBJECT, properties={"data": files}, required=["data"]))})


def exact_request_schemas(app: Litestar) -> None:
    """Describe the JSON request bodies as msgspec validates them. Litestar's schema drops what msgspec
    enforces inside unions (the limits of ``stop``: 1-200 characters, at most 4) and ``forbid_unknown_fields``
    (no ``additionalProperties: false``); msgspec's own JSON schema has both."""
    _, components = msgspec.json.schema_components(REQUEST_BODIES, ref_template="#/components/schemas/{name}")
    served = app.plugins.get("OpenAPIPlugin").provide_openapi_schema()  # built once, then served as it is
    served["components"]["schemas"].update(components)
