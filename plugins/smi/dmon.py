"""`otpu-smi dmon`: nvidia-smi's device monitor, one line per card per interval.

Metric groups (`-s`, any of them, default `pume`): p power and die temperature, u utilisation
(run, MXU, VPU, DMA), c core clock, m DRAM bandwidth and memory used, e health (problems now:
0 when none). Two `#` header lines (names, units) start the output and come again every
`--header-every` lines; `-o D`, `-o T` or `-o DT` put the date and time in front.
"""
from __future__ import annotations

from dataclasses import dataclass

from otpu_core.errors import UsageError


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    field: str
    width: int = 6
    digits: int = 0


GROUPS: dict[str, tuple[Column, ...]] = {
    "p": (Column("pwr", "W", "power.draw", 6, 1), Column("temp", "C", "temperature.die", 6, 1)),
    "u": (Column("run", "%", "utilization.running", 5), Column("mxu", "%", "utilization.mxu", 5),
          Column("vpu", "%", "utilization.vpu", 5), Column("dma", "%", "utilization.dma", 5)),
    "c": (Column("core", "MHz", "clocks.core", 7, 1),),
    "m": (Column("dram", "GB/s", "dram.bandwidth", 6, 2), Column("used", "MiB", "memory.used", 6)),
    "e": (Column("err", "-", "health", 4),),
}
DEFAULT_GROUPS = "pume"
TIME_OPTIONS = {"D": ("Date", "YYYYMMDD", 8), "T": ("Time", "HH:MM:SS", 8)}


def parse_groups(text: str) -> list[Column]:
    letters = [c for c in text.strip()]
    unknown = sorted({c for c in letters if c not in GROUPS})
    if not letters or unknown:
        raise UsageError(f"-s {text!r}: metric groups are letters of {''.join(GROUPS)}",
                         hint="p power/temperature, u utilisation, c clock, m DRAM, e health")
    return [col for g in dict.fromkeys(letters) for col in GROUPS[g]]


def parse_time(text: str | None) -> list[str]:
    if text is None:
        return []
    letters = list(dict.fromkeys(text.strip().upper()))
    if not letters or any(c not in TIME_OPTIONS for c in letters):
        raise UsageError(f"-o {text!r}: D (date), T (time) or DT")
    return [c for c in "DT" if c in letters]


def header(columns: list[Column], stamps: list[str]) -> list[str]:
    names = [f"{TIME_OPTIONS[s][0]:>{TIME_OPTIONS[s][2]}}" for s in stamps] + [f"{'card':>4}"]
    units = [f"{TIME_OPTIONS[s][1]:>{TIME_OPTIONS[s][2]}}" for s in stamps] + [f"{'Idx':>4}"]
    names += [f"{c.name:>{c.width}}" for c in columns]
    units += [f"{c.unit:>{c.width}}" for c in columns]
    return ["# " + " ".join(names), "# " + " ".join(units)]


def _cell(col: Column, report: dict) -> str:
    if not report.get("ok"):
        return f"{'-':>{col.width}}"
    f = report["fields"].get(col.field)
    if col.field == "health":
        return f"{len(report.get('health') or []):>{col.width}}"
    v = None if f is None else f.value
    if v is None:
        return f"{'-':>{col.width}}"
    return f"{float(v):>{col.width}.{col.digits}f}"


def line(columns: list[Column], stamps: list[str], index: int, report: dict) -> str:
    t = report.get("time", "")               # ISO: YYYY-MM-DDTHH:MM:SS.mmm
    parts = [t[:10].replace("-", "") if s == "D" else t[11:19] for s in stamps]
    parts.append(f"{index:>4}")
    parts += [_cell(c, report) for c in columns]
    return "  " + " ".join(parts)
