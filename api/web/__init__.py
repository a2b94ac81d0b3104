"""The browser app: one HTML page (chat at ``/``, documents at ``/documents``) and its static assets.

Everything is served from this package (no CDN, no build step). The page and its assets load without the
API key, so the page can ask for it; every API route stays behind the key (see ``api.app``).
"""

from __future__ import annotations

from pathlib import Path

from litestar import Controller, HttpMethod, Response, get, route
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.response import File

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/static"
CATALOGUE_FOLDER = "i18n"  # the message catalogues of the app's texts, one per language (static/i18n/en.json)
# The types of what the app serves, said here: ``mimetypes`` reads them from the Windows registry, where .js is
# text/plain on many machines, and a browser refuses a module script of that type (a blank page).
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml",
                ".png": "image/png", ".ico": "image/x-icon", ".json": "application/json",
                ".txt": "text/plain; charset=utf-8"}  # the vendored viewers' LICENSE and NOTICE files
PAGE_PATHS = ("/", "/documents", "/keys")  # client-side views of the one page
# The API docs pages (api.openapi.DocsPage): they carry no schema and ask for the key as the app does.
DOCS_PAGES = ("/schema", "/schema/redoc", "/schema/swagger")
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
    return method in ("GET", "HEAD") and (path in PAGE_PATHS or path in DOCS_PAGES
                                          or path.startswith(STATIC_PATH + "/"))


class PageController(Controller):
    include_in_schema = False

    @get(list(PAGE_PATHS), media_type="text/html", sync_to_thread=False)
    def page(self) -> Response[bytes]:
        return Response((STATIC_DIR / "index.html").read_bytes(), headers=PAGE_HEADERS)


def _serve(folder: Path, name: str) -> File:
    """A file of ``folder`` (no subfolders, no dot-files), with its type from STATIC_TYPES."""
    path = folder / name
    media_type = STATIC_TYPES.get(path.suffix)
    if media_type is None or path.name != name or name.startswith(".") or not path.is_file():
        raise NotFoundException(f"no static file {name!r}")
    return File(path, filename=name, media_type=media_type, content_disposition_type="inline",
                headers={"Cache-Control": "no-cache"})


@route(STATIC_PATH + "/{name:str}", http_method=[HttpMethod.GET, HttpMethod.HEAD], name="web-static",
       include_in_schema=False, sync_to_thread=False)
def static_file(name: FromPath[str]) -> File:
    """One of the app's own files, with its type from STATIC_TYPES."""
    return _serve(STATIC_DIR, name)


@route(STATIC_PATH + "/" + CATALOGUE_FOLDER + "/{name:str}", http_method=[HttpMethod.GET, HttpMethod.HEAD],
       name="web-catalogue", include_in_schema=False, sync_to_thread=False)
def catalogue_file(name: FromPath[str]) -> File:
    """A message catalogue of the app's texts (static/i18n/<lang>.json): the app's one folder."""
    if not name.endswith(".json"):
        raise NotFoundException(f"no catalogue {name!r}")
    return _serve(STATIC_DIR / CATALOGUE_FOLDER, name)


def web_handlers() -> list:
    return [PageController, static_file, catalogue_file]


__all__ = ["DOCS_PAGES", "PAGE_PATHS", "STATIC_DIR", "is_open", "web_handlers"]
