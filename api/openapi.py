"""What the OpenAPI schema says beyond the handlers' own types: every error status a route can answer
(always in the one error shape, ``ErrorResponse``), the Server-Sent Events of streaming answers, and the
multipart upload body (read by the handler itself, so that a bad part gets a message of its own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIType, Operation, Reference, RequestBody, Schema

from api import protocol
from api.protocol import (AskRequest, ChatCompletionRequest, ChatRequest, ConversationRename, ConversationWrite,
                          ErrorResponse, HealthResponse, JobStatus, KeyCreateRequest, RetrieveRequest, UploadResponse)
from api.web import STATIC_PATH

REF = "#/components/schemas/{name}"
REQUEST_BODIES = (AskRequest, RetrieveRequest, ChatRequest, ChatCompletionRequest, KeyCreateRequest, ConversationWrite,
                  ConversationRename)
EVENT_STREAM = "text/event-stream"
ERRORS = {
    400: "Invalid request: a body that is not valid JSON (or not UTF-8, or nested too deeply), a field of the "
         "wrong type or out of range, an unknown field, an empty or too long question, a bad index name",
    401: "Missing, unknown, expired or revoked bearer token (only when the server has keys: RAG_API_KEY, "
         "`rag keys create`, or signed tokens with jwt_jwks)",
    403: "The key's role does not allow this on the index (`forbidden`; the same whether the index exists or "
         "not), a Host the server does not answer to (`forbidden_host`), or a cross-origin request that would "
         "change something (`cross_origin`)",
    404: "No such index (`index_not_found`: the indexes it lists are those the key holds a role on), document (`document_not_found`), source (`source_not_found`), "
         "job (`job_not_found`) or conversation of the caller's (`conversation_not_found`)",
    409: "The index is being written by another process (`index_locked`) or was built with another "
         "embedder (`embedder_mismatch`); a key of that name is active (`conflict`); a source another replica "
         "is syncing (`source_busy`); a job that cannot be run again (`job_state`); an index deleted without "
         "`confirm` repeating its name (`confirmation_required`)",
    413: "The request body is larger than the server accepts (`payload_too_large`)",
    500: "A bug in the server (`internal_error`); the server log has the traceback",
    503: "The models are still loading or failed to load (`model_unavailable`), or the generation queue is "
         "full (`overloaded`, with Retry-After)",
}



DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>API · Offline RAG</title>
  <link rel="icon" href="data:,">
  {styles}
  <link rel="stylesheet" href="{static}/docs.css">
  {scripts}
  <script type="module" src="{static}/docs.js"></script>
</head>
<body data-viewer="{viewer}">
  <header class="docs-bar">
    <strong>Offline RAG · API</strong>
    <nav><a href="/" data-i18n="apiDocs.back">Back to the app</a>
      <a href="/schema/swagger" data-i18n="apiDocs.swagger">Swagger UI (try it out)</a>
      <a href="/schema/redoc" data-i18n="apiDocs.redoc">ReDoc (reading)</a>
      <a href="/schema/openapi.json">openapi.json</a></nav>
  </header>
  <form id="docs-key" class="docs-key" hidden autocomplete="off">
    <p id="docs-message" data-i18n="apiDocs.loading">Loading the API description…</p>
    <label><span data-i18n="key.label">API key</span> <input type="password" id="docs-key-input" required></label>
    <button type="submit" id="docs-key-submit" data-i18n="apiDocs.show">Show the API</button>
    <p class="docs-hint" data-i18n="key.kept">Kept in this browser tab only (session storage) and sent as a bearer
      token.</p>
  </form>
  <div id="docs-viewer"></div>
</body>
</html>
"""


class DocsPage(OpenAPIRenderPlugin):
    """A docs page that carries no schema: its script fetches /schema/openapi.json with the key from this
    tab (or asks for one), so the page itself opens without a key, as the app's does."""

    def __init__(self, viewer: str, path: str | list[str]) -> None:
        super().__init__(path=path)
        self.viewer = viewer

    def render(self, request, openapi_schema: dict[str, Any]) -> bytes:  # noqa: ANN001 - Litestar's signature
        static = STATIC_PATH
        if self.viewer == "swagger":
            styles = f'<link rel="stylesheet" href="{static}/swagger-ui.css">'
            scripts = (f'<script src="{static}/swagger-ui-bundle.js"></script>\n  '
                       f'<script src="{static}/swagger-ui-standalone-preset.js"></script>')
        else:
            styles, scripts = "", f'<script src="{static}/redoc.standalone.js"></script>'
        return DOCS_PAGE.format(static=static, styles=styles, scripts=scripts, viewer=self.viewer).encode()


def docs_config() -> OpenAPIConfig:
    """The OpenAPI document and its two readers, Swagger UI and ReDoc, with their scripts served by the app
    itself (api/web/static, vendored from npm with their licences): the docs render on a site with no internet.
    Their pages open without a key and ask for one; the schema itself (openapi.json) needs it."""
    return OpenAPIConfig(title="Offline RAG", version="0.1.0", path="/schema", render_plugins=[
        DocsPage("redoc", ["/redoc", "/"]),
        DocsPage("swagger", "/swagger"),
        JsonRenderPlugin(),
    ])


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The documented error responses for ``statuses`` (401, 403 and 500 are added: every route can answer
    them)."""
    return {status: ResponseSpec(ErrorResponse, description=ERRORS[status], generate_examples=False)
            for status in sorted({*statuses, 401, 403, 500})}


ANSWER_ERRORS = errors(400, 404, 413, 503)
UPLOAD_RESPONSES = {
    **errors(400, 409, 503),
    413: ResponseSpec(ErrorResponse, generate_examples=False,
                      description="The body is over the upload limit, or every file is over RAG_MAX_UPLOAD_MB "
                                  "(then the body also has `index` and `files`, as in 200)"),
    202: ResponseSpec(JobStatus, generate_examples=False,
                      description="The upload goes on as a job (it took longer than job_wait_s, or `async=true`): "
                                  "follow it at Location (GET /v1/jobs/{id}, or its /events stream)"),
    422: ResponseSpec(UploadResponse, generate_examples=False,
                      description="No file was accepted (unsupported type, unreadable, encrypted, no text): "
                                  "`files` says why for each, `error` for the first"),
}
HEALTH_RESPONSES = {503: ResponseSpec(HealthResponse, generate_examples=False,
                                      description="Models loading (`status: loading`) or failed (`failed`)")}

ASK_EVENTS = """The answer (JSON). With `"stream": true` it comes as Server-Sent Events, one JSON object per
`data:` line: `{"token": str}` for each piece of the answer, then one `{"done": true, "answer", "abstained",
"abstain_reason", "citations", "sources", "metrics"}` (the fields of the non-streaming answer).
An error after the stream started ends it with `{"error": {"type", "message"}}`."""
SEED_EVENTS = """Server-Sent Events, one JSON object per `data:` line: `{"token": str}` for each piece of the
answer, then `{"done": true, "token": "[DONE]", "answer", "metrics", "sources", "citations", "abstained"}`
(and `"content"`, the abstention message, when it abstained). An error after the stream started ends it with
`{"error": {"type", "message"}}`."""
OPENAI_EVENTS = """The completion (JSON). With `"stream": true`, OpenAI's chat.completion.chunk objects as
Server-Sent Events (`data: {"id", "object": "chat.completion.chunk", "created", "model", "choices": [{"index",
"delta", "finish_reason"}]}`); the last chunk with a finish_reason also has `sources`, `citations`,
`abstained`; with `stream_options.include_usage` a final chunk has `usage` and empty `choices`; then
`data: [DONE]`. An error after the stream started is sent as `{"error": {"type", "message"}}` before `[DONE]`."""
JOB_EVENTS = """Server-Sent Events, one JSON `JobStatus` per `data:` line (as GET /v1/jobs/{id} answers), sent
whenever the job moves on; the stream ends after the event of its final state (done, failed, cancelled or
interrupted). A `: keep-alive` comment comes every 15 s while nothing changes."""
EVENT_STREAMS = (  # path, method, payload component, its wire types (any one per event), description, [DONE] at the end
    ("/v1/ask", "post", "AskEvent", protocol.ASK_EVENTS, ASK_EVENTS, False),
    ("/v1/chat/stream", "post", "SeedEvent", protocol.SEED_EVENTS, SEED_EVENTS, False),
    ("/v1/chat/completions", "post", "OpenAIEvent", protocol.OPENAI_EVENTS, OPENAI_EVENTS, True),
    ("/v1/jobs/{job_id}/events", "get", "JobEvent", protocol.JOB_EVENTS, JOB_EVENTS, False),
)


def event_stream_only(description: str) -> dict[int, ResponseSpec]:
    """The 200 of a route that always streams (its event schema is set by ``complete_schema``)."""
    return {200: ResponseSpec(str, media_type=EVENT_STREAM, description=description, generate_examples=False)}


UPLOAD_BODY = RequestBody(required=True, description="one or more files in the multipart field `data`",
                          content={"multipart/form-data": OpenAPIMediaType(schema=Schema(
                              type=OpenAPIType.OBJECT, required=["data"], properties={"data": Schema(
                                  type=OpenAPIType.ARRAY, min_items=1,
                                  description="the files; each part needs a file name with an extension",
                                  items=Schema(type=OpenAPIType.STRING, format="binary"))}))})  # type: ignore[arg-type]


def operation(*, json_body: type[msgspec.Struct] | None = None, upload: bool = False) -> type[Operation]:
    """The OpenAPI operation of a handler that reads its own body (api.requests): ``json_body`` as msgspec
    decodes it (its schema is added by ``complete_schema``) or a multipart ``upload``."""

    @dataclass
    class Documented(Operation):
        def __post_init__(self) -> None:
            if json_body is not None:
                self.request_body = RequestBody(required=True, content={"application/json": OpenAPIMediaType(
                    schema=Reference(ref=REF.format(name=json_body.__name__)))})
            if upload:
                self.request_body = UPLOAD_BODY

    return Documented


def event_schema(payload: str, done_marker: bool) -> dict[str, Any]:
    """One Server-Sent Event whose ``data`` is a JSON ``payload`` (a component), or the literal ``[DONE]``.
    (Before OpenAPI 3.2 the ``schema`` of text/event-stream describes each event; schemathesis checks it.)"""
    json_data = {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"$ref": REF.format(name=payload)}}
    data = {"anyOf": [{"const": "[DONE]"}, json_data]} if done_marker else json_data
    return {"type": "object", "required": ["data"], "properties": {"data": data}}


def complete_schema(app: Litestar) -> None:
    """Add to the served schema what Litestar cannot make from the handlers:

    * the JSON request bodies as msgspec decodes them (api.requests.json_body): msgspec's own JSON schema has
      what Litestar's would drop (limits inside unions, like those of ``stop``; ``additionalProperties: false``
      for ``forbid_unknown_fields``) and the rules documented with ``extra_json_schema``;
    * the Server-Sent Events of the streaming answers, each event's JSON described by a wire type.
    """
    events = {kind for _, _, _, kinds, _, _ in EVENT_STREAMS for kind in kinds}
    _, components = msgspec.json.schema_components((*REQUEST_BODIES, *events), ref_template=REF)
    for _, _, name, kinds, _, _ in EVENT_STREAMS:
        components[name] = {"anyOf": [{"$ref": REF.format(name=kind.__name__)} for kind in kinds]}
    served = app.plugins.get("OpenAPIPlugin").provide_openapi_schema()  # built once, then served as it is
    served["components"]["schemas"].update(components)
    for path, method, name, _, description, done in EVENT_STREAMS:
        ok = served["paths"][path][method]["responses"]["200"]
        ok["content"][EVENT_STREAM] = {"schema": event_schema(name, done)}
        ok["description"] = description
    # A document's original is sent as a PDF to view, or as a download of its own type ("text/markdown").
    original = served["paths"]["/v1/documents/{document_id}/original"]["get"]["responses"]["200"]
    original["content"] = {"application/pdf": {"schema": {"type": "string", "format": "binary"}},
                           "*/*": {"schema": {"type": "string", "format": "binary"}}}
