// The admin's page: create a key (shown once), list keys, revoke one; list indexes, delete one (typing its name).

import { apiFetch, getJSON, sendJSON } from "./api.js";
import { formatDate, h } from "./dom.js";
import { t } from "./i18n.js";

const list = (text) => (text || "").split(",").map((s) => s.trim()).filter(Boolean);

function when(seconds) {
  return seconds ? formatDate(new Date(seconds * 1000).toISOString()) : t("keys.never");
}

const STATES = ["active", "expired", "revoked"];
const ROLES = ["reader", "editor", "admin"];

// What the key sees, in words of the page's language (the server's `sees` says the same in English).
function sees(key) {
  if (!Array.isArray(key.groups)) return key.sees;
  if (key.groups.includes("*")) return t("keys.sees.all");
  return key.groups.length ? t("keys.sees.groups", { groups: key.groups.join(", ") }) : t("keys.sees.public");
}

function message(text) {
  const el = document.getElementById("keys-message");
  el.hidden = !text;
  el.textContent = text || "";
}

export async function refreshKeys() {
  refreshIndexList();
  let body;
  try {
    body = await getJSON("/v1/keys");
  } catch (err) {
    message(err.message);
    document.getElementById("keys-body").replaceChildren();
    return;
  }
  message(body.keys.length ? "" : t("keys.none"));
  document.getElementById("keys-body").replaceChildren(...body.keys.map((key) => {
    const revoke = h("button", { type: "button", class: "danger-outline small-button", "aria-label": t("keys.revokeLabel", { name: key.name }) },
      t("keys.revoke"));
    revoke.hidden = key.state === "revoked";
    revoke.addEventListener("click", async () => {
      try {
        await sendJSON("DELETE", `/v1/keys/${encodeURIComponent(key.name)}`);
      } catch (err) {
        message(err.message);
      }
      refreshKeys();
    });
    return h("tr", { dataset: { key: key.name } },
      h("td", { class: "key-name" }, key.name),
      h("td", { "data-label": t("keys.col.roles") }, key.roles.map((g) => `${g.index}=${ROLES.includes(g.role) ? t(`role.${g.role}`) : g.role}`).join(", ")),
      h("td", { "data-label": t("keys.col.sees") }, sees(key)),
      h("td", { "data-label": t("keys.expires") }, when(key.expires)),
      h("td", { class: "key-state", "data-label": t("keys.col.state") },
        STATES.includes(key.state) ? t(`keys.state.${key.state}`) : key.state),
      h("td", { class: "actions" }, revoke));
  }));
}

function indexesMessage(text) {
  const el = document.getElementById("indexes-message");
  el.hidden = !text;
  el.textContent = text || "";
}

export async function refreshIndexList() {
  let body;
  try {
    body = await getJSON("/v1/indexes");
  } catch (err) {
    indexesMessage(err.message);
    return;
  }
  if (!body.indexes.length) indexesMessage(t("keys.noIndexes"));
  document.getElementById("indexes-body").replaceChildren(...body.indexes.map((index) => {
    const remove = h("button", { type: "button", class: "danger-outline small-button", "aria-label": t("index.deleteLabel", { name: index.name }) },
      t("action.delete"));
    remove.addEventListener("click", () => confirmIndexDelete(index));
    return h("tr", { dataset: { index: index.name } },
      h("td", { class: "index-name" }, index.name), h("td", { "data-label": t("nav.documents") }, index.documents),
      h("td", { "data-label": t("docs.col.chunks") }, index.chunks), h("td", { class: "actions" }, remove));
  }));
}

function confirmIndexDelete(index) {
  const dialog = document.getElementById("index-delete-dialog");
  const typed = document.getElementById("index-delete-name");
  document.getElementById("index-delete-message").textContent =
    t("index.delete.message", { name: index.name, documents: t("count.documents", { count: index.documents }),
      chunks: t("count.chunks", { count: index.chunks }) });
  typed.value = "";
  dialog.returnValue = "";
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "ok") return;
    let outcome;
    try {
      const query = new URLSearchParams({ confirm: typed.value.trim() });
      await apiFetch(`/v1/indexes/${encodeURIComponent(index.name)}?${query}`, { method: "DELETE" });
      outcome = t("index.deleted", { name: index.name });
      window.dispatchEvent(new Event("rag:indexes"));
    } catch (err) {
      outcome = t("index.deleteFailed", { name: index.name, message: err.message });
    }
    await refreshIndexList();
    indexesMessage(outcome);
  }, { once: true });
  dialog.showModal();
  typed.focus();
}

export function initKeys() {
  document.getElementById("key-create-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = (id) => document.getElementById(id).value.trim();
    const body = { name: value("new-key-name"), role: value("new-key-role"), indexes: list(value("new-key-indexes")) };
    if (value("new-key-expires") && value("new-key-expires") !== "never") body.expires = value("new-key-expires");
    if (list(value("new-key-groups")).length) body.groups = list(value("new-key-groups"));
    try {
      const created = await (await sendJSON("POST", "/v1/keys", body)).json();
      document.getElementById("new-key-value").textContent = created.key;
      document.getElementById("new-key-shown").hidden = false;
      message("");
      event.target.reset();
    } catch (err) {
      document.getElementById("new-key-shown").hidden = true;
      message(err.message); // the server's own words (not refreshed away: nothing changed)
      return;
    }
    refreshKeys();
  });
}
