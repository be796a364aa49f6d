"use strict";
// Roofline: arithmetic intensity (MACs per DRAM byte) against attained MACs per cycle on log-log axes,
// the DRAM roof (slope 1), the MXU roof (flat), the ridge point; the run, its MM classes and its MM source lines.
function renderRoofline(app) {
  const m = app.model, p = m.p, roof = p.roofline, root = document.getElementById("view-roofline");
  const W = 760, H = 460, L = 70, R = 20, T = 20, B = 50;
  const points = [];
  if (roof.bytes && roof.macs) points.push({ label: "whole run", x: roof.intensity, y: roof.attained, r: 7, colour: "#22303c" });
  for (const c of p.class_table || []) {
    if (c.macs > 0 && c.bytes > 0 && c.busy > 0) points.push({ label: `class ${c.class}`, x: c.macs / c.bytes, y: c.macs / c.busy, r: 5, colour: UNIT_COLOURS[1] });
  }
  for (const s of p.source_table || []) {
    if (s.macs > 0 && s.bytes > 0 && s.busy > 0) {
      const src = p.sources[s.src];
      points.push({ label: `${sourceLabel(src)} ${src.func}: ${src.text}`, x: s.macs / s.bytes, y: s.macs / s.busy, r: 3.5, colour: "#f28e2b", src: s.src });
    }
  }
  const xs = points.map(q => q.x).concat([roof.ridge]), ys = points.map(q => q.y).concat([roof.peak_macs]);
  const x0 = Math.pow(10, Math.floor(Math.log10(Math.max(1e-3, Math.min(...xs) / 2)))), x1 = Math.pow(10, Math.ceil(Math.log10(Math.max(...xs) * 4)));
  const y0 = Math.pow(10, Math.floor(Math.log10(Math.max(1e-3, Math.min(...ys) / 2)))), y1 = Math.pow(10, Math.ceil(Math.log10(roof.peak_macs * 2)));
  const sx = v => L + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * (W - L - R);
  const sy = v => H - B - (Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0)) * (H - T - B);
  const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "roof-svg" });
  g.append(svg("rect", { x: 0, y: 0, width: W, height: H, fill: "#fff" }));
  for (let e = Math.log10(x0); e <= Math.log10(x1) + 1e-9; e++) {
    const X = sx(Math.pow(10, e));
    g.append(svg("line", { x1: X, x2: X, y1: T, y2: H - B, stroke: "#eceff2" }), svg("text", { x: X, y: H - B + 16, "text-anchor": "middle" }, `1e${e}`));
  }
  for (let e = Math.log10(y0); e <= Math.log10(y1) + 1e-9; e++) {
    const Y = sy(Math.pow(10, e));
    g.append(svg("line", { x1: L, x2: W - R, y1: Y, y2: Y, stroke: "#eceff2" }), svg("text", { x: L - 6, y: Y + 4, "text-anchor": "end" }, `1e${e}`));
  }
  g.append(svg("text", { x: (L + W - R) / 2, y: H - 12, "text-anchor": "middle" }, "arithmetic intensity (MACs per DRAM byte)"),
    svg("text", { x: 14, y: (T + H - B) / 2, transform: `rotate(-90 14 ${(T + H - B) / 2})`, "text-anchor": "middle" }, "attained MACs per cycle"));
  // roofs: y = bw * x up to the ridge, then the MXU peak
  const bw = roof.peak_bytes, peak = roof.peak_macs, ridge = roof.ridge;
  const a = Math.max(x0, y0 / bw);
  g.append(svg("path", { d: `M${sx(a)},${sy(bw * a)} L${sx(ridge)},${sy(peak)} L${sx(x1)},${sy(peak)}`, stroke: "#22303c", "stroke-width": 2.5, fill: "none", id: "roof-line" }),
    svg("line", { x1: sx(ridge), x2: sx(ridge), y1: sy(peak), y2: H - B, stroke: "#22303c", "stroke-dasharray": "4 4" }),
    svg("text", { x: sx(ridge) + 6, y: sy(peak) + 14 }, `ridge ${fix(ridge, 2)} MAC/B`),
    svg("text", { x: sx(x1) - 6, y: sy(peak) - 6, "text-anchor": "end" }, `MXU peak ${peak} MAC/cycle`),
    svg("text", { x: sx(a) + 8, y: sy(bw * a) - 8 }, `DRAM ${fix(bw, 1)} B/cycle`));
  for (const q of points) {
    const c = svg("circle", { cx: sx(q.x), cy: sy(q.y), r: q.r, fill: q.colour, "fill-opacity": 0.85, stroke: "#fff", class: "roof-pt" },
      svg("title", {}, `${q.label}\nintensity ${fix(q.x, 3)} MAC/B, attained ${fix(q.y, 1)} MAC/cycle, roof ${fix(Math.min(peak, bw * q.x), 1)}`));
    if (q.src !== undefined) { c.style.cursor = "pointer"; c.addEventListener("click", () => app.set({ view: "sources", src: q.src })); }
    g.append(c);
  }
  root.replaceChildren(
    el("div", { class: "cards" },
      el("div", { class: "card" }, el("div", { class: "k" }, "intensity"), el("div", { class: "v" }, fix(roof.intensity, 3) + " MAC/B")),
      el("div", { class: "card" }, el("div", { class: "k" }, "attained"), el("div", { class: "v" }, fix(roof.attained, 1) + " MAC/cycle")),
      el("div", { class: "card" }, el("div", { class: "k" }, "ridge point"), el("div", { class: "v" }, fix(ridge, 2) + " MAC/B")),
      el("div", { class: "card" }, el("div", { class: "k" }, "of roofline"), el("div", { class: "v" }, pct(roof.efficiency)))),
    g,
    el("p", { class: "mute" }, `Below the ridge a kernel is DRAM-bound (the slope: ${fix(bw, 1)} bytes per cycle at the sustained rate); above it MXU-bound. ` +
      "Points: the whole run, each MM class, each MM source line (click one to open it in the source table)."));
}
