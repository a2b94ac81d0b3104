"""Server-Sent Events framing."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from litestar.response import Stream

from rag.core.errors import RagError


def sse(data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode("utf-8")


# Content-Type is set here too: for handlers annotated ``dict | Stream`` Litestar passes the handler's
# (JSON) media type to the Stream, which would otherwise win over ``Stream(media_type=...)``.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
               "Content-Type": "text/event-stream; charset=utf-8"}


def sse_error(exc: RagError) -> bytes:
    """The event that ends a stream which failed after it had started (headers are already sent)."""
    return sse({"error": {"type": exc.error_type, "message": exc.message}})


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
