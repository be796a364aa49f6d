"""Terminal views of profiles: `info`, `diff` and `list` as Rich tables (the JSON forms are the same data)."""
from __future__ import annotations

from rich.table import Table

from .workloads import Workload


def summary(p: dict) -> dict:
    """The facts `info` shows for one profile (also its --json form)."""
    cfg, roof = p["config"], p["roofline"]
    return {"kind": p["kind"], "name": p["name"], "workload": p.get("workload"), "device": p.get("device"),
            "cycles": p["cycles"], "seconds": p.get("seconds"), "clock_mhz": p["clock_mhz"],
            "instructions": p["instructions"], "traced": p.get("traced", 0),
            "roofline": {"bound": roof["bound"], "bound_cycles": round(roof["bound_cycles"]),
                         "efficiency": roof["efficiency"]},
            "config": {k: cfg[k] for k in ("target", "S", "D", "MCOLS", "LANES")},
            "busy": p["slices"][0]["busy"] if p.get("slices") else {}, "trace": p.get("trace", {}),
            "notes": p["notes"]}


def info_lines(path: str, doc: dict) -> list[str]:
    out = [f"{path}: {doc['format']} v{doc['version']}, created {doc.get('created', '?')} by {doc.get('tool', '?')}"]
    for p in doc["profiles"]:
        s = summary(p)
        c, r = s["config"], s["roofline"]
        out.append(f"  [{s['kind']}] {s['name']}: {s['cycles']:,} cycles ({1e6 * (s['seconds'] or 0):.1f} us at "
                   f"{s['clock_mhz']:g} MHz), roofline {r['bound']} {r['bound_cycles']:,} "
                   f"({100 * r['efficiency']:.1f}%), "
                   f"{s['instructions']:,} instructions ({s['traced']:,} traced), "
                   f"S={c['S']} D={c['D']} MCOLS={c['MCOLS']} LANES={c['LANES']}")
        for n in p["notes"]:
            if n["level"] in ("warn", "bad"):
                out.append(f"    {n['level']}: {n['text']}")
    return out


def diff_tables(d: dict) -> list:
    a, b = d["a"], d["b"]
    head = Table(title="profiles", show_header=True)
    for col in ("", "name", "kind", "cycles", "instructions"):
        head.add_column(col, justify="right" if col in ("cycles", "instructions") else "left")
    head.add_row("A", a["name"], a["kind"], f"{a['cycles']:,}", f"{a['instructions']:,}")
    head.add_row("B", b["name"], b["kind"], f"{b['cycles']:,}", f"{b['instructions']:,}")
    head.add_row("B - A", "", "", f"{d['cycles_delta']:+,}", "")
    classes = Table(title="busy cycles per instruction class")
    for col in ("class", "count A", "count B", "A", "B", "B - A"):
        classes.add_column(col, justify="left" if col == "class" else "right")
    for r in d["classes"]:
        classes.add_row(r["class"], f"{r['count_a']:,}", f"{r['count_b']:,}", f"{r['a']:,}", f"{r['b']:,}",
                        f"{r['delta']:+,}")
    lines = Table(title="source lines that moved most (busy cycles)")
    for col in ("source", "A", "B", "B - A"):
        lines.add_column(col, justify="left" if col == "source" else "right")
    for r in d["sources"]:
        lines.add_row(f"{r['source']}\n  {r['text']}", f"{r['a']:,}", f"{r['b']:,}", f"{r['delta']:+,}")
    if not d["sources"]:
        lines.add_row("(no source line moved)", "", "", "")
    return [head, classes, lines]


def workloads_table(items: list[Workload]) -> Table:
    t = Table(title="workloads")
    t.add_column("name")
    t.add_column("options")
    t.add_column("what it runs")
    for w in items:
        t.add_row(w.name, " ".join(f"--{o}" for o in w.takes) or "-", w.help)
    return t
