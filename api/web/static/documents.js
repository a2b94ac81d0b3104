// The documents view: upload (drag and drop or file picker, per-file progress and outcome), long uploads and
// syncs followed as jobs (progress bar, cancel, run again; picked up again after a reload), the folders the
// index follows with "Sync now", list, filter, delete.

import { ApiError, apiFetch, getJSON, openOriginal, uploadFile } from "./api.js";
import { formatDate, h } from "./dom.js";
import { formatNumber, t, tNodes } from "./i18n.js";

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
    message(documents.length ? "" : t("docs.none"));
  } catch (err) {
    documents = [];
    if (err instanceof ApiError && err.type === "index_not_found") message(t("docs.none"));
    else message(t("docs.listFailed", { message: err.message }));
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
    ? (shown.length === documents.length ? t("docs.count", { count: documents.length })
      : t("docs.countFiltered", { shown: shown.length, count: documents.length })) : "";
  els.table.hidden = shown.length === 0;
  if (documents.length && !shown.length) message(t("docs.noMatch", { filter }));
  else if (documents.length) message("");
  // Two documents with one title are told apart by their file names, always shown under the title.
  els.body.replaceChildren(...shown.map((doc) => {
    const name = doc.title || fileName(doc.path);
    const remove = h("button", { type: "button", class: "danger-outline small-button", "aria-label": t("docs.deleteLabel", { name, file: fileName(doc.path) }) }, t("action.delete"));
    remove.addEventListener("click", () => confirmDelete(doc));
    const open = h("button", { type: "button", class: "secondary small-button open-original",
      "aria-label": t("docs.openLabel", { name, file: fileName(doc.path) }) }, t("docs.open"));
    open.addEventListener("click", () => openOriginal(doc.id, fileName(doc.path), null, currentIndex(), message));
    const origin = doc.folder
      ? h("span", { class: "doc-folder", title: t("docs.syncedFrom", { folder: doc.folder }) },
        t("docs.fromFolder", { name: fileName(doc.folder) || doc.folder }))
      : h("span", { class: "muted", title: t(doc.origin === "upload" ? "docs.uploaded.title" : "docs.added.title") },
        t(doc.origin === "upload" ? "docs.uploaded" : "docs.addedOnServer"));
    return h("tr", { dataset: { id: doc.id, folder: doc.folder || "" } },
      h("td", { class: "doc-title" },
        h("span", { class: "title" }, name),
        h("span", { class: "muted small path" }, `${fileName(doc.path)} · ${doc.kind || ""}`)),
      h("td", { "data-label": t("docs.col.source"), class: "doc-source" }, origin),
      h("td", { "data-label": t("docs.col.pages") }, doc.pages ?? "—"),
      h("td", { "data-label": t("docs.col.chunks") }, doc.chunks),
      h("td", { "data-label": t("docs.col.groups"), class: "doc-groups" },
        doc.access_groups ? doc.access_groups.split(",").join(", ") : t("docs.everyone")),
      h("td", { "data-label": t("docs.col.added") }, h("time", { datetime: doc.ingested_at }, formatDate(doc.ingested_at))),
      h("td", { class: "actions" }, open, " ", remove));
  }));
}

function confirmDelete(doc) {
  const dialog = els.confirm;
  els.confirmMessage.replaceChildren(
    ...tNodes("docs.confirmDelete", { title: h("strong", {}, doc.title || fileName(doc.path)), file: fileName(doc.path),
      count: doc.chunks }),
    // A followed folder's file comes back with the next sync: say so before, not after.
    ...(doc.folder ? [h("span", { class: "folder-warning" }, h("br"), h("br"),
      ...tNodes("docs.folderWarning", { folder: h("strong", {}, doc.folder) }))] : [])); // (null would read "null")
  dialog.returnValue = "";
  dialog.addEventListener("close", async () => {
    if (dialog.returnValue !== "ok") return;
    try {
      await apiFetch(`/v1/documents/${encodeURIComponent(doc.id)}${indexQuery()}`, { method: "DELETE" });
      message("");
    } catch (err) {
      message(t("docs.deleteFailed", { message: err.message }));
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
  return t("count.chunks", { count });
}

function outcomeText(outcome) {
  switch (outcome.status) {
    case "added": return t("upload.added", { chunks: chunks(outcome.chunks) });
    case "updated": return t("upload.updated", { chunks: chunks(outcome.chunks) });
    case "unchanged": return t("upload.unchanged");
    default: return t("upload.failed", { reason: outcome.reason || t("upload.unknownReason") });
  }
}

function addUpload(file) {
  const progress = h("progress", { max: "1", value: "0", "aria-label": t("upload.progressLabel", { name: file.name }) });
  const status = h("span", { class: "upload-status" }, t("upload.waiting"));
  const dismiss = h("button", { type: "button", class: "icon upload-dismiss", "aria-label": t("upload.dismiss", { name: file.name }) }, "×");
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
    set("uploading", t("upload.uploading"));
    sending.add(file.name);
    try {
      const groups = els.groups.value.split(",").map((g) => g.trim()).filter(Boolean).join(",");
      const { status: code, body } = await uploadFile(file, currentIndex(), (fraction) => {
        progress.value = fraction;
        set("uploading", fraction < 1
          ? t("upload.uploadingPercent", { percent: formatNumber(fraction, { style: "percent" }) }) : t("upload.indexing"));
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
        set("failed", code === 503 ? t("upload.modelsLoading") : t("upload.failed", { reason: error }));
      }
    } catch (err) {
      set("failed", t("upload.failed", { reason: err.message }));
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
  if (value < 60) return t("time.seconds", { seconds: Math.max(1, Math.round(value)) });
  const minutes = Math.round(value / 60);
  return minutes < 60 ? t("time.minutes", { minutes })
    : t("time.hoursMinutes", { hours: Math.floor(minutes / 60), minutes: minutes % 60 });
}

function jobName(job) {
  if (job.kind === "sync") {
    const source = sources.find((s) => s.id === job.source);
    return t("job.syncOf", { name: source ? fileName(source.path) || source.path : t("job.aFolder") });
  }
  const names = job.names || [];
  return names.length > 1 ? t("job.andMore", { name: names[0], count: names.length - 1 }) : names[0] || t("job.upload");
}

function syncCounts(summary) {
  const parts = ["added", "updated", "renamed", "removed", "failed"].filter((k) => summary[k])
    .map((k) => t(`job.sync.${k}`, { count: summary[k] }));
  return parts.length ? parts.join(", ") : t("job.nothingChanged");
}

function jobText(job) {
  switch (job.state) {
    case "queued": return t("job.queued");
    case "running": {
      const page = { page: job.current_file_page, pages: job.current_file_pages, file: job.current_file };
      const parts = [job.current_file_pages ? t(job.current_file ? "job.readingPageOf" : "job.readingPage", page)
        : t("upload.indexing")];
      if (job.files_total > 1) parts.push(t("job.filesDone", { done: job.files_done, total: job.files_total }));
      if (job.eta_s !== null && job.eta_s !== undefined) parts.push(t("job.left", { time: seconds(job.eta_s) }));
      return parts.join(" · ");
    }
    case "done":
      if (job.kind === "sync") return t("job.synced", { counts: syncCounts(job.summary || {}), time: seconds(job.elapsed_s) });
      return job.files.length === 1 ? `${outcomeText(job.files[0])} · ${seconds(job.elapsed_s)}`
        : t("job.filesAdded", { done: job.files.filter((f) => f.status !== "failed").length, total: job.files.length,
          time: seconds(job.elapsed_s) });
    case "cancelled": return t("job.cancelled");
    case "interrupted": return t("job.interrupted");
    default: return t("upload.failed", { reason: job.error ? job.error.message : t("upload.unknownReason") });
  }
}

// A row that follows one job until it ends: progress bar, what it is doing, Cancel; Run again once interrupted.
function followJob(job) {
  if (followed.has(job.id)) return;
  followed.add(job.id);
  const progress = h("progress", { max: "1", value: String(job.progress || 0), "aria-label": t("job.progressLabel", { name: jobName(job) }) });
  const status = h("span", { class: "upload-status" }, jobText(job));
  const cancel = h("button", { type: "button", class: "danger-outline small-button job-cancel" }, t("job.cancel"));
  const retry = h("button", { type: "button", class: "secondary small-button job-retry", hidden: "" }, t("job.retry"));
  const dismiss = h("button", { type: "button", class: "icon upload-dismiss", "aria-label": t("upload.dismiss", { name: jobName(job) }) }, "×");
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
    status.textContent = t("job.cancelling");
    try {
      show(await (await apiFetch(`/v1/jobs/${job.id}`, { method: "DELETE" })).json());
    } catch (err) {
      status.textContent = t("job.cancelFailed", { message: err.message });
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
      status.textContent = t("job.retryFailed", { message: err.message });
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
        if (ACTIVE.includes(current.state)) status.textContent = t("job.followFailed", { message: err.message });
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
  if (!last) return t("folder.notSynced");
  const when = formatDate(last.started_at);
  if (last.status === "error") return t("folder.lastSyncError", { when, error: last.error || t("folder.unreadable") });
  const failed = last.failed ? t("folder.failed", { count: last.failed }) : "";
  return t("folder.lastSync", { when, counts: syncCounts(last), failed, time: seconds(last.seconds) });
}

export async function refreshSources() {
  try {
    sources = (await getJSON(`/v1/sources${indexQuery()}`)).sources || [];
  } catch (_) {
    sources = []; // readers do not see folders; an index not created yet has none
  }
  els.sourcesPanel.hidden = sources.length === 0;
  els.sources.replaceChildren(...sources.map((source) => {
    const button = h("button", { type: "button", class: "secondary small-button", "aria-label": t("folder.syncLabel", { path: source.path }) },
      t("folder.syncNow"));
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        const index = currentIndex();
        const query = new URLSearchParams({ async: "true", ...(index ? { index } : {}) });
        followJob(await (await apiFetch(`/v1/sources/${source.id}/sync?${query}`, { method: "POST" })).json());
      } catch (err) {
        message(t("folder.syncFailed", { path: source.path, message: err.message }));
      } finally {
        button.disabled = false;
      }
    });
    const every = source.every_s ? t("folder.every", { time: seconds(source.every_s) }) : t("folder.onRequest");
    return h("li", { class: "folder", dataset: { id: source.id, status: source.last ? source.last.status : "new" } },
      h("span", { class: "folder-path" }, source.path + (source.glob ? ` (${source.glob})` : "")),
      h("span", { class: "muted small" },
        t("folder.summary", { files: t("count.files", { count: source.files }), every, last: lastSyncText(source) })),
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
    els.formatsHint.textContent = t("docs.formats", { formats: body.formats.map((f) => f.label).join(", ") });
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
