"use strict";
// Overview: the headline numbers, where the port-B cycles went, unit utilisation, findings, instruction classes.
function cyclesAccount(buckets, total) {
  const entries = Object.entries(buckets || {}).filter(([, v]) => v > 0);
  return el("div", {},
    el("div", { class: "bar", id: "ov-bucket-bar" }, entries.map(([k, v]) =>
      el("div", { style: `width:${(100 * v / total).toFixed(3)}%;background:${BUCKET_COLOURS[k] || "#999"}`, title: `${k}: ${fmt(v)} cycles (${pct(v / total)})` }))),
    el("div", { class: "legend" }, entries.map(([k, v]) =>
      el("span", {}, el("span", { class: "sw", style: `background:${BUCKET_COLOURS[k] || "#999"}` }), `${k} ${fmt(v)} (${pct(v / total)})`))));
}

function renderOverview(app) {
  const m = app.model, p = m.p, root = document.getElementById("view-overview");
  const roof = p.roofline, cycles = Math.max(p.cycles, 1);
  const sl = (p.slices || [])[0] || { busy: {}, buckets: {} };
  const portB = (sl.buckets || {})["port B streaming"];
  const cards = [
    ["cycles", fmt(p.cycles)], ["time", us(p.cycles, p.clock_mhz) + ` at ${p.clock_mhz} MHz`],
    ["roofline", pct(roof.efficiency) + ` (${roof.bound}-bound)`],
    ["port B busy", portB !== undefined ? pct(portB / cycles) : "–"],
    ["MACs / cycle", fix(roof.attained, 1) + ` of ${roof.peak_macs}`],
    ["instructions", `${fmt(p.instructions)} (${fmt(p.traced || 0)} traced)`],
  ];
  const classCols = [
    { key: "class", label: "class", left: true }, { key: "count", label: "count", fmt: fmt },
    { key: "busy", label: "busy cycles", fmt: fmt }, { key: "work", label: "nominal work", fmt: fmt },
    { key: "dep_wait", label: "dependency wait", fmt: fmt }, { key: "unit_wait", label: "unit wait", fmt: fmt },
    { key: "bytes", label: "DRAM bytes", fmt: fmt }, { key: "macs", label: "MACs", fmt: fmt },
  ];
  root.replaceChildren(
    el("div", { class: "cards" }, cards.map(([k, v]) => el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v)))),
    el("div", { class: "mute" }, `${p.name} · ${p.kind === "sim" ? "timing model" : p.kind === "hw" ? "card trace" : "card counters"} · target ${p.config.target}` +
      (p.device ? ` · ${p.device}` : "")),
    el("h2", {}, "Where the port-B cycles went"),
    Object.keys(sl.buckets || {}).length ? cyclesAccount(sl.buckets, cycles) : el("div", { class: "mute" }, "no trace: the account needs trace records"),
    el("h2", {}, "Unit utilisation"),
    el("div", { id: "ov-util" }, UNITS.map((u, k) => {
      const b = (sl.busy || {})[u] || 0;
      return el("div", { class: "util-row" }, el("span", {}, u),
        el("div", { class: "track" }, el("div", { style: `width:${Math.min(100, 100 * b / cycles)}%;background:${UNIT_COLOURS[k]}` })),
        el("span", { class: "num" }, pct(b / cycles)));
    })),
    el("h2", {}, "Findings"),
    el("ul", { class: "notes", id: "ov-notes" }, p.notes.map(n => el("li", { class: n.level }, n.text))),
    el("h2", {}, "Instruction classes"),
    gridTable(classCols, (p.class_table || []).slice(), { sort: { key: "busy", desc: true } }));
}
