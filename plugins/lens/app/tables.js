"use strict";
// The instruction table (virtual: only the rows on screen are in the DOM, so a million rows scroll) and the
// source-line table. Both sort by a column, filter by text, and a click jumps to the timeline.
const IN_COLS = [
  ["#", i => i, "num"], ["slice", null, "num"], ["pc", null, "num"], ["class", null, ""], ["unit", null, ""],
  ["dispatch", null, "num"], ["ready", null, "num"], ["start", null, "num"], ["end", null, "num"],
  ["busy", null, "num"], ["wait", null, "num"], ["source", null, ""],
];
const ROW_H = 22;

class InstrTable {
  constructor(app) {
    this.app = app; this.sortKey = "#"; this.desc = false;
    this.body = document.getElementById("in-body"); this.rows = document.getElementById("in-rows");
    this.spacer = document.getElementById("in-spacer");
    this.body.addEventListener("scroll", () => this.paint());
    document.getElementById("in-filter").addEventListener("input", e => { this.filter = e.target.value; this.refresh(); });
  }
  setModel(m) {
    this.m = m;
    this.head();
    this.refresh();
  }
  key(name) {
    const m = this.m;
    switch (name) {
      case "#": return i => i;
      case "slice": return i => m.slice[i];
      case "pc": return i => m.pc[i];
      case "class": return i => m.cls[i];
      case "unit": return i => m.unit[i];
      case "dispatch": return i => m.d[i];
      case "ready": return i => m.ready[i];
      case "start": return i => m.start[i];
      case "end": return i => m.end[i];
      case "busy": return i => m.end[i] - m.start[i];
      case "wait": return i => m.start[i] - m.d[i];
      default: return i => m.src[i];
    }
  }
  head() {
    document.getElementById("in-head").replaceChildren(...IN_COLS.map(([name, , cls]) => el("div", {
      class: cls, onclick: () => { if (this.sortKey === name) this.desc = !this.desc; else { this.sortKey = name; this.desc = name !== "#" && cls === "num"; } this.head(); this.refresh(); },
    }, name + (this.sortKey === name ? (this.desc ? " ▾" : " ▴") : ""))));
  }
  refresh() {
    const m = this.m, q = (this.filter || "").trim().toLowerCase();
    let order;
    if (q) {
      // match per class, per source and per pc once, then per row by lookup
      const clsOk = m.p.classes.map(c => c.includes(q));
      const srcOk = m.p.sources.map(s => `${s.file}:${s.line} ${s.func} ${s.text}`.toLowerCase().includes(q));
      const pcOk = m.prog.map(r => String(r[2]).toLowerCase().includes(q));
      const unitOk = UNITS.map(u => u.toLowerCase() === q);
      const out = [];
      for (let i = 0; i < m.n; i++) {
        if ((m.cls[i] >= 0 && clsOk[m.cls[i]]) || (m.src[i] >= 0 && srcOk[m.src[i]]) || pcOk[m.pc[i]] || (m.unit[i] >= 0 && unitOk[m.unit[i]])) out.push(i);
      }
      order = Int32Array.from(out);
    } else {
      order = new Int32Array(m.n);
      for (let i = 0; i < m.n; i++) order[i] = i;
    }
    if (this.sortKey !== "#" || this.desc) {
      const f = this.key(this.sortKey), vals = new Float64Array(m.n);
      for (const i of order) vals[i] = f(i);
      const sgn = this.desc ? -1 : 1;
      order.sort((a, b) => sgn * (vals[a] - vals[b]) || a - b);
    }
    this.order = order;
    document.getElementById("in-count").textContent = `${fmt(order.length)} of ${fmt(m.n)} instructions`;
    this.spacer.style.height = (order.length * ROW_H) + "px";
    this.paint();
  }
  paint() {
    const m = this.m, order = this.order; if (!order) return;
    const top = this.body.scrollTop, h = this.body.clientHeight || 600;
    const k0 = Math.max(0, Math.floor(top / ROW_H) - 5), k1 = Math.min(order.length, Math.ceil((top + h) / ROW_H) + 5);
    this.rows.style.top = (k0 * ROW_H) + "px";
    const sel = this.app.state.i, kids = [];
    for (let k = k0; k < k1; k++) {
      const i = order[k], src = sourceOf(m, i), row = progRow(m, i);
      kids.push(el("div", { class: "vt-row" + (i === sel ? " sel" : ""), "data-index": i, title: row[2], onclick: () => this.app.select(i, { view: "timeline" }) },
        el("div", { class: "num" }, i), el("div", { class: "num" }, m.slice[i]), el("div", { class: "num" }, m.pc[i]),
        el("div", {}, row[1]), el("div", {}, el("span", { class: "swatch", style: `background:${UNIT_COLOURS[m.unit[i]] || "#999"}` }), UNITS[m.unit[i]] || "?"),
        el("div", { class: "num" }, fmt(m.d[i])), el("div", { class: "num" }, fmt(m.ready[i])), el("div", { class: "num" }, fmt(m.start[i])),
        el("div", { class: "num" }, fmt(m.end[i])), el("div", { class: "num" }, fmt(m.end[i] - m.start[i])), el("div", { class: "num" }, fmt(m.start[i] - m.d[i])),
        el("div", {}, src ? `${sourceLabel(src)} ${src.text}` : "")));
    }
    this.rows.replaceChildren(...kids);
  }
  scrollTo(i) {
    if (!this.order) return;
    const k = this.order.indexOf(i);
    if (k >= 0) { const h = this.body.clientHeight || 600; this.body.scrollTop = Math.max(0, k * ROW_H - h / 2); }
    this.paint();
  }
}

function renderSources(app) {
  const m = app.model, p = m.p, root = document.getElementById("src-table");
  const q = (document.getElementById("src-filter").value || "").trim().toLowerCase();
  const rows = (p.source_table || []).map(r => {
    const s = p.sources[r.src];
    const caller = s.chain.length ? s.chain[s.chain.length - 1] : null;
    return { ...r, where: `${sourceLabel(s)} ${s.func}`, text: s.text, caller: caller ? `${sourceLabel(caller)} ${caller.func}` : "" };
  }).filter(r => !q || `${r.where} ${r.text} ${r.caller}`.toLowerCase().includes(q));
  document.getElementById("src-count").textContent = `${rows.length} source lines`;
  const cols = [
    { key: "where", label: "line", left: true }, { key: "caller", label: "called from", left: true },
    { key: "busy", label: "busy cycles", fmt: fmt }, { key: "count", label: "instructions", fmt: fmt },
    { key: "work", label: "nominal work", fmt: fmt }, { key: "dep_wait", label: "dependency wait", fmt: fmt },
    { key: "unit_wait", label: "unit wait", fmt: fmt }, { key: "starve", label: "MXU starved", fmt: fmt },
    { key: "bytes", label: "DRAM bytes", fmt: fmt }, { key: "macs", label: "MACs", fmt: fmt },
    { key: "text", label: "source", left: true, fmt: v => el("code", { class: "clip", title: v }, v) },
  ];
  const table = gridTable(cols, rows, {
    sort: app.srcSort || { key: "busy", desc: true }, selected: r => r.src === app.state.src, rowKey: r => r.src,
    onclick: r => {
      let first = -1;
      for (let i = 0; i < m.n; i++) if (m.src[i] === r.src) { first = i; break; }
      if (first >= 0) app.select(first, { view: "timeline", src: r.src }); else app.set({ src: r.src });
    },
  });
  root.replaceChildren(table);
}
