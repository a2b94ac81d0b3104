// DOM building without innerHTML: every string from a document, the model or a file name becomes a text node.

import { formatNumber, language, t } from "./i18n.js";

// h("a", {href: "#x", class: "cite"}, "text", childNode, [more, children])
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) throw new Error("use addEventListener, not on* attributes");
    if (name === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Whitespace-tolerant search: the sentences sent to the model had their line breaks turned into spaces.
// Returns [start, end] in `text`, or null.
function findLoosely(text, needle, from = 0) {
  const words = needle.trim().split(/\s+/).filter(Boolean);
  if (!words.length) return null;
  const pattern = new RegExp(words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("\\s+"), "g");
  pattern.lastIndex = from;
  const match = pattern.exec(text);
  return match ? [match.index, match.index + match[0].length] : null;
}

// Character ranges of `text` to highlight: each highlight string where it occurs (a highlight that is not
// found whole is looked for sentence by sentence). Sorted, merged.
export function highlightRanges(text, highlights) {
  const ranges = [];
  for (const highlight of highlights || []) {
    const whole = findLoosely(text, highlight);
    if (whole) {
      ranges.push(whole);
      continue;
    }
    for (const part of highlight.split(/(?<=[.!?])\s+/)) {
      const found = part.trim().length > 3 ? findLoosely(text, part) : null;
      if (found) ranges.push(found);
    }
  }
  ranges.sort((a, b) => a[0] - b[0]);
  const merged = [];
  for (const range of ranges) {
    const last = merged[merged.length - 1];
    if (last && range[0] <= last[1]) last[1] = Math.max(last[1], range[1]);
    else merged.push([...range]);
  }
  return merged;
}

// `text` as nodes, with <mark> around the highlighted ranges.
export function highlighted(text, highlights) {
  const nodes = [];
  let at = 0;
  for (const [start, end] of highlightRanges(text, highlights)) {
    if (start > at) nodes.push(document.createTextNode(text.slice(at, start)));
    nodes.push(h("mark", {}, text.slice(start, end)));
    at = end;
  }
  if (at < text.length) nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

// `text` as nodes, with <mark class="quote"> around exact [start, end) character ranges (evidence offsets).
export function markedRanges(text, ranges) {
  const nodes = [];
  let at = 0;
  for (const [start, end] of [...ranges].sort((a, b) => a[0] - b[0])) {
    if (start < at || end > text.length || end <= start) continue;
    if (start > at) nodes.push(document.createTextNode(text.slice(at, start)));
    nodes.push(h("mark", { class: "quote" }, text.slice(start, end)));
    at = end;
  }
  if (at < text.length) nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

// Seconds in the page's language: "1.23 s" ("1,23 s" in German), whole seconds from 10 s on.
export function formatSeconds(ms) {
  const digits = ms >= 10000 ? 0 : 2;
  return t("time.seconds", { seconds: formatNumber(ms / 1000, { minimumFractionDigits: digits, maximumFractionDigits: digits }) });
}

export function formatDate(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso || "") : new Intl.DateTimeFormat(language(), {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  }).format(date);
}
