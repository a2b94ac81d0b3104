"""The one place where exceptions become HTTP responses: ``{"error": {"type", "message"}}``."""

from __future__ import annotations

import logging

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from api.auth import request_context
from api.requests import ClientDisconnected
from rag.core.errors import BadRequestError, IndexNotFoundError, OverloadedError, RagError
from rag.core.names import missing_index_message

log = logging.getLogger("rag.api")
# Litestar's functions that read, decode and validate a request before its handler runs: an exception
# raised inside them is about the request, whatever its type (checked by tests/test_hardening.py).
REQUEST_READERS = frozenset({"to_kwargs", "parse_values_from_connection_kwargs"})
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left before the answer (never delivered)


def error_response(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response({"error": {"type": error_type, "message": message}}, status_code=status, headers=headers)


def rag_error_handler(request: Request, exc: RagError) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, OverloadedError) else None
    message = exc.message
    if isinstance(exc, IndexNotFoundError) and exc.index:
        # The indexes there are, as far as the caller may know of them: those it holds a grant on (an index it
        # may not use is one that does not exist, issue 34).
        principal = request_context(request).principal
        message = missing_index_message(exc.index, [n for n in exc.existing if principal.role_for(n) is not None])
    return error_response(exc.status_code, exc.error_type, message, headers)


def validation_error_handler(_: Request, exc: ValidationException) -> Response:
    detail = exc.extra if exc.extra else None
    message = exc.detail or "invalid request"
    if isinstance(detail, list) and detail:
        first = detail[0]
        if isinstance(first, dict):
            if first.get("key") == "data" and first.get("message") == "'data'":  # Litestar's word for "no body"
                return error_response(400, BadRequestError.error_type, "a JSON object request body is required")
            message = f"{first.get('message', message)}" + (f" ({first.get('key')})" if first.get("key") else "")
    return error_response(400, BadRequestError.error_type, message)


def http_error_handler(_: Request, exc: HTTPException) -> Response:
    types = {400: BadRequestError.error_type, 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
    return error_response(exc.status_code, types.get(exc.status_code, "http_error"), exc.detail, exc.headers)


def raised_reading_the_request(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in REQUEST_READERS and frame.f_globals.get("__name__", "").startswith("litestar."):
            return True
        tb = tb.tb_next
    return False


def disconnected_handler(_: Request, exc: ClientDisconnected) -> Response:
    return error_response(CLIENT_CLOSED_REQUEST, "client_disconnected", "the client left before the answer")


def internal_error_handler(request: Request, exc: Exception) -> Response:
    if raised_reading_the_request(exc):  # the next unforeseen bad input: a 400, logged to be looked at
        log.warning("unreadable request on %s", request.url.path, exc_info=exc)
        return error_response(400, BadRequestError.error_type,
                              f"the request could not be read: {type(exc).__name__}: {exc}")
    log.exception("unhandled error on %s", request.url.path)
    return error_response(500, "internal_error", "internal error; see the server log")


EXCEPTION_HANDLERS = {
    RagError: rag_error_handler,
    ValidationException: validation_error_handler,
    HTTPException: http_error_handler,
    ClientDisconnected: disconnected_handler,
    Exception: internal_error_handler,
}
