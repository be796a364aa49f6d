"""Two profiles of the same program side by side: cycle deltas per instruction class and per source line.

Typically the timing model's profile against a card's: `diff(a, b)` gives total cycles, the busy
cycles of each instruction class in both with the difference, and the source lines whose busy
cycles moved most (sources are matched by file, line, function and callers, so the two may come
from different compilations of the same kernel).
"""
from __future__ import annotations


def source_key(src: dict) -> str:
    chain = " < ".join(f"{f['file']}:{f['line']}" for f in src.get("chain", []))
    return f"{src['file']}:{src['line']} ({src['func']})" + (f" < {chain}" if chain else "")


def _by_source(p: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for row in p.get("source_table", []):
        key = source_key(p["sources"][row["src"]])
        acc = out.setdefault(key, {"busy": 0, "count": 0, "text": p["sources"][row["src"]]["text"]})
        acc["busy"] += row["busy"]
        acc["count"] += row["count"]
    return out


def diff(a: dict, b: dict, top: int = 10) -> dict:
    classes = {}
    for side, p in (("a", a), ("b", b)):
        for row in p.get("class_table", []):
            c = classes.setdefault(row["class"], {"class": row["class"], "a": 0, "b": 0, "count_a": 0, "count_b": 0})
            c[side] += row["busy"]
            c[f"count_{side}"] += row["count"]
    for c in classes.values():
        c["delta"] = c["b"] - c["a"]
    sa, sb = _by_source(a), _by_source(b)
    lines = []
    for key in set(sa) | set(sb):
        x, y = sa.get(key, {"busy": 0, "text": ""}), sb.get(key, {"busy": 0, "text": ""})
        lines.append({"source": key, "text": x["text"] or y["text"], "a": x["busy"], "b": y["busy"],
                      "delta": y["busy"] - x["busy"]})
    lines.sort(key=lambda r: (-abs(r["delta"]), r["source"]))
    return {"a": {"name": a["name"], "kind": a["kind"], "cycles": a["cycles"], "instructions": a["instructions"]},
            "b": {"name": b["name"], "kind": b["kind"], "cycles": b["cycles"], "instructions": b["instructions"]},
            "cycles_delta": b["cycles"] - a["cycles"],
            "classes": sorted(classes.values(), key=lambda r: (-abs(r["delta"]), r["class"])),
            "sources": [r for r in lines if r["delta"]][:top]}
