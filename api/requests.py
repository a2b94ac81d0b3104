"""Reading request bodies: whatever makes a body unreadable is the client's error (400 with a message that
says what is wrong), never a 500."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, TypeVar

import msgspec
from litestar import Request
from litestar.datastructures import UploadFile
from litestar.exceptions import HTTPException
from litestar.types import Receive

from rag.core.errors import BadRequestError, RagError

T = TypeVar("T")
log = logging.getLogger("rag.api")
UPLOAD_FIELD = "data"
# What Litestar's multipart parser says when a part's headers pass its limit (python-multipart's
# max_header_size, 4 KiB at Litestar 2.25: a file name thousands of characters long) or the body has more
# parts than multipart_form_part_limit (1,000).
PART_HEADERS_TOO_LARGE = "Request Entity Too Large"


def unreadable(what: str, exc: Exception) -> BadRequestError:
    """The client's error for a body that could not be decoded; unforeseen causes are logged with their
    traceback, so the next one can get a message of its own."""
    if isinstance(exc, RecursionError):
        return BadRequestError(f"the {what} is nested too deeply")
    if isinstance(exc, UnicodeDecodeError):
        return BadRequestError(f"the {what} is not valid UTF-8 ({exc.reason})")
    log.warning("unreadable %s", what, exc_info=exc)
    return BadRequestError(f"the {what} could not be read: {exc}")


class ApiRequest(Request[Any, Any, Any]):
    """The app's request class: a multipart body that cannot be parsed is a 400 that says why."""

    async def form(self) -> Any:
        try:
            return await super().form()
        except HTTPException as exc:
            if exc.status_code == 400 and exc.detail == PART_HEADERS_TOO_LARGE:
                raise BadRequestError("the multipart body is over the parser's limits: more than 1,000 parts "
                                      "(send at most 1,000 files per upload) or a part with headers over 4 KiB "
                                      "(a file name that long?)") from exc
            if exc.status_code == 400:
                cause = f": {exc.__cause__}" if exc.__cause__ else ""
                raise BadRequestError(f"the multipart body is malformed ({exc.detail}{cause})") from exc
            raise
        except RagError:
            raise
        except Exception as exc:  # noqa: BLE001 - anything the parser raises is about the body
            raise unreadable("multipart body", exc) from exc


def integral_floats_as_ints(value: Any) -> Any:
    """JSON has one number type: ``4.0`` is the integer 4 (as JSON Schema's "integer" says); msgspec's strict
    mode would refuse it for an int field (floats fields take ints, so nothing is lost)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [integral_floats_as_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: integral_floats_as_ints(v) for k, v in value.items()}
    return value


async def json_body(request: Request[Any, Any, Any], schema: type[T]) -> T:
    """The JSON body as ``schema``, decoded strictly: a field of the wrong type is refused, never coerced
    (Litestar's own body parsing would take ``"stream": 0`` for false and ``"max_tokens": "8"`` for 8).
    Only an ``application/json`` body is read: ``text/plain`` (or a form) is what a foreign web page can post
    without a preflight (api/guard.py)."""
    media_type = request.content_type[0].lower()
    if media_type != "application/json":
        raise BadRequestError(f"send the body as JSON with Content-Type: application/json, not "
                              f"{media_type or 'no Content-Type'}")
    raw = await request.body()
    if not raw.strip():
        raise BadRequestError("a JSON object request body is required")
    try:
        return msgspec.convert(integral_floats_as_ints(msgspec.json.decode(raw)), type=schema, strict=True)
    except msgspec.ValidationError as exc:
        raise BadRequestError(str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise BadRequestError(f"the body is not valid JSON: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - anything else the decoder raises is about the body too
        raise unreadable("JSON body", exc) from exc


async def uploaded_files(request: Request[Any, Any, Any]) -> list[UploadFile]:
    """The files of a multipart upload (field ``data``); each part must be a file with a file name."""
    if request.content_type[0] != "multipart/form-data":
        raise BadRequestError(f"send the files as multipart/form-data in the field '{UPLOAD_FIELD}', "
                              f"not {request.content_type[0] or 'an empty body'}")
    form = await request.form()
    parts = form.getall(UPLOAD_FIELD, [])
    if not parts:
        fields = sorted(set(form.keys()))
        raise BadRequestError(f"no files in the upload (send them in the multipart field '{UPLOAD_FIELD}'"
                              + (f"; got only {', '.join(map(repr, fields))})" if fields else ")"))
    for number, part in enumerate(parts, 1):
        if not isinstance(part, UploadFile) or not part.filename:
            raise BadRequestError(f"part {number} of the field '{UPLOAD_FIELD}' is not a file: each part needs "
                                  "a file name (Content-Disposition: form-data; name=\"data\"; filename=\"...\")")
    return parts


class ClientDisconnected(Exception):
    """The client left before its answer was ready (nobody reads the response; logged as 499)."""


async def cancel_on_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await ``work`` while watching the ASGI receive channel: when the client disconnects, ``work`` is
    cancelled (an answer's generation stops with it) and ``ClientDisconnected`` raised. Only for requests
    whose body has been read (later messages on the channel can only be ``http.disconnect``)."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled():
            raise ClientDisconnected() from None
        raise
    finally:
        watcher.cancel()
