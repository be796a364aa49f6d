"use strict";
// Timeline: one row per unit (per slice), the DRAM streams, and counter strips from the activity windows.
// Canvas, drawn from the typed arrays: only what is visible, one pixel column at a time when zoomed out.
const TL = { label: 92, lane: 24, strip: 28, axis: 26, pad: 4 };
// [label, window fields summed as a share of the window's cycles, colour]; the MXU FIFO strip's
// bars are the cycles its chunk FIFO ran empty while streaming (ms), its line the mean FIFO level
// as a share of FIFO_DEPTH (ff: the level summed over the window's cycles; the timing model does
// not model the level, so only a card's records draw the line).
const STRIPS = [
  ["port B", ["bm", "bd"], "#2f6fb5"], ["MXU compute", ["mx"], "#e15759"],
  ["DRAM stalls", ["bs", "as"], "#b26a00"], ["TMEM losses", ["fm"], "#b07aa1"],
  ["MXU FIFO", ["ms"], "#d4a000", "ff"],
];

function fifoLevel(w, k, depth) { return w.ff && depth ? w.ff[k] / Math.max(1, w.n[k]) / depth : 0; }
function hasFifoLevel(w) { return !!(w.ff && w.ff.some(v => v > 0)); }

function timelineLayout(m) {
  const rows = [];
  let y = TL.axis;
  for (let s = 0; s < m.slices; s++) {
    UNITS.forEach((u, k) => { rows.push({ kind: "unit", slice: s, unit: k, label: (m.slices > 1 ? `S${s} ` : "") + u, y, h: TL.lane }); y += TL.lane; });
    rows.push({ kind: "dram", slice: s, label: (m.slices > 1 ? `S${s} ` : "") + "DRAM", y, h: TL.lane }); y += TL.lane;
    STRIPS.forEach(([label, keys, colour, level]) => { rows.push({ kind: "strip", slice: s, label, keys, colour, level, y, h: TL.strip }); y += TL.strip; });
    y += TL.pad;
  }
  return { rows, height: y + 4 };
}

class Timeline {
  constructor(app) {
    this.app = app;
    this.canvas = document.getElementById("tl-canvas");
    this.tip = document.getElementById("tl-tip");
    this.t0 = 0; this.t1 = 1; this.drag = null;
    const c = this.canvas;
    c.addEventListener("wheel", e => { e.preventDefault(); this.zoom(e.deltaY > 0 ? 1.25 : 0.8, this.cycleAt(e.offsetX)); }, { passive: false });
    c.addEventListener("mousedown", e => { this.drag = { x: e.offsetX, t0: this.t0, t1: this.t1, moved: false }; });
    window.addEventListener("mouseup", e => {
      if (!this.drag) return;
      const d = this.drag; this.drag = null;
      if (!d.moved && e.target === c) this.click(e.offsetX, e.offsetY);
    });
    c.addEventListener("mousemove", e => this.move(e));
    c.addEventListener("mouseleave", () => { this.tip.hidden = true; });
    c.addEventListener("dblclick", () => { this.reset(); this.draw(); });
    new ResizeObserver(() => { if (this.app.state.view === "timeline") this.draw(); }).observe(c);
  }
  setModel(m) { this.m = m; this.layout = timelineLayout(m); this.reset(); }
  reset() { this.t0 = 0; this.t1 = Math.max(1, this.m.p.cycles); }
  plotWidth() { return Math.max(50, this.canvas.clientWidth - TL.label); }
  cycleAt(x) { return this.t0 + (x - TL.label) / this.plotWidth() * (this.t1 - this.t0); }
  xOf(t) { return TL.label + (t - this.t0) / (this.t1 - this.t0) * this.plotWidth(); }
  zoom(f, at) {
    const span = Math.min(Math.max((this.t1 - this.t0) * f, 8), Math.max(this.m.p.cycles, 8) * 1.05);
    const r = (at - this.t0) / (this.t1 - this.t0);
    this.t0 = at - r * span; this.t1 = this.t0 + span; this.draw();
  }
  centre(t, span) {
    const w = span || (this.t1 - this.t0);
    this.t0 = t - w / 2; this.t1 = t + w / 2;
  }
  move(e) {
    if (this.drag) {
      const dx = e.offsetX - this.drag.x;
      if (Math.abs(dx) > 2) this.drag.moved = true;
      const dt = dx / this.plotWidth() * (this.drag.t1 - this.drag.t0);
      this.t0 = this.drag.t0 - dt; this.t1 = this.drag.t1 - dt; this.draw();
      return;
    }
    const hit = this.hit(e.offsetX, e.offsetY);
    if (!hit) { this.tip.hidden = true; return; }
    this.tip.hidden = false;
    this.tip.replaceChildren(...hit.lines.map(l => el("div", {}, l)));
    const left = Math.min(e.offsetX + 14, this.canvas.clientWidth - 300);
    this.tip.style.left = left + "px"; this.tip.style.top = (e.offsetY + 14) + "px";
  }
  rowAt(y) { return this.layout.rows.find(r => y >= r.y && y < r.y + r.h); }
  hit(x, y) {
    if (x < TL.label) return null;
    const row = this.rowAt(y), m = this.m, t = this.cycleAt(x);
    if (!row) return null;
    const tol = 3 / this.plotWidth() * (this.t1 - this.t0);
    if (row.kind === "unit" || row.kind === "dram") {
      const lane = row.kind === "unit" ? m.lanes[row.slice][row.unit] : m.dram[row.slice];
      let k = lastAtOrBefore(lane.starts, t + tol);
      if (k < 0 || lane.ends[k] < t - tol) return { lines: [`${row.label}: idle at cycle ${fmt(t)}`] };
      const i = lane.idx[k];
      return { i, lines: instrLines(m, i) };
    }
    const w = (m.p.windows || [])[row.slice];
    if (!w || !w.cycle.length) return null;
    const k = firstAfter(w.cycle, t);
    if (k >= w.cycle.length) return null;
    const v = row.keys.reduce((a, key) => a + w[key][k], 0) / Math.max(1, w.n[k]);
    const span = `window ${fmt(w.cycle[k] - w.n[k])}–${fmt(w.cycle[k])}`;
    if (!row.level) return { lines: [`${row.label}: ${pct(v)} of ${span}`] };
    const depth = m.p.config.FIFO_DEPTH;
    return { lines: [`${row.label}: empty while streaming ${pct(v)} of ${span}`,
      hasFifoLevel(w) ? `mean level ${fmt(Math.round(fifoLevel(w, k, depth) * depth))} of ${fmt(depth)} chunks`
        : "level not in the records (the timing model does not model it)"] };
  }
  click(x, y) {
    const h = this.hit(x, y);
    if (h && h.i !== undefined) this.app.select(h.i, { t: Math.round(this.m.start[h.i]), keepView: true });
  }
  draw() {
    const m = this.m; if (!m) return;
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    const W = c.clientWidth || 800, H = this.layout.height;
    c.style.height = H + "px";
    if (c.width !== Math.round(W * dpr) || c.height !== Math.round(H * dpr)) { c.width = Math.round(W * dpr); c.height = Math.round(H * dpr); }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fff"; g.fillRect(0, 0, W, H);
    this.drawAxis(g, W);
    const sel = this.app.state.i, src = this.app.state.src;
    for (const row of this.layout.rows) {
      g.fillStyle = row.kind === "strip" ? "#fafbfc" : "#f5f7f9";
      g.fillRect(TL.label, row.y + 1, W - TL.label, row.h - 2);
      g.fillStyle = "#1d2327"; g.font = "11px system-ui, sans-serif"; g.textBaseline = "middle";
      g.fillText(row.label, 6, row.y + row.h / 2);
      g.save(); g.beginPath(); g.rect(TL.label, 0, W - TL.label, H); g.clip();
      if (row.kind === "unit") this.drawLane(g, m.lanes[row.slice][row.unit], row, UNIT_COLOURS[row.unit], sel, src, true);
      else if (row.kind === "dram") this.drawLane(g, m.dram[row.slice], row, DRAM_COLOUR, sel, src, false);
      else this.drawStrip(g, row);
      g.restore();
    }
    const t = this.app.state.t;
    if (Number.isFinite(t)) {
      const X = this.xOf(t);
      g.strokeStyle = "#c62828"; g.lineWidth = 1; g.beginPath(); g.moveTo(X, TL.axis - 6); g.lineTo(X, H); g.stroke();
    }
    document.getElementById("tl-range").textContent =
      `cycles ${fmt(Math.max(0, this.t0))} – ${fmt(Math.min(m.p.cycles, this.t1))} of ${fmt(m.p.cycles)} (${us(Math.max(0, this.t1 - this.t0), m.p.clock_mhz)} shown)`;
  }
  drawAxis(g, W) {
    const span = this.t1 - this.t0, target = span / Math.max(2, this.plotWidth() / 110);
    const p10 = Math.pow(10, Math.floor(Math.log10(target)));
    const step = [1, 2, 5, 10].map(k => k * p10).find(s => s >= target) || p10 * 10;
    g.fillStyle = "#6b7480"; g.font = "10px system-ui, sans-serif"; g.textBaseline = "alphabetic";
    g.strokeStyle = "#e3e7eb";
    for (let t = Math.ceil(this.t0 / step) * step; t <= this.t1; t += step) {
      const X = this.xOf(t);
      g.beginPath(); g.moveTo(X, TL.axis - 4); g.lineTo(X, this.layout.height); g.stroke();
      g.fillText(fmt(t), X + 2, TL.axis - 8);
    }
  }
  drawLane(g, lane, row, colour, sel, src, unitLane) {
    const m = this.m, n = lane.idx.length; if (!n) return;
    const k0 = firstAfter(lane.ends, this.t0), k1 = firstAfter(lane.starts, this.t1);
    const count = k1 - k0, pw = this.plotWidth();
    const y = row.y + 3, h = row.h - 6;
    const starts = unitLane ? m.start : m.ds, ends = unitLane ? m.end : m.de;
    if (count > pw * 2) {
      // zoomed out: which pixel columns are covered, drawn as runs
      const cover = new Uint8Array(pw + 2);
      const scale = pw / (this.t1 - this.t0);
      for (let k = k0; k < k1; k++) {
        const a = Math.max(0, Math.floor((lane.starts[k] - this.t0) * scale)), b = Math.min(pw + 1, Math.ceil((lane.ends[k] - this.t0) * scale));
        for (let x = a; x < Math.max(b, a + 1); x++) cover[x] = 1;
      }
      g.fillStyle = colour;
      let runStart = -1;
      for (let x = 0; x <= pw + 1; x++) {
        if (cover[x] && runStart < 0) runStart = x;
        if ((!cover[x] || x === pw + 1) && runStart >= 0) { g.fillRect(TL.label + runStart, y, x - runStart, h); runStart = -1; }
      }
    } else {
      const detail = count < 4000;
      for (let k = k0; k < k1; k++) {
        const i = lane.idx[k];
        const x0 = this.xOf(starts[i]), x1 = Math.max(this.xOf(ends[i]), x0 + 1);
        g.fillStyle = colour;
        g.fillRect(x0, y, x1 - x0, h);
        if (unitLane && detail && m.de[i] > m.ds[i]) {   // the DRAM stream inside the instruction
          g.fillStyle = "rgba(0,0,0,0.22)"; g.fillRect(this.xOf(m.ds[i]), y + h - 4, Math.max(1, this.xOf(m.de[i]) - this.xOf(m.ds[i])), 4);
        }
        if (unitLane && detail && m.d[i] < m.start[i]) {  // dispatch -> start: amber while dependencies are pending
          const yd = row.y + 2;
          g.strokeStyle = "#d89b00"; g.lineWidth = 1.5; g.beginPath(); g.moveTo(this.xOf(m.d[i]), yd); g.lineTo(this.xOf(m.ready[i]), yd); g.stroke();
          g.strokeStyle = "#9aa3ad"; g.beginPath(); g.moveTo(this.xOf(m.ready[i]), yd); g.lineTo(x0, yd); g.stroke();
        }
        if (detail && x1 - x0 > 40) {
          g.fillStyle = "#fff"; g.font = "10px system-ui, sans-serif"; g.textBaseline = "middle";
          const name = (m.prog[m.pc[i]] || [0, "?"])[1];
          g.save(); g.beginPath(); g.rect(x0, y, x1 - x0, h); g.clip(); g.fillText(name, x0 + 3, y + h / 2); g.restore();
        }
        if (i === sel || (src >= 0 && m.src[i] === src)) {
          g.strokeStyle = i === sel ? "#000" : "#d4a000"; g.lineWidth = 2; g.strokeRect(x0 - 1, y - 1, x1 - x0 + 2, h + 2);
        }
      }
    }
    if (sel >= 0 && sel < m.n && (unitLane ? m.unit[sel] === row.unit : m.de[sel] > m.ds[sel]) && m.slice[sel] === row.slice) {
      const x0 = this.xOf(starts[sel]), x1 = Math.max(this.xOf(ends[sel]), x0 + 1);
      g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(x0 - 1, y - 1, x1 - x0 + 2, h + 2);
    }
  }
  drawStrip(g, row) {
    const w = (this.m.p.windows || [])[row.slice];
    if (!w || !w.cycle.length) return;
    g.fillStyle = row.colour;
    const base = row.y + row.h - 2, hmax = row.h - 5;
    for (let k = 0; k < w.cycle.length; k++) {
      const end = w.cycle[k], begin = end - w.n[k];
      if (end < this.t0 || begin > this.t1) continue;
      const v = row.keys.reduce((a, key) => a + w[key][k], 0) / Math.max(1, w.n[k]);
      const x0 = this.xOf(begin), x1 = Math.max(this.xOf(end), x0 + 1), hh = Math.min(1, v) * hmax;
      g.fillRect(x0, base - hh, x1 - x0, hh);
    }
    if (row.level && hasFifoLevel(w)) this.drawLevel(g, w, base, hmax);
  }
  drawLevel(g, w, base, hmax) {
    const depth = this.m.p.config.FIFO_DEPTH;
    g.strokeStyle = "#1d2327"; g.lineWidth = 1.25; g.beginPath();
    let first = true;
    for (let k = 0; k < w.cycle.length; k++) {
      const end = w.cycle[k], begin = end - w.n[k];
      if (end < this.t0 || begin > this.t1) continue;
      const y = base - Math.min(1, fifoLevel(w, k, depth)) * hmax;
      if (first) { g.moveTo(this.xOf(begin), y); first = false; } else g.lineTo(this.xOf(begin), y);
      g.lineTo(this.xOf(end), y);
    }
    g.stroke();
  }
}

function instrLines(m, i) {
  const row = progRow(m, i), src = sourceOf(m, i);
  const lines = [`#${i} ${UNITS[m.unit[i]] || "?"} pc ${m.pc[i]}: ${row[2]}`,
    `dispatch ${fmt(m.d[i])} · ready ${fmt(m.ready[i])} · start ${fmt(m.start[i])} · end ${fmt(m.end[i])} (${fmt(m.end[i] - m.start[i])} cycles)`];
  if (m.de[i] > m.ds[i]) lines.push(`DRAM stream ${fmt(m.ds[i])} – ${fmt(m.de[i])} (${fmt(m.de[i] - m.ds[i])} cycles)`);
  if (m.starve[i]) lines.push(`MXU starved ${fmt(m.starve[i])} cycles`);
  if (src) lines.push(`${sourceLabel(src)} ${src.func}: ${src.text}`);
  return lines;
}
