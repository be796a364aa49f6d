"use strict";
// Small helpers shared by every view: DOM building, number formatting, colours, searching, the URL hash.
const UNITS = ["DMA", "MXU", "QUANT", "VPU", "COLL"];
const UNIT_COLOURS = ["#4e79a7", "#e15759", "#f28e2b", "#59a14f", "#b07aa1"];
const DRAM_COLOUR = "#76b7b2";
const BUCKET_COLOURS = {
  "port B streaming": "#2f6fb5", "port A streaming": "#76b7b2", "program fetch": "#9c755f", "DRAM latency": "#bab0ac",
  "MXU computing": "#e15759", "VPU busy": "#59a14f", "quantiser busy": "#f28e2b", "collective busy": "#b07aa1",
  "DMA busy": "#4e79a7", "waiting on dependencies": "#edc948", "nothing in flight": "#e6e6e6",
};
const STATE_COLOURS = {
  busy: "#59a14f", streaming: "#2f6fb5", dram: "#e15759", tmem: "#b07aa1", dep: "#edc948", queued: "#f28e2b", idle: "#eceff2",
};
const STATE_TEXT = {
  busy: "busy computing", streaming: "streaming from DRAM", dram: "stalled on DRAM (waiting for its turn or for data in flight)",
  tmem: "writing back, lost TMEM bank arbitration", dep: "dispatched, waiting on a dependency",
  queued: "ready, queued behind the unit's previous instruction", idle: "idle",
};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

const nf = new Intl.NumberFormat("en-US");
function fmt(n) { return Number.isFinite(n) ? nf.format(Math.round(n)) : "–"; }
function pct(x) { return Number.isFinite(x) ? (100 * x).toFixed(1) + "%" : "–"; }
function fix(x, d) { return Number.isFinite(x) ? x.toFixed(d) : "–"; }
function us(cycles, mhz) { return (cycles / mhz).toFixed(cycles / mhz < 10 ? 2 : 1) + " µs"; }

// index of the last element <= x in a sorted typed array (or -1)
function lastAtOrBefore(arr, x, lo = 0, hi = arr.length) {
  while (lo < hi) { const mid = (lo + hi) >>> 1; if (arr[mid] <= x) lo = mid + 1; else hi = mid; }
  return lo - 1;
}
// index of the first element > x
function firstAfter(arr, x) { return lastAtOrBefore(arr, x) + 1; }

function parseHash() {
  const out = {};
  const h = location.hash.replace(/^#/, "");
  for (const part of h.split("&")) {
    if (!part) continue;
    const [k, v] = part.split("=");
    out[decodeURIComponent(k)] = v === undefined ? "" : decodeURIComponent(v);
  }
  return out;
}

function writeHash(state) {
  const parts = [];
  for (const k of ["view", "profile", "slice", "t", "pin", "i", "src"]) {
    const v = state[k];
    if (v !== undefined && v !== null && v !== "" && !(typeof v === "number" && Number.isNaN(v))) parts.push(`${k}=${encodeURIComponent(v)}`);
  }
  const h = "#" + parts.join("&");
  if (h !== location.hash) history.replaceState(null, "", h);
}

function unitIndex(name) {
  if (name === undefined || name === null || name === "") return -1;
  const n = String(name).toUpperCase();
  const aliases = { Q: 2, QNT: 2, QUANTISER: 2, QUANTIZER: 2, COLLECTIVE: 4 };
  if (n in aliases) return aliases[n];
  return UNITS.indexOf(n);
}

function sortRows(rows, key, desc) {
  rows.sort((a, b) => {
    const x = a[key], y = b[key];
    const c = (typeof x === "string" || typeof y === "string") ? String(x).localeCompare(String(y)) : x - y;
    return desc ? -c : c;
  });
  return rows;
}

function gridTable(columns, rows, opts = {}) {
  // columns: [{key, label, left, fmt}]; rows: objects; opts.onclick(row), opts.selected(row), opts.sort {key, desc}
  const state = opts.sort || { key: columns[1] ? columns[1].key : columns[0].key, desc: true };
  const table = el("table", { class: "grid" });
  const render = () => {
    sortRows(rows, state.key, state.desc);
    table.replaceChildren(
      el("thead", {}, el("tr", {}, columns.map(c => el("th", {
        class: c.left ? "l" : "", title: "sort",
        onclick: () => { if (state.key === c.key) state.desc = !state.desc; else { state.key = c.key; state.desc = !c.left; } render(); },
      }, c.label + (state.key === c.key ? (state.desc ? " ▾" : " ▴") : ""))))),
      el("tbody", {}, rows.map(r => el("tr", {
        class: opts.selected && opts.selected(r) ? "sel" : "", onclick: opts.onclick ? () => opts.onclick(r) : null,
        "data-key": opts.rowKey ? opts.rowKey(r) : null,
      }, columns.map(c => el("td", { class: c.left ? "l" : "" }, c.fmt ? c.fmt(r[c.key], r) : r[c.key]))))));
  };
  render();
  table.rerender = render;
  return table;
}
