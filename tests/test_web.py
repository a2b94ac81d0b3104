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
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from format_fixtures import make_long_scan
from helpers import cli_env, header_proxy, jwt_env, server_process, sign, signing_key
from ingest.pipeline import ingest_paths
from ingest.parameters import IngestParameters
from rag.store.embedded import EmbeddedIndex
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
    summary = ingest_paths(paths, EmbeddedIndex(settings.replace(home=home).index_path()),
                           IngestParameters.from_settings(settings, embedder))
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
def locale() -> str:
    """The browser's language (navigator.languages); a test parametrized with ``locale`` gets another."""
    return "en-US"


@pytest.fixture
def page(browser, locale: str):
    """A fresh context (empty storage) and page in ``locale``; page errors fail the test."""
    context = browser.new_context(viewport={"width": 1200, "height": 900}, locale=locale)
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
    # The search's rank, never a percentage that reads as confidence; file names, never absolute paths.
    assert turn.locator("details.source .score").all_text_contents() == ["1st match", "2nd match", "3rd match",
                                                                       "4th match", "5th match"]
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
    httpx.delete(f"{server}/v1/conversations")  # the open server's one principal ("local") is every test's
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


def test_sources_of_a_refusal_show_a_rank_that_says_it_is_no_answer(page, server: str):
    """Issue 37 item 5: a refused question listed unrelated passages at "relevance 100%, 98%, 97%", read as
    confidence. Now each source shows its rank, and its tooltip says that none of them answers."""
    open_ready(page, server)
    turn = ask(page, OFF_TOPIC_QUESTION)
    assert turn.get_attribute("data-abstained") == "true"
    sources = turn.locator("details.source")
    assert "%" not in turn.locator(".sources").inner_text()
    ranks = sources.locator(".score")
    assert ranks.all_text_contents()[:3] == ["1st match", "2nd match", "3rd match"]
    expect(ranks.first).to_have_attribute("title", re.compile(r"^Ranked 1st of \d+ by the search.*"
                                                              r"None of these passages answers the question"))


def test_timing_line_is_the_same_for_every_answer_and_counts_in_plain_words(page, server: str):
    """Issue 37 item 10: "1 tokens"; "first token …" on some answers only (a short answer arrives whole, with
    the done event). Every finished answer says when its first words appeared; one token is "1 token"."""
    open_ready(page, server)
    short = ask(page, ROLLO_QUESTION)  # a verified short answer: it arrives whole
    expect(short.locator(".meta")).to_contain_text(re.compile(r"first words \d+\.\d\d s · total"))
    refused = ask(page, OFF_TOPIC_QUESTION)
    expect(refused.locator(".meta")).to_contain_text("first words")

    def one_token(route):  # the real server, asked for a one-token plain chat answer
        body = route.request.post_data_json
        route.continue_(post_data=json.dumps({**body, "max_tokens": 1, "use_context": False}))

    page.route("**/v1/chat/stream", one_token)
    one = ask(page, "Say hello.")
    page.unroute("**/v1/chat/stream")
    meta = one.locator(".meta").inner_text()
    assert re.search(r"(^| · )1 token( · |$)", meta) and "1 tokens" not in meta, meta
    assert "first words" in meta, meta


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
    httpx.delete(f"{server}/v1/conversations")
    open_ready(page, server)
    ask(page, ROLLO_QUESTION)
    page.click("#new-conversation")
    ask(page, OFF_TOPIC_QUESTION)
    expect(page.locator("#conversation-list li")).to_have_count(2)
    expect(page.locator("#conversation-list li[data-id='']")).to_have_count(0)  # both saved
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#clear-conversations")
    expect(page.locator(".turn")).to_have_count(0)
    expect(page.locator("#conversation-list .conversation-delete")).to_have_count(0)
    expect(page.locator("#clear-conversations")).to_be_hidden()
    assert httpx.get(f"{server}/v1/conversations").json()["conversations"] == []
    page.reload()
    expect(page.locator("#status")).to_have_attribute("data-state", "ready")
    expect(page.locator(".turn")).to_have_count(0)
    expect(page.locator("#conversation-list li")).to_have_count(0)


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
    from rag.store.keys import SqliteKeyStore
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
        assert all(not b.is_visible() for b in page.locator("#documents-body button", has_text="Delete").all())
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
        expect(page.locator("#index-delete-message")).to_contain_text("with 1 document and 1 chunk,")  # Intl plurals
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
        assert all(not b.is_visible() for b in page.locator("#documents-body button", has_text="Delete").all())
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
            elsewhere.append(route.request.url)  # images too (ReDoc's footer logo came from its CDN)
            route.abort("internetdisconnected")

    page.route("**/*", only_this_server)
    page.goto(server + "/schema/swagger")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Offline RAG")
    expect(page.locator(".opblock-summary-path").filter(has_text="/v1/ask").first).to_be_visible()
    screenshot(page, "api-docs-swagger.png")
    page.goto(server + "/schema/redoc")
    expect(page.locator("h1").first).to_contain_text("Offline RAG")
    expect(page.get_by_text("/v1/ask").first).to_be_attached()
    page.wait_for_timeout(1000)  # ReDoc drew its footer
    page.goto(server + "/schema")  # the root is ReDoc too
    expect(page.locator("h1").first).to_contain_text("Offline RAG")
    assert elsewhere == [], elsewhere


def test_api_docs_ask_for_the_key_and_are_linked_from_the_app(page, keyed_server: str):
    """Issue 37 item 2: with keys, /schema and /schema/swagger showed raw 401 JSON with no way to give a key,
    and nothing linked to them. The docs pages open, ask for the key (a wrong one is explained), then render
    with it; "Try it out" sends it; the app's API tab leads there with the key already given."""
    for path in ("/schema", "/schema/swagger", "/schema/redoc"):
        opened = httpx.get(keyed_server + path)
        assert opened.status_code == 200 and "docs.js" in opened.text and '"paths"' not in opened.text, path
    assert httpx.get(keyed_server + "/schema/openapi.json").status_code == 401  # the schema itself needs the key
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto(keyed_server + "/schema/swagger")
    expect(page.locator("#docs-message")).to_contain_text("needs an API key")
    page.fill("#docs-key-input", "not-the-key")
    page.press("#docs-key-input", "Enter")
    expect(page.locator("#docs-message")).to_contain_text("was not accepted")
    page.fill("#docs-key-input", API_KEY)
    page.click("#docs-key-submit")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Offline RAG")
    page.locator(".opblock-summary-path[data-path='/v1/me']").click()
    page.locator(".opblock.is-open .try-out__btn").click()
    with page.expect_response(keyed_server + "/v1/me") as tried:
        page.locator(".opblock.is-open .execute").click()
    assert tried.value.status == 200, "Try it out sent the key"
    expect(page.locator(".opblock.is-open .live-responses-table")).to_contain_text("api-key")
    screenshot(page, "api-docs-keyed.png")
    assert all(url.startswith(keyed_server) for url in asked), [u for u in asked if not u.startswith(keyed_server)]

    fresh = page.context.new_page()  # a new tab: signs in to the app, then follows its API tab
    fresh.goto(keyed_server + "/")
    fresh.fill("#key-input", API_KEY)
    fresh.click("#key-submit")
    expect(fresh.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)
    fresh.click("#tab-api")
    expect(fresh).to_have_url(keyed_server + "/schema/swagger")
    expect(fresh.locator(".swagger-ui .info .title")).to_contain_text("Offline RAG")
    expect(fresh.locator("#docs-key")).to_be_hidden()
    fresh.goto(keyed_server + "/schema/redoc")
    expect(fresh.locator("h1").first).to_contain_text("Offline RAG")
    fresh.close()


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
    added = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), "sources", "add", str(folder),
                            "--json"], cwd=PROJECT_ROOT, env=cli_env(settings), capture_output=True, text=True,
                           timeout=120)
    assert added.returncode == 0, added.stderr
    scan = make_long_scan(tmp_path / "survey.pdf", 150).read_bytes()
    default_wait = str(Settings.__dataclass_fields__["job_wait_s"].default)
    with server_process(settings, home, logs / "jobs.log", RAG_MAX_TOKENS=MAX_TOKENS,
                        RAG_JOB_WAIT_S=default_wait) as base:
        open_ready(page, base, "/documents")
        source = page.locator("#sources .folder")
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


# --------------------------------------------------------------------------- layout, in every page state
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# What holds a title: a source's, a document's, a conversation's, a followed folder's, an upload's, a heading.
TITLES = (".source-title, .doc-title .title, .doc-title .path, .conversation-open, .folder-path, .upload-name, "
          "h1, h2, h3, summary, dialog p")
# Geometry of the page as a person sees it, measured in the page: every problem as a sentence.
LAYOUT_PROBLEMS = """([titles, focus]) => {
  const problems = [];
  const shown = (el) => {
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none';
  };
  const describe = (el) => `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}.${[...el.classList].join('.')}` +
    ` "${el.textContent.trim().slice(0, 30)}"`;
  const lines = (el) => {  // how many lines its text takes
    const range = document.createRange();
    range.selectNodeContents(el);
    return new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top))).size;
  };
  const candidates = new Set(document.querySelectorAll(titles));
  // Any other box whose own text is a phrase (16+ characters) is held to the same rule.
  for (const el of document.querySelectorAll('main *, header *, dialog *')) {
    const own = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('').trim();
    if (own.length >= 16) candidates.add(el);
  }
  for (const el of candidates) {
    if (!shown(el) || !el.textContent.trim()) continue;
    const width = el.getBoundingClientRect().width;
    if (width < 120 && lines(el) > 1) problems.push(`${describe(el)} wraps in a box ${Math.round(width)} px wide`);
  }
  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth) problems.push(`the page scrolls sideways (${doc.scrollWidth} px wide)`);
  const ask = document.getElementById('ask-form');
  if (ask && shown(ask)) {
    const box = ask.getBoundingClientRect();
    // Nothing is drawn over the ask box...
    for (const [x, y] of [[0.5, 0.5], [0.05, 0.2], [0.95, 0.2], [0.05, 0.8], [0.95, 0.8]]) {
      const px = box.left + box.width * x, py = box.top + box.height * y;
      const hit = document.elementFromPoint(px, py);
      if (hit && !ask.contains(hit)) problems.push(`${describe(hit)} covers the ask box at (${Math.round(px)}, ${Math.round(py)})`);
    }
    // ...and what the person just opened or asked is not under it.
    for (const el of document.querySelectorAll(focus || ':not(*)')) {
      const r = el.getBoundingClientRect();
      if (shown(el) && r.bottom > box.top + 1 && r.top < box.bottom) problems.push(`${describe(el)} is under the ask box`);
    }
  }
  // An opened source: its header above its passage, both as wide as the source.
  for (const source of document.querySelectorAll('details.source[open]')) {
    const head = source.querySelector('summary').getBoundingClientRect();
    const passage = source.querySelector('.passage').getBoundingClientRect();
    const whole = source.getBoundingClientRect();
    if (passage.top < head.bottom - 1) problems.push(`an opened source's passage is beside its header, not under it`);
    for (const [what, r] of [['header', head], ['passage', passage]]) {
      if (r.width < whole.width * 0.8) problems.push(`an opened source's ${what} is ${Math.round(r.width)} of ${Math.round(whole.width)} px wide`);
    }
  }
  return problems;
}"""


def layout_problems(page, focus: str | None = None) -> list[str]:
    return page.evaluate(LAYOUT_PROBLEMS, [TITLES, focus])


@pytest.fixture(scope="module")
def people(settings: Settings, web_home: Path, tmp_path_factory: pytest.TempPathFactory):
    """A server with API keys (the example documents): two admins (ada, bob) and a reader (rex). Yields the
    base URL and a dict name -> key."""
    from rag.store.keys import SqliteKeyStore
    from rag.core.keys import new_key, parse_grants

    home = tmp_path_factory.mktemp("people-home")
    shutil.copytree(web_home / "indexes", home / "indexes")
    store = SqliteKeyStore(home)
    keys = {}
    for name, role, indexes in (("ada", "admin", ["*"]), ("bob", "admin", ["*"]), ("rex", "reader", ["default"])):
        record, keys[name] = new_key(name, parse_grants(role, indexes))
        store.add(record)
    store.close()
    with server_process(settings, home, home / "serve.log", RAG_MAX_TOKENS=MAX_TOKENS) as base:
        yield People(base, keys, home)


@dataclass
class People:
    base: str
    keys: dict[str, str]
    home: Path

    def headers(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[name]}"}


def sign_in(page, base: str, key: str, path: str = "/"):
    """Open the page and give the key when it asks, as a person does."""
    page.goto(base + path)
    page.fill("#key-input", key)
    page.click("#key-submit")
    expect(page.locator("#key-dialog")).to_be_hidden()
    expect(page.locator("#principal")).to_be_visible()
    expect(page.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)


@pytest.mark.parametrize("locale", ["en-US", "de-DE"])
@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_layout_of_every_page_state(page, people, size: str, locale: str):
    """Geometry, not just the DOM: for each page state (empty chat, an answer, the answer with a source opened, a
    refusal, the documents page, the keys page, a reader's documents page) no title wraps in a box narrower
    than 120 px, nothing covers the ask box or sits under it, and the page never scrolls sideways. In English
    and in German (longer words), where no English text of the app is left either. Each state's screenshot is
    saved (test-artifacts/layout-*.png, layout-de-*.png; tools/docs/screenshots.py copies English ones to docs/)."""
    base, keys = people.base, people.keys
    lang = locale[:2]
    page.set_viewport_size(DESKTOP if size == "desktop" else PHONE)
    found: dict[str, list[str]] = {}

    def state(name: str, focus: str | None = None):
        page.wait_for_timeout(400)  # the smooth scroll to an opened source ends
        found[name] = layout_problems(page, focus)
        screenshot(page, f"layout-{size}-{name}.png" if lang == "en" else f"layout-{lang}-{size}-{name}.png")
        if lang != "en":
            found[name] += [f"English left: {text}" for text in english_left(page, lang)]

    sign_in(page, base, keys["ada"])
    expect(page.locator("#chat-empty-index .empty-documents li")).to_have_count(3)
    state("chat-empty")
    turn = ask(page, ROLLO_QUESTION)
    state("chat-answer", ".turn:last-child .answer-text")
    turn.locator("a.cite").first.click()
    expect(turn.locator("details.source[open]")).to_have_count(1)
    state("chat-source-open", "details.source[open] summary")
    page.click("#new-conversation")
    refused = ask(page, OFF_TOPIC_QUESTION)
    assert refused.get_attribute("data-abstained") == "true"
    state("chat-refusal", ".turn:last-child .abstained")
    page.click("#tab-documents")
    expect(page.locator("#documents-body tr")).to_have_count(3)
    state("documents")
    page.click("#tab-keys")
    expect(page.locator("#keys-body tr")).to_have_count(3)
    state("keys")
    page.evaluate("key => sessionStorage.setItem('rag.apiKey', key)", keys["rex"])
    page.goto(base + "/documents")
    expect(page.locator("#principal")).to_have_text({"en": "rex · reader", "de": "rex · Leser"}[lang])
    expect(page.locator("#documents-body tr")).to_have_count(3)
    state("reader-documents")
    problems = {name: p for name, p in found.items() if p}
    assert not problems, json.dumps(problems, indent=1)


def audit_events(home: Path) -> list[dict]:
    return [json.loads(line) for path in sorted((home / "audit").rglob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def test_a_readers_documents_page_asks_only_what_a_reader_may(page, people):
    """Issue 37 item 6: a reader's documents page showed "Who may see new uploads" and called /v1/sources and
    /v1/jobs (403 each), filling the audit trail with "refused" records on every visit."""
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url.removeprefix(people.base)))
    sign_in(page, people.base, people.keys["rex"], "/documents")
    expect(page.locator("#principal")).to_have_text("rex · reader")
    expect(page.locator("#documents-body tr")).to_have_count(3)
    expect(page.locator(".upload-groups")).to_be_hidden()
    expect(page.locator("#dropzone")).to_be_hidden()
    page.click("#tab-chat")
    page.click("#tab-documents")  # a second visit
    expect(page.locator("#documents-body tr")).to_have_count(3)
    page.wait_for_timeout(1000)
    assert "/v1/documents" in asked, asked
    assert not [u for u in asked if u.startswith(("/v1/sources", "/v1/jobs"))], asked
    refused = [e for e in audit_events(people.home) if e.get("principal") == "rex" and e.get("event") == "refused"]
    assert refused == [], refused


def test_dismissing_a_result_is_not_shown_as_danger(page, server: str):
    """Issue 37 item 10: the × that dismisses a successful result turned red (the colour of deleting)."""
    open_ready(page, server, "/documents")
    upload_via_picker(page, "harbour-note.txt", b"The Ombrel harbour opens at nine every morning.\n")
    row = page.locator(".upload", has_text="harbour-note.txt")
    expect(row).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    dismiss = row.locator(".upload-dismiss")
    dismiss.hover()
    colour = dismiss.evaluate("el => getComputedStyle(el).color")
    danger = page.evaluate("""() => { const probe = document.createElement('span');
        probe.style.color = 'var(--danger)'; document.body.append(probe);
        const colour = getComputedStyle(probe).color; probe.remove(); return colour; }""")
    assert colour != danger, (colour, danger)
    doc = next(d for d in httpx.get(f"{server}/v1/documents").json()["documents"] if d["path"].endswith("harbour-note.txt"))
    assert httpx.delete(f"{server}/v1/documents/{doc['id']}").status_code == 200


# --------------------------------------------------------------------------- conversations follow the person
def storage_text(page) -> str:
    """Everything this origin keeps in the browser: local and session storage, as one string."""
    return page.evaluate("""() => JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])""")


def conversation_titles(page) -> list[str]:
    return page.locator("#conversation-list .conversation-open").all_text_contents()


def test_two_people_on_one_browser_never_see_each_others_conversations(browser, people):
    """Issue 37 item 11 and the sign-out control (item 7): on one browser profile, ada signs in, asks, signs out;
    bob signs in and sees none of it, asks, signs out; ada signs in again and sees her conversation only. After
    each sign-out the browser holds nothing of theirs. The same person in a second browser context sees her
    conversation (kept on the server), renames it there, and the first browser shows the new name."""
    for name in ("ada", "bob"):
        httpx.delete(f"{people.base}/v1/conversations", headers=people.headers(name))
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        sign_in(page, people.base, people.keys["ada"])
        expect(page.locator("#sign-out")).to_be_visible()
        ask(page, ROLLO_QUESTION)
        expect(page.locator("#conversation-list li[data-id]:not([data-id=''])")).to_have_count(1)
        assert conversation_titles(page) == [ROLLO_QUESTION]
        screenshot(page, "conversations-list.png")

        page.click("#sign-out")
        expect(page.locator("#key-dialog")).to_be_visible()
        assert "Rollo" not in storage_text(page) and people.keys["ada"] not in storage_text(page)
        assert page.locator(".turn").count() == 0 and conversation_titles(page) == []
        page.fill("#key-input", people.keys["bob"])
        page.click("#key-submit")
        expect(page.locator("#principal")).to_have_text("bob · admin")
        expect(page.locator("#status")).to_have_attribute("data-state", "ready")
        page.wait_for_timeout(800)  # the list has come (and is empty)
        assert conversation_titles(page) == [] and "Rollo" not in page.locator("main").inner_text()
        ask(page, OFF_TOPIC_QUESTION)
        expect(page.locator("#conversation-list li[data-id]:not([data-id=''])")).to_have_count(1)

        page.click("#sign-out")
        expect(page.locator("#key-dialog")).to_be_visible()
        assert "Jupiter" not in storage_text(page) and people.keys["bob"] not in storage_text(page)
        page.fill("#key-input", people.keys["ada"])
        page.click("#key-submit")
        expect(page.locator("#principal")).to_have_text("ada · admin")
        expect(page.locator("#conversation-list .conversation-open")).to_have_count(1)
        assert conversation_titles(page) == [ROLLO_QUESTION]
        assert "Jupiter" not in page.locator("main").inner_text()

        # The same person in another browser: her conversation is there, whole; renamed there...
        other = browser.new_context(viewport=PHONE)
        second = other.new_page()
        second.set_default_timeout(20_000)
        try:
            sign_in(second, people.base, people.keys["ada"])
            expect(second.locator("#conversation-list .conversation-open")).to_have_count(1)
            second.locator("#conversation-list .conversation-open").first.click()
            expect(second.locator(".turn")).to_have_count(1)
            expect(second.locator(".turn .question")).to_contain_text(ROLLO_QUESTION)
            expect(second.locator(".turn details.source")).to_have_count(5)
            second.locator(".conversation-rename").first.click()
            second.fill(".conversation-title-input", "Rollo and")
            # A list that comes while she types (as the reload after signing in may) leaves her typing alone.
            with second.expect_response(lambda r: r.url.endswith("/v1/conversations")):
                second.evaluate("window.dispatchEvent(new Event('rag:key'))")
            expect(second.locator(".conversation-title-input")).to_have_value("Rollo and")
            expect(second.locator(".conversation-title-input")).to_be_focused()
            second.fill(".conversation-title-input", "Rollo and his king")
            second.press(".conversation-title-input", "Enter")
            expect(second.locator("#conversation-list .conversation-open")).to_have_text(["Rollo and his king"])
            screenshot(second, "conversations-second-browser.png")
        finally:
            other.close()
        # ...and so in the first browser once it looks again.
        page.reload()
        expect(page.locator("#conversation-list .conversation-open")).to_have_text(["Rollo and his king"])
        listed = httpx.get(f"{people.base}/v1/conversations", headers=people.headers("bob")).json()["conversations"]
        assert [c["title"] for c in listed] == [OFF_TOPIC_QUESTION]
    finally:
        context.close()


# --------------------------------------------------------------------------- where documents come from, originals
def text_pdf(pages: list[str]) -> bytes:
    """A small PDF with one line of text per page (Helvetica), as a word processor's export has."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", None, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {len(objects)} 0 R >>")
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


TIDES_PDF = text_pdf(["Harbour almanac of Quorvath, first page.",
                      "The Quorvath tide tables are printed every Sunday by the harbour master."])


def test_documents_say_where_they_come_from_and_open_their_original(page, server: str):
    """Issue 37 item 9 and "open the original": two documents with one title are told apart by their file
    names; a Source column says uploaded or which folder; a document row and a citation open the original file
    (a PDF in a tab at the cited page, anything else as a download) through the same access check as the
    passage (a document outside the reader's groups is "not found" there too)."""
    open_ready(page, server, "/documents")
    same_title = "# Harbour notes\n\nThe {} pier of Quorvath opens at {}.\n"
    upload_via_picker(page, "harbour-east.md", same_title.format("east", "six").encode(), "text/markdown")
    expect(page.locator(".upload", has_text="harbour-east.md")).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    upload_via_picker(page, "harbour-west.md", same_title.format("west", "nine").encode(), "text/markdown")
    expect(page.locator(".upload", has_text="harbour-west.md")).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    upload_via_picker(page, "tides.pdf", TIDES_PDF, "application/pdf")
    expect(page.locator(".upload", has_text="tides.pdf")).to_have_attribute("data-state", "added", timeout=CHAT_TIMEOUT_MS)
    rows = page.locator("#documents-body tr", has_text="Harbour notes")
    expect(rows).to_have_count(2)
    assert sorted(t.split(" · ")[0] for t in rows.locator(".path").all_text_contents()) == ["harbour-east.md",
                                                                                        "harbour-west.md"]
    expect(rows.first.locator(".doc-source")).to_have_text("uploaded")
    expect(document_row(page, "normans.md").locator(".doc-source")).to_have_text("added on the server")  # rag ingest
    expect(page.locator("#documents-table th").nth(1)).to_have_text("Source")

    with page.expect_download() as download:
        document_row(page, "harbour-west.md").locator(".open-original").click()
    assert download.value.suggested_filename == "harbour-west.md"
    assert Path(download.value.path()).read_text() == same_title.format("west", "nine")
    with page.context.expect_page() as popup:
        document_row(page, "tides.pdf").locator(".open-original").click()
    popup.value.wait_for_url(re.compile(r"^blob:"))
    popup.value.close()
    screenshot(page, "documents-sources.png")

    page.click("#tab-chat")
    turn = ask(page, "When are the Quorvath tide tables printed?")
    source = turn.locator("details.source", has_text="tides.pdf").first
    source.locator("summary").click()
    opener = source.locator(".open-original")
    expect(opener).to_have_text("open the original at page 2")
    with page.context.expect_page() as popup:
        opener.click()
    popup.value.wait_for_url(re.compile(r"^blob:.*#page=2$"))
    popup.value.close()

    listed = {Path(d["path"]).name: d for d in httpx.get(f"{server}/v1/documents").json()["documents"]}
    pdf = httpx.get(f"{server}/v1/documents/{listed['tides.pdf']['id']}/original")
    assert pdf.status_code == 200 and pdf.content == TIDES_PDF and pdf.headers["content-type"] == "application/pdf"
    assert pdf.headers["content-disposition"].startswith("inline")
    md = httpx.get(f"{server}/v1/documents/{listed['harbour-east.md']['id']}/original")
    assert md.headers["content-disposition"].startswith("attachment") and "sandbox" in md.headers["content-security-policy"]
    assert httpx.get(f"{server}/v1/documents/nope/original").json()["error"]["type"] == "document_not_found"
    for doc in ("harbour-east.md", "harbour-west.md", "tides.pdf"):
        assert httpx.delete(f"{server}/v1/documents/{listed[doc]['id']}").status_code == 200
    assert httpx.get(f"{server}/v1/documents/{listed['tides.pdf']['id']}/original").status_code == 404


def test_the_original_is_behind_the_same_check_as_the_passage(settings: Settings, web_home: Path, tmp_path: Path):
    """A key that does not see a document's groups gets "not found" for its original, as for its passages."""
    from rag.store.keys import SqliteKeyStore
    from rag.core.keys import new_key, parse_grants

    home = tmp_path / "groups-home"
    shutil.copytree(web_home / "indexes", home / "indexes")
    store = SqliteKeyStore(home)
    editor, editor_key = new_key("finance-editor", parse_grants("editor", ["default"]), frozenset({"finance"}))
    outsider, outsider_key = new_key("outsider", parse_grants("reader", ["default"]), frozenset({"hr"}))
    store.add(editor)
    store.add(outsider)
    store.close()
    with server_process(settings, home, tmp_path / "groups.log", RAG_MAX_TOKENS=MAX_TOKENS) as base:
        uploaded = httpx.post(f"{base}/v1/documents", params={"groups": "finance"}, timeout=60,
                              headers={"Authorization": f"Bearer {editor_key}"},
                              files={"data": ("ledger.md", b"# Ledger\n\nThe Ombrel fund closes each quarter.\n")})
        doc = uploaded.json()["files"][0]["document_id"]
        url = f"{base}/v1/documents/{doc}/original"
        assert httpx.get(url, headers={"Authorization": f"Bearer {editor_key}"}).status_code == 200
        refused = httpx.get(url, headers={"Authorization": f"Bearer {outsider_key}"})
        assert refused.status_code == 404 and refused.json()["error"]["type"] == "document_not_found"
        assert httpx.get(url).status_code == 401


def test_a_followed_folders_document_says_so_before_it_is_deleted(page, settings: Settings, tmp_path: Path):
    """Issue 37 item 3: deleting a document of a followed folder was undone by the next sync without a word,
    and the list did not say which documents come from a folder. Now the row names the folder and the delete
    dialog says the next sync adds it again (and what to do instead); a successful sync's × is not red."""
    home, folder = tmp_path / "home", tmp_path / "share"
    folder.mkdir()
    (folder / "mill.md").write_text("# The old mill\n\nThe Kestrel Club meets in the old mill on Tuesdays.\n")
    added = subprocess.run([sys.executable, "-m", "app.cli", "--home", str(home), "sources", "add", str(folder),
                            "--json"], cwd=PROJECT_ROOT, env=cli_env(settings), capture_output=True, text=True,
                           timeout=120)
    assert added.returncode == 0, added.stderr
    with server_process(settings, home, tmp_path / "folder.log", RAG_MAX_TOKENS=MAX_TOKENS) as base:
        open_ready(page, base, "/documents")
        page.locator("#sources .folder").get_by_role("button", name=re.compile("Sync .* now")).click()
        sync = page.locator(".upload.job", has_text="Sync of share")
        expect(sync).to_have_attribute("data-state", "done", timeout=CHAT_TIMEOUT_MS)
        row = document_row(page, "mill.md")
        expect(row.locator(".doc-source")).to_have_text("folder share")
        assert row.get_attribute("data-folder") == str(folder)
        sync.locator(".upload-dismiss").hover()
        assert sync.locator(".upload-dismiss").evaluate("el => getComputedStyle(el).color") != page.evaluate(
            "getComputedStyle(document.querySelector('.danger-outline')).color")
        row.get_by_role("button", name=re.compile("Delete")).click()
        expect(page.locator("#confirm-message")).to_contain_text("comes from the followed folder")
        expect(page.locator("#confirm-message")).to_contain_text("the next sync adds it again")
        screenshot(page, "documents-folder-delete.png")
        page.click("#confirm-cancel")
        expect(row).to_have_count(1)


# --------------------------------------------------------------------------- the app's texts in the browser's language
STATIC = PROJECT_ROOT / "api" / "web" / "static"
CATALOGUES = STATIC / "i18n"
PLACEHOLDER = re.compile(r"\{(\w+)\}")
PLURAL_CATEGORIES = {"zero", "one", "two", "few", "many", "other"}
# Keys the scripts build from a value (t(`role.${role}`)): the values each may take.
DYNAMIC_KEYS = {"role.": ("reader", "editor", "admin"), "keys.state.": ("active", "expired", "revoked"),
                "job.sync.": ("added", "updated", "renamed", "removed", "failed")}
# What the server supplies (answers, quotes, titles, file names, names, its format labels): not the app's texts.
SERVER_TEXT = (".answer-text, .evidence-quote, .passage, .question p, .abstained p, .source-title, .source-path, "
               ".location, .preview, .empty-documents li, .example, .conversation-open, .doc-title, .folder-path, "
               ".upload-name, #principal, #formats-hint, .key-name, .index-name, #index-select")
# The page's texts as a person meets them: what it shows, its tooltips, placeholders, labels and the tab's title.
PAGE_TEXTS = """(serverText) => {
  // Cut out wherever it is quoted too (a conversation's title in its buttons' labels), in later calls as well.
  const supplied = window.__serverTexts = window.__serverTexts || new Set();
  const server = [...document.querySelectorAll(serverText)];
  const visibility = server.map((el) => el.style.visibility);
  for (const el of server) {
    if (el.textContent.trim()) supplied.add(el.textContent.trim());
    el.style.visibility = 'hidden';  // left out of innerText, the page otherwise as it was
  }
  const texts = [document.title, document.body.innerText];
  for (const dialog of document.querySelectorAll('dialog[open]')) texts.push(dialog.innerText);
  server.forEach((el, i) => { el.style.visibility = visibility[i]; });
  for (const el of document.querySelectorAll('[title], [placeholder], [aria-label], [data-label]')) {
    if (el.closest(serverText)) continue;
    for (const name of ['title', 'placeholder', 'aria-label', 'data-label']) {
      if (el.getAttribute(name)) texts.push(el.getAttribute(name));
    }
  }
  const longestFirst = [...supplied].sort((x, y) => y.length - x.length);
  return longestFirst.reduce((text, cut) => text.split(cut).join(' '), texts.join('\\n'));
}"""


def catalogue(lang: str) -> dict:
    return json.loads((CATALOGUES / f"{lang}.json").read_text(encoding="utf-8"))


def forms(value) -> list[str]:
    """A catalogue value's texts: the text, or each of its plural forms."""
    return list(value.values()) if isinstance(value, dict) else [value]


def english_left(page, lang: str) -> list[str]:
    """The English texts of the app (its en.json phrases of 6 letters or more, between placeholders) still in
    the page although ``lang``'s catalogue has none of them (a word both languages share, like "Documents" in
    French, does not count). Server-supplied text is left out."""
    translated = "\n".join(text for value in catalogue(lang).values() for text in forms(value))
    phrases = set()
    for value in catalogue("en").values():
        for text in forms(value):
            for part in PLACEHOLDER.split(text)[::2]:
                part = part.strip(" ·:;,.()[]…—–-+“”")
                if len(part) >= 6 and part not in translated:
                    phrases.add(part)
    shown = page.evaluate(PAGE_TEXTS, SERVER_TEXT)
    return sorted(phrase for phrase in phrases if phrase in shown)


def keys_used() -> tuple[set[str], set[str]]:
    """The catalogue keys the page's HTML and scripts use: (literal keys, prefixes of keys built from a value)."""
    from api.openapi import DOCS_PAGE

    html = (STATIC / "index.html").read_text(encoding="utf-8") + DOCS_PAGE
    used = set(re.findall(r'data-i18n(?:-placeholder|-title|-aria-label)?="([^"]+)"', html))
    prefixes = set()
    for script in STATIC.glob("*.js"):
        if script.name in ("i18n.js", "redoc.standalone.js") or script.name.startswith("swagger"):
            continue
        code = script.read_text(encoding="utf-8")
        for call in re.finditer(r"\bt(?:Nodes)?\(", code):
            # The first argument: up to the comma or parenthesis that closes it.
            depth, at, quote = 0, call.end(), None
            while True:
                char = code[at]
                if quote:
                    quote = None if char == quote and code[at - 1] != "\\" else quote
                elif char in "\"'`":
                    quote = char
                elif char in "([{":
                    depth += 1
                elif char in ")]}" and depth:
                    depth -= 1
                elif char in ",)" and not depth:
                    break
                at += 1
            argument = code[call.end():at]
            literals = re.findall(r'"([a-z]\w*(?:\.\w+)+)"', argument)  # not the values a condition compares
            templates = re.findall(r"`([^`$]+)\$\{", argument)
            assert literals or templates, f"{script.name}: t() of something not a key: {argument!r}"
            used.update(literals)
            prefixes.update(templates)
    return used, prefixes


def test_every_text_of_the_app_is_in_the_catalogues():
    """The page's HTML and scripts use only keys of en.json (and use all of them), and every catalogue has
    exactly en.json's keys, each with the same placeholders and valid plural forms (issue 38, item 4)."""
    english = catalogue("en")
    used, prefixes = keys_used()
    assert prefixes == set(DYNAMIC_KEYS), prefixes
    used |= {prefix + value for prefix, values in DYNAMIC_KEYS.items() for value in values}
    assert not used - set(english), f"keys missing in en.json: {sorted(used - set(english))}"
    assert not set(english) - used, f"keys of en.json no page text uses: {sorted(set(english) - used)}"
    languages = sorted(path.stem for path in CATALOGUES.glob("*.json"))
    assert languages == ["de", "en", "es", "fr"], languages
    assert re.search(r'LANGUAGES = \["en", "de", "fr", "es"\]', (STATIC / "i18n.js").read_text()), \
        "i18n.js offers every catalogue"
    for lang in languages:
        messages = catalogue(lang)
        assert list(messages) == list(english), f"{lang}.json has other keys than en.json (or in another order)"
        for key, value in messages.items():
            assert isinstance(value, dict) == isinstance(english[key], dict), f"{lang}: {key} (plural or not)"
            if isinstance(value, dict):
                assert "other" in value and set(value) <= PLURAL_CATEGORIES, f"{lang}: {key}: {sorted(value)}"
            assert all(text.strip() for text in forms(value)), f"{lang}: {key} is empty"
            names = {name for text in forms(value) for name in PLACEHOLDER.findall(text)}
            english_names = {name for text in forms(english[key]) for name in PLACEHOLDER.findall(text)}
            assert names == english_names, f"{lang}: {key} has placeholders {names}, en.json {english_names}"


def test_the_catalogues_are_served_and_packaged(server: str):
    for lang in ("en", "de", "fr", "es"):
        response = httpx.get(f"{server}/static/i18n/{lang}.json")
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
        assert response.json() == catalogue(lang)
    assert httpx.get(f"{server}/static/i18n/xx.json").status_code == 404
    assert httpx.get(f"{server}/static/i18n/%2e%2e%2fapp.js").status_code == 404
    assert '"static/i18n/*"' in (PROJECT_ROOT / "pyproject.toml").read_text(), "the catalogues are package data"


def test_a_german_browser_gets_the_app_in_german(browser, people):
    """A browser whose language is German (de-DE) sees the key dialog, the chat (an answer the documents do not
    have, its sources and timing), the documents page and the keys page in German, with <html lang="de">, and
    none of the app's English texts; the API's own error messages stay English (they are for programs)."""
    base, keys = people.base, people.keys
    context = browser.new_context(viewport=DESKTOP, locale="de-DE")
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_default_timeout(20_000)
        page.goto(base + "/")
        dialog = page.locator("#key-dialog")
        expect(dialog).to_be_visible()
        expect(page.locator("html")).to_have_attribute("lang", "de")
        expect(dialog.locator("#key-title")).to_have_text("API-Schlüssel erforderlich")
        expect(dialog.locator("#key-message")).to_have_text(
            "Dieser Server braucht einen API-Schlüssel. Geben Sie ihn ein, um fortzufahren.")
        expect(dialog.locator("#key-submit")).to_have_text("Schlüssel verwenden")
        assert english_left(page, "de") == []
        page.set_viewport_size(PHONE)
        assert [p for p in layout_problems(page) if "covers the ask box" not in p] == []  # a modal dialog does
        screenshot(page, "layout-de-phone-key-dialog.png")
        page.set_viewport_size(DESKTOP)
        page.fill("#key-input", keys["ada"])
        page.click("#key-submit")
        expect(dialog).to_be_hidden()
        expect(page.locator("#status")).to_have_attribute("data-state", "ready", timeout=60_000)
        expect(page.locator("#status-text")).to_contain_text(re.compile(r"bereit · 3 Dokumente · \d+ Abschnitte"))
        expect(page.locator("#principal")).to_have_text("ada · Admin")
        expect(page.locator("#chat-empty-index h3").first).to_have_text("In diesem Index (3 Dokumente)")
        expect(page.locator("#ask")).to_have_text("Fragen")
        expect(page.locator("#question")).to_have_attribute("placeholder", re.compile(r"^Frage stellen…"))
        assert page.title() == "Offline RAG"
        assert english_left(page, "de") == []

        turn = ask(page, OFF_TOPIC_QUESTION)
        assert turn.get_attribute("data-abstained") == "true"
        expect(turn.locator(".abstained strong")).to_have_text("Nicht in den Dokumenten")
        expect(turn.locator(".sources-heading")).to_contain_text("Nächstliegende Quellen")
        assert turn.locator(".score").all_text_contents()[:3] == ["1. Treffer", "2. Treffer", "3. Treffer"]
        expect(turn.locator(".score").first).to_have_attribute("title", re.compile(
            r"^Von der Suche als 1\. von \d+ eingestuft.*Keine dieser Textstellen"))
        # Numbers as German writes them (a decimal comma), plurals from Intl.PluralRules.
        expect(turn.locator(".meta")).to_contain_text(re.compile(r"erste Wörter \d+,\d\d s · gesamt \d+,\d\d s"))
        assert english_left(page, "de") == []

        page.click("#tab-documents")
        expect(page.locator("#documents-body tr")).to_have_count(3)
        assert page.title() == "Dokumente · Offline RAG"
        expect(page.locator("#documents-table th").first).to_have_text("Titel und Datei")
        delete = page.locator("#documents-body tr").first.get_by_role("button", name=re.compile("löschen"))
        expect(delete).to_have_text("Löschen")
        expect(page.locator("#documents-body .doc-source").first).to_have_text("auf dem Server hinzugefügt")
        assert english_left(page, "de") == []
        delete.click()
        expect(page.locator("#confirm-dialog")).to_be_visible()
        expect(page.locator("#confirm-title")).to_have_text("Dokument löschen?")
        expect(page.locator("#confirm-message")).to_have_text(
            re.compile(r"löschen\? Seine? \d+ Abschnitte? w.*entfernt\.$"))
        assert english_left(page, "de") == []
        assert [p for p in layout_problems(page) if "covers the ask box" not in p] == []
        screenshot(page, "layout-de-desktop-delete-dialog.png")
        page.click("#confirm-cancel")

        page.click("#tab-keys")
        expect(page.locator("#keys-body tr")).to_have_count(3)
        assert page.title() == "API-Schlüssel · Offline RAG"
        expect(page.locator("#keys-body .key-state").first).to_have_text("aktiv")
        expect(page.locator("#new-key-submit")).to_have_text("Schlüssel erstellen")
        assert english_left(page, "de") == []
        # The API's error messages are for programs: English, shown as the server wrote them.
        page.fill("#new-key-name", "ada")
        page.click("#new-key-submit")
        expect(page.locator("#keys-message")).to_be_visible()
        message = page.locator("#keys-message").inner_text()
        api_message = httpx.post(f"{base}/v1/keys", headers=people.headers("ada"),
                                 json={"name": "ada", "role": "reader", "indexes": []}).json()["error"]["message"]
        assert message == api_message, (message, api_message)
    finally:
        context.close()
    assert not errors, f"errors in the page: {errors}"


@pytest.mark.parametrize("locale", ["fr-FR", "es-ES"])
def test_french_and_spanish_browsers_get_the_chat_in_their_language(page, server: str, locale: str):
    lang = locale[:2]
    words = {"fr": ("Discussion", "Demander", "Absent des documents", "1er résultat", "2e résultat",
                    r"premiers mots \d+,\d\d s"),
             "es": ("Chat", "Preguntar", "No está en los documentos", "1.º resultado", "2.º resultado",
                    r"primeras palabras \d+,\d\d s")}[lang]
    open_ready(page, server)
    expect(page.locator("html")).to_have_attribute("lang", lang)
    expect(page.locator("#tab-chat")).to_have_text(words[0])
    expect(page.locator("#ask")).to_have_text(words[1])
    expect(page.locator("#chat-empty-index .empty-documents li")).to_have_count(3)
    assert english_left(page, lang) == []
    page.set_viewport_size(PHONE)
    assert layout_problems(page) == []
    screenshot(page, f"layout-{lang}-phone-chat-empty.png")
    turn = ask(page, OFF_TOPIC_QUESTION)
    assert turn.get_attribute("data-abstained") == "true"
    expect(turn.locator(".abstained strong")).to_have_text(words[2])
    assert turn.locator(".score").all_text_contents()[:2] == list(words[3:5])
    expect(turn.locator(".meta")).to_contain_text(re.compile(words[5]))
    assert english_left(page, lang) == []
    assert layout_problems(page, ".turn:last-child .abstained") == []
    screenshot(page, f"layout-{lang}-phone-chat-refusal.png")


@pytest.fixture(scope="module")
def german_server(settings: Settings, embedder, tmp_path_factory: pytest.TempPathFactory, logs: Path):
    """A server whose index holds one German document (tests/data/languages/de/urlaub.md)."""
    home = tmp_path_factory.mktemp("web-home-de")
    doc = Path(__file__).resolve().parent / "data" / "languages" / "de" / "urlaub.md"
    summary = ingest_paths([doc], EmbeddedIndex(settings.replace(home=home).index_path()),
                           IngestParameters.from_settings(settings, embedder))
    assert summary.count("added") == 1, summary.as_dict()
    with server_process(settings, home, logs / "serve-de.log", RAG_MAX_TOKENS=MAX_TOKENS) as base:
        yield base


@pytest.mark.parametrize("locale", ["de-DE"])
def test_a_german_question_in_a_german_browser_gets_a_german_answer(page, german_server: str):
    """Issue 38: a German question over a German document, in a German-language browser: the answer line is
    German (words of the document, as its quote spells them), the quote is verbatim, the app's texts are German;
    a German question the document does not answer is refused in German, by the server too."""
    open_ready(page, german_server)
    expect(page.locator("html")).to_have_attribute("lang", "de")
    turn = ask(page, "Bis wann kann Resturlaub übertragen werden?")
    assert turn.get_attribute("data-abstained") == "false"
    quote = turn.locator(".evidence-quote").first
    expect(quote).to_contain_text("“Resturlaub kann bis zum 31. März des Folgejahres übertragen werden.”")
    answer = turn.locator(".answer-text").inner_text().strip()
    assert answer and answer in "Resturlaub kann bis zum 31. März des Folgejahres übertragen werden.", answer
    expect(turn.locator(".sources-heading")).to_contain_text("Quellen")
    assert english_left(page, "de") == []
    screenshot(page, "layout-de-desktop-german-answer.png")
    turn = ask(page, "Wie viele Urlaubstage bekommen Praktikanten auf dem Mond?")
    assert turn.get_attribute("data-abstained") == "true"
    expect(turn.locator(".abstained strong")).to_have_text("Nicht in den Dokumenten")
    expect(turn.locator(".abstained p")).to_have_text("Die Dokumente enthalten keine Antwort auf diese Frage.")
    assert english_left(page, "de") == []
    page.set_viewport_size(PHONE)
    assert layout_problems(page) == []
    screenshot(page, "layout-de-phone-german-refusal.png")


@pytest.mark.parametrize("locale", ["de-AT"])
def test_the_language_is_the_browsers_first_the_app_has_or_the_one_asked_for(page, server: str):
    """'de-AT' is German; ?lang=xx overrides the browser's; a language with no catalogue is English."""
    open_ready(page, server)
    expect(page.locator("html")).to_have_attribute("lang", "de")
    expect(page.locator("#tab-documents")).to_have_text("Dokumente")
    for asked, lang, tab in (("es", "es", "Documentos"), ("fr", "fr", "Documents"), ("xx", "de", "Dokumente")):
        open_ready(page, server, f"/documents?lang={asked}")
        expect(page.locator("html")).to_have_attribute("lang", lang)
        expect(page.locator("#tab-documents")).to_have_text(tab)
    page.goto(server + "/schema/swagger")  # the API docs pages too (their texts; the API's own stay English)
    expect(page.locator("html")).to_have_attribute("lang", "de")
    expect(page.locator(".docs-bar nav a").first).to_have_text("Zurück zur App")
    expect(page.locator(".swagger-ui")).to_be_visible(timeout=20_000)
    languages = page.evaluate("""async () => {
        const { chooseLanguage } = await import('/static/i18n.js');
        return [chooseLanguage('', ['pt-BR', 'fr-CA', 'de']), chooseLanguage('', ['ja']),
                chooseLanguage('?lang=ES', ['de'])];
    }""")
    assert languages == ["fr", "en", "es"]
