// The chat view: conversations (kept on the server, per person: /v1/conversations), streaming answers,
// citations and sources. The browser keeps only the open conversation's id, for this tab, until sign-out.

import { ApiError, apiFetch, getJSON, openOriginal, sendJSON, streamEvents } from "./api.js";
import { formatSeconds, h, highlighted, markedRanges } from "./dom.js";
import { t, tNodes } from "./i18n.js";

const OLD_STORAGE = "rag.conversations.v1"; // where conversations were kept before: removed, never read
const CURRENT = "rag.conversation"; // sessionStorage: the open conversation's id
const HISTORY_TURNS = 8; // earlier turns sent with a follow-up question
const MAX_MESSAGE_CHARS = 8000;
const CITATION = /\[(\d{1,2}(?:\s*,\s*\d{1,2})*)\]/g;

let list = []; // [{id, title, created, updated, turns}] from the server, the last changed first
let active = { id: null, title: "", turns: [] }; // the open conversation (id null: not saved yet)
let els = {};
let running = null; // {controller, turn, conversation}
let currentIndex = () => null;
let onAnswered = () => {};
let saving = Promise.resolve();
let loaded = false;
// A conversation being renamed: the list is not redrawn under the person's typing (a list that came meanwhile,
// e.g. the reload after signing in, is drawn when the rename ends).
let renaming = null;

function listMessage(text) {
  els.conversationMessage.hidden = !text;
  els.conversationMessage.textContent = text || "";
}

// ---------------------------------------------------------------- the server's copy
const SOURCE_FIELDS = ["number", "document_id", "path", "title", "page", "section", "text", "snippet", "highlights",
  "found_by", "deleted"];

function pick(object, fields) {
  const picked = {};
  for (const field of fields) {
    if (object[field] !== undefined && object[field] !== null) picked[field] = object[field];
  }
  return picked;
}

function toServer(turn) {
  const timing = {};
  for (const [name, value] of Object.entries(turn.timing || {})) {
    if (typeof value === "number" && value >= 0) timing[name] = value;
  }
  return {
    question: turn.question,
    answer: turn.answer || "",
    state: turn.state === "streaming" ? "stopped" : turn.state,
    ...(turn.error ? { error: String(turn.error).slice(0, 2000) } : {}),
    abstained: Boolean(turn.abstained),
    ...(turn.abstainReason ? { abstain_reason: turn.abstainReason } : {}),
    ...(turn.index ? { index: turn.index } : {}),
    citations: turn.citations || [],
    sources: (turn.sources || []).map((s) => pick(s, SOURCE_FIELDS)),
    evidence: (turn.evidence || []).map((e) => pick(e, ["source", "quote", "start", "end"])),
    timing,
  };
}

function fromServer(turn) {
  return { ...turn, abstainReason: turn.abstain_reason || null, sources: turn.sources || [], timing: turn.timing || {} };
}

function summaryOf(conversation) {
  return list.find((c) => c.id === conversation.id);
}

// Saves the open conversation after each answer: the first save creates it on the server.
function save(conversation) {
  const body = { title: conversation.title, turns: conversation.turns.map(toServer) };
  saving = saving.then(async () => {
    try {
      if (conversation.id) {
        const saved = await (await sendJSON("PUT", `/v1/conversations/${encodeURIComponent(conversation.id)}`, body)).json();
        list = [saved, ...list.filter((c) => c.id !== saved.id)];
      } else {
        const saved = await (await sendJSON("POST", "/v1/conversations", body)).json();
        conversation.id = saved.id;
        conversation.title = saved.title;
        list = [saved, ...list];
        if (conversation === active) sessionStorage.setItem(CURRENT, saved.id);
      }
      listMessage("");
    } catch (err) {
      listMessage(t("chat.saveFailed", { message: err.message }));
    }
    renderConversationList();
  });
  return saving;
}

// The person's conversations, once the server knows who they are; opens the one this tab had open.
export async function loadConversations() {
  let body;
  try {
    body = await getJSON("/v1/conversations");
  } catch (err) {
    listMessage(err instanceof ApiError && err.status === 401 ? "" : t("chat.listFailed", { message: err.message }));
    return;
  }
  list = body.conversations || [];
  listMessage("");
  const wanted = sessionStorage.getItem(CURRENT);
  if (!loaded && !active.turns.length && wanted && list.some((c) => c.id === wanted)) {
    loaded = true;
    await selectConversation(wanted);
    return;
  }
  loaded = true;
  renderConversationList();
}

function newConversation() {
  if (running) return;
  active = { id: null, title: "", turns: [] };
  sessionStorage.removeItem(CURRENT);
  render();
  els.question.focus();
}

async function selectConversation(id) {
  if (running) return;
  try {
    const conversation = await getJSON(`/v1/conversations/${encodeURIComponent(id)}`);
    active = { id: conversation.id, title: conversation.title, turns: conversation.turns.map(fromServer) };
    sessionStorage.setItem(CURRENT, id);
    listMessage("");
  } catch (err) {
    listMessage(t("chat.openFailed", { message: err.message }));
    return;
  }
  render();
  if (els.turns.lastElementChild) reveal(els.turns.lastElementChild);
}

async function deleteConversation(id) {
  if (running && running.conversation.id === id) return;
  try {
    await apiFetch(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) {
      listMessage(t("chat.deleteFailed", { message: err.message }));
      return;
    }
  }
  list = list.filter((c) => c.id !== id);
  if (active.id === id) newConversation();
  else renderConversationList();
}

function startRename(item, conversation) {
  const input = h("input", { type: "text", class: "conversation-title-input", maxlength: "200",
    "aria-label": t("chat.renameLabel"), value: conversation.title || "" });
  item.replaceChildren(input);
  renaming = conversation.id;
  input.focus();
  input.select();
  let done = false;
  const finish = async (keep) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    if (keep && title && title !== conversation.title) {
      try {
        const saved = await (await sendJSON("PATCH", `/v1/conversations/${encodeURIComponent(conversation.id)}`, { title })).json();
        list = list.map((c) => (c.id === saved.id ? saved : c));
        if (active.id === saved.id) active.title = saved.title;
        listMessage("");
      } catch (err) {
        listMessage(t("chat.renameFailed", { message: err.message }));
      }
    }
    if (renaming === conversation.id) renaming = null;
    renderConversationList();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      finish(true);
    } else if (event.key === "Escape") {
      event.preventDefault();
      finish(false);
    }
  });
  input.addEventListener("blur", () => finish(true));
}

async function clearConversations() {
  if (running) return;
  if (!window.confirm(t("chat.deleteAllConfirm"))) return;
  try {
    await apiFetch("/v1/conversations", { method: "DELETE" });
  } catch (err) {
    listMessage(t("chat.deleteAllFailed", { message: err.message }));
    return;
  }
  list = [];
  newConversation();
}

// Signed out: nothing of the person stays in this page (the storage is cleared by the caller).
export function forgetConversations() {
  renaming = null;
  list = [];
  active = { id: null, title: "", turns: [] };
  sessionStorage.removeItem(CURRENT);
  if (els.turns) render();
}

// ---------------------------------------------------------------- rendering
function renderConversationList() {
  // The saved conversations, and the open one while its first answer is on its way (not saved yet).
  if (renaming) return;
  const shown = [...list];
  if (!active.id && active.turns.length) shown.unshift({ id: null, title: active.title, turns: active.turns.length });
  const items = shown.map((c) => {
    const isActive = c.id === active.id;
    const open = h("button", { type: "button", class: "conversation-open", "aria-current": isActive ? "true" : null,
      title: c.title || t("chat.untitled") }, c.title || t("chat.untitled"));
    const item = h("li", { class: isActive ? "active" : null, dataset: { id: c.id || "" } }, open);
    if (c.id) {
      open.addEventListener("click", () => selectConversation(c.id));
      const rename = h("button", { type: "button", class: "conversation-rename icon",
        "aria-label": t("chat.renameConversation", { title: c.title || t("chat.untitledShort") }), title: t("chat.rename") }, "✎");
      rename.addEventListener("click", () => startRename(item, c));
      const remove = h("button", { type: "button", class: "conversation-delete icon",
        "aria-label": t("chat.deleteConversation", { title: c.title || t("chat.untitledShort") }), title: t("action.delete") }, "×");
      remove.addEventListener("click", () => deleteConversation(c.id));
      item.append(rename, remove);
    }
    return item;
  });
  els.conversationList.replaceChildren(...items);
  els.clearConversations.hidden = list.length === 0;
}

function citationLinks(text, turnIndex, sources = []) {
  // The answer text as nodes, each [n] (or [n, m]) a link to that source of this turn; a number with no
  // source shown (a stopped or still streaming answer) stays plain text, never a link that opens nothing.
  const shown = new Set(sources.map((s) => s.number));
  const nodes = [];
  let at = 0;
  for (const match of text.matchAll(CITATION)) {
    if (match.index > at) nodes.push(document.createTextNode(text.slice(at, match.index)));
    const numbers = match[1].split(",").map((n) => Number(n.trim()));
    nodes.push("[");
    numbers.forEach((n, i) => {
      if (i) nodes.push(", ");
      nodes.push(shown.has(n) ? citeLink(turnIndex, n) : String(n));
    });
    nodes.push("]");
    at = match.index + match[0].length;
  }
  if (at < text.length) nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

function citeLink(turnIndex, n, label = String(n)) {
  const link = h("a", { href: `#src-${turnIndex}-${n}`, class: "cite", dataset: { source: n } }, label);
  link.addEventListener("click", (event) => {
    event.preventDefault();
    showSource(turnIndex, n);
  });
  return link;
}

function showSource(turnIndex, n) {
  const source = document.getElementById(`src-${turnIndex}-${n}`);
  if (!source) return;
  source.open = true;
  source.scrollIntoView({ block: "nearest", behavior: "smooth" });
  source.classList.remove("flash");
  void source.offsetWidth; // restart the animation
  source.classList.add("flash");
  source.querySelector("summary").focus({ preventScroll: true });
}

function sourceLocation(source) {
  const parts = [];
  if (source.page !== null && source.page !== undefined) parts.push(t("chat.page", { page: source.page }));
  if (source.section && source.section !== source.title) parts.push(`§ ${source.section}`);
  return parts.join(" · ");
}

// Browsers are shown the file name, never the server's absolute path.
function fileName(path) {
  return String(path || "").split(/[\\/]/).pop();
}

function preview(text, words = 10) {
  const head = String(text || "").split(/\s+/).filter(Boolean);
  return head.slice(0, words).join(" ") + (head.length > words ? "…" : "");
}

function renderSources(turn, turnIndex) {
  const sources = turn.sources || [];
  if (!sources.length) return null;
  const cited = new Set(turn.citations || []);
  // Sources with the same title and location are told apart by their first words.
  const place = (s) => `${s.title}\u0000${sourceLocation(s)}`;
  const count = new Map();
  for (const s of sources) count.set(place(s), (count.get(place(s)) || 0) + 1);
  const items = sources.map((source, position) => {
    const text = source.text || source.snippet || "";
    const location = sourceLocation(source);
    // The search's rank, not a percentage: a percentage reads as confidence, and the closest passages to a
    // question the documents cannot answer still score near the top of any scale.
    const rank = h("span", { class: "score", title: rankTitle(position + 1, sources.length, source, turn.abstained) },
      t("chat.rank", { ordinal: position + 1 }));
    const summary = h("summary", {},
      h("span", { class: "badge" }, `[${source.number}]`), " ",
      h("span", { class: "source-title" }, source.title || fileName(source.path) || t("chat.untitledSource")),
      location ? h("span", { class: "location" }, location) : null,
      count.get(place(source)) > 1 ? h("span", { class: "preview" }, `“${preview(text)}”`) : null,
      cited.has(source.number) ? h("span", { class: "tag" }, t("chat.cited")) : null,
      source.deleted ? h("span", { class: "tag gone" }, t("chat.deleted")) : null,
      (source.highlights || []).length ? h("span", { class: "tag quiet", title: t("chat.inContext.title") }, t("chat.inContext")) : null,
      rank);
    // The evidence quoted from this source is marked exactly (its offsets); else the sentences the model saw.
    const quoted = (turn.evidence || []).filter((e) => e.source === source.number && source.text)
      .map((e) => [e.start, e.end]);
    const passage = source.deleted
      ? h("p", { class: "passage gone" }, t("chat.sourceGone"))
      : h("blockquote", { class: "passage" },
        ...(quoted.length ? markedRanges(text, quoted) : highlighted(text, source.highlights)));
    const isSnippet = !source.text && text.length && source.snippet === text;
    let open = null;
    if (!source.deleted && source.document_id) {
      const atPage = source.page !== null && source.page !== undefined && /\.pdf$/i.test(fileName(source.path));
      open = h("button", { type: "button", class: "link-button open-original" },
        atPage ? t("chat.openOriginalAtPage", { page: source.page }) : t("chat.openOriginal"));
      open.addEventListener("click", () => openOriginal(source.document_id, fileName(source.path), source.page,
        turn.index || currentIndex(), (text) => { open.textContent = text; open.classList.add("error"); }));
    }
    return h("details", { class: "source", id: `src-${turnIndex}-${source.number}`, dataset: { number: source.number } },
      summary, passage,
      h("p", { class: "source-foot muted small" },
        h("span", { class: "source-path" }, fileName(source.path), isSnippet ? t("chat.snippet") : ""),
        open ? " · " : null, open));
  });
  const heading = t(turn.abstained ? "chat.closestSources" : "chat.sources");
  return h("div", { class: "sources" },
    h("h3", { class: "sources-heading" }, `${heading} `, h("span", { class: "muted" }, `(${sources.length})`)),
    ...items);
}

function rankTitle(rank, count, source, abstained) {
  return t("chat.rankTitle", { rank: t("chat.rankOf", { ordinal: rank }), count,
    foundBy: source.found_by ? t("chat.foundBy", { method: source.found_by }) : "",
    meaning: t(abstained ? "chat.rankMeaningRefused" : "chat.rankMeaning") });
}

function renderMeta(turn) {
  const timing = turn.timing || {};
  const parts = [];
  if (turn.state === "streaming") parts.push(t("chat.answering"));
  if (turn.state === "stopped") parts.push(t("chat.stopped"));
  if (timing.firstTokenMs !== undefined && timing.firstTokenMs >= 0) {
    parts.push(t("chat.firstWords", { time: formatSeconds(timing.firstTokenMs) }));
  }
  if (timing.totalMs !== undefined) parts.push(t("chat.total", { time: formatSeconds(timing.totalMs) }));
  if (timing.outputTokens) parts.push(t("count.tokens", { count: timing.outputTokens }));
  const title = timing.serverTtftMs !== undefined
    ? t("chat.serverTitle", { first: formatSeconds(timing.serverTtftMs), total: formatSeconds(timing.serverTotalMs) }) : null;
  if (timing.serverTtftMs) parts.push(t("chat.server", { time: formatSeconds(timing.serverTtftMs) }));
  return h("p", { class: "meta", title }, parts.join(" · "));
}

function renderAnswerBody(turn, turnIndex) {
  if (turn.state === "error") {
    return h("p", { class: "error", role: "alert" }, turn.error || t("chat.error"));
  }
  if (turn.abstained) {
    return h("div", { class: "abstained", dataset: { reason: turn.abstainReason || "" } },
      h("strong", {}, t(turn.abstainReason === "empty_index" ? "chat.emptyIndexAnswer" : "chat.notInDocuments")),
      h("p", {}, turn.answer || t("chat.noAnswer")));
  }
  const text = turn.answer || "";
  // A command, option or configuration line is shown as code, verbatim.
  const answer = turn.answerKind === "command"
    ? h("div", { class: "answer-text" }, h("code", { class: "answer-command" }, text))
    : h("div", { class: "answer-text" }, ...citationLinks(text, turnIndex, turn.sources || []));
  if (turn.state === "streaming") answer.append(h("span", { class: "cursor", "aria-hidden": "true" }));
  const explicit = [...text.matchAll(CITATION)].length > 0;
  const known = (n) => (turn.sources || []).some((s) => s.number === n);
  // The answer first, then the quotes that support it, each verbatim from its source with a link to it.
  const evidence = explicit ? [] : (turn.evidence || []).filter((e) => known(e.source));
  if (evidence.length) {
    return [answer, h("div", { class: "evidence" }, ...evidence.map((e) =>
      h("blockquote", { class: "evidence-quote" }, `“${e.quote}” `, "[", citeLink(turnIndex, e.source), "]")))];
  }
  const citations = (turn.citations || []).filter(known);
  const citedLine = !explicit && citations.length
    ? h("p", { class: "cited-line" }, t("chat.supportedBy"), citations.flatMap((n, i) => [i ? " " : "", "[", citeLink(turnIndex, n), "]"]))
    : null;
  return [answer, citedLine];
}

function renderTurn(turn, turnIndex) {
  const li = h("li", { class: "turn", dataset: { turn: turnIndex, state: turn.state } });
  fillTurn(li, turn, turnIndex);
  return li;
}

function fillTurn(li, turn, turnIndex) {
  li.dataset.state = turn.state;
  li.dataset.abstained = turn.abstained ? "true" : "false";
  const timing = turn.timing || {};
  if (timing.firstTokenMs !== undefined) li.dataset.firstTokenMs = String(Math.round(timing.firstTokenMs));
  if (timing.totalMs !== undefined) li.dataset.totalMs = String(Math.round(timing.totalMs));
  if (timing.serverTtftMs !== undefined) li.dataset.serverTtftMs = String(Math.round(timing.serverTtftMs));
  li.replaceChildren(
    h("div", { class: "question" }, h("span", { class: "who" }, t("chat.you")), h("p", {}, turn.question)),
    h("div", { class: "answer" }, h("span", { class: "who" }, t("chat.answer")), renderAnswerBody(turn, turnIndex),
      renderMeta(turn), renderSources(turn, turnIndex)));
}

// Only the answer part of the streaming turn changes per token (cheap for short answers).
function updateStreamingAnswer(li, turn, turnIndex) {
  const body = li.querySelector(".answer-text");
  if (!body) return fillTurn(li, turn, turnIndex);
  body.replaceChildren(...citationLinks(turn.answer, turnIndex, turn.sources || []),
    h("span", { class: "cursor", "aria-hidden": "true" }));
  return undefined;
}

// The page follows a streaming answer while the reader is at the bottom; scrolling up stops that.
function atBottom() {
  return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
}

function reveal(li) {
  // The whole turn when it fits; else its answer (the answer comes first, its quotes and sources after it).
  const answer = li.querySelector(".answer-text");
  if (answer && li.getBoundingClientRect().height > window.innerHeight * 0.6) answer.scrollIntoView({ block: "start" });
  else li.scrollIntoView({ block: "end" });
}

export function render() {
  renderConversationList();
  els.turns.replaceChildren(...active.turns.map(renderTurn));
  els.empty.hidden = active.turns.length > 0;
  setRunning(Boolean(running));
}

function setRunning(on) {
  els.ask.hidden = on;
  els.stop.hidden = !on;
  els.ask.disabled = on;
  els.newConversation.disabled = on;
}

// ---------------------------------------------------------------- asking
function historyMessages(conversation) {
  const messages = [];
  const done = conversation.turns.filter((t) => (t.state === "done" || t.state === "stopped") && t.answer);
  for (const turn of done.slice(-HISTORY_TURNS)) {
    messages.push({ role: "user", content: turn.question.slice(0, MAX_MESSAGE_CHARS) });
    messages.push({ role: "assistant", content: turn.answer.slice(0, MAX_MESSAGE_CHARS) });
  }
  return messages;
}

async function ask(question, started) {
  const conversation = active;
  const messages = [...historyMessages(conversation), { role: "user", content: question }];
  const index = currentIndex();
  const turn = { question, answer: "", state: "streaming", sources: [], citations: [], timing: {}, index };
  conversation.turns.push(turn);
  if (!conversation.title) conversation.title = question.replace(/\s+/g, " ").slice(0, 80);
  const turnIndex = conversation.turns.length - 1;
  const controller = new AbortController();
  running = { controller, turn, conversation };
  render();
  const li = els.turns.lastElementChild;
  li.dataset.requestMessages = String(messages.length); // what this turn sent (read by tests)
  reveal(li);
  const body = { messages };
  if (index) body.index = index;
  try {
    let finished = false;
    for await (const event of streamEvents("/v1/chat/stream", body, controller.signal)) {
      if (event.error) throw new ApiError(0, event.error.type, event.error.message);
      if (event.done) {
        finished = true;
        turn.sources = event.sources || [];
        turn.citations = event.citations || [];
        turn.evidence = event.evidence || [];
        turn.abstained = Boolean(event.abstained);
        turn.abstainReason = event.abstain_reason || null;
        turn.answerKind = event.answer_kind || "phrase";
        if (typeof event.answer === "string") turn.answer = event.answer;
        else if (event.abstained && event.content) turn.answer = event.content;
        const m = event.metrics || {};
        turn.timing.totalMs = performance.now() - started;
        turn.timing.serverTtftMs = (m.ttft || 0) * 1000;
        turn.timing.serverTotalMs = (m.total_latency || 0) * 1000;
        turn.timing.outputTokens = m.output_tokens || 0;
        // A short answer is verified before it is sent, so it arrives whole with this event: its first words
        // are painted now (every answer's timing line says when its first words appeared).
        if (turn.timing.firstTokenMs === undefined || turn.timing.firstTokenMs < 0) {
          turn.timing.firstTokenMs = performance.now() - started;
        }
        turn.state = "done";
        break;
      }
      if (typeof event.token === "string") {
        const follow = atBottom();
        turn.answer += event.token;
        updateStreamingAnswer(li, turn, turnIndex);
        if (follow) reveal(li);
        if (turn.timing.firstTokenMs === undefined) {
          turn.timing.firstTokenMs = -1; // measured once the token is painted
          requestAnimationFrame(() => {
            if (turn.timing.firstTokenMs !== -1) return; // the answer was complete first (measured at its end)
            turn.timing.firstTokenMs = performance.now() - started;
            li.dataset.firstTokenMs = String(Math.round(turn.timing.firstTokenMs));
          });
        }
      }
    }
    if (!finished) throw new ApiError(0, "stream_ended", t("chat.streamEnded"));
  } catch (err) {
    if (err.name === "AbortError") {
      turn.state = "stopped";
      turn.timing.totalMs = performance.now() - started;
    } else {
      turn.state = "error";
      turn.error = err.type === "index_not_found"
        ? t("chat.noDocumentsError") : (err.message || String(err));
    }
  } finally {
    if (turn.timing.firstTokenMs === -1) delete turn.timing.firstTokenMs;
    running = null;
    save(conversation);
    const follow = atBottom();
    if (conversation === active) {
      fillTurn(li, turn, turnIndex);
      if (follow || turn.state === "error") reveal(li);
    }
    setRunning(false);
    if (!document.activeElement || document.activeElement === document.body) els.question.focus();
    onAnswered(turn);
  }
}

function stop() {
  if (running) running.controller.abort();
}

export function initChat(options) {
  currentIndex = options.currentIndex;
  onAnswered = options.onAnswered || onAnswered;
  els = {
    turns: document.getElementById("turns"),
    empty: document.getElementById("chat-empty"),
    form: document.getElementById("ask-form"),
    question: document.getElementById("question"),
    ask: document.getElementById("ask"),
    stop: document.getElementById("stop"),
    newConversation: document.getElementById("new-conversation"),
    conversationList: document.getElementById("conversation-list"),
    conversationMessage: document.getElementById("conversation-message"),
    clearConversations: document.getElementById("clear-conversations"),
    emptyIndex: document.getElementById("chat-empty-index"),
  };
  els.clearConversations.addEventListener("click", clearConversations);
  localStorage.removeItem(OLD_STORAGE); // conversations once kept in the browser: a shared browser showed them
  els.form.addEventListener("submit", (event) => {
    const started = performance.now(); // timings are from the click (or Enter) to what the page shows
    event.preventDefault();
    const question = els.question.value.trim();
    if (!question || running) return;
    els.question.value = "";
    ask(question, started);
  });
  els.question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      els.form.requestSubmit();
    }
  });
  els.stop.addEventListener("click", stop);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && running && !document.querySelector("dialog[open]")) stop();
  });
  els.newConversation.addEventListener("click", newConversation);
  render();
  if (els.turns.lastElementChild) reveal(els.turns.lastElementChild); // a reload opens at the last answer
}

// ---------------------------------------------------------------- the empty chat page
// What is in the index, and a few questions to start from (a click puts one in the question box).
export async function refreshChatEmpty() {
  if (!els.emptyIndex) return;
  const index = currentIndex();
  let docs = [];
  try {
    docs = (await getJSON(`/v1/documents${index ? `?index=${encodeURIComponent(index)}` : ""}`)).documents || [];
  } catch (_) {
    docs = [];
  }
  if (currentIndex() !== index) return; // another index was chosen meanwhile: its own refresh shows it
  if (!docs.length) {
    els.emptyIndex.replaceChildren(h("p", { class: "hint" }, ...tNodes("chat.emptyIndex",
      { link: h("a", { href: "/documents", class: "to-documents" }, t("chat.emptyIndexLink")) })));
  } else {
    const titles = docs.map((d) => d.title || fileName(d.path));
    const shown = titles.slice(0, 6);
    const examples = shown.slice(0, 3).map((title) => t("chat.example", { title }));
    els.emptyIndex.replaceChildren(
      h("h3", {}, t("chat.inThisIndex", { count: docs.length })),
      h("ul", { class: "empty-documents" }, ...shown.map((t) => h("li", {}, t)),
        titles.length > shown.length ? h("li", { class: "muted" }, t("chat.andMore", { count: titles.length - shown.length })) : null),
      h("h3", {}, t("chat.tryAsking")),
      h("div", { class: "examples" }, ...examples.map((question) => {
        const button = h("button", { type: "button", class: "example secondary" }, question);
        button.addEventListener("click", () => {
          els.question.value = question;
          els.question.focus();
        });
        return button;
      })));
  }
  els.emptyIndex.hidden = false;
  const link = els.emptyIndex.querySelector(".to-documents");
  if (link) link.addEventListener("click", (event) => {
    event.preventDefault();
    document.getElementById("tab-documents").click();
  });
}
