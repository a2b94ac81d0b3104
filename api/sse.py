"""Server-Sent Events framing."""

from __future__ import annotations

from typing import Any, AsyncIterator, TypeVar

import msgspec
from litestar.response import Stream

from api.protocol import ErrorBody, ErrorResponse
from rag.core.errors import RagError


EventType = TypeVar("EventType", bound=msgspec.Struct)


def sse(data: msgspec.Struct | str) -> bytes:
    """One event: a typed event (api/protocol.py, the classes the OpenAPI schema describes) or a literal."""
    payload = data if isinstance(data, str) else msgspec.json.encode(data).decode("utf-8")
    return f"data: {payload}\n\n".encode("utf-8")


def event(kind: type[EventType], **fields: Any) -> EventType:
    """A typed event from plain values (nested dicts become their Structs): a field the schema does not
    have, or one of the wrong type, fails here rather than reaching a client."""
    return msgspec.convert(fields, type=kind)


# Content-Type is set here too: for handlers annotated ``dict | Stream`` Litestar passes the handler's
# (JSON) media type to the Stream, which would otherwise win over ``Stream(media_type=...)``.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
               "Content-Type": "text/event-stream; charset=utf-8"}


def sse_error(exc: RagError) -> bytes:
    """The event that ends a stream which failed after it had started (headers are already sent)."""
    return sse(ErrorResponse(error=ErrorBody(type=exc.error_type, message=exc.message)))


def sse_response(frames: AsyncIterator[bytes]) -> Stream:
    return Stream(frames, media_type="text/event-stream", headers=SSE_HEADERS)


async def primed(events):
    """Run an event stream up to its first item, so errors before any output become HTTP errors."""
    first = await events.__anext__()

    async def chain():
        try:
            yield first
            async for item in events:
                yield item
        finally:
            await events.aclose()  # a client that went away cancels its generation

    return chain()
