// The admin's page: create a key (shown once), list keys, revoke one; list indexes, delete one (typing its name).

import { apiFetch, getJSON, sendJSON } from "./api.js";
import { h } from "./dom.js";

const list = (text) => (text || "").split(",").map((s) => s.trim()).filter(Boolean);

function when(seconds) {
  return seconds ? new Date(seconds * 1000).toISOString().slice(0, 16).replace("T", " ") : "never";
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
  message(body.keys.length ? "" : "No keys yet.");
  document.getElementById("keys-body").replaceChildren(...body.keys.map((key) => {
    const revoke = h("button", { type: "button", class: "danger-outline small-button", "aria-label": `Revoke ${key.name}` }, "Revoke");
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
      h("td", { "data-label": "Roles" }, key.roles.map((g) => `${g.index}=${g.role}`).join(", ")),
      h("td", { "data-label": "Sees" }, key.sees),
      h("td", { "data-label": "Expires" }, when(key.expires)),
      h("td", { class: "key-state", "data-label": "State" }, key.state),
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
  if (!body.indexes.length) indexesMessage("No indexes yet.");
  document.getElementById("indexes-body").replaceChildren(...body.indexes.map((index) => {
    const remove = h("button", { type: "button", class: "danger-outline small-button", "aria-label": `Delete index ${index.name}` }, "Delete");
    remove.addEventListener("click", () => confirmIndexDelete(index));
    return h("tr", { dataset: { index: index.name } },
      h("td", { class: "index-name" }, index.name), h("td", { "data-label": "Documents" }, index.documents),
      h("td", { "data-label": "Chunks" }, index.chunks), h("td", { class: "actions" }, remove));
  }));
}

function confirmIndexDelete(index) {
  const dialog = document.getElementById("index-delete-dialog");
  const typed = document.getElementById("index-delete-name");
  document.getElementById("index-delete-message").textContent =
    `Index “${index.name}” with ${index.documents} documents and ${index.chunks} chunks, and its uploaded files, ` +
    "will be deleted for good. Back it up first (rag index backup).";
  typed.value = "";
  dialog.returnValue = "";
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "ok") return;
    let outcome;
    try {
      const query = new URLSearchParams({ confirm: typed.value.trim() });
      await apiFetch(`/v1/indexes/${encodeURIComponent(index.name)}?${query}`, { method: "DELETE" });
      outcome = `Index “${index.name}” deleted.`;
      window.dispatchEvent(new Event("rag:indexes"));
    } catch (err) {
      outcome = `Could not delete “${index.name}”: ${err.message}`;
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
      message(err.message);
    }
    refreshKeys();
  });
}
