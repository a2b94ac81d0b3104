// Talking to the server: the API key, JSON requests, the SSE answer stream, uploads with progress.
// Behind a site's reverse proxy that adds `Authorization: Bearer …` to every request, the server knows the
// caller without a key from the page: the page then never asks for one (signedInBySite).

import { t } from "./i18n.js";

const KEY_STORAGE = "rag.apiKey";

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

function authHeaders() {
  const key = apiKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// The page supplies how to ask the person for a key (a dialog); it resolves with the key or null.
let keyPrompt = async () => null;
let pendingPrompt = null;
let signedInBySite = false;
let onSiteSignInLost = () => {};

export function setKeyPrompt(prompt) {
  keyPrompt = prompt;
}

// The server identified the caller from what the site's proxy sent, not from a key typed here: from now on a
// 401 means the site's sign-in ended (an expired token), which no key typed here would fix.
export function useSiteSignIn(onLost) {
  signedInBySite = true;
  onSiteSignInLost = onLost;
}

const UNAUTHORIZED = () => signedInBySite
  ? new ApiError(401, "unauthorized", t("api.siteSignInRejected"))
  : new ApiError(401, "unauthorized", t("api.keyNeeded"));

// After a 401 to a request sent with key `sentWith`: ask for a key (once for all requests that failed at the same
// time). True = retry. A 401 to a request that left before the key now held was entered is no verdict on that key:
// it is retried with it, never a second prompt (a request still in flight with a wrong key used to reopen the
// dialog after the right key was entered).
async function obtainKey(sentWith) {
  if (!signedInBySite && apiKey() && apiKey() !== sentWith) return true;
  if (signedInBySite) {
    onSiteSignInLost();
    return false;
  }
  if (!pendingPrompt) {
    const hadKey = Boolean(apiKey());
    pendingPrompt = keyPrompt(hadKey).then((key) => {
      pendingPrompt = null;
      if (key) {
        sessionStorage.setItem(KEY_STORAGE, key);
        window.dispatchEvent(new Event("rag:key"));
      } else {
        sessionStorage.removeItem(KEY_STORAGE);
      }
      return Boolean(key);
    });
  }
  return pendingPrompt;
}

async function errorFrom(response) {
  let type = "http_error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      type = body.error.type || type;
      message = body.error.message || message;
    }
  } catch (_) {
    /* not JSON */
  }
  if (response.status === 503 && type === "model_unavailable") message = t("api.modelsLoading");
  return new ApiError(response.status, type, message);
}

// fetch() with the key; a 401 asks for the key and retries. Non-2xx answers throw ApiError.
export async function apiFetch(path, options = {}) {
  for (;;) {
    const sentWith = apiKey();
    const headers = { ...(options.headers || {}), ...authHeaders() };
    let response;
    try {
      response = await fetch(path, { ...options, headers });
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError(0, "network", t("api.unreachable"));
    }
    if (response.status === 401) {
      if (await obtainKey(sentWith)) continue;
      throw UNAUTHORIZED();
    }
    if (!response.ok) throw await errorFrom(response);
    return response;
  }
}

// Who the server takes the caller for (GET /v1/me) without asking for a key: null when it does not know
// (401: no key yet, and no proxy that signs requests in) or cannot be reached.
export async function whoAmI() {
  try {
    const response = await fetch("/v1/me", { headers: authHeaders(), cache: "no-store" });
    return response.ok ? await response.json() : null;
  } catch (_) {
    return null;
  }
}

export async function getJSON(path) {
  return (await apiFetch(path)).json();
}

export async function sendJSON(method, path, body, signal) {
  const options = { method, signal, headers: { "Content-Type": "application/json" } };
  if (body !== undefined) options.body = JSON.stringify(body);
  return apiFetch(path, options);
}

// POST a JSON body and yield each Server-Sent Event's parsed `data:` payload.
export async function* streamEvents(path, body, signal) {
  const response = await sendJSON("POST", path, body, signal);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (!data) continue;
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

// Upload one file with XMLHttpRequest (for upload progress). onProgress(fraction); resolves with
// {status, body}; a 401 asks for the key and uploads again.
export function uploadFile(file, index, onProgress, groups = "") {
  const query = new URLSearchParams();
  if (index) query.set("index", index);
  if (groups) query.set("groups", groups); // absent: a new document is public, a replaced one keeps its groups
  const url = "/v1/documents" + (query.size ? `?${query}` : "");
  const once = () => new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url);
    const key = apiKey();
    if (key) xhr.setRequestHeader("Authorization", `Bearer ${key}`);
    xhr.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    });
    xhr.addEventListener("load", () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch (_) {
        /* not JSON */
      }
      resolve({ status: xhr.status, body, sentWith: key });
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "network", t("api.unreachable"))));
    xhr.addEventListener("abort", () => reject(new ApiError(0, "aborted", t("api.uploadCancelled"))));
    const form = new FormData();
    form.append("data", file, file.name);
    xhr.send(form);
  });
  return (async () => {
    for (;;) {
      const result = await once();
      if (result.status === 401) {
        if (await obtainKey(result.sentWith)) continue;
        throw UNAUTHORIZED();
      }
      return result;
    }
  })();
}

// Open a document's original file (GET /v1/documents/{id}/original, the same access check as its passages): a
// PDF in a new tab at `page`, anything else downloaded. The key goes in a header, so the file is fetched here
// and handed to the browser as a blob. `report(text)` shows why not.
export async function openOriginal(documentId, name, page, index, report) {
  const query = index ? `?index=${encodeURIComponent(index)}` : "";
  // A PDF opens in a tab of its own, opened on the click (later, a popup blocker would stop it).
  const opened = /\.pdf$/i.test(name || "") ? window.open("", "_blank") : null;
  try {
    const response = await apiFetch(`/v1/documents/${encodeURIComponent(documentId)}/original${query}`);
    const type = response.headers.get("Content-Type") || "";
    const url = URL.createObjectURL(await response.blob());
    if (type.startsWith("application/pdf") && opened) {
      opened.location.href = page ? `${url}#page=${page}` : url;
      return;
    }
    if (opened) opened.close();
    const link = Object.assign(document.createElement("a"), { href: url, download: name || "document" });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (err) {
    if (opened) opened.close();
    report(t("api.cannotOpenOriginal", { name, message: err.message }));
  }
}
