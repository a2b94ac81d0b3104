"""The web app in a real browser (headless Chromium through Playwright) against a real ``rag serve``.

One server (the example documents, short generations) and one browser serve most tests; each test gets a
fresh browser context (its own localStorage). Two more servers start for what needs a fresh or a keyed one:
the "loading models…" state, and the API key prompt. Screenshots go to ``test-artifacts/``.

Chromium is Debian's (``apt-get install chromium``); Playwright's own browser download is not used. Without
it the tests skip, except under CI (``CI=true``), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from format_fixtures import make_long_scan
from helpers import cli_env, header_proxy, jwt_env, server_process, sign, signing_key
from ingest.pipeline import ingest_paths
from ingest.store.embedded import EmbeddedIndex
from rag.core.settings import PROJECT_ROOT, Settings

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # reported by the `browser` fixture
    expect = sync_playwright = None

CHROMIUM = Path(os.environ.get("RAG_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = PROJECT_ROOT / "test-artifacts"
EXAMPLE_DOCS = PROJECT_ROOT / "examples" / "docs"
MAX_TOKENS = "24"  # the servers' RAG_MAX_TOKENS: short generations keep the module fast
API_KEY = "web-test-key-7f3a"
ROLLO_QUESTION = "Who was Rollo, the leader of the Normans?"
FOLLOW_UP = "Which king did he swear fealty to?"
OFF_TOPIC_QUESTION = "What is the boiling point of liquid nitrogen on Jupiter's moons?"
LONG_QUESTION = "Write a long, detailed essay about the history of the Normans, covering every century."
ZORBLAT_TEXT = ("Zorblat festival notes\n\n"
                "The Zorblat festival is held every March in Quintessa. "
                "Visitors to the Zorblat festival eat purple dumplings and fly paper kites.\n")
XSS_TEXT = ('# <img src=x onerror="window.__xss=1"> Qwerty notes\n\n'
            "The Qwerty river flows north through Blorpland. <script>window.__xss=2</script> "
            "It ends in the Blorp lake.\n")
XSS_FILE_NAME = '<img src=x onerror="window.__xss=3">qwerty.md'
CHAT_TIMEOUT_MS = 60_000

# Records, in the page, every length the streaming answer had and every status text shown.
RECORDER = """
window.__answerLengths = [];
window.__statusTexts = [];
new MutationObserver(() => {
  const streaming = document.querySelectorAll('.turn[data-state="streaming"] .answer-text');
  if (streaming.length) window.__answerLengths.push(streaming[streaming.length - 1].textContent.length);
  const status = document.getElementById('status-text');
  const text = status && status.textContent;
  if (text && window.__statusTexts[window.__statusTexts.length - 1] !== text) window.__statusTexts.push(text);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium. Missing: a skip with the reason, or a failure under CI."""
    missing = None
    if sync_playwright is None:
        missing = "the playwright package is not installed (pip install -e '.[dev]')"
    elif not CHROMIUM.is_file():
        missing = f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    if missing:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"browser tests cannot run under CI: {missing}")
        pytest.skip(f"browser tests need a browser: {missing}")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def web_home(tmp_path_factory: pytest.TempPathFactory, settings: Settings, embedder) -> Path:
    """A scratch home whose default index holds the example documents."""
    home = tmp_path_factory.mktemp("web-home")
    docs = home / "docs"
    shutil.copytree(EXAMPLE_DOCS, docs)
    paths = sorted(docs.glob("*.md"))
    summary = ingest_paths(paths, EmbeddedIndex(settings.replace(home=home).index_path()), embedder, settings.chunk_tokens,
                           settings.chunk_overlap)
    assert summary.count("added") == len(paths), summary.as_dict()
    return home


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web-logs")


@pytest.fixture(scope="module")
def server(settings: Settings, web_home: Path, logs: Path):
    with server_process(settings, web_home, logs / "serve.log", RAG_MAX_TOKENS=MAX_TOKENS) as base:
        yield base


@pytest.fixture
def page(browser):
    """A fresh context (empty storage) and page; page errors fail the test."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    context.add_init_script(RECORDER)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(20_000)
    yield page
    context.close()
    assert not errors, f"errors in the page: {errors}"


def open_ready(page, base: str, path: str = "/"):
    page.goto(base + path)
    expect(page.locator("#status")).to_have_attribute("data-state", "ready")


def ask(page, question: str):
    """Type a question, send it with Enter, wait for the turn to finish; returns the turn's locator."""
    turns = page.locator(".turn")
    before = turns.count()
    page.fill("#question", question)
    page.press("#question", "Enter")
    turn = turns.nth(before)
    expect(turn).to_have_attribute("data-state", re.compile("done|error|stopped"), timeout=CHAT_TIMEOUT_MS)
    assert turn.get_attribute("data-state") == "done", turn.inner_text()
    return turn


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def upload_via_picker(page, name: str, content: bytes, mime: str = "text/plain"):
    page.set_input_files("#file-input", files=[{"name": name, "mimeType": mime, "buffer": content}])


def upload_via_drop(page, name: str, content: str, mime: str = "text/markdown"):
    """Drop a file on the drop zone, as a drag from the desktop does."""
    page.evaluate("""([name, content, mime]) => {
        const data = new DataTransfer();
        data.items.add(new File([content], name, {type: mime}));
        const zone = document.getElementById('dropzone');
        for (const type of ['dragenter', 'dragover', 'drop']) {
          zone.dispatchEvent(new DragEvent(type, {dataTransfer: data, bubbles: true, cancelable: true}));
        }
    }""", [name, content, mime])


def document_row(page, text: str):
    return page.locator("#documents-body tr", has_text=text)


# --------------------------------------------------------------------------- chat
def test_answer_streams_into_the_page_with_sources_and_citations(page, server: str):
    open_ready(page, server)
    expect(page.locator("#status-text")).to_contain_text(re.compile(r"3 documents · \d+ chunks"))
    turn = ask(page, ROLLO_QUESTION)

    lengths = page.evaluate("window.__answerLengths")
    answer = turn.locator(".answer-text").inner_text()
    # The short answer is verified against the passages before it streams, so it arrives whole.
    assert lengths == sorted(lengths) and lengths[-1] == len(answer), (lengths, answer)
    assert 0 < len(answer.split()) <= 16, answer
    # The answer first, then the quote that supports it, verbatim, with a link to its source.
    quote = turn.locator(".evidence-quote").first
    expect(quote).to_be_visible()
    quote_text = quote.inner_text()
    assert answer in quote_text and "Rollo" in quote_text, quote_text

    sources = turn.locator("details.source")
    assert sources.count() == 5
    expect(sources.first.locator(".source-title")).to_have_text("Normans")
    # The source view marks exactly the quoted span (the evidence offsets).
    number = quote.locator("a.cite").get_attribute("data-source")
    marked = turn.locator(f"details.source[data-number='{number}'] mark.quote")
    assert marked.count() == 1 and marked.inner_text() in quote_text, "the quoted span is marked in its source"
    # One relevance measure, in rank order; file names, never the server's absolute paths.
    shown = [int(re.fullmatch(r"relevance (\d+)%", text).group(1))
             for text in turn.locator("details.source .score").all_text_contents()]
    assert len(shown) == 5 and shown == sorted(shown, reverse=True), shown
    for path in turn.locator(".source-path").all_text_contents():
        assert "/" not in path and "\\" not in path and path.endswith(".md"), path

    first_token = int(turn.get_attribute("data-first-token-ms"))
    total = int(turn.get_attribute("data-total-ms"))
    server_ttft = int(turn.get_attribute("data-server-ttft-ms"))
    # The whole answer arrives as one piece just before the done event, so its paint may land after "total".
    assert 0 < first_token <= total + 50 and 0 < server_ttft <= first_token + 50, (first_token, total, server_ttft)
    expect(turn.locator(".meta")).to_contain_text("total")
    print(f"\nclick→first token painted {first_token} ms, server TTFT {server_ttft} ms, total {total} ms")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(
        {"page_first_token_ms": first_token, "server_ttft_ms": server_ttft, "page_total_ms": total}))

    # A citation link opens and shows its source's passage.
    citation = turn.locator("a.cite").first
    number = citation.get_attribute("data-source")
    source = turn.locator(f"details.source[data-number='{number}']")
    expect(source).not_to_have_attribute("open", "")
    citation.click()
    expect(source).to_have_attribute("open", "")
    expect(source.locator(".passage")).to_be_visible()
    assert "Rollo" in source.locator(".passage").inner_text() or number != "1"
    screenshot(page, "chat.png")


def test_follow_up_sends_history_and_conversations_survive_reload(page, server: str):
    open_ready(page, server)
    ask(page, ROLLO_QUESTION)
    with page.expect_request("**/v1/chat/stream") as request:
        second = ask(page, FOLLOW_UP)
    messages = request.value.post_data_json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"], messages
    assert messages[0]["content"] == ROLLO_QUESTION and messages[2]["content"] == FOLLOW_UP
    assert messages[1]["content"] == page.locator(".turn").first.locator(".answer-text").inner_text()
    assert second.get_attribute("data-request-messages") == "3"

    page.reload()
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".turn").nth(1).locator(".question")).to_contain_text(FOLLOW_UP)

    page.click("#new-conversation")
    expect(page.locator(".turn")).to_have_count(0)
    with page.expect_request("**/v1/chat/stream") as request:
        ask(page, ROLLO_QUESTION)
    assert len(request.value.post_data_json["messages"]) == 1, "a new conversation starts without history"
    earlier = page.locator("#conversation-list li", has_text=ROLLO_QUESTION[:20])
    expect(earlier).to_have_count(2)
    earlier.nth(1).locator(".conversation-open").click()
    expect(page.locator(".turn")).to_have_count(2)


def test_a_new_answer_in_a_long_conversation_stays_in_view(page, server: str):
    page.set_viewport_size({"width": 1000, "height": 520})
    open_ready(page, server)
    for _ in range(3):  # taller than the window
        turn = ask(page, ROLLO_QUESTION)
    answer = turn.locator(".answer-text").bounding_box()
    box = page.locator("#ask-form").bounding_box()
    assert answer["y"] + answer["height"] <= box["y"] + 1, (answer, box)  # above the sticky question box
    assert answer["y"] >= 0
    page.reload()  # a reload opens at the last answer
    expect(page.locator(".turn")).to_have_count(3)
    page.wait_for_function("window.scrollY > 0")


def test_off_topic_question_shows_not_in_the_documents_with_closest_sources(page, server: str):
    open_ready(page, server)
    turn = ask(page, OFF_TOPIC_QUESTION)
    assert turn.get_attribute("data-abstained") == "true"
    expect(turn.locator(".abstained")).to_contain_text("Not in the documents")
    expect(turn.locator(".sources-heading")).to_contain_text("Closest sources")
    assert turn.locator("details.source").count() >= 1


def test_stop_cancels_the_generation(page, server: str):
    open_ready(page, server)

    def long_answer(route):  # this one answer may run long, so that there is time to stop it: a plain chat
        # turn (answers from the documents are short phrases, verified before they stream)
        body = route.request.post_data_json
        route.continue_(post_data=json.dumps({**body, "max_tokens": 400, "use_context": False}))

    page.route("**/v1/chat/stream", long_answer)
    page.fill("#question", LONG_QUESTION)
    page.press("#question", "Enter")
    turn = page.locator(".turn").first
    expect(turn.locator(".answer-text")).not_to_have_text("", timeout=CHAT_TIMEOUT_MS)
    page.click("#stop")
    expect(turn).to_have_attribute("data-state", "stopped")
    expect(turn.locator(".meta")).to_contain_text("stopped")
    expect(page.locator("#ask")).to_be_visible()
    stopped_at = len(turn.locator(".answer-text").inner_text())
    deadline = time.monotonic() + 10
    while "rag_generation_queue_depth 0.0" not in httpx.get(f"{server}/metrics").text:
        assert time.monotonic() < deadline, "the server kept generating after the page stopped"
        time.sleep(0.1)
    assert len(turn.locator(".answer-text").inner_text()) == stopped_at
    # A stopped answer has no sources: a [n] in its text is plain text, not a link that opens nothing.
    assert turn.locator("details.source").count() == 0
    expect(turn.locator("a.cite")).to_have_count(0)
    page.unroute("**/v1/chat/stream")


def test_empty_chat_page_shows_the_documents_and_example_questions(page, server: str):
    open_ready(page, server)
    empty = page.locator("#chat-empty-index")
    expect(empty).to_contain_text("In this index (3 documents)")
    titles = [d["title"] for d in httpx.get(f"{server}/v1/documents").json()["documents"]]
    expect(empty.locator(".empty-documents li")).to_have_count(3)
    for title in titles:
        expect(empty).to_contain_text(title)
    examples = empty.locator("button.example")
    expect(examples).to_have_count(3)
    examples.first.click()
    assert page.input_value("#question") == examples.first.inner_text()


def test_clear_all_conversations(page, server: str):
    open_ready(page, server)
    ask(page, ROLLO_QUESTION)
    page.click("#new-conversation")
    ask(page, OFF_TOPIC_QUESTION)
    expect(page.locator("#conversation-list li")).to_have_count(2)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#clear-conversations")
    expect(page.locator(".turn")).to_have_count(0)
    expect(page.locator("#conversation-list .conversation-delete")).to_have_count(0)
    expect(page.locator("#clear-conversations")).to_be_hidden()
    kept = json.loads(page.evaluate("localStorage.getItem('rag.conversations.v1')"))["conversations"]
    assert all(not c["turns"] for c in kept), kept
    page.reload()
    expect(page.locator(".turn")).to_have_count(0)


# --------------------------------------------------------------------------- documents
def test_upload_hint_and_file_picker_come_from_the_format_registry(page, server: str):
    from ingest.formats.registry import FORMATS

    listed = httpx.get(f"{server}/v1/documents/formats").json()
    assert [f["kind"] for f in listed["formats"]] == [f.kind for f in FORMATS]
    open_ready(page, server, "/documents")
    suffixes = [suffix for f in FORMATS for suffix in f.suffixes]
    expect(page.locator("#file-input")).to_have_attribute("accept", ",".join(suffixes))
    hint = page.locator("#formats-hint")
    for label in ("PDF", "Word", "Excel", "PowerPoint", "e-mail", "EPUB", "images"):
        expect(hint).to_contain_text(label)


def test_upload_results_can_be_dismissed(page, server: str):
    open_ready(page, server, "/documents")
    expect(page.locator("#uploads-head")).to_be_hidden()
    upload_via_picker(page, "empty-one.txt", b"")
    upload_via_picker(page, "empty-two.txt", b"")
    expect(page.locator(".upload[data-state='failed']")).to_have_count(2, timeout=CHAT_TIMEOUT_MS)
    page.locator(".upload", has_text="empty-two.txt").locator(".upload-dismiss").click()
    expect(page.locator(".upload")).to_have_count(1)
    page.click("#uploads-clear")
    expect(page.locator(".upload")).to_have_count(0)
    expect(page.locator("#uploads-head")).to_be_hidden()


def test_upload_list_ask_and_delete_a_document(page, server: str):
    open_ready(page, server, "/documents")
    expect(page.locator("#documents-body tr")).to_have_count(3)
    upload_via_picker(page, "zorblat-notes.txt", ZORBLAT_TEXT.encode())
    upload = page.locator(".upload", has_text="zorblat-notes.txt")
    expect(upload).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    expect(upload.locator("progress")).to_have_attribute("value", "1")
    expect(upload).to_contain_text("added")
    expect(document_row(page, "zorblat-notes.txt")).to_have_count(1)
    expect(page.locator("#documents-count")).to_have_text("(4)")

    upload_via_picker(page, "zorblat-notes.txt", ZORBLAT_TEXT.encode())  # the same file again
    expect(page.locator(".upload").first).to_have_attribute("data-state", "unchanged", timeout=CHAT_TIMEOUT_MS)
    upload_via_picker(page, "empty.txt", b"")
    expect(page.locator(".upload").first).to_have_attribute("data-state", "failed", timeout=CHAT_TIMEOUT_MS)
    expect(page.locator(".upload").first.locator(".upload-status")).to_contain_text("failed: ")

    page.fill("#documents-filter", "zorb")
    expect(page.locator("#documents-body tr")).to_have_count(1)
    expect(page.locator("#documents-count")).to_have_text("(1 of 4)")
    page.fill("#documents-filter", "")
    screenshot(page, "documents.png")

    page.click("#tab-chat")
    expect(page).to_have_url(re.compile(r"/$"))
    turn = ask(page, "When is the Zorblat festival held?")
    assert "March" in turn.locator(".answer-text").inner_text()
    expect(turn.locator("details.source").first.locator(".source-path")).to_contain_text("zorblat-notes.txt")

    page.click("#tab-documents")
    row = document_row(page, "zorblat-notes.txt")
    row.get_by_role("button", name=re.compile("Delete")).click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    expect(page.locator("#confirm-message")).to_contain_text("zorblat-notes.txt")
    page.click("#confirm-cancel")
    expect(row).to_have_count(1)
    row.get_by_role("button", name=re.compile("Delete")).click()
    page.click("#confirm-ok")
    expect(row).to_have_count(0)
    expect(page.locator("#documents-body tr")).to_have_count(3)
    listed = httpx.get(f"{server}/v1/documents").json()["documents"]
    assert not any("zorblat" in d["path"] for d in listed), listed


def test_markup_in_documents_and_file_names_is_shown_as_text(page, server: str):
    open_ready(page, server, "/documents")
    upload_via_drop(page, XSS_FILE_NAME, XSS_TEXT)
    upload = page.locator(".upload").first
    expect(upload).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    expect(upload.locator(".upload-name")).to_have_text(XSS_FILE_NAME)
    row = document_row(page, "Qwerty notes")
    expect(row.locator(".title")).to_have_text('<img src=x onerror="window.__xss=1"> Qwerty notes')

    page.click("#tab-chat")
    turn = ask(page, "Where does the Qwerty river end?")
    source = turn.locator("details.source", has_text="Qwerty notes").first
    source.locator("summary").click()
    expect(source.locator(".passage")).to_contain_text("<script>window.__xss=2</script>")
    expect(source.locator(".source-title")).to_have_text('<img src=x onerror="window.__xss=1"> Qwerty notes')
    assert page.evaluate("typeof window.__xss") == "undefined", "markup from a document ran in the page"
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0

    page.click("#tab-documents")
    document_row(page, "Qwerty notes").get_by_role("button", name=re.compile("Delete")).click()
    page.click("#confirm-ok")
    expect(document_row(page, "Qwerty notes")).to_have_count(0)
    assert page.evaluate("typeof window.__xss") == "undefined"


def test_index_picker_appears_with_a_second_index_and_scopes_everything(page, server: str):
    open_ready(page, server, "/documents")
    expect(page.locator("#index-picker")).to_be_hidden()  # one index: nothing to pick
    created = httpx.post(f"{server}/v1/documents?index=second", timeout=60,
                         files={"data": ("zorblat-notes.txt", ZORBLAT_TEXT.encode(), "text/plain")})
    assert created.status_code == 200, created.text
    page.reload()
    picker = page.locator("#index-select")
    expect(picker).to_be_visible()
    expect(picker).to_have_value("default")
    expect(page.locator("#documents-body tr")).to_have_count(3)
    picker.select_option("second")
    expect(page.locator("#documents-body tr")).to_have_count(1)
    expect(page.locator("#status-text")).to_contain_text("1 document · 1 chunk")
    upload_via_picker(page, "qwerty.md", XSS_TEXT.encode(), "text/markdown")
    expect(page.locator(".upload").first).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    expect(page.locator("#documents-body tr")).to_have_count(2)
    assert len(httpx.get(f"{server}/v1/documents").json()["documents"]) == 3, "the default index is untouched"

    page.click("#tab-chat")
    with page.expect_request("**/v1/chat/stream") as request:
        turn = ask(page, "When is the Zorblat festival held?")
    assert request.value.post_data_json["index"] == "second"
    assert set(turn.locator(".source-path").all_text_contents()) <= {"zorblat-notes.txt", "qwerty.md"}
    page.click("#tab-documents")
    assert page.locator(".upload").count() >= 1
    page.locator("#index-select").select_option("default")  # upload results belong to the index they went to
    expect(page.locator(".upload")).to_have_count(0)
    expect(page.locator("#uploads-head")).to_be_hidden()
    page.locator("#index-select").select_option("second")
    page.reload()
    expect(page.locator("#index-select")).to_have_value("second")  # the choice is remembered


def test_an_empty_index_says_so_in_the_chat(page, server: str):
    created = httpx.post(f"{server}/v1/documents?index=emptied", timeout=60,
                         files={"data": ("note.txt", b"The harbour opens at nine every morning.\n", "text/plain")})
    assert created.status_code == 200, created.text
    doc = created.json()["files"][0]["document_id"]
    assert httpx.delete(f"{server}/v1/documents/{doc}?index=emptied").status_code == 200
    open_ready(page, server)
    page.locator("#index-select").select_option("emptied")
    expect(page.locator("#chat-empty-index")).to_contain_text("This index has no documents yet")
    page.fill("#question", "When does the harbour open?")
    page.press("#question", "Enter")
    turn = page.locator(".turn").first
    expect(turn).to_have_attribute("data-state", "done", timeout=CHAT_TIMEOUT_MS)
    expect(turn.locator(".abstained")).to_contain_text("No documents in this index yet")
    expect(turn.locator(".abstained")).to_contain_text("Documents page")
    expect(turn.locator(".abstained")).to_have_attribute("data-reason", "empty_index")
    page.locator("#index-select").select_option("default")


def test_narrow_screen(page, server: str):
    page.set_viewport_size({"width": 390, "height": 844})
    open_ready(page, server)
    turn = ask(page, ROLLO_QUESTION)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways on a phone ({width} px wide)"
    turn.locator("a.cite").first.click()
    screenshot(page, "chat-narrow.png")
    # The two-row top bar scrolls away on a phone, so it never covers the question; titles wrap, not cut.
    assert page.evaluate("getComputedStyle(document.querySelector('.topbar')).position") == "static"
    title = page.locator(".conversation-open").first
    assert title.evaluate("el => getComputedStyle(el).whiteSpace") == "normal"
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    question = turn.locator(".question p").bounding_box()
    header = page.locator(".topbar").bounding_box()
    assert question["y"] >= header["y"] + header["height"] - 1 or header["y"] + header["height"] <= 0


# --------------------------------------------------------------------------- loading and auth
def test_loading_models_is_shown_until_the_server_is_ready(page, settings: Settings, web_home: Path, logs: Path):
    with server_process(settings, web_home, logs / "loading.log", wait_ready=False,
                        RAG_MAX_TOKENS=MAX_TOKENS) as base:
        assert httpx.get(f"{base}/healthz").status_code == 503, "the models loaded before the page could look"
        page.goto(base + "/")
        expect(page.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)
        expect(page.locator("#status-text")).to_contain_text("ready · 3 documents")
        seen = page.evaluate("window.__statusTexts")
        assert "loading models…" in seen, seen
        ask(page, ROLLO_QUESTION)


@pytest.fixture(scope="module")
def keyed_server(settings: Settings, web_home: Path, logs: Path):
    with server_process(settings, web_home, logs / "keyed.log", RAG_MAX_TOKENS=MAX_TOKENS,
                        RAG_API_KEY=API_KEY) as base:
        yield base


def test_page_and_assets_load_without_the_key_but_the_api_needs_it(keyed_server: str):
    page = httpx.get(keyed_server + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for path in ("/documents", "/static/app.js", "/static/style.css"):
        assert httpx.get(keyed_server + path).status_code == 200, path
    assert httpx.head(keyed_server + "/static/app.js").status_code == 200
    for path in ("/v1/documents", "/v1/indexes", "/schema/openapi.json", "/metrics"):
        assert httpx.get(keyed_server + path).status_code == 401, path
    for path in ("/", "/documents", "/static/app.js"):  # only GET and HEAD are open; the rest is refused
        assert httpx.post(keyed_server + path).status_code in (401, 405), path
    # A path that leaves /static/ is not served from it, nor from the API.
    with httpx.Client(base_url=keyed_server) as client:
        escaped = client.send(client.build_request("GET", "/static/../v1/indexes"))
        assert escaped.status_code in (401, 404), escaped.text
        assert '"indexes"' not in escaped.text
    listed = httpx.get(keyed_server + "/v1/indexes", headers={"Authorization": f"Bearer {API_KEY}"})
    assert listed.status_code == 200 and listed.json()["indexes"][0]["name"] == "default", listed.text


def test_api_key_is_asked_for_and_a_wrong_one_is_explained(page, keyed_server: str):
    page.goto(keyed_server + "/")
    dialog = page.locator("#key-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#key-message")).to_contain_text("needs an API key")
    page.fill("#key-input", "not-the-key")
    page.press("#key-input", "Enter")
    expect(page.locator("#key-message")).to_contain_text("was not accepted")
    expect(dialog).to_be_visible()
    page.fill("#key-input", API_KEY)
    page.click("#key-submit")
    expect(dialog).to_be_hidden()
    expect(page.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)
    turn = ask(page, ROLLO_QUESTION)
    assert turn.locator("details.source").count() == 5
    assert page.evaluate("sessionStorage.getItem('rag.apiKey')") == API_KEY
    page.click("#tab-documents")
    expect(page.locator("#documents-body tr")).to_have_count(3)


def test_roles_in_the_page_readers_see_no_upload_or_delete_admins_manage_keys(page, settings: Settings,
                                                                               web_home: Path, tmp_path: Path):
    from ingest.store.keys import SqliteKeyStore
    from rag.core.keys import new_key, parse_grants

    home = tmp_path / "roles-home"
    shutil.copytree(web_home / "indexes", home / "indexes")
    store = SqliteKeyStore(home)
    reader, reader_key = new_key("reader-web", parse_grants("reader", ["default"]))
    admin, admin_key = new_key("admin-web", parse_grants("admin", ["*"]), groups=frozenset({"*"}))
    store.add(reader)
    store.add(admin)
    store.close()
    with server_process(settings, home, tmp_path / "roles.log", RAG_MAX_TOKENS=MAX_TOKENS) as base:
        page.goto(base + "/documents")
        page.fill("#key-input", reader_key)
        page.click("#key-submit")
        expect(page.locator("#principal")).to_have_text("reader-web · reader")
        expect(page.locator("#documents-body tr")).to_have_count(3)
        expect(page.locator("#dropzone")).to_be_hidden()
        expect(page.locator("#documents-body button", has_text="Delete")).to_have_count(3)
        assert all(not b.is_visible() for b in page.locator("#documents-body button").all())
        expect(page.locator("#tab-keys")).to_be_hidden()
        screenshot(page, "access-reader-documents.png")

        page.evaluate("key => sessionStorage.setItem('rag.apiKey', key)", admin_key)
        page.reload()
        expect(page.locator("#principal")).to_have_text("admin-web · admin")
        expect(page.locator("#dropzone")).to_be_visible()
        page.click("#tab-keys")
        expect(page.locator("#keys-body tr")).to_have_count(2)
        page.fill("#new-key-name", "made-in-page")
        page.fill("#new-key-indexes", "default")
        page.fill("#new-key-expires", "30d")
        page.click("#new-key-submit")
        expect(page.locator("#new-key-value")).to_have_text(re.compile(r"^rag_"))
        made = page.locator("#new-key-value").inner_text()
        row = page.locator('#keys-body tr[data-key="made-in-page"]')
        expect(row.locator(".key-state")).to_have_text("active")
        assert httpx.get(f"{base}/v1/documents", headers={"Authorization": f"Bearer {made}"}).status_code == 200
        row.locator("button", has_text="Revoke").click()
        expect(row.locator(".key-state")).to_have_text("revoked")
        assert httpx.get(f"{base}/v1/documents", headers={"Authorization": f"Bearer {made}"}).status_code == 401

        # Indexes on the admin page: deleting one needs its name typed; readers cannot delete over the API.
        admin_headers = {"Authorization": f"Bearer {admin_key}"}
        scratch = httpx.post(f"{base}/v1/documents", params={"index": "scratchpad"}, headers=admin_headers,
                             files=[("data", ("pad.txt", b"The scratchpad index holds one note.\n"))], timeout=60)
        assert scratch.status_code == 200, scratch.text
        refused = httpx.delete(f"{base}/v1/indexes/scratchpad", params={"confirm": "scratchpad"},
                               headers={"Authorization": f"Bearer {reader_key}"})
        assert refused.status_code == 403
        page.reload()
        page.click("#tab-keys")
        before = len(httpx.get(f"{base}/v1/indexes", headers=admin_headers).json()["indexes"])
        expect(page.locator("#indexes-body tr")).to_have_count(before)
        screenshot(page, "access-admin-keys.png")
        page.locator('#indexes-body tr[data-index="scratchpad"] button').click()
        expect(page.locator("#index-delete-message")).to_contain_text("1 documents")
        page.fill("#index-delete-name", "scratchpad")
        page.click("#index-delete-ok")
        expect(page.locator("#indexes-message")).to_have_text("Index “scratchpad” deleted.")
        expect(page.locator("#indexes-body tr")).to_have_count(before - 1)
        names = [i["name"] for i in httpx.get(f"{base}/v1/indexes", headers=admin_headers).json()["indexes"]]
        assert "scratchpad" not in names and "default" in names
        assert not (home / "uploads" / "scratchpad").exists()


# Records the id of every modal dialog the page opens (the key prompt is one).
DIALOG_RECORDER = """
window.__dialogsOpened = [];
const showModal = HTMLDialogElement.prototype.showModal;
HTMLDialogElement.prototype.showModal = function () {
  window.__dialogsOpened.push(this.id);
  return showModal.call(this);
};
"""


def test_behind_a_proxy_that_signs_requests_in_the_page_never_asks_for_a_key(page, settings: Settings,
                                                                             web_home: Path, tmp_path: Path):
    """A site's reverse proxy adds the signed-in user's bearer token (a real JWT) to every request it forwards:
    the page asks the server who it is, shows the name and role, hides upload for a reader and answers, without
    ever opening the key dialog; when the site's token expires the page says to reload (a key typed here would
    not help). The same page straight from the server (no proxy) asks for a key."""
    key = signing_key()
    home = tmp_path / "sso-home"
    shutil.copytree(web_home / "indexes", home / "indexes")
    env = jwt_env(tmp_path, key, {"staff": {"roles": ["default=reader"]}})
    token = sign(key, preferred_username="erin", groups=["staff"])
    page.add_init_script(DIALOG_RECORDER)
    with server_process(settings, home, tmp_path / "sso.log", RAG_MAX_TOKENS=MAX_TOKENS, **env) as base, \
            header_proxy(base, proxy_headers := {"Authorization": f"Bearer {token}"}) as (proxy, forwarded):
        page.goto(proxy + "/documents")
        expect(page.locator("#principal")).to_have_text("erin · reader")
        expect(page.locator("#principal")).to_have_attribute("title", "signed in by the site")
        expect(page.locator("#documents-body tr")).to_have_count(3)
        expect(page.locator("#dropzone")).to_be_hidden()
        assert all(not b.is_visible() for b in page.locator("#documents-body button").all())
        expect(page.locator("#tab-keys")).to_be_hidden()
        page.click("#tab-chat")
        expect(page.locator("#status")).to_have_attribute("data-state", "ready")
        turn = ask(page, ROLLO_QUESTION)
        assert turn.locator("details.source").count() == 5
        screenshot(page, "access-sso-proxy.png")
        expect(page.locator("#key-dialog")).to_be_hidden()
        assert page.evaluate("window.__dialogsOpened") == []
        assert page.evaluate("sessionStorage.getItem('rag.apiKey')") is None
        assert "/v1/me" in forwarded and "/v1/chat/stream" in forwarded, forwarded
        # The server, not the page, holds the line: through the proxy an upload is the reader's 403.
        refused = httpx.post(f"{proxy}/v1/documents", files=[("data", ("x.txt", b"A note.\n"))], timeout=30)
        assert refused.status_code == 403, refused.text

        now = int(time.time())
        expired = sign(key, preferred_username="erin", groups=["staff"], exp=now - 60, iat=now - 600)
        proxy_headers["Authorization"] = f"Bearer {expired}"
        turns = page.locator(".turn")
        before = turns.count()
        page.fill("#question", FOLLOW_UP)
        page.press("#question", "Enter")
        expect(turns.nth(before)).to_have_attribute("data-state", "error")
        expect(turns.nth(before)).to_contain_text("reload the page")
        expect(page.locator("#status-text")).to_have_text("signed out — reload the page to sign in again")
        assert page.evaluate("window.__dialogsOpened") == []

        page.goto(base + "/")  # no proxy, no token: the key prompt as before
        expect(page.locator("#key-dialog")).to_be_visible()
        expect(page.locator("#key-message")).to_contain_text("needs an API key")
        assert page.evaluate("window.__dialogsOpened") == ["key-dialog"]


def test_api_docs_render_with_the_network_blocked(page, server: str):
    """Swagger UI and ReDoc load their scripts, styles and fonts only from this server: every other host is
    unreachable, as at a site."""
    elsewhere: list[str] = []

    def only_this_server(route):
        if route.request.url.startswith(server):
            route.continue_()
        else:
            if route.request.resource_type != "image":  # ReDoc's footer logo hides itself when unreachable
                elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    page.route("**/*", only_this_server)
    page.goto(server + "/schema/swagger")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Offline RAG")
    expect(page.locator(".opblock-summary-path").filter(has_text="/v1/ask").first).to_be_visible()
    screenshot(page, "api-docs-swagger.png")
    page.goto(server + "/schema/redoc")
    expect(page.locator("h1").first).to_contain_text("Offline RAG")
    expect(page.get_by_text("/v1/ask").first).to_be_attached()
    page.goto(server + "/schema")  # the root is ReDoc too
    expect(page.locator("h1").first).to_contain_text("Offline RAG")
    assert elsewhere == [], elsewhere


def test_an_upload_can_be_given_document_groups(page, server: str):
    """The upload form's groups field: the document is stored with them (the API agrees) and the table says so."""
    open_ready(page, server, "/documents")
    page.fill("#upload-groups", " finance , hr ")
    upload_via_picker(page, "ledger-notes.txt", b"The ledger of the Ombrel fund is closed every quarter.\n")
    expect(page.locator(".upload", has_text="ledger-notes.txt")).to_have_attribute("data-state", "added",
                                                                                   timeout=CHAT_TIMEOUT_MS)
    row = document_row(page, "ledger-notes.txt")
    expect(row.locator(".doc-groups")).to_have_text("finance, hr")
    listed = httpx.get(f"{server}/v1/documents").json()["documents"]
    stored = next(d for d in listed if d["path"].endswith("ledger-notes.txt"))
    assert stored["access_groups"] == "finance,hr"
    expect(document_row(page, "normans.md").locator(".doc-groups")).to_have_text("everyone")
    assert httpx.delete(f"{server}/v1/documents/{stored['id']}").status_code == 200


# --------------------------------------------------------------------------- jobs and folders
def test_long_uploads_and_syncs_are_followed_as_jobs_also_after_a_reload(page, settings: Settings, logs: Path,
                                                                         tmp_path: Path):
    """With the default job_wait_s: "Sync now" on a followed folder and a long scanned upload each show a job
    with a progress bar that survives a reload; Cancel leaves no document."""
    home, folder = tmp_path / "home", tmp_path / "share"
    folder.mkdir()
    (folder / "mill.md").write_text("# The old mill\n\nThe Kestrel Club meets in the old mill on Tuesdays.\n")
    make_long_scan(folder / "census.pdf", 20)
    added = subprocess.run([sys.executable, "-m", "rag.cli", "--home", str(home), "sources", "add", str(folder),
                            "--json"], cwd=PROJECT_ROOT, env=cli_env(settings), capture_output=True, text=True,
                           timeout=120)
    assert added.returncode == 0, added.stderr
    scan = make_long_scan(tmp_path / "survey.pdf", 150).read_bytes()
    default_wait = str(Settings.__dataclass_fields__["job_wait_s"].default)
    with server_process(settings, home, logs / "jobs.log", RAG_MAX_TOKENS=MAX_TOKENS,
                        RAG_JOB_WAIT_S=default_wait) as base:
        open_ready(page, base, "/documents")
        source = page.locator("#sources .source")
        expect(source).to_have_count(1)
        expect(source).to_contain_text(str(folder))
        expect(source).to_contain_text("not synced yet")
        source.get_by_role("button", name=re.compile("Sync .* now")).click()
        sync = page.locator(".upload.job", has_text="Sync of share")
        expect(sync).to_have_attribute("data-state", "done", timeout=CHAT_TIMEOUT_MS)
        expect(sync).to_contain_text("synced: 2 added")
        expect(page.locator("#documents-body tr")).to_have_count(2)
        expect(source).to_contain_text("last sync")

        upload_via_picker(page, "survey.pdf", scan, mime="application/pdf")
        job = page.locator(".upload.job", has_text="survey.pdf")
        expect(job).to_have_attribute("data-state", "running", timeout=CHAT_TIMEOUT_MS)
        expect(job.locator(".upload-status")).to_contain_text(re.compile(r"reading page \d+ of 150"))
        page.reload()  # the job goes on, and the page picks it up again
        expect(page.locator("#status")).to_have_attribute("data-state", "ready")
        job = page.locator(".upload.job", has_text="survey.pdf")
        expect(job).to_have_attribute("data-state", "running")
        expect(job.locator(".upload-status")).to_contain_text("left")  # an ETA
        first = float(job.locator("progress").evaluate("p => p.value"))
        time.sleep(1.5)
        later = float(job.locator("progress").evaluate("p => p.value"))
        assert 0 < first <= later, (first, later)  # it goes on moving after the reload
        expect(job).to_have_attribute("data-state", "done", timeout=CHAT_TIMEOUT_MS)
        expect(job).to_contain_text("added")
        expect(document_row(page, "survey.pdf")).to_have_count(1)
        screenshot(page, "documents-jobs.png")

        upload_via_picker(page, "survey-copy.pdf", scan, mime="application/pdf")
        copy = page.locator(".upload.job", has_text="survey-copy.pdf")
        expect(copy.locator(".upload-status")).to_contain_text(re.compile(r"reading page \d+ of 150"),
                                                               timeout=CHAT_TIMEOUT_MS)
        copy.get_by_role("button", name="Cancel").click()
        expect(copy).to_have_attribute("data-state", "cancelled", timeout=CHAT_TIMEOUT_MS)
        expect(copy).to_contain_text("nothing of it was kept")
        expect(page.locator("#documents-body tr")).to_have_count(3)
        assert "survey-copy.pdf" not in {Path(d["path"]).name
                                         for d in httpx.get(f"{base}/v1/documents").json()["documents"]}
