// The documents view: upload (drag and drop or file picker, per-file progress and outcome), list, filter, delete.

import { ApiError, apiFetch, getJSON, uploadFile } from "./api.js";
import { formatDate, h } from "./dom.js";

let els = {};
let documents = [];
let currentIndex = () => null;
let onChanged = () => {};
let uploadQueue = Promise.resolve();

function indexQuery() {
  const index = currentIndex();
  return index ? `?index=${encodeURIComponent(index)}` : "";
}

function message(text) {
  els.message.hidden = !text;
  els.message.textContent = text || "";
}

export async function refreshDocuments() {
  try {
    const body = await getJSON(`/v1/documents${indexQuery()}`);
    documents = body.documents || [];
    message(documents.length ? "" : "No documents yet: drop some files above.");
  } catch (err) {
    documents = [];
    if (err instanceof ApiError && err.type === "index_not_found") message("No documents yet: drop some files above.");
    else message(`Cannot list the documents: ${err.message}`);
  }
  renderDocuments();
}

function matches(doc, filter) {
  if (!filter) return true;
  const hay = `${doc.title || ""} ${doc.path || ""} ${doc.kind || ""}`.toLowerCase();
  return filter.toLowerCase().split(/\s+/).filter(Boolean).every((word) => hay.includes(word));
}

function fileName(path) {
  return String(path || "").split(/[\\/]/).pop();
}

function renderDocuments() {
  const filter = els.filter.value.trim();
  const shown = documents.filter((doc) => matches(doc, filter));
  els.count.textContent = documents.length
    ? (shown.length === documents.length ? `(${documents.length})` : `(${shown.length} of ${documents.length})`) : "";
  els.table.hidden = shown.length === 0;
  if (documents.length && !shown.length) message(`No document matches “${filter}”.`);
  else if (documents.length) message("");
  els.body.replaceChildren(...shown.map((doc) => {
    const remove = h("button", { type: "button", class: "danger-outline small-button", "aria-label": `Delete ${doc.title || fileName(doc.path)}` }, "Delete");
    remove.addEventListener("click", () => confirmDelete(doc));
    return h("tr", { dataset: { id: doc.id } },
      h("td", { class: "doc-title" },
        h("span", { class: "title" }, doc.title || fileName(doc.path)),
        h("span", { class: "muted small path" }, `${fileName(doc.path)} · ${doc.kind || ""}`)),
      h("td", { "data-label": "Pages" }, doc.pages ?? "—"),
      h("td", { "data-label": "Chunks" }, doc.chunks),
      h("td", { "data-label": "Groups", class: "doc-groups" }, doc.access_groups ? doc.access_groups.split(",").join(", ") : "everyone"),
      h("td", { "data-label": "Added" }, h("time", { datetime: doc.ingested_at }, formatDate(doc.ingested_at))),
      h("td", { class: "actions" }, remove));
  }));
}

function confirmDelete(doc) {
  const dialog = els.confirm;
  els.confirmMessage.replaceChildren(
    "Delete ", h("strong", {}, doc.title || fileName(doc.path)), ` (${fileName(doc.path)})? `,
    `Its ${chunks(doc.chunks)} will be removed from the index.`);
  dialog.returnValue = "";
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "ok") return;
    try {
      await apiFetch(`/v1/documents/${encodeURIComponent(doc.id)}${indexQuery()}`, { method: "DELETE" });
      message("");
    } catch (err) {
      message(`Could not delete: ${err.message}`);
      return;
    } finally {
      await refreshDocuments();
      onChanged();
    }
  }, { once: true });
  dialog.showModal();
  els.confirmCancel.focus();
}

// ---------------------------------------------------------------- uploads
function chunks(count) {
  return `${count} chunk${count === 1 ? "" : "s"}`;
}

function outcomeText(outcome) {
  switch (outcome.status) {
    case "added": return `added · ${chunks(outcome.chunks)}`;
    case "updated": return `updated · ${chunks(outcome.chunks)}`;
    case "unchanged": return "unchanged (already in the index)";
    default: return `failed: ${outcome.reason || "unknown reason"}`;
  }
}

function addUpload(file) {
  const progress = h("progress", { max: "1", value: "0", "aria-label": `Upload of ${file.name}` });
  const status = h("span", { class: "upload-status" }, "waiting…");
  const dismiss = h("button", { type: "button", class: "icon upload-dismiss", "aria-label": `Dismiss ${file.name}` }, "×");
  const item = h("li", { class: "upload", dataset: { state: "waiting" } },
    h("span", { class: "upload-name" }, file.name), progress, status, dismiss);
  dismiss.addEventListener("click", () => {
    item.remove();
    showUploadsHead();
  });
  els.uploads.prepend(item);
  showUploadsHead();
  const set = (state, text) => {
    item.dataset.state = state;
    status.textContent = text;
  };
  // One file at a time: the server ingests one upload per index at a time anyway.
  uploadQueue = uploadQueue.then(async () => {
    set("uploading", "uploading…");
    try {
      const groups = els.groups.value.split(",").map((g) => g.trim()).filter(Boolean).join(",");
      const { status: code, body } = await uploadFile(file, currentIndex(), (fraction) => {
        progress.value = fraction;
        set("uploading", fraction < 1 ? `uploading ${Math.round(fraction * 100)} %` : "indexing…");
      }, groups);
      progress.value = 1;
      const outcome = body && Array.isArray(body.files) ? body.files[0] : null;
      if (outcome) {
        set(outcome.status === "failed" ? "failed" : outcome.status, outcomeText(outcome));
      } else {
        const error = body && body.error ? body.error.message : `HTTP ${code}`;
        set("failed", code === 503 ? "failed: the models are still loading — try again in a moment" : `failed: ${error}`);
      }
    } catch (err) {
      set("failed", `failed: ${err.message}`);
    }
    await refreshDocuments();
    onChanged();
  });
}

function showUploadsHead() {
  els.uploadsHead.hidden = !els.uploads.children.length;
}

// Upload results belong to the index they went to: cleared by the button, and when another index is picked.
// Uploads still running finish (their rows go; the documents list shows the outcome).
export function clearUploads() {
  els.uploads.replaceChildren();
  showUploadsHead();
}

// The formats come from the server's format registry: the hint and the file picker never disagree with it.
async function loadFormats() {
  try {
    const body = await getJSON("/v1/documents/formats");
    els.input.accept = body.accept;
    els.formatsHint.textContent = ` (${body.formats.map((f) => f.label).join(", ")})`;
  } catch (_) {
    /* no list (e.g. no key yet): every file is offered, the server says which it cannot read */
  }
}

function addFiles(files) {
  for (const file of files) addUpload(file);
}

export function initDocuments(options) {
  currentIndex = options.currentIndex;
  onChanged = options.onChanged || onChanged;
  els = {
    dropzone: document.getElementById("dropzone"),
    input: document.getElementById("file-input"),
    uploads: document.getElementById("uploads"),
    filter: document.getElementById("documents-filter"),
    count: document.getElementById("documents-count"),
    message: document.getElementById("documents-message"),
    table: document.getElementById("documents-table"),
    body: document.getElementById("documents-body"),
    confirm: document.getElementById("confirm-dialog"),
    confirmMessage: document.getElementById("confirm-message"),
    confirmCancel: document.getElementById("confirm-cancel"),
    uploadsHead: document.getElementById("uploads-head"),
    formatsHint: document.getElementById("formats-hint"),
    groups: document.getElementById("upload-groups"),
  };
  document.getElementById("uploads-clear").addEventListener("click", clearUploads);
  loadFormats();
  els.input.addEventListener("change", () => {
    addFiles([...els.input.files]);
    els.input.value = "";
  });
  const zone = els.dropzone;
  for (const type of ["dragenter", "dragover"]) {
    zone.addEventListener(type, (event) => {
      event.preventDefault();
      zone.classList.add("dragging");
    });
  }
  for (const type of ["dragleave", "drop"]) {
    zone.addEventListener(type, () => zone.classList.remove("dragging"));
  }
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    addFiles([...(event.dataTransfer?.files || [])]);
  });
  // A file dropped elsewhere on the page must not navigate away from it.
  window.addEventListener("dragover", (event) => event.preventDefault());
  window.addEventListener("drop", (event) => event.preventDefault());
  els.filter.addEventListener("input", renderDocuments);
}
