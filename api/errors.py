"""The one place where exceptions become HTTP responses: ``{"error": {"type", "message"}}``."""

from __future__ import annotations

import logging

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from rag.core.errors import BadRequestError, OverloadedError, RagError

log = logging.getLogger("rag.api")


def error_response(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response({"error": {"type": error_type, "message": message}}, status_code=status, headers=headers)


def rag_error_handler(_: Request, exc: RagError) -> Response:
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, OverloadedError) else None
    return error_response(exc.status_code, exc.error_type, exc.message, headers)


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
    types = {400: BadRequestError.error_type, 401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
    return error_response(exc.status_code, types.get(exc.status_code, "http_error"), exc.detail, exc.headers)


def internal_error_handler(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path)
    return error_response(500, "internal_error", "internal error; see the server log")


EXCEPTION_HANDLERS = {
    RagError: rag_error_handler,
    ValidationException: validation_error_handler,
    HTTPException: http_error_handler,
    Exception: internal_error_handler,
}
