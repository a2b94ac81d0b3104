// The documents view: upload (drag and drop or file picker, per-file progress and outcome), long uploads and
// syncs followed as jobs (progress bar, cancel, run again; picked up again after a reload), the folders the
// index follows with "Sync now", list, filter, delete.

import { ApiError, apiFetch, getJSON, openOriginal, uploadFile } from "./api.js";
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
  // Two documents with one title are told apart by their file names, always shown under the title.
  els.body.replaceChildren(...shown.map((doc) => {
    const name = doc.title || fileName(doc.path);
    const remove = h("button", { type: "button", class: "danger-outline small-button", "aria-label": `Delete ${name} (${fileName(doc.path)})` }, "Delete");
    remove.addEventListener("click", () => confirmDelete(doc));
    const open = h("button", { type: "button", class: "secondary small-button open-original",
      "aria-label": `Open the original of ${name} (${fileName(doc.path)})` }, "Open");
    open.addEventListener("click", () => openOriginal(doc.id, fileName(doc.path), null, currentIndex(), message));
    const origin = doc.folder
      ? h("span", { class: "doc-folder", title: `Synced from the followed folder ${doc.folder}` }, `folder ${fileName(doc.folder) || doc.folder}`)
      : h("span", { class: "muted", title: doc.origin === "upload" ? "Uploaded here or over the API"
        : "Added on the server (rag ingest)" }, doc.origin === "upload" ? "uploaded" : "added on the server");
    return h("tr", { dataset: { id: doc.id, folder: doc.folder || "" } },
      h("td", { class: "doc-title" },
        h("span", { class: "title" }, name),
        h("span", { class: "muted small path" }, `${fileName(doc.path)} · ${doc.kind || ""}`)),
      h("td", { "data-label": "Source", class: "doc-source" }, origin),
      h("td", { "data-label": "Pages" }, doc.pages ?? "—"),
      h("td", { "data-label": "Chunks" }, doc.chunks),
      h("td", { "data-label": "Groups", class: "doc-groups" }, doc.access_groups ? doc.access_groups.split(",").join(", ") : "everyone"),
      h("td", { "data-label": "Added" }, h("time", { datetime: doc.ingested_at }, formatDate(doc.ingested_at))),
      h("td", { class: "actions" }, open, " ", remove));
  }));
}

function confirmDelete(doc) {
  const dialog = els.confirm;
  els.confirmMessage.replaceChildren(
    "Delete ", h("strong", {}, doc.title || fileName(doc.path)), ` (${fileName(doc.path)})? `,
    `Its ${chunks(doc.chunks)} will be removed from the index.`,
    // A followed folder's file comes back with the next sync: say so before, not after.
    doc.folder ? h("span", { class: "folder-warning" }, h("br"), h("br"),
      "It comes from the followed folder ", h("strong", {}, doc.folder), ": the next sync adds it again. ",
      "To remove it for good, delete or move the file in that folder (or stop following the folder).") : null);
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
    sending.add(file.name);
    try {
      const groups = els.groups.value.split(",").map((g) => g.trim()).filter(Boolean).join(",");
      const { status: code, body } = await uploadFile(file, currentIndex(), (fraction) => {
        progress.value = fraction;
        set("uploading", fraction < 1 ? `uploading ${Math.round(fraction * 100)} %` : "indexing…");
      }, groups);
      progress.value = 1;
      const outcome = body && Array.isArray(body.files) ? body.files[0] : null;
      if (code === 202 && body && body.id) {
        // Longer than the server waits inline (a long scan): the row follows the job from here.
        item.remove();
        followJob(body);
        return;
      }
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

// ---------------------------------------------------------------- jobs: long uploads and syncs
const JOB_POLL_MS = 700;
const ACTIVE = ["queued", "running"];
const followed = new Set(); // job ids with a row on the page
// Names of files this page has uploaded: their rows follow them, not resumeJobs. Kept after the upload ends:
// a job list fetched while one ran arrives after it (under load the same upload got a second row).
const sending = new Set();

function seconds(value) {
  if (value < 60) return `${Math.max(1, Math.round(value))} s`;
  const minutes = Math.round(value / 60);
  return minutes < 60 ? `${minutes} min` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

function jobName(job) {
  if (job.kind === "sync") {
    const source = sources.find((s) => s.id === job.source);
    return `Sync of ${source ? fileName(source.path) || source.path : "a folder"}`;
  }
  const names = job.names || [];
  return names.length > 1 ? `${names[0]} and ${names.length - 1} more` : names[0] || "upload";
}

function syncCounts(summary) {
  const parts = ["added", "updated", "renamed", "removed", "failed"].filter((k) => summary[k]).map((k) => `${summary[k]} ${k}`);
  return parts.length ? parts.join(", ") : "nothing changed";
}

function jobText(job) {
  switch (job.state) {
    case "queued": return "waiting for the index…";
    case "running": {
      const parts = [job.current_file_pages
        ? `reading page ${job.current_file_page} of ${job.current_file_pages}${job.current_file ? ` (${job.current_file})` : ""}`
        : "indexing…"];
      if (job.files_total > 1) parts.push(`${job.files_done} of ${job.files_total} files`);
      if (job.eta_s !== null && job.eta_s !== undefined) parts.push(`about ${seconds(job.eta_s)} left`);
      return parts.join(" · ");
    }
    case "done":
      if (job.kind === "sync") return `synced: ${syncCounts(job.summary || {})} · ${seconds(job.elapsed_s)}`;
      return job.files.length === 1 ? `${outcomeText(job.files[0])} · ${seconds(job.elapsed_s)}`
        : `${job.files.filter((f) => f.status !== "failed").length} of ${job.files.length} files added · ${seconds(job.elapsed_s)}`;
    case "cancelled": return "cancelled: nothing of it was kept";
    case "interrupted": return "interrupted: the server stopped while it ran";
    default: return `failed: ${job.error ? job.error.message : "unknown reason"}`;
  }
}

// A row that follows one job until it ends: progress bar, what it is doing, Cancel; Run again once interrupted.
function followJob(job) {
  if (followed.has(job.id)) return;
  followed.add(job.id);
  const progress = h("progress", { max: "1", value: String(job.progress || 0), "aria-label": `Progress of ${jobName(job)}` });
  const status = h("span", { class: "upload-status" }, jobText(job));
  const cancel = h("button", { type: "button", class: "danger-outline small-button job-cancel" }, "Cancel");
  const retry = h("button", { type: "button", class: "secondary small-button job-retry", hidden: "" }, "Run again");
  const dismiss = h("button", { type: "button", class: "icon upload-dismiss", "aria-label": `Dismiss ${jobName(job)}` }, "×");
  const item = h("li", { class: "upload job", dataset: { state: job.state, job: job.id } },
    h("span", { class: "upload-name" }, jobName(job)), progress, status, cancel, retry, dismiss);
  els.uploads.prepend(item);
  showUploadsHead();
  let stopped = false;
  let current = job;
  dismiss.addEventListener("click", () => {
    stopped = true;
    item.remove();
    showUploadsHead();
  });
  const show = (latest) => {
    current = latest;
    item.dataset.state = latest.state;
    progress.value = latest.progress;
    status.textContent = jobText(latest);
    cancel.hidden = !ACTIVE.includes(latest.state);
    retry.hidden = !latest.can_retry;
  };
  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    status.textContent = "cancelling…";
    try {
      show(await (await apiFetch(`/v1/jobs/${job.id}`, { method: "DELETE" })).json());
    } catch (err) {
      status.textContent = `could not cancel: ${err.message}`;
    }
  });
  retry.addEventListener("click", async () => {
    retry.disabled = true;
    try {
      const again = await (await apiFetch(`/v1/jobs/${job.id}/retry`, { method: "POST" })).json();
      stopped = true;
      item.remove();
      followJob(again);
    } catch (err) {
      status.textContent = `could not run it again: ${err.message}`;
      retry.disabled = false;
    }
  });
  show(job);
  (async () => {
    while (!stopped && ACTIVE.includes(current.state)) {
      await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
      if (!ACTIVE.includes(current.state)) break; // cancelled meanwhile (the job is gone then)
      try {
        const latest = await getJSON(`/v1/jobs/${job.id}`);
        if (ACTIVE.includes(current.state)) show(latest);
      } catch (err) {
        if (ACTIVE.includes(current.state)) status.textContent = `cannot follow this job: ${err.message}`;
        if (!ACTIVE.includes(current.state)) break;
        return;
      }
    }
    if (!stopped) {
      await refreshDocuments();
      if (current.kind === "sync") await refreshSources();
      onChanged();
    }
  })();
}

// After a reload, or another index picked: the jobs still running, and those a restart interrupted today.
async function resumeJobs() {
  let body;
  try {
    body = await getJSON(`/v1/jobs${indexQuery()}`);
  } catch (_) {
    return; // readers may not follow jobs
  }
  const dayAgo = Date.now() - 24 * 3600 * 1000;
  for (const job of [...(body.jobs || [])].reverse()) {
    const recent = job.state === "interrupted" && job.can_retry && Date.parse(job.created_at) > dayAgo;
    const ours = job.kind === "upload" && (job.names || []).some((name) => sending.has(name));
    if ((ACTIVE.includes(job.state) || recent) && !ours) followJob(job);
  }
}

// ---------------------------------------------------------------- folders the index follows
let sources = [];

function lastSyncText(source) {
  const last = source.last;
  if (!last) return "not synced yet";
  const when = formatDate(last.started_at);
  if (last.status === "error") return `last sync ${when}: ${last.error || "the folder could not be read"}`;
  const failed = last.failed ? ` · ${last.failed} failed` : "";
  return `last sync ${when}: ${syncCounts(last)}${failed} · ${seconds(last.seconds)}`;
}

export async function refreshSources() {
  try {
    sources = (await getJSON(`/v1/sources${indexQuery()}`)).sources || [];
  } catch (_) {
    sources = []; // readers do not see folders; an index not created yet has none
  }
  els.sourcesPanel.hidden = sources.length === 0;
  els.sources.replaceChildren(...sources.map((source) => {
    const button = h("button", { type: "button", class: "secondary small-button", "aria-label": `Sync ${source.path} now` }, "Sync now");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const index = currentIndex();
        const query = new URLSearchParams({ async: "true", ...(index ? { index } : {}) });
        followJob(await (await apiFetch(`/v1/sources/${source.id}/sync?${query}`, { method: "POST" })).json());
      } catch (err) {
        message(`Could not sync ${source.path}: ${err.message}`);
      } finally {
        button.disabled = false;
      }
    });
    const every = source.every_s ? `every ${seconds(source.every_s)}` : "on request";
    return h("li", { class: "folder", dataset: { id: source.id, status: source.last ? source.last.status : "new" } },
      h("span", { class: "folder-path" }, source.path + (source.glob ? ` (${source.glob})` : "")),
      h("span", { class: "muted small" }, `${source.files} files · ${every} · ${lastSyncText(source)}`),
      button);
  }));
}

function showUploadsHead() {
  els.uploadsHead.hidden = !els.uploads.children.length;
}

// Upload results belong to the index they went to: cleared by the button, and when another index is picked.
// Uploads still running finish (their rows go; the documents list shows the outcome).
export function clearUploads() {
  els.uploads.replaceChildren();
  followed.clear();
  showUploadsHead();
}

// The documents page opened, or another index picked: its folders, and the jobs that are still going.
export async function refreshJobsAndSources() {
  await refreshSources();
  await resumeJobs();
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
    sourcesPanel: document.getElementById("sources-panel"),
    sources: document.getElementById("sources"),
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
