"""The manual (docs/, built by MkDocs into site/) and the README that points into it: the site builds with
--strict (every link and anchor checked, no page outside the nav), loads nothing from another host, the README's
links resolve, and a real `rag serve` answers /docs/ with the index page whose links work."""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import httpx
import pytest
import yaml

from helpers import server_process
from rag.core.settings import PROJECT_ROOT, Settings

DOCS = PROJECT_ROOT / "docs"
SITE = PROJECT_ROOT / "site"  # where `make docs` builds it and `rag serve` looks (api.docs_site.SITE_DIR)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def mkdocs_config() -> dict:
    # mkdocs.yml has no Python tags; the safe loader reads it
    return yaml.safe_load((PROJECT_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built_site() -> Path:
    """`mkdocs build --strict` into site/, as `make docs` does (without --strict): a broken link, a missing
    anchor or a page no nav entry reaches is a warning, and --strict makes a warning fail the build."""
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"], cwd=PROJECT_ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return SITE


def test_the_manual_builds_strict_and_loads_nothing_from_another_host(built_site: Path):
    pages = sorted(built_site.glob("*.html"))
    assert {p.stem for p in DOCS.glob("*.md")} <= {p.stem for p in pages}
    for page in pages:
        html = page.read_text(encoding="utf-8")
        outside = re.findall(r'<(?:script|link|img)[^>]*(?:src|href)="(https?:)?//', html)
        assert not outside, f"{page.name} loads from another host: the manual must work offline"


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    listed = nav_pages(mkdocs_config()["nav"])
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))


def github_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def headings(markdown: str) -> list[str]:
    found, fence = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.+)", line)):
            found.append(m.group(1).strip())
    return found


def test_the_readmes_links_resolve():
    """Each relative link of the README names a file of the repository; an anchor names a heading (GitHub's
    anchors in the README, MkDocs' in a docs page); and the README links every page of the manual."""
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(readme) if not t.startswith(("http://", "https://", "mailto:"))]
    assert targets
    for target in targets:
        path, _, anchor = target.partition("#")
        file = PROJECT_ROOT / path if path else PROJECT_ROOT / "README.md"
        assert file.exists(), f"README links {target!r}: no such file"
        if anchor:
            text = file.read_text(encoding="utf-8")
            slug = github_slug if file.name == "README.md" else mkdocs_slug
            assert anchor in {slug(h) for h in headings(text)}, f"README links {target!r}: no such heading"
    linked = {Path(t.partition("#")[0]).name for t in targets if t.startswith("docs/")}
    assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= linked


def test_rag_serve_answers_docs_with_the_manual_and_its_links_work(built_site: Path, settings: Settings,
                                                                     tmp_path: Path):
    """A real `rag serve` with a key: /docs redirects to /docs/, the index page opens without the key (the API
    stays behind it), a page it links to opens, its stylesheet comes with its type; a path out of the site is a
    404."""
    with server_process(settings, tmp_path / "home", tmp_path / "serve.log", RAG_API_KEY="docs-test-key") as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            redirect = client.get("/docs")
            assert redirect.status_code == 301 and redirect.headers["location"] == "/docs/"
            index = client.get("/docs/")
            assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
            assert "<h1" in index.text and "Offline RAG question answering" in index.text
            links = re.findall(r'href="([\w-]+\.html)"', index.text)
            assert "install.html" in links and "architecture.html" in links, links
            page = client.get("/docs/" + "install.html")
            assert page.status_code == 200 and "Install and run" in page.text and "make serve" in page.text
            stylesheet = re.search(r'<link href="(css/[^"]+\.css)"', page.text)
            assert stylesheet, page.text[:2000]
            css = client.get("/docs/" + stylesheet.group(1))
            assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
            assert client.get("/docs/%2e%2e/pyproject.toml").status_code == 404
            assert client.get("/docs/no-such-page.html").status_code == 404
            assert client.post("/v1/ask", json={"question": "Where?"}).status_code == 401


def test_docs_without_a_built_site_is_a_404_that_says_how_to_build_it(tmp_path: Path):
    from litestar import Litestar
    from litestar.testing import TestClient

    from api.docs_site import docs_handlers

    with TestClient(Litestar(route_handlers=docs_handlers(tmp_path / "site"))) as client:
        answer = client.get("/docs/")
        assert answer.status_code == 404 and "make docs" in answer.text


def test_the_drawn_house_has_no_upward_arrow_and_no_cycle(tmp_path: Path):
    """tools/draw_architecture.py (which draws docs/architecture.png) reads the graph it draws from the code:
    0 arrows back up and 0 cycles, between rooms and between floors."""
    drawn = subprocess.run([sys.executable, str(PROJECT_ROOT / "tools" / "draw_architecture.py"), "--out",
                            str(tmp_path / "house.png")], capture_output=True, text=True, timeout=300)
    assert drawn.returncode == 0, drawn.stdout + drawn.stderr
    assert "upward arrows: 0 between rooms, 0 between floors" in drawn.stdout, drawn.stdout
    assert "cycles: 0 between rooms, 0 between floors" in drawn.stdout, drawn.stdout
    assert (tmp_path / "house.png").stat().st_size > 10_000
