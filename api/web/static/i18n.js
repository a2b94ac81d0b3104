// The app's own texts in the browser's language: t(key, params) looks the text up in the message catalogue of
// the language chosen (static/i18n/<lang>.json, data, not code), English (en.json) when a key is missing there.
// Texts from the server (answers, quotes, titles, the API's error messages) are shown as they come.
//
// A catalogue maps a key to a text, or to its plural forms ({"one": …, "other": …}, the categories of
// Intl.PluralRules; "other" is always there). In a text, {name} is replaced by params.name: numbers are
// formatted for the language (Intl.NumberFormat). The form is chosen by params.count (cardinal: "1 token",
// "2 tokens") or by params.ordinal (ordinal: "1st", "2nd"). tNodes() does the same but a param may be a DOM node.

export const LANGUAGES = ["en", "de", "fr", "es"];
const FALLBACK = "en";

let lang = FALLBACK;
let messages = {};
let fallback = {};

// The first of the browser's languages (navigator.languages, "de-AT" counts as "de") the app has a catalogue
// for; ?lang=xx in the address overrides it.
export function chooseLanguage(search = location.search, preferred = navigator.languages || [navigator.language]) {
  const asked = new URLSearchParams(search).get("lang");
  for (const tag of [asked, ...preferred]) {
    const primary = String(tag || "").toLowerCase().split(/[-_]/)[0];
    if (LANGUAGES.includes(primary)) return primary;
  }
  return FALLBACK;
}

async function fetchCatalogue(code) {
  const response = await fetch(`/static/i18n/${code}.json`, { cache: "no-cache" });
  if (!response.ok) throw new Error(`no catalogue for ${code}: ${response.status}`);
  return response.json();
}

// Loads the catalogues (the chosen language's and English) and sets <html lang>. Never throws: a catalogue
// that cannot be loaded leaves English (or, without en.json either, the keys' texts in the HTML).
export async function loadLanguage(code = chooseLanguage()) {
  const [english, chosen] = await Promise.all([
    fetchCatalogue(FALLBACK).catch(() => ({})),
    code === FALLBACK ? null : fetchCatalogue(code).catch(() => null),
  ]);
  fallback = english;
  messages = chosen || english;
  lang = chosen ? code : FALLBACK;
  document.documentElement.lang = lang;
  return lang;
}

export function language() {
  return lang;
}

export function formatNumber(n, options = {}) {
  return new Intl.NumberFormat(lang, options).format(n);
}

function lookup(key, params) {
  let value = Object.hasOwn(messages, key) ? messages[key] : fallback[key];
  if (value === undefined) return key;
  if (typeof value === "object" && value !== null) {
    const ordinal = params.ordinal !== undefined;
    const n = ordinal ? params.ordinal : params.count;
    const category = new Intl.PluralRules(lang, { type: ordinal ? "ordinal" : "cardinal" }).select(Number(n) || 0);
    value = value[category] ?? value.other ?? "";
  }
  return String(value);
}

function paramText(value) {
  return typeof value === "number" ? formatNumber(value) : String(value ?? "");
}

// The text of `key` with its {params} filled in.
export function t(key, params = {}) {
  return lookup(key, params).replace(/\{(\w+)\}/g, (whole, name) => (name in params ? paramText(params[name]) : whole));
}

// As t(), as a list of strings and nodes: a param that is a DOM node (a link, <strong>) is put in as it is.
export function tNodes(key, params = {}) {
  const parts = lookup(key, params).split(/\{(\w+)\}/);
  return parts.map((part, i) => {
    if (i % 2 === 0) return part;
    if (!(part in params)) return `{${part}}`;
    return params[part] instanceof Node ? params[part] : paramText(params[part]);
  }).filter((part) => part !== "");
}

// The page's own texts: data-i18n="key" (the text), data-i18n-placeholder, data-i18n-title,
// data-i18n-aria-label (those attributes). An element whose text holds markup names its parts in
// data-i18n-nodes: {name} in the text is replaced by its child with data-i18n-part="name".
export function translatePage(root = document) {
  for (const el of root.querySelectorAll("[data-i18n]")) {
    const key = el.dataset.i18n;
    if (el.hasAttribute("data-i18n-nodes")) {
      const parts = {};
      for (const child of el.querySelectorAll("[data-i18n-part]")) parts[child.dataset.i18nPart] = child;
      el.replaceChildren(...tNodes(key, parts));
    } else {
      el.textContent = t(key);
    }
  }
  for (const attribute of ["placeholder", "title", "aria-label"]) {
    for (const el of root.querySelectorAll(`[data-i18n-${attribute}]`)) {
      el.setAttribute(attribute, t(el.getAttribute(`data-i18n-${attribute}`)));
    }
  }
}
