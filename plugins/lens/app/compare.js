"use strict";
// Compare: two profiles side by side (typically the timing model and a card running the same program):
// headline numbers, busy cycles per instruction class with the difference, and the source lines that moved most.
function sourceKey(s) {
  return `${s.file}:${s.line} (${s.func})` + (s.chain.length ? " < " + s.chain.map(f => `${f.file}:${f.line}`).join(" < ") : "");
}

function bySource(p) {
  const out = new Map();
  for (const r of p.source_table || []) {
    const s = p.sources[r.src], k = sourceKey(s);
    const acc = out.get(k) || { busy: 0, text: s.text };
    acc.busy += r.busy; out.set(k, acc);
  }
  return out;
}

function renderCompare(app) {
  const root = document.getElementById("view-compare"), all = app.profiles;
  if (all.length < 2) {
    root.replaceChildren(el("p", {}, "Open two profiles to compare them: `otpu-lens open sim.otpuprof card.otpuprof`, a file with several profiles, or drop a second file here."));
    return;
  }
  const pick = (id, value) => el("select", { id, onchange: () => { app.cmp[id === "cmp-a" ? 0 : 1] = Number(document.getElementById(id).value); renderCompare(app); } },
    all.map((e, k) => el("option", { value: k, selected: k === value ? "" : null }, `${k}: ${e.p.name}`)));
  const [ia, ib] = app.cmp;
  const a = all[ia].p, b = all[ib].p;
  const classes = new Map();
  for (const [side, p] of [["a", a], ["b", b]]) for (const r of p.class_table || []) {
    const c = classes.get(r.class) || { class: r.class, a: 0, b: 0 };
    c[side] += r.busy; classes.set(r.class, c);
  }
  const crow = [...classes.values()].map(c => ({ ...c, delta: c.b - c.a }));
  const sa = bySource(a), sb = bySource(b), lines = [];
  for (const k of new Set([...sa.keys(), ...sb.keys()])) {
    const x = sa.get(k) || { busy: 0, text: "" }, y = sb.get(k) || { busy: 0, text: "" };
    if (y.busy !== x.busy) lines.push({ source: k, text: x.text || y.text, a: x.busy, b: y.busy, delta: y.busy - x.busy, abs: Math.abs(y.busy - x.busy) });
  }
  const dfmt = v => el("span", { class: v > 0 ? "delta-pos" : v < 0 ? "delta-neg" : "" }, (v > 0 ? "+" : "") + fmt(v));
  const side = p => el("div", { class: "card" },
    el("div", { class: "k" }, `${p.kind} · ${p.config.target}`), el("div", {}, p.name),
    el("div", { class: "v" }, `${fmt(p.cycles)} cycles`), el("div", {}, `${pct(p.roofline.efficiency)} of roofline · ${fmt(p.instructions)} instructions`));
  root.replaceChildren(
    el("div", { class: "toolbar" }, "A ", pick("cmp-a", ia), " B ", pick("cmp-b", ib)),
    el("div", { class: "cmp" }, side(a), side(b)),
    el("p", {}, "B − A: ", dfmt(b.cycles - a.cycles), " cycles"),
    el("h2", {}, "Busy cycles per instruction class"),
    gridTable([{ key: "class", label: "class", left: true }, { key: "a", label: "A", fmt: fmt }, { key: "b", label: "B", fmt: fmt },
      { key: "delta", label: "B − A", fmt: dfmt }], crow, { sort: { key: "b", desc: true } }),
    el("h2", {}, "Source lines that moved most"),
    lines.length ? gridTable([{ key: "source", label: "source", left: true }, { key: "text", label: "text", left: true, fmt: v => el("code", { class: "clip", title: v }, v) },
      { key: "a", label: "A", fmt: fmt }, { key: "b", label: "B", fmt: fmt }, { key: "abs", label: "|B − A|", fmt: fmt }, { key: "delta", label: "B − A", fmt: dfmt }],
    lines, { sort: { key: "abs", desc: true } }) : el("p", { class: "mute" }, "No source line moved."));
}
