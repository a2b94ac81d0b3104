// The admin's keys page: create a key (shown once), list keys, revoke one.

import { getJSON, sendJSON } from "./api.js";
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
      h("td", {}, key.name),
      h("td", {}, key.roles.map((g) => `${g.index}=${g.role}`).join(", ")),
      h("td", {}, key.groups ? key.groups.join(", ") : "all"),
      h("td", {}, when(key.expires)),
      h("td", { class: "key-state" }, key.state),
      h("td", {}, revoke));
  }));
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
