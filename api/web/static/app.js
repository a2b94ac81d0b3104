// The page: views (chat at /, documents at /documents), server status, index picker, API key prompt.

import { apiKey, getJSON, setKeyPrompt, useSiteSignIn, whoAmI } from "./api.js";
import { forgetConversations, initChat, loadConversations, refreshChatEmpty } from "./chat.js";
import { clearUploads, initDocuments, refreshDocuments, refreshJobsAndSources } from "./documents.js";
import { initKeys, refreshKeys } from "./keys.js";
import { loadLanguage, t, translatePage } from "./i18n.js";

const INDEX_STORAGE = "rag.index";
const POLL_LOADING_MS = 1500;
const POLL_READY_MS = 15000;

let indexes = []; // [{name, documents, chunks}] from /v1/indexes
let defaultIndex = null;
let health = null;
let pollTimer = null;
let indexesLoaded = false;
let siteSignInLost = false;

function selectedIndex() {
  // Sent with requests only when the person picked one (several indexes); else the server's default.
  return indexes.length > 1 ? localStorage.getItem(INDEX_STORAGE) : null;
}

// ---------------------------------------------------------------- views
const VIEWS = { "/": "chat", "/documents": "documents", "/keys": "keys" };

function showView(name) {
  for (const view of ["chat", "documents", "keys"]) {
    document.getElementById(`view-${view}`).hidden = view !== name;
    const tab = document.getElementById(`tab-${view}`);
    if (view === name) tab.setAttribute("aria-current", "page");
    else tab.removeAttribute("aria-current");
  }
  document.body.dataset.view = name;
  document.title = t({ documents: "page.title.documents", keys: "page.title.keys" }[name] || "page.title");
  if (name === "keys") refreshKeys();
  else if (name === "documents" && indexesLoaded) openDocuments();
  else document.getElementById("question").focus({ preventScroll: true });
}

function route() {
  showView(VIEWS[location.pathname] || "chat");
}

function initTabs() {
  for (const tab of document.querySelectorAll(".tabs a[data-view]")) {
    tab.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      if (location.pathname !== tab.getAttribute("href")) history.pushState(null, "", tab.getAttribute("href"));
      route();
    });
  }
  window.addEventListener("popstate", route);
}

// ---------------------------------------------------------------- status
function setStatus(kind, text, detail) {
  const status = document.getElementById("status");
  status.dataset.state = kind;
  document.getElementById("status-text").textContent = text;
  status.title = detail || "";
}

function indexSummary() {
  const chosen = selectedIndex();
  const info = chosen ? indexes.find((i) => i.name === chosen) : (indexes.find((i) => i.name === defaultIndex) || health?.index);
  if (!info) return "";
  return `${t("count.documents", { count: info.documents })} · ${t("count.chunks", { count: info.chunks })}`;
}

function showHealth() {
  if (siteSignInLost) {
    setStatus("failed", t("status.signedOut"));
    return;
  }
  if (!health) return;
  if (health.status === "ok") {
    const summary = indexSummary();
    setStatus("ready", summary ? t("status.readySummary", { summary }) : t("status.ready"),
      t("status.serverDetail", { generator: health.generator, device: health.device, scheduler: health.scheduler }));
  } else if (health.status === "loading") {
    setStatus("loading", t("status.loading"), health.reason || "");
  } else {
    setStatus("failed", t("status.failed", { reason: health.reason || health.status }));
  }
}

async function pollHealth(started = null) {
  clearTimeout(pollTimer);
  let next = POLL_LOADING_MS;
  try {
    const response = await (started || fetch("/healthz", { cache: "no-store" }));
    health = await response.json();
    if (response.ok) next = POLL_READY_MS;
    showHealth();
  } catch (_) {
    health = null;
    setStatus("offline", t("status.offline"));
  }
  pollTimer = setTimeout(pollHealth, next);
}

// ---------------------------------------------------------------- indexes
async function refreshIndexes() {
  try {
    const body = await getJSON("/v1/indexes");
    indexes = body.indexes || [];
    defaultIndex = body.default;
  } catch (_) {
    indexes = [];
  }
  const picker = document.getElementById("index-picker");
  const select = document.getElementById("index-select");
  picker.hidden = indexes.length < 2;
  if (indexes.length >= 2) {
    const chosen = localStorage.getItem(INDEX_STORAGE);
    if (!indexes.some((i) => i.name === chosen)) {
      localStorage.setItem(INDEX_STORAGE, indexes.some((i) => i.name === defaultIndex) ? defaultIndex : indexes[0].name);
    }
    select.replaceChildren(...indexes.map((i) => {
      const option = document.createElement("option");
      option.value = i.name;
      option.textContent = `${i.name} (${i.documents})`;
      return option;
    }));
    select.value = localStorage.getItem(INDEX_STORAGE);
  }
  indexesLoaded = true;
  showHealth();
  refreshChatEmpty();
  await refreshMe();
}

function initIndexPicker() {
  document.getElementById("index-select").addEventListener("change", (event) => {
    localStorage.setItem(INDEX_STORAGE, event.target.value);
    clearUploads();
    showHealth();
    refreshChatEmpty();
    showPrincipal();
    if (document.body.dataset.view === "documents") openDocuments();
  });
}

// The documents page: its list, the folders the index follows and the jobs still going (after a reload too).
function openDocuments() {
  refreshDocuments();
  // Folders and jobs are for those who may change the index: a reader's page does not ask (each refusal
  // would be an audit record, on every visit).
  if (document.body.dataset.canEdit !== "false") refreshJobsAndSources();
}

// ---------------------------------------------------------------- who is signed in (/v1/me)
const ROLES = ["reader", "editor", "admin"];
let me = null;
let signedInBySite = false;

function roleFor(index) {
  // The strongest role on the index (an exact grant or "*"), as the server decides it.
  const held = (me?.roles || []).filter((g) => g.index === index || g.index === "*").map((g) => g.role);
  return held.sort((a, b) => ROLES.indexOf(b) - ROLES.indexOf(a))[0] || null;
}

function showPrincipal() {
  const label = document.getElementById("principal");
  if (!me) {
    label.hidden = true;
    return;
  }
  const role = roleFor(selectedIndex() || defaultIndex || "");
  document.body.dataset.canEdit = role === "editor" || role === "admin" ? "true" : "false";
  document.body.dataset.role = role || "none";
  const admin = (me.roles || []).some((g) => g.index === "*" && g.role === "admin");
  document.getElementById("tab-keys").hidden = !(admin && me.authenticated);
  label.hidden = !me.authenticated;
  label.textContent = `${me.name} · ${ROLES.includes(role) ? t(`role.${role}`) : role || t("account.noAccess")}`;
  label.title = t(signedInBySite ? "account.bySite" : "account.byKey");
  // Signed in with a key typed here: sign out (or in with another key). The site's own sign-in ends at the site.
  document.getElementById("sign-out").hidden = !(me.authenticated && !signedInBySite && apiKey());
}

// Sign out: this tab forgets the key and the open conversation, and the page starts again at the key prompt.
function signOut() {
  forgetConversations();
  sessionStorage.clear();
  localStorage.removeItem("rag.conversations.v1");
  location.assign(location.pathname);
}

// Before any request can be refused: who does the server take this page for? Behind a reverse proxy that adds
// the site's bearer token to every request it knows already, and then the page never asks for a key.
async function identify() {
  me = await whoAmI();
  if (me && me.authenticated && !apiKey()) {
    signedInBySite = true;
    document.body.dataset.signIn = "site";
    useSiteSignIn(() => {
      siteSignInLost = true;
      showHealth();
    });
  }
}

async function refreshMe() {
  try {
    me = await getJSON("/v1/me");
  } catch (_) {
    me = null;
  }
  showPrincipal();
}

// ---------------------------------------------------------------- API key
function initKeyPrompt() {
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  const text = document.getElementById("key-message");
  setKeyPrompt((wrongKey) => new Promise((resolve) => {
    text.textContent = t(wrongKey ? "key.wrong" : "key.needed");
    text.classList.toggle("error", wrongKey);
    dialog.dataset.wrongKey = wrongKey ? "true" : "false";
    input.value = "";
    const done = (key) => {
      dialog.removeEventListener("close", onClose);
      resolve(key);
    };
    const onClose = () => done(dialog.returnValue === "ok" ? input.value.trim() || null : null);
    dialog.addEventListener("close", onClose);
    dialog.returnValue = "";
    dialog.showModal();
    input.focus();
  }));
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (input.value.trim()) dialog.close("ok");
  });
  document.getElementById("key-cancel").addEventListener("click", () => dialog.close("cancel"));
}

// ---------------------------------------------------------------- start
// The server's state is asked for at once (the page shows "loading models…" while they load), and shown once the
// texts in the browser's language are loaded: before anything is shown or asked.
const firstHealth = fetch("/healthz", { cache: "no-store" });
firstHealth.catch(() => {}); // a refusal is handled where it is awaited
await loadLanguage();
translatePage();
initKeyPrompt();
initTabs();
initIndexPicker();
initChat({ currentIndex: selectedIndex, onAnswered: () => {} });
initDocuments({ currentIndex: selectedIndex, onChanged: () => { refreshIndexes(); pollHealth(); } });
initKeys();
window.addEventListener("rag:key", () => setTimeout(() => refreshIndexes().then(loadConversations), 500)); // what a refused request could not list
document.getElementById("sign-out").addEventListener("click", signOut);
window.addEventListener("rag:indexes", () => refreshIndexes()); // an index was deleted on the admin page
route();
pollHealth(firstHealth);
identify().then(refreshIndexes).then(() => {
  if (document.body.dataset.view === "documents") openDocuments();
  loadConversations();
});
