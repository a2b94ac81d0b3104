// The API docs pages (/schema/swagger, /schema/redoc; /schema is ReDoc too): the viewer is served by this
// server (no CDN) and shows the schema once the server gives it. With API keys, the page asks for one (the same
// key the app keeps in this tab), and Swagger UI's "Try it out" sends it.

import { loadLanguage, t, translatePage } from "./i18n.js";

const KEY_STORAGE = "rag.apiKey";
const viewer = document.body.dataset.viewer;
const form = document.getElementById("docs-key");
const input = document.getElementById("docs-key-input");
const message = document.getElementById("docs-message");
const target = document.getElementById("docs-viewer");

function key() {
  return sessionStorage.getItem(KEY_STORAGE) || "";
}

async function schema() {
  const headers = key() ? { Authorization: `Bearer ${key()}` } : {};
  const response = await fetch("/schema/openapi.json", { headers, cache: "no-store" });
  if (response.status === 401) return null;
  if (!response.ok) throw new Error(t("apiDocs.httpError", { status: response.status, statusText: response.statusText }));
  return response.json();
}

function render(spec) {
  form.hidden = true;
  if (viewer === "swagger") {
    window.SwaggerUIBundle({
      spec,
      domNode: target,
      deepLinking: true,
      validatorUrl: null, // no badge fetched from the validator's public site
      presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIStandalonePreset],
      layout: "BaseLayout",
      requestInterceptor: (request) => {
        if (key()) request.headers.Authorization = `Bearer ${key()}`;
        return request;
      },
    });
  } else {
    window.Redoc.init(spec, { hideDownloadButton: false }, target);
  }
}

async function show(afterKey) {
  let spec;
  try {
    spec = await schema();
  } catch (err) {
    message.textContent = t("apiDocs.loadFailed", { message: err.message });
    form.hidden = false;
    return;
  }
  if (spec) {
    render(spec);
    return;
  }
  sessionStorage.removeItem(KEY_STORAGE);
  message.textContent = t(afterKey ? "key.wrong" : "apiDocs.needKey");
  message.classList.toggle("error", Boolean(afterKey));
  form.hidden = false;
  input.value = "";
  input.focus();
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const typed = input.value.trim();
  if (!typed) return;
  sessionStorage.setItem(KEY_STORAGE, typed);
  show(true);
});

await loadLanguage();
translatePage();
document.title = t("apiDocs.title");
show(false);
