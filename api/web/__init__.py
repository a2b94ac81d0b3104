"""The browser app: one HTML page (chat at ``/``, documents at ``/documents``) and its static assets.

Everything is served from this package (no CDN, no build step). The page and its assets load without the
API key, so the page can ask for it; every API route stays behind the key (see ``api.app``).
"""

from __future__ import annotations

from pathlib import Path

from litestar import Controller, Response, get
from litestar.datastructures import CacheControlHeader
from litestar.static_files import create_static_files_router

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/static"
PAGE_PATHS = ("/", "/documents", "/keys")  # client-side views of the one page
# The page runs only its own scripts and talks only to this server, whatever a document or a reply contains.
PAGE_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                                "form-action 'self'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def is_open(method: str, path: str) -> bool:
    """Whether a request is for the page or its assets (served without the API key): GET or HEAD only."""
    return method in ("GET", "HEAD") and (path in PAGE_PATHS or path.startswith(STATIC_PATH + "/"))


class PageController(Controller):
    include_in_schema = False

    @get(list(PAGE_PATHS), media_type="text/html", sync_to_thread=False)
    def page(self) -> Response[bytes]:
        return Response((STATIC_DIR / "index.html").read_bytes(), headers=PAGE_HEADERS)


def web_handlers() -> list:
    static = create_static_files_router(path=STATIC_PATH, directories=[STATIC_DIR], name="web-static",
                                        cache_control=CacheControlHeader(no_cache=True), include_in_schema=False)
    return [PageController, static]


__all__ = ["PAGE_PATHS", "STATIC_DIR", "is_open", "web_handlers"]
