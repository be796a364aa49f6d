"use strict";
// The app: profiles, the selection state behind every view, deep links (#view=timeline&t=12000&pin=mxu),
// the detail panel, opening files. `window.lens` exposes the state for tests and curious users.
const VIEWS = ["overview", "roofline", "timeline", "floor", "instrs", "sources", "compare"];

const app = {
  profiles: [], models: new Map(), cmp: [0, 1],
  state: { view: "overview", profile: 0, slice: 0, t: NaN, pin: "", i: -1, src: -1 },
  get model() {
    const k = this.state.profile;
    if (!this.models.has(k)) this.models.set(k, buildModel(this.profiles[k].p, this.profiles[k].source));
    return this.models.get(k);
  },

  addDocuments(docs, source) {
    for (const doc of docs) for (const p of doc.profiles) this.profiles.push({ p, source });
    const sel = document.getElementById("profile-select");
    sel.replaceChildren(...this.profiles.map((e, k) => el("option", { value: k }, `${k}: ${e.p.name} [${e.p.kind}]`)));
    sel.value = String(this.state.profile);
    if (this.profiles.length > 1) this.cmp = [0, this.profiles.length - 1];
  },

  useProfile(k) {
    this.state.profile = Math.max(0, Math.min(this.profiles.length - 1, k | 0));
    document.getElementById("profile-select").value = String(this.state.profile);
    const m = this.model;
    this.timeline.setModel(m); this.floor.setModel(m); this.instrs.setModel(m);
  },

  set(partial, opts = {}) {
    const before = this.state.profile;
    Object.assign(this.state, partial);
    if (this.state.profile !== before) this.useProfile(this.state.profile);
    writeHash(this.state);
    if (partial.view) this.show(partial.view);
    else this.redraw(opts);
  },

  select(i, opts = {}) {
    const m = this.model;
    if (!(i >= 0 && i < m.n)) return;
    const t = opts.t !== undefined && Number.isFinite(opts.t) ? opts.t : Math.round(m.start[i]);
    Object.assign(this.state, { i, t, slice: m.slice[i], pin: (UNITS[m.unit[i]] || "").toLowerCase() });
    if (opts.src !== undefined) this.state.src = opts.src;
    this.detail(i);
    const span = Math.min(Math.max(m.p.cycles, 8), Math.max(2000, 6 * (m.end[i] - m.start[i])));
    if (!opts.keepView) this.timeline.centre(t, span);
    writeHash(this.state);
    if (opts.view) this.show(opts.view); else this.redraw({});
  },

  show(view) {
    if (!VIEWS.includes(view)) view = "overview";
    this.state.view = view;
    for (const v of VIEWS) document.getElementById(`view-${v}`).classList.toggle("on", v === view);
    for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("on", b.dataset.view === view);
    writeHash(this.state);
    const render = {
      overview: () => renderOverview(this), roofline: () => renderRoofline(this), timeline: () => this.timeline.draw(),
      floor: () => this.floor.draw(), instrs: () => this.instrs.paint(), sources: () => renderSources(this), compare: () => renderCompare(this),
    };
    render[view]();
    if (view === "instrs" && this.state.i >= 0) this.instrs.scrollTo(this.state.i);
  },

  redraw(opts) {
    const v = this.state.view;
    if (v === "timeline") this.timeline.draw();
    else if (v === "floor") this.floor.draw();
    else if (v === "instrs") this.instrs.paint();
    else if (v === "sources" && !opts.quiet) renderSources(this);
  },

  detail(i) {
    const m = this.model, box = document.getElementById("detail");
    box.dataset.index = String(i);
    const row = progRow(m, i), src = sourceOf(m, i);
    const kv = (k, v) => el("tr", {}, el("td", { class: "mute" }, k), el("td", {}, v));
    const kids = [el("h3", {}, `#${i} ${row[1]} on ${UNITS[m.unit[i]] || "?"}`), el("code", {}, row[2]),
      el("table", {},
        kv("slice / pc", `${m.slice[i]} / ${m.pc[i]}`), kv("dispatch", fmt(m.d[i])), kv("ready", `${fmt(m.ready[i])} (+${fmt(m.ready[i] - m.d[i])})`),
        kv("start", `${fmt(m.start[i])} (unit wait ${fmt(m.start[i] - m.ready[i])})`), kv("end", fmt(m.end[i])),
        kv("busy", `${fmt(m.end[i] - m.start[i])} cycles, nominal ${fmt(row[5])}`),
        m.de[i] > m.ds[i] ? kv("DRAM stream", `${fmt(m.ds[i])} – ${fmt(m.de[i])}`) : null,
        kv("DRAM bytes", `port B ${fmt(row[6])}, port A ${fmt(row[7])}`), row[8] ? kv("MACs", fmt(row[8])) : null,
        m.starve[i] ? kv("MXU starved", fmt(m.starve[i])) : null, m.deny[i] ? kv("TMEM deny", fmt(m.deny[i])) : null)];
    if (src) {
      kids.push(el("h3", {}, "source"), el("div", {}, `${src.file}:${src.line} in ${src.func}`), el("code", {}, src.text));
      for (const f of src.chain) kids.push(el("div", { class: "mute" }, `called from ${f.file}:${f.line} in ${f.func}: `, el("code", {}, f.text)));
    }
    kids.push(el("div", { class: "toolbar" },
      el("button", { onclick: () => this.select(i, { view: "timeline" }) }, "timeline"),
      el("button", { onclick: () => this.select(i, { view: "floor" }) }, "floorplan"),
      src ? el("button", { onclick: () => this.set({ view: "sources", src: m.src[i] }) }, "source") : null));
    box.replaceChildren(...kids);
  },

  applyHash() {
    const h = parseHash();
    const profile = h.profile !== undefined ? Number(h.profile) : this.state.profile;
    if (profile !== this.state.profile || !this.timeline.m) this.useProfile(profile);
    const m = this.model;
    const slice = h.slice !== undefined ? Math.max(0, Math.min(m.slices - 1, Number(h.slice) | 0)) : 0;
    const t = h.t !== undefined ? Number(h.t) : NaN;
    const src = h.src !== undefined ? Number(h.src) : -1;
    Object.assign(this.state, { slice, t, src, pin: h.pin || "", i: -1 });
    let i = h.i !== undefined ? Number(h.i) : -1;
    const unit = unitIndex(h.pin);
    if (i < 0 && unit >= 0 && Number.isFinite(t)) i = instrAt(m, slice, unit, t);
    if (i < 0 && src >= 0) { for (let k = 0; k < m.n; k++) if (m.src[k] === src) { i = k; break; } }
    if (i >= 0 && i < m.n) this.select(i, { t: Number.isFinite(t) ? t : undefined, src: src >= 0 ? src : undefined });
    else if (Number.isFinite(t)) this.timeline.centre(t, Math.min(Math.max(m.p.cycles, 8), 4000));
    this.show(h.view || this.state.view);
  },
};

function banner(text, bad) {
  const b = document.getElementById("banner");
  b.hidden = !text; b.textContent = text || ""; b.classList.toggle("bad", !!bad);
}

async function openFiles(files) {
  const docs = [];
  for (const f of files) {
    try { docs.push(await loadFile(f)); } catch (e) { banner(`${e.message}`, true); }
  }
  if (!docs.length) return;
  const first = app.profiles.length;
  app.addDocuments(docs, "file");
  banner("");
  app.set({ profile: first, i: -1, src: -1 });
  app.useProfile(first);
  app.show(app.state.view);
}

async function boot() {
  app.timeline = new Timeline(app); app.floor = new Floorplan(app); app.instrs = new InstrTable(app);
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => app.set({ view: b.dataset.view }));
  document.getElementById("profile-select").addEventListener("change", e => { app.set({ profile: Number(e.target.value), i: -1, src: -1, t: NaN }); app.show(app.state.view); });
  document.getElementById("file-input").addEventListener("change", e => openFiles([...e.target.files]));
  document.getElementById("src-filter").addEventListener("input", () => renderSources(app));
  document.addEventListener("dragover", e => e.preventDefault());
  document.addEventListener("drop", e => { e.preventDefault(); openFiles([...e.dataTransfer.files]); });
  window.addEventListener("hashchange", () => app.applyHash());
  let docs = [];
  const mark = name => { window.lens.timings[name] = performance.now(); };
  mark("boot");
  try {
    const block = document.getElementById("lens-data").textContent.trim();
    const embedded = block && block !== "null" ? JSON.parse(block) : null;
    if (embedded) docs = embedded.map((d, k) => checkDocument(d, `embedded profile ${k}`));
    else if (window.LENS_URLS) docs = await Promise.all(window.LENS_URLS.map(loadUrl));
  } catch (e) { banner(e.message, true); }
  mark("loaded");
  if (docs.length) {
    app.addDocuments(docs, window.LENS_URLS ? "served" : "embedded");
    app.model;
    mark("model");
    app.applyHash();
  } else if (!document.getElementById("banner").textContent) {
    banner("No profile loaded: drop a .otpuprof file here or use “Open profile…”.");
  }
  document.documentElement.dataset.lensReady = "1";
  window.lens.readyAt = performance.now();
}

window.lens = { app, state: app.state, ready: null, readyAt: null, timings: {} };
window.lens.ready = boot();
