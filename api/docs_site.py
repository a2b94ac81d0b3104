"""The manual at ``/docs/``: the static site MkDocs builds from ``docs/`` into ``site/`` (``make docs``; ``make
serve`` builds it first), served as files, with no internet, and open without the API key as the web page is.

A clone that has not built it gets a 404 that says how to. ``site/`` is git-ignored: it is built from the pages,
never edited.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from litestar import HttpMethod, Request, Response, route
from litestar.response import File, Redirect

from rag.core.settings import PROJECT_ROOT

DOCS_PATH = "/docs"
SITE_DIR = PROJECT_ROOT / "site"
NOT_BUILT = ("The documentation site is not built. In the clone, run `make docs` (or `.venv/bin/mkdocs build`, "
             "after `pip install -e \".[docs]\"`), then reload this page. The same pages, unbuilt: docs/*.md.\n")
# Said here, not read from ``mimetypes``: on Windows it reads the registry, where .js is often text/plain.
SITE_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript",
              ".json": "application/json", ".map": "application/json", ".png": "image/png",
              ".ico": "image/x-icon", ".svg": "image/svg+xml", ".woff2": "font/woff2", ".woff": "font/woff",
              ".ttf": "font/ttf", ".xml": "application/xml", ".gz": "application/gzip",
              ".csv": "text/csv"}  # text/* types get "; charset=utf-8" from Litestar
SITE_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def site_file(site: Path, relative: str) -> Path | None:
    """The file of the built site that ``relative`` (the URL path under /docs/) names — a folder means its
    index.html — or None: nothing there, a dot-file, a type the site does not have, or a path out of the site."""
    parts = PurePosixPath(relative.lstrip("/")).parts
    if any(part in ("..", ".") or part.startswith(".") or "\\" in part or ":" in part for part in parts):
        return None
    path = site.joinpath(*parts)
    if path.is_dir():
        path = path / "index.html"
    if path.suffix not in SITE_TYPES or not path.is_file():
        return None
    return path


def docs_handlers(site: Path = SITE_DIR) -> list:
    @route([DOCS_PATH, DOCS_PATH + "/{file_path:path}"], http_method=[HttpMethod.GET, HttpMethod.HEAD],
           name="docs-site", include_in_schema=False, sync_to_thread=False)
    def docs_site(request: Request) -> Response | File | Redirect:
        """A page or asset of the built manual; /docs and a folder without its slash are redirected (the pages'
        links are relative to their folder)."""
        if not (site / "index.html").is_file():
            return Response(NOT_BUILT, status_code=404, media_type="text/plain", headers=SITE_HEADERS)
        # The path as requested: Litestar's own (and a path parameter's) has lost a trailing slash, which says
        # what the pages' relative links are relative to.
        raw = request.scope["path"]
        if request.scope.get("raw_path"):
            raw = unquote(request.scope["raw_path"].decode("latin-1").partition("?")[0])
        path = site_file(site, raw.removeprefix(DOCS_PATH))
        if path is None:
            return Response(f"No page {raw!r} in the manual; its contents: {DOCS_PATH}/\n", status_code=404,
                            media_type="text/plain", headers=SITE_HEADERS)
        if path.name == "index.html" and not raw.endswith(("/", "index.html")):
            return Redirect(raw + "/", status_code=301)
        return File(path, filename=path.name, media_type=SITE_TYPES[path.suffix], content_disposition_type="inline",
                    headers=SITE_HEADERS)

    return [docs_site]


__all__ = ["DOCS_PATH", "NOT_BUILT", "SITE_DIR", "docs_handlers", "site_file"]
