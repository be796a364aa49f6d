"""Card power estimated from unit utilisation, for cards whose power nobody measures.

A power model is a fixed part plus, per unit, the dynamic watts the unit draws when busy all
the time; the estimate is fixed_w + sum(unit_w * clamp(util, 0, 1)) over the units, each
scaled by the free-running counter that says how busy it was (a counter missing from the
sample counts as fully busy, so the estimate errs high). Models come from a `power.json`
(format "openTPU-power", version 1, written from the Vivado power report of the build by
`python -m otpu_core.power report.rpt -o power.json`, text or XML report) or, without one,
from the board figures below, which are marked as such in every estimate.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .errors import UsageError

FORMAT, VERSION = "openTPU-power", 1

# The counter whose utilisation scales each unit's dynamic power ("DRAM" is beats per cycle).
UNIT_COUNTER = {"MXU": "MXU_BUSY", "VPU": "VPU_BUSY", "QNT": "QNT_BUSY", "DMA": "DMA_BUSY",
                "TMEM": "RUNNING", "SEQ": "RUNNING", "DRAM": "DRAM"}

# Board figures used without a power report: a 6.0 W design of which 2.95 W is unit dynamic power.
BOARD_FIXED_W = 3.05
BOARD_UNITS_W = {"MXU": 1.20, "VPU": 0.35, "QNT": 0.15, "DMA": 0.20, "TMEM": 0.35, "SEQ": 0.10, "DRAM": 0.60}


@dataclass(frozen=True)
class PowerModel:
    fixed_w: float
    units: Mapping[str, float]
    max_w: float
    source: str

    def estimate(self, util: Mapping[str, float]) -> "PowerEstimate":
        per_unit = {}
        for unit, watts in self.units.items():
            u = util.get(UNIT_COUNTER.get(unit, unit))
            per_unit[unit] = watts * (1.0 if u is None else min(max(float(u), 0.0), 1.0))
        return PowerEstimate(self.fixed_w + sum(per_unit.values()), self.fixed_w, self.max_w, per_unit, self.source)


@dataclass(frozen=True)
class PowerEstimate:
    w: float
    fixed_w: float
    max_w: float
    units: dict[str, float] = field(default_factory=dict)
    source: str = ""

    def as_dict(self) -> dict:
        return {"w": round(self.w, 3), "fixed_w": self.fixed_w, "max_w": self.max_w,
                "units": {k: round(v, 3) for k, v in self.units.items()}, "source": self.source}


def board_model() -> PowerModel:
    return PowerModel(BOARD_FIXED_W, dict(BOARD_UNITS_W), BOARD_FIXED_W + sum(BOARD_UNITS_W.values()),
                      "board figures (no power report)")


def load(path: str | Path | None) -> PowerModel | None:
    """The model of a power.json; None when the file does not exist. A malformed file is a usage error."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        return None
    try:
        doc = json.loads(p.read_text())
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not a power report (not UTF-8 text)") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{p}: not a readable power report: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise UsageError(f"{p}: not an {FORMAT} version {VERSION} file",
                         hint="write one from the build's Vivado power report")
    try:
        units = {str(k): float(v) for k, v in doc["units"].items()}
        total = float(doc["total_w"])
        fixed = float(doc.get("fixed_w", total - sum(units.values())))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{p}: power report lacks total_w or units ({e})") from None
    bad = [f"{k}={v}" for k, v in (("total_w", total), ("fixed_w", fixed), *units.items())
           if not math.isfinite(v) or v < 0]
    if bad:
        raise UsageError(f"{p}: power figures must be finite watts >= 0, got {', '.join(bad)}")
    return PowerModel(fixed, units, total, f"power report {p.name}")


def require(path: str | Path, option: str = "--power-json") -> PowerModel:
    """The model of a power report the user named: a missing file, a directory or a malformed
    report is a usage error naming the option and the path."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {p}: is a directory, not a power report")
    if not p.is_file():
        raise UsageError(f"{option} {p}: no such file")
    return load(p)


def model(path: str | Path | None = None) -> PowerModel:
    """The report's model if there is one, else the board figures."""
    return load(path) or board_model()


# ---- the build's power report ----------------------------------------------------------------

# Instance names of the units (outermost match wins; under u_board when the design has one).
UNIT_OF_INSTANCE = {"u_mxu": "MXU", "u_act": "MXU", "u_vpu": "VPU", "u_quant": "QNT", "u_dma": "DMA",
                    "u_tmem": "TMEM", "u_seq": "SEQ", "u_mem": "DRAM"}
_SUMMARY_KEYS = {"total on-chip power (w)": "total_w", "dynamic (w)": "dynamic_w", "device static (w)": "static_w",
                 "junction temperature (c)": "junction_c", "confidence level": "confidence"}


def _number(text: str) -> float | None:
    try:
        return float(text.strip().rstrip("*"))
    except ValueError:
        return None


def _text_sections(text: str) -> dict[str, list[list[str]]]:
    """report_power text: a title line underlined with dashes, then `| a | b |` table rows."""
    lines = text.splitlines()
    sections: dict[str, list[list[str]]] = {}
    current = None
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and set(nxt.strip()) == {"-"} and not line.lstrip().startswith(("|", "+")):
            current = sections.setdefault(line.strip().lower(), [])
        elif current is not None and line.lstrip().startswith("|"):
            current.append([c.rstrip() for c in line.strip()[1:-1].split("|")])
    return sections


def _xml_sections(text: str) -> dict[str, list[list[str]]]:
    """report_power XML: <section title=...> holding (nested) <tablerow>s of <tablecell contents=...>."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(text)
    sections: dict[str, list[list[str]]] = {}

    def rows(elem, depth: int, out: list[list[str]]) -> None:
        for row in elem.findall("tablerow"):
            cells = [c.get("contents", "") for c in row.findall("tablecell")]
            if cells:
                out.append(["  " * depth + cells[0].strip(), *cells[1:]])
            rows(row, depth + 1, out)

    for sec in root.iter("section"):
        out = sections.setdefault((sec.get("title") or "").strip().lower(), [])
        table = sec.find("table")
        if table is not None:
            rows(table, 0, out)
    return sections


def parse_report(text: str, source: str = "") -> dict:
    """A Vivado report_power (text or XML) as an openTPU-power document; ValueError if it is not one."""
    sections = _xml_sections(text) if text.lstrip().startswith("<") else _text_sections(text)
    summary = next((v for k, v in sections.items() if k.endswith("summary")), None)
    doc: dict = {"format": FORMAT, "version": VERSION, "source": source, "tool": "vivado report_power"}
    for cells in summary or []:
        key = _SUMMARY_KEYS.get(cells[0].strip().lower())
        if key and len(cells) > 1:
            doc[key] = cells[1].strip() if key == "confidence" else _number(cells[1])
    if doc.get("total_w") is None:
        raise ValueError("not a Vivado power report: no 'Total On-Chip Power (W)' in a Summary section")
    comps = next((v for k, v in sections.items() if k.endswith("on-chip components")), [])
    doc["components"] = {c[0].strip(): _number(c[1]) for c in comps
                         if len(c) > 1 and _number(c[1]) is not None}
    hier = next((v for k, v in sections.items() if k.endswith("by hierarchy")), [])
    doc["hierarchy"] = [[(len(c[0]) - len(c[0].lstrip())) // 2, c[0].strip(), _number(c[1])] for c in hier
                        if len(c) > 1 and _number(c[1]) is not None]
    doc["units"] = _units(doc["hierarchy"])
    doc["util"] = {u: UNIT_COUNTER[u] for u in doc["units"]}
    doc["fixed_w"] = round(doc["total_w"] - sum(doc["units"].values()), 6)
    return doc


def _units(hierarchy: list[list]) -> dict[str, float]:
    """Dynamic watts per unit: the outermost instance named for a unit, inside u_board if there is one."""
    board_depth = next((d for d, name, _ in hierarchy if name == "u_board"), None)
    units: dict[str, float] = {}
    inside_board = board_depth is None
    claimed_depth = None     # depth of the unit instance we are inside, if any
    for depth, name, watts in hierarchy:
        if board_depth is not None:
            if name == "u_board":
                inside_board = True
                continue
            if depth <= board_depth:
                inside_board = False
        if claimed_depth is not None and depth > claimed_depth:
            continue
        claimed_depth = None
        unit = UNIT_OF_INSTANCE.get(name)
        if inside_board and unit:
            units[unit] = round(units.get(unit, 0.0) + watts, 6)
            claimed_depth = depth
    return units


def main(argv: list[str] | None = None) -> int:
    """`python -m otpu_core.power REPORT [-o power.json]`: a build's power report as openTPU-power JSON."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(prog="python -m otpu_core.power", description=main.__doc__)
    ap.add_argument("report", type=Path)
    ap.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    a = ap.parse_args(argv)
    try:
        doc = parse_report(a.report.read_text(), str(a.report))
    except (OSError, ValueError) as e:
        print(f"python -m otpu_core.power: error: {a.report}: {e}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=2) + "\n"
    if a.output:
        a.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
