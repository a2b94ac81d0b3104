"""Litestar application factory: routes, error mapping, auth, request logging, model lifespan."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import asynccontextmanager
from typing import AsyncIterator

import anyio.to_thread
from litestar import Litestar, Request, Router
from litestar.datastructures import MutableScopeHeaders
from litestar.di import Provide
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider

from api.auth import ANONYMOUS, CONTEXT_SCOPE_KEY, request_context
from api.docs_site import DOCS_PATH, docs_handlers
from api.errors import EXCEPTION_HANDLERS, error_response
from api.guard import HostPolicy
from api.telemetry import configure_logging, service_metrics
from api.openapi import complete_schema, docs_config
from api.requests import ApiRequest
from api.routes.access import AccessController
from api.routes.answers import AnswersController
from api.routes.chat import ChatController
from api.routes.conversations import ConversationsController
from api.routes.documents import DocumentsController
from api.routes.health import HealthController
from api.routes.indexes import IndexesController
from api.routes.jobs import JobsController
from api.routes.openai import OpenAIController
from api.routes.sources import SourcesController
from api.state import ServerState
from app.runtime import load_answering
from api.web import is_open, web_handlers
from rag.core.access import RequestContext
from rag.core.errors import RagError
from rag.core.settings import Settings, load_settings

OPEN_PATHS = ("/healthz", DOCS_PATH)  # and GET of the web page and its assets (api.web.is_open)
JSON_BODY_LIMIT = 4 * 1024 * 1024  # JSON requests (questions, chats); uploads have their own limit


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive), else b""."""
    scheme, _, token = dict(headers).get(b"authorization", b"").partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


def allowed_methods(scope: Scope) -> str | None:
    """Every method of the matched path. (Litestar 2.25 answers OPTIONS with the methods of the first
    handler registered for a path: OPTIONS /v1/documents said "GET, OPTIONS", without POST.)"""
    template = scope.get("path_template")
    for route in scope["litestar_app"].routes:
        if template in (route.path, route.path_format):
            return ", ".join(sorted(route.methods))
    return None


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    value = dict(headers).get(name)
    return value.decode("latin-1") if value is not None else None


def guard_auth_and_logging(settings: Settings, state: ServerState):
    """ASGI middleware: the browser guard (api.guard), authentication (api.auth) into the request's one
    ``RequestContext``, request id, one JSON log line per request."""
    logger = configure_logging(settings.log_file)
    hosts = HostPolicy.from_settings(settings.host, settings.allowed_hosts)

    def middleware(app: ASGIApp) -> ASGIApp:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            request_id = uuid.uuid4().hex[:16]
            name_server_span(scope["method"], scope.get("path_template"), request_id)
            start = time.perf_counter()
            scheme = scope.get("scheme", "http")
            state.metrics.active(scope["method"], scheme, 1)
            try:
                await guarded(scope, receive, send, request_id, start)
            finally:
                state.metrics.active(scope["method"], scheme, -1)

        async def guarded(scope: Scope, receive: Receive, send: Send, request_id: str, start: float) -> None:
            path = scope["path"]
            status_holder = {"status": 500}

            async def send_wrapper(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status_holder["status"] = message["status"]
                    headers = MutableScopeHeaders.from_message(message)
                    headers["X-Request-ID"] = request_id
                    if scope["method"] == "OPTIONS" and "allow" in headers and (allow := allowed_methods(scope)):
                        headers["Allow"] = allow
                await send(message)

            async def refuse(status: int, error_type: str, message: str, extra: dict[str, str] | None = None,
                             audited: dict[str, str | None] | None = None):
                response = error_response(status, error_type, message, extra)
                await response.to_asgi_response(app=None, request=Request(scope))(scope, receive, send_wrapper)
                _log(logger, state, request_id, scope, status, start)
                if audited is not None:  # in the audit trail too, rate-limited (Auditor.record_refusal)
                    client = (scope.get("client") or ("unknown",))[0]
                    try:
                        await anyio.to_thread.run_sync(lambda: state.services.audit.record_refusal(
                            error_type, status, scope["method"], path, str(client), request_id=request_id,
                            **audited))
                    except (RagError, OSError) as exc:  # not written: the refusal stands
                        logger.warning("the refusal could not be audited: %s", exc)

            headers = scope["headers"]
            host = header(headers, b"host")
            if not hosts.host_ok(host):
                await refuse(403, "forbidden_host", "this server does not answer to that Host name; behind a "
                             "reverse proxy, list the public name in the allowed_hosts setting", audited={"host": host})
                return
            origin = header(headers, b"origin")
            if not hosts.origin_ok(scope["method"], origin, header(headers, b"sec-fetch-site"), host):
                await refuse(403, "cross_origin", "cross-origin requests may not change anything here; use the "
                             "server's own page (a reverse proxy's public name goes in allowed_hosts)",
                             audited={"origin": origin, "fetch_site": header(headers, b"sec-fetch-site")})
                return
            token = bearer_token(headers).decode("latin-1")
            try:
                principal = await anyio.to_thread.run_sync(state.auth.principal, token)
            except RagError as exc:  # the key store cannot be reached: a 503 that says so
                await refuse(exc.status_code, exc.error_type, exc.message)
                return
            if principal is None:
                if not path.startswith(OPEN_PATHS) and not is_open(scope["method"], path):
                    await refuse(401, "unauthorized", "missing or invalid bearer token", {"WWW-Authenticate": "Bearer"},
                                 audited={"token": "presented" if token else "none"})
                    return
                principal = ANONYMOUS
            scope[CONTEXT_SCOPE_KEY] = RequestContext(principal, request_id)  # type: ignore[literal-required]
            try:
                await app(scope, receive, send_wrapper)
            finally:
                _log(logger, state, request_id, scope, status_holder["status"], start)

        return wrapped

    return middleware


def _log(logger, state: ServerState, request_id: str, scope: Scope, status: int, start: float) -> None:
    """The request's one JSON log line, and its one record in the metrics (``http.server.request.duration``)."""
    seconds = time.perf_counter() - start
    template = scope.get("path_template")  # templates keep the label set small
    state.metrics.request(scope["method"], template, status, scope.get("scheme", "http"),
                          scope.get("http_version", "1.1"), seconds)
    logger.info("request", extra={"fields": {
        "request_id": request_id, "method": scope["method"], "route": template or "unmatched", "path": scope["path"],
        "status": status, "latency_ms": round(seconds * 1000, 2)}})


def name_server_span(method: str, template: str | None, request_id: str) -> None:
    """The HTTP server span is named from the raw path; the route (Litestar routes before any middleware runs)
    gives it its low-cardinality name ("DELETE /v1/documents/{document_id}") and ``http.route``, and it gets
    the request id that the JSON log line carries. (It ends as the response is sent, before this middleware's
    own ``finally``.)"""
    span = trace.get_current_span()
    if span.is_recording():
        if template:
            span.update_name(f"{method} {template}")
            span.set_attribute("http.route", template)
        span.set_attribute("rag.request_id", request_id)


def server_spans() -> list:
    """OpenTelemetry's ASGI instrumentation (through Litestar's config): one SERVER span per request under the
    HTTP conventions, continuing an incoming ``traceparent``; no span per ASGI send/receive (one per SSE event).
    Its metrics are off (a no-op meter): each request is recorded once, by ``_log``, with telemetry on or off."""
    from litestar.plugins.opentelemetry import OpenTelemetryConfig  # lazy: only a server that traces

    return [OpenTelemetryConfig(exclude_spans=["receive", "send"], meter_provider=NoOpMeterProvider(),
                                scope_span_details_extractor=lambda scope: (
                                    f"{scope.get('method', '')} {scope.get('path', '')}".strip(), {})).middleware]


def serving_app() -> Litestar:
    """The app of a ``rag serve --workers N`` worker process: settings from the environment, telemetry on."""
    return create_app(load_settings(), telemetry=True)


def create_app(settings: Settings | None = None, telemetry: bool = False) -> Litestar:
    """``telemetry``: install OpenTelemetry for this process as the settings say (a serving process; apps
    built inside another program, such as tests, leave the process's telemetry alone)."""
    settings = settings or load_settings()
    # Logging first: what opening the state reports (jobs a stop of the server interrupted) must reach the
    # JSON log, not only a handler telemetry may have put on the root logger.
    configure_logging(settings.log_file)
    metrics, exporting = service_metrics(settings, telemetry)
    tracing = exporting is not None and exporting.tracing
    server = ServerState.open(settings, metrics)

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        # Models load in the background: the port opens at once and /healthz answers 503 "loading"
        # (every model route answers 503 too) until they are ready.
        loader = threading.Thread(target=load_answering, args=(settings, server.services), name="model-loader",
                                  daemon=True)
        loader.start()
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(loader.join)
            server.close()
            if exporting is not None:
                await anyio.to_thread.run_sync(exporting.shutdown)

    # Uploads may carry several files of up to max_upload_mb each; every other route takes small JSON bodies.
    documents = Router(path="/", route_handlers=[DocumentsController],
                       request_max_body_size=settings.max_upload_mb * 1024 * 1024 * 4)
    app = Litestar(
        route_handlers=[HealthController, AccessController, AnswersController, ChatController, OpenAIController,
                        IndexesController, SourcesController, JobsController, ConversationsController,
                        documents, *web_handlers(), *docs_handlers()],
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=[*(server_spans() if tracing else []), guard_auth_and_logging(settings, server)],
        dependencies={"context": Provide(request_context, sync_to_thread=False),
                      "services": Provide(lambda: server.services, use_cache=True, sync_to_thread=False),
                      "server": Provide(lambda: server, use_cache=True, sync_to_thread=False)},
        request_max_body_size=JSON_BODY_LIMIT,
        request_class=ApiRequest,  # an unreadable body is a 400 that says why (api/requests.py)
        openapi_config=docs_config(),
        logging_config=None,  # the product's own JSON logging (api/telemetry.py); no second plain-text format
        debug=False,
    )
    complete_schema(app)
    return app
