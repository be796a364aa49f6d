"use strict";
// Loading profile documents (embedded, fetched, or dropped by the user) and building each profile's model:
// absolute per-instruction times as typed arrays, per-unit index lists in start order, program rows by pc.
const FORMAT = "otpu-lens-profile", VERSION = 2;   // version 1: windows as plain lists

async function inflate(buf) {
  const bytes = new Uint8Array(buf);
  if (bytes.length > 1 && bytes[0] === 0x1f && bytes[1] === 0x8b) {
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return await new Response(stream).text();
  }
  return new TextDecoder().decode(bytes);
}

function checkDocument(doc, name) {
  if (!doc || typeof doc !== "object" || doc.format !== FORMAT)
    throw new Error(`${name}: format ${JSON.stringify(doc && doc.format)} is not ${FORMAT}`);
  if (!Number.isInteger(doc.version) || doc.version < 1) throw new Error(`${name}: version ${doc.version} is not a profile version`);
  if (doc.version > VERSION) throw new Error(`${name}: version ${doc.version} is newer than this page reads (${VERSION})`);
  if (!Array.isArray(doc.profiles) || !doc.profiles.length) throw new Error(`${name}: no profiles in the file`);
  return doc;
}

async function loadUrl(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return checkDocument(JSON.parse(await inflate(await r.arrayBuffer())), url);
}

async function loadFile(file) {
  return checkDocument(JSON.parse(await inflate(await file.arrayBuffer())), file.name);
}

// A packed column ({dtype i1|i2|i4|f8, delta, b64}: little-endian bytes in base64) or a plain list, as numbers.
function unpackColumn(col) {
  if (Array.isArray(col) || ArrayBuffer.isView(col)) return col;
  const bytes = Uint8Array.fromBase64 ? Uint8Array.fromBase64(col.b64) : (() => {
    const bin = atob(col.b64), out = new Uint8Array(bin.length);
    for (let k = 0; k < bin.length; k++) out[k] = bin.charCodeAt(k);
    return out;
  })();
  const Type = { i1: Int8Array, i2: Int16Array, i4: Int32Array, f8: Float64Array }[col.dtype];
  if (!Type) throw new Error(`column type ${col.dtype} is not one this page reads`);
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const arr = new Type(buf);
  if (!col.delta) return arr;
  const out = new Float64Array(arr.length);
  let acc = 0;
  for (let k = 0; k < arr.length; k++) { acc += arr[k]; out[k] = acc; }
  return out;
}

function buildModel(p, source) {
  const cols = {};
  for (const [k, v] of Object.entries(p.instrs.data)) cols[k] = unpackColumn(v);
  p.windows = (p.windows || []).map(w => Object.fromEntries(Object.entries(w).map(([k, v]) => [k, unpackColumn(v)])));
  const n = cols.d.length;
  const prog = (p.programs[0] || { rows: [] }).rows;
  const m = {
    p, source, n, prog,
    d: new Float64Array(n), ready: new Float64Array(n), start: new Float64Array(n), end: new Float64Array(n),
    release: new Float64Array(n), ds: new Float64Array(n), de: new Float64Array(n),
    pc: new Int32Array(n), slice: new Int32Array(n), unit: new Int8Array(n), cls: new Int32Array(n), src: new Int32Array(n),
    starve: new Float64Array(n), deny: new Float64Array(n),
  };
  const classIndex = new Map(p.classes.map((c, i) => [c, i]));
  const pcUnit = new Int8Array(prog.length), pcCls = new Int32Array(prog.length), pcSrc = new Int32Array(prog.length);
  for (let i = 0; i < prog.length; i++) { pcUnit[i] = prog[i][3]; pcCls[i] = classIndex.get(prog[i][1]) ?? -1; pcSrc[i] = prog[i][4]; }
  const { d, rdy, wait, dur, rel, dsw, dsl, pc, slice, starve, deny } = cols;
  for (let i = 0; i < n; i++) {
    const di = d[i], r = di + rdy[i], s = r + wait[i];
    m.d[i] = di; m.ready[i] = r; m.start[i] = s; m.end[i] = s + dur[i];
    m.release[i] = rel[i] ? s + rel[i] : -1; m.ds[i] = s + dsw[i]; m.de[i] = s + dsw[i] + dsl[i];
    const q = pc[i];
    m.pc[i] = q; m.slice[i] = slice[i];
    m.unit[i] = q < prog.length ? pcUnit[q] : -1; m.cls[i] = q < prog.length ? pcCls[q] : -1; m.src[i] = q < prog.length ? pcSrc[q] : -1;
    m.starve[i] = starve[i]; m.deny[i] = deny[i];
  }
  m.slices = Math.max(1, (p.slices || []).length);
  m.maxSpan = 0;
  for (let i = 0; i < n; i++) if (m.end[i] - m.d[i] > m.maxSpan) m.maxSpan = m.end[i] - m.d[i];
  // built on first use (the timeline, the floorplan, a deep link to a unit): the overview needs neither
  let lanes = null, dram = null;
  Object.defineProperty(m, "lanes", { get: () => lanes || (lanes = buildLanes(m)) });
  Object.defineProperty(m, "dram", { get: () => dram || (dram = buildDram(m)) });
  return m;
}

// per (slice, unit): instruction indices in start order (a unit runs one at a time, so ends are ordered too)
function buildLanes(m) {
  const n = m.n, out = [];
  for (let s = 0; s < m.slices; s++) {
    const counts = new Int32Array(UNITS.length);
    for (let i = 0; i < n; i++) if (m.slice[i] === s && m.unit[i] >= 0) counts[m.unit[i]]++;
    const lanes = UNITS.map((_, u) => new Int32Array(counts[u]));
    const fill = new Int32Array(UNITS.length);
    for (let i = 0; i < n; i++) if (m.slice[i] === s && m.unit[i] >= 0) { const u = m.unit[i]; lanes[u][fill[u]++] = i; }
    out.push(lanes.map(idx => {
      let sorted = true;
      for (let k = 1; k < idx.length; k++) if (m.start[idx[k]] < m.start[idx[k - 1]]) { sorted = false; break; }
      if (!sorted) idx.sort((a, b) => m.start[a] - m.start[b]);
      const starts = new Float64Array(idx.length), ends = new Float64Array(idx.length);
      for (let k = 0; k < idx.length; k++) { starts[k] = m.start[idx[k]]; ends[k] = m.end[idx[k]]; }
      return { idx, starts, ends };
    }));
  }
  return out;
}

// DRAM streams per slice, in issue order (served in order, so their starts are ordered)
function buildDram(m) {
  const out = [];
  for (let s = 0; s < m.slices; s++) {
    let count = 0;
    for (let i = 0; i < m.n; i++) if (m.slice[i] === s && m.de[i] > m.ds[i]) count++;
    const idx = new Int32Array(count);
    let k = 0;
    for (let i = 0; i < m.n; i++) if (m.slice[i] === s && m.de[i] > m.ds[i]) idx[k++] = i;
    const starts = new Float64Array(count), ends = new Float64Array(count);
    for (let j = 0; j < count; j++) { starts[j] = m.ds[idx[j]]; ends[j] = m.de[idx[j]]; }
    out.push({ idx, starts, ends });
  }
  return out;
}

function progRow(m, i) {
  const q = m.pc[i];
  return m.prog[q] || [q, "?", "?", -1, -1, 0, 0, 0, 0, 0, 0];
}

function sourceOf(m, i) { const s = m.src[i]; return s >= 0 ? m.p.sources[s] : null; }

function sourceLabel(src) {
  if (!src) return "";
  return `${src.file.split("/").slice(-2).join("/")}:${src.line}`;
}

// The instruction on `unit` of `slice` running at cycle t, else the last one that started before t, else -1.
function instrAt(m, slice, unit, t) {
  const lane = m.lanes[slice] && m.lanes[slice][unit];
  if (!lane || !lane.idx.length) return -1;
  const k = lastAtOrBefore(lane.starts, t);
  return k >= 0 ? lane.idx[k] : lane.idx[0];
}
