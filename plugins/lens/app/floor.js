"use strict";
// Floorplan replay: the target's units laid out as blocks, coloured by what each is doing at the cursor cycle.
// Play / pause (space), step (arrows), speed, scrub; continuous or instruction by instruction.
const FP_HELP = [
  "Each block is a part of the machine at the cursor cycle. Colours: " +
  Object.entries(STATE_TEXT).map(([k, v]) => `${v} (${k})`).join("; ") + ".",
  "DRAM channels and ports light up while a transfer streams; the dispatch window shows how many of its slots hold an instruction " +
  "dispatched and not yet complete; TMEM banks and VPU lanes light with the VPU, ACT RAM with the quantiser and the MXU.",
  "The bar above compares the run with its roofline bound: the grey part is the cycles the bound does not explain.",
  "Hover a block for what it is and what it is doing; click to pin the card (Esc closes). Space plays, arrows step.",
];
const BLOCK_INFO = {
  dram0: "DRAM channel 0: 64-byte beats interleave across the two channels.", dram1: "DRAM channel 1.",
  portb: "Port B: MXU weight rows and DMA (LD, ST) transfers.", porta: "Port A: MM scales and QST (KV cache) writes.",
  dma: "DMA unit: LD, ST, WAITW, DSTEP, STREAM between DRAM and TMEM.", act: "ACT RAM: quantised activations the MXU multiplies.",
  mxu: "MXU: one D-byte weight chunk per cycle against MCOLS activation columns.", quant: "Quantiser: QACT (to ACT RAM), QST (to the KV cache).",
  tmem: "TMEM: fp32 words in LANES banks (bank = address mod LANES).", vpu: "VPU: LANES words per cycle, composites slower.",
  coll: "Collective unit: BAR and GATHER across slices.", win: "Dispatch window: instructions dispatched and not yet complete.",
};

class Floorplan {
  constructor(app) {
    this.app = app; this.playing = false; this.raf = 0; this.pinned = null;
    this.wrap = document.getElementById("fp-svg-wrap");
    this.card = document.getElementById("fp-card");
    this.scrub = document.getElementById("fp-scrub");
    document.getElementById("fp-play").addEventListener("click", () => this.toggle());
    document.getElementById("fp-step").addEventListener("click", () => this.step(1));
    document.getElementById("fp-back").addEventListener("click", () => this.step(-1));
    document.getElementById("fp-help-btn").addEventListener("click", () => { const h = document.getElementById("fp-help"); h.hidden = !h.hidden; });
    document.getElementById("fp-help").replaceChildren(...FP_HELP.map(t => el("p", {}, t)));
    this.scrub.addEventListener("input", () => this.app.set({ t: Number(this.scrub.value) }, { quiet: true }));
    document.addEventListener("keydown", e => {
      if (this.app.state.view !== "floor" || e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
      if (e.key === " ") { e.preventDefault(); this.toggle(); }
      else if (e.key === "ArrowRight") { e.preventDefault(); this.step(1); }
      else if (e.key === "ArrowLeft") { e.preventDefault(); this.step(-1); }
      else if (e.key === "Escape") { this.pinned = null; this.card.hidden = true; }
    });
  }
  setModel(m) {
    this.m = m; this.slice = 0;
    const cfg = m.p.config;
    this.scrub.max = Math.max(1, m.p.cycles);
    this.build(cfg);
    const roof = m.p.roofline, frac = Math.min(1, roof.bound_cycles / Math.max(1, m.p.cycles));
    document.getElementById("fp-gap").replaceChildren(
      el("div", { class: "bar", title: `roofline bound ${fmt(roof.bound_cycles)} of ${fmt(m.p.cycles)} cycles` },
        el("div", { style: `width:${(100 * frac).toFixed(2)}%;background:#2f6fb5` }), el("div", { style: `width:${(100 - 100 * frac).toFixed(2)}%;background:#cfd5db` })),
      el("div", { class: "mute" }, `roofline gap: the ${roof.bound} bound explains ${pct(frac)} of the ${fmt(m.p.cycles)} cycles`));
  }
  build(cfg) {
    const W = 900, H = 430, g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "fp-svg" });
    this.blocks = {};
    const block = (key, x, y, w, h, label) => {
      const r = svg("rect", { x, y, width: w, height: h, rx: 6, class: "fpblock", fill: STATE_COLOURS.idle, "data-block": key });
      r.addEventListener("mouseenter", e => this.showCard(key, e)); r.addEventListener("mouseleave", () => { if (!this.pinned) this.card.hidden = true; });
      r.addEventListener("click", e => { this.pinned = key; this.showCard(key, e); const i = this.instrOf(key); if (i >= 0) this.app.select(i, { keepView: true, t: this.app.state.t }); });
      g.append(r, svg("text", { x: x + 8, y: y + 16, "pointer-events": "none" }, label));
      this.blocks[key] = r;
      return r;
    };
    const path = (key, d) => { const p = svg("path", { d, stroke: "#c3cad1", "stroke-width": 3, fill: "none", "data-path": key }); g.append(p); return p; };
    this.paths = {
      dramB: path("dramB", "M150,120 L230,120"), dramA: path("dramA", "M150,300 L230,300"),
      bMxu: path("bMxu", "M330,120 L430,150"), bDma: path("bDma", "M330,120 L430,60"), aMxu: path("aMxu", "M330,300 L430,200"),
      aQuant: path("aQuant", "M330,300 L430,330"), dmaTmem: path("dmaTmem", "M590,60 L670,90"), mxuTmem: path("mxuTmem", "M590,170 L670,130"),
      quantAct: path("quantAct", "M510,310 L510,270"), actMxu: path("actMxu", "M510,240 L510,210"), vpuTmem: path("vpuTmem", "M720,250 L720,190"),
    };
    block("dram0", 20, 60, 130, 110, "DRAM ch 0"); block("dram1", 20, 250, 130, 110, "DRAM ch 1");
    block("portb", 230, 95, 100, 50, "port B"); block("porta", 230, 275, 100, 50, "port A");
    block("dma", 430, 30, 160, 60, "DMA"); block("mxu", 430, 120, 160, 90, `MXU (${cfg.MCOLS} columns)`);
    block("act", 430, 225, 160, 45, "ACT RAM"); block("quant", 430, 300, 160, 55, "quantiser");
    block("tmem", 670, 60, 200, 130, `TMEM (${cfg.LANES} banks)`); block("vpu", 670, 250, 200, 80, `VPU (${cfg.LANES} lanes)`);
    block("coll", 670, 350, 200, 40, "collective");
    // sub-cells: MXU columns, TMEM banks, VPU lanes, dispatch window slots
    this.cells = { mxu: [], tmem: [], vpu: [], win: [] };
    for (let c = 0; c < cfg.MCOLS; c++) this.cells.mxu.push(g.appendChild(svg("rect", { x: 440 + c * (140 / cfg.MCOLS), y: 150, width: 140 / cfg.MCOLS - 4, height: 48, fill: "#fff", stroke: "#9aa3ad", "pointer-events": "none" })));
    for (let b = 0; b < cfg.LANES; b++) this.cells.tmem.push(g.appendChild(svg("rect", { x: 680 + b * (180 / cfg.LANES), y: 100, width: 180 / cfg.LANES - 3, height: 75, fill: "#fff", stroke: "#9aa3ad", "pointer-events": "none" })));
    for (let l = 0; l < cfg.LANES; l++) this.cells.vpu.push(g.appendChild(svg("rect", { x: 680 + l * (180 / cfg.LANES), y: 280, width: 180 / cfg.LANES - 3, height: 38, fill: "#fff", stroke: "#9aa3ad", "pointer-events": "none" })));
    block("win", 230, 370, 360, 45, `dispatch window (${cfg.WIN} slots)`);
    for (let s = 0; s < cfg.WIN; s++) this.cells.win.push(g.appendChild(svg("rect", { x: 240 + s * (340 / cfg.WIN), y: 392, width: 340 / cfg.WIN - 3, height: 16, fill: "#fff", stroke: "#9aa3ad", "pointer-events": "none" })));
    this.legend = svg("g", {});
    let lx = 20;
    for (const [k, c] of Object.entries(STATE_COLOURS)) {
      this.legend.append(svg("rect", { x: lx, y: 6, width: 12, height: 12, fill: c, stroke: "#52606d" }), svg("text", { x: lx + 16, y: 16 }, k));
      lx += 26 + 7 * k.length;
    }
    g.append(this.legend);
    this.wrap.replaceChildren(g);
  }
  unitState(u, t) {
    const m = this.m, lane = m.lanes[this.slice][u];
    const k = lastAtOrBefore(lane.starts, t);
    if (k >= 0 && lane.ends[k] > t) {
      const i = lane.idx[k];
      const lat = m.p.config.DRAM_LATENCY;
      if (m.de[i] > m.ds[i]) {
        if (t >= m.ds[i] && t < m.de[i]) return { state: "streaming", i };
        if (t < m.ds[i] || t < m.de[i] + lat) return { state: "dram", i };
      }
      if (u === 1 && m.release[i] >= 0 && t >= m.release[i] && m.deny[i] > 0) return { state: "tmem", i };
      return { state: "busy", i };
    }
    const next = k + 1 < lane.idx.length ? lane.idx[k + 1] : -1;
    if (next >= 0 && m.d[next] <= t) return { state: t < m.ready[next] ? "dep" : "queued", i: next };
    return { state: "idle", i: -1 };
  }
  inFlight(t) {
    const m = this.m;
    let count = 0;
    const k = lastAtOrBefore(m.d, t);
    for (let j = k; j >= 0 && count < 64; j--) { if (m.slice[j] === this.slice && m.end[j] > t) count++; if (m.d[j] < t - m.maxSpan) break; }
    return count;
  }
  instrOf(key) {
    const u = { dma: 0, mxu: 1, quant: 2, vpu: 3, coll: 4 }[key];
    return u === undefined ? -1 : this.unitState(u, this.app.state.t || 0).i;
  }
  draw() {
    const m = this.m; if (!m) return;
    const t = Number.isFinite(this.app.state.t) ? this.app.state.t : 0;
    this.scrub.value = String(Math.round(t));
    document.getElementById("fp-time").textContent = `cycle ${fmt(t)} of ${fmt(m.p.cycles)} (${us(t, m.p.clock_mhz)})`;
    const st = UNITS.map((_, u) => this.unitState(u, t));
    const colour = s => STATE_COLOURS[s.state];
    const set = (key, s) => { this.blocks[key].setAttribute("fill", colour(s)); this.blocks[key].dataset.state = s.state; };
    set("dma", st[0]); set("mxu", st[1]); set("quant", st[2]); set("vpu", st[3]); set("coll", st[4]);
    const lane = m.dram[this.slice], k = lastAtOrBefore(lane.starts, t);
    const streaming = k >= 0 && lane.ends[k] > t ? lane.idx[k] : -1;
    const bytesB = streaming >= 0 ? progRow(m, streaming)[6] : 0;
    const sB = { state: streaming >= 0 && bytesB > 0 ? "streaming" : "idle" };
    const sA = { state: streaming >= 0 && progRow(m, streaming)[7] > 0 ? "streaming" : "idle" };
    set("portb", sB); set("porta", sA); set("dram0", streaming >= 0 ? { state: "streaming" } : { state: "idle" }); set("dram1", streaming >= 0 ? { state: "streaming" } : { state: "idle" });
    set("act", st[2].state === "busy" || st[1].state === "busy" || st[1].state === "streaming" ? { state: "busy" } : { state: "idle" });
    set("tmem", st[3].state === "busy" || st[0].state === "busy" || st[0].state === "streaming" ? { state: "busy" } : { state: "idle" });
    const flight = this.inFlight(t);
    set("win", { state: flight ? "busy" : "idle" });
    this.cells.win.forEach((c, s) => c.setAttribute("fill", s < flight ? STATE_COLOURS.queued : "#fff"));
    const mxuOn = st[1].state === "busy" || st[1].state === "streaming";
    const rows = mxuOn ? ((progRow(m, st[1].i)[2].match(/ m=(\d+)/) || [0, "1"])[1] | 0) : 0;
    this.cells.mxu.forEach((c, j) => c.setAttribute("fill", mxuOn && j < Math.max(1, rows) ? "#fff2b3" : "#fff"));
    const vpuOn = st[3].state === "busy";
    this.cells.vpu.forEach(c => c.setAttribute("fill", vpuOn ? "#c9e7c2" : "#fff"));
    const tmemOn = vpuOn || st[0].state === "busy" || st[0].state === "streaming" || st[1].state === "busy";
    this.cells.tmem.forEach(c => c.setAttribute("fill", tmemOn ? "#c9e7c2" : "#fff"));
    const on = (key, yes, col) => { const p = this.paths[key]; p.setAttribute("stroke", yes ? col : "#c3cad1"); p.setAttribute("stroke-dasharray", yes ? "8 5" : ""); p.setAttribute("stroke-dashoffset", yes ? String(-(t % 13)) : "0"); };
    const mxuStream = st[1].state === "streaming", dmaStream = st[0].state === "streaming";
    on("dramB", sB.state === "streaming", "#2f6fb5"); on("dramA", sA.state === "streaming", "#76b7b2");
    on("bMxu", mxuStream, "#2f6fb5"); on("bDma", dmaStream, "#2f6fb5"); on("aMxu", mxuStream && sA.state === "streaming", "#76b7b2");
    on("aQuant", st[2].state === "streaming", "#76b7b2"); on("dmaTmem", st[0].state !== "idle" && st[0].state !== "dep", "#4e79a7");
    on("mxuTmem", st[1].state === "busy" || st[1].state === "tmem", "#e15759"); on("quantAct", st[2].state === "busy", "#f28e2b");
    on("actMxu", mxuOn, "#f28e2b"); on("vpuTmem", vpuOn, "#59a14f");
    if (this.pinned) this.fillCard(this.pinned);
  }
  showCard(key, e) {
    this.fillCard(key);
    const box = this.wrap.getBoundingClientRect(), host = this.card.parentElement.getBoundingClientRect();
    this.card.style.left = Math.min(e.clientX - host.left + 12, box.width - 320) + "px";
    this.card.style.top = (e.clientY - host.top + 12) + "px";
    this.card.hidden = false;
  }
  fillCard(key) {
    const u = { dma: 0, mxu: 1, quant: 2, vpu: 3, coll: 4 }[key];
    const t = this.app.state.t || 0;
    const kids = [el("b", {}, key.toUpperCase()), el("div", {}, BLOCK_INFO[key] || "")];
    const state = this.blocks[key].dataset.state || "idle";
    kids.push(el("div", {}, `at cycle ${fmt(t)}: ${STATE_TEXT[state] || state}`));
    if (u !== undefined) { const s = this.unitState(u, t); if (s.i >= 0) kids.push(...instrLines(this.m, s.i).map(l => el("div", { class: "mono" }, l))); }
    if (this.pinned === key) kids.unshift(el("span", { class: "close", onclick: () => { this.pinned = null; this.card.hidden = true; } }, "×"));
    this.card.replaceChildren(...kids);
  }
  toggle() {
    this.playing = !this.playing;
    document.getElementById("fp-play").textContent = this.playing ? "❚❚" : "▶";
    if (this.playing) { this.last = performance.now(); this.raf = requestAnimationFrame(ts => this.tick(ts)); }
    else cancelAnimationFrame(this.raf);
  }
  tick(ts) {
    if (!this.playing) return;
    const dt = (ts - this.last) / 1000; this.last = ts;
    const speed = Number(document.getElementById("fp-speed").value), m = this.m;
    let t = this.app.state.t || 0;
    if (document.getElementById("fp-mode").value === "instr") {
      this.acc = (this.acc || 0) + dt * speed * 4;
      while (this.acc >= 1) { this.acc -= 1; t = this.nextEvent(t, 1, true); }
    } else t += dt * speed * Math.max(m.p.cycles, 1) / 30;
    if (t >= m.p.cycles) { t = m.p.cycles; this.toggle(); }
    this.app.set({ t: Math.round(t) }, { quiet: true });
    if (this.playing) this.raf = requestAnimationFrame(x => this.tick(x));
  }
  nextEvent(t, dir, startsOnly) {
    const m = this.m;
    let best = dir > 0 ? Infinity : -Infinity;
    for (const lane of m.lanes[this.slice]) {
      for (const arr of startsOnly ? [lane.starts] : [lane.starts, lane.ends]) {
        if (!arr.length) continue;
        if (dir > 0) { const k = firstAfter(arr, t); if (k < arr.length) best = Math.min(best, arr[k]); }
        else { const k = lastAtOrBefore(arr, t - 1); if (k >= 0) best = Math.max(best, arr[k]); }
      }
    }
    return Number.isFinite(best) ? best : t;
  }
  step(dir) {
    if (this.playing) this.toggle();
    const instr = document.getElementById("fp-mode").value === "instr";
    this.app.set({ t: this.nextEvent(this.app.state.t || 0, dir, instr) }, { quiet: true });
  }
}
