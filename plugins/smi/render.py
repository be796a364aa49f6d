"""otpu-smi's screens: one boxed table per card, utilisation bars, sparklines for loop mode, and
the `-q` nested key/value text."""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

BLOCKS = "▁▂▃▄▅▆▇█"
BAR_CELLS = 10
UTIL_ROWS = (("RUN", "utilization.running"), ("MXU", "utilization.mxu"), ("MAC", "utilization.mac"), ("VPU", "utilization.vpu"),
             ("QNT", "utilization.quant"), ("DMA", "utilization.dma"), ("DRAM", "utilization.dram"))
HISTORY = 40


def bar(percent: float | None) -> str:
    """`█████░░░░░  50%`: ten cells, the percentage right-aligned."""
    if percent is None:
        return "n/a"
    p = max(0.0, min(100.0, float(percent)))
    full = int(round(p / 100 * BAR_CELLS))
    return "█" * full + "░" * (BAR_CELLS - full) + f" {p:3.0f}%"


def sparkline(values: Iterable[float | None], lo: float | None = None, hi: float | None = None) -> str:
    """One block per value, scaled to [lo, hi]; by default the series' own range, so a rise of
    a degree shows as a rise (a flat series is a row of the lowest block)."""
    vals = [v for v in values]
    nums = [v for v in vals if v is not None]
    if not nums:
        return ""
    bottom = min(nums) if lo is None else lo
    top = max(nums) if hi is None else hi
    span = top - bottom
    if span <= 0:
        return "".join(" " if v is None else BLOCKS[0] for v in vals)
    return "".join(" " if v is None else BLOCKS[min(len(BLOCKS) - 1, max(0, int((v - bottom) / span * len(BLOCKS))))]
                   for v in vals)


def spark_range(values: list) -> str:
    """`3.0..3.2` beside a sparkline scaled to its own range."""
    nums = [v for v in values if v is not None]
    return f" {min(nums):.1f}..{max(nums):.1f}" if nums else ""


class History:
    """Recent utilisation, power and temperature of each card, for the loop-mode sparklines."""

    def __init__(self, size: int = HISTORY):
        self.size = size
        self.series: dict[tuple[str, str], deque] = {}

    def add(self, dev: str, fields: dict) -> None:
        for key in ("utilization.mxu", "utilization.running", "power.draw", "temperature.die"):
            f = fields.get(key)
            self.series.setdefault((dev, key), deque(maxlen=self.size)).append(None if f is None else f.value)

    def get(self, dev: str, key: str) -> list:
        return list(self.series.get((dev, key), ()))


def _text(fields: dict, name: str) -> str:
    f = fields.get(name)
    return f.text() if f is not None else "[N/A]"


def card_table(report: dict[str, Any], history: History | None = None) -> Table:
    f = report["fields"]
    own = report.get("card_target")
    built = f"target {own}" if own else "target unknown"
    asked = "" if own == report["target"] else f" (compared with {report['target']})"
    title = f"{report['device']} · {report['name']} · {built}{asked}"
    t = Table(title=title, title_justify="left", box=box.ROUNDED, show_header=False, expand=False, min_width=72)
    t.add_column("what", style="bold", no_wrap=True)
    t.add_column("value")
    bs = report["bitstream"]
    match = report["cfg_hash"]["match"]
    hash_text = {True: "[green]CFG_HASH match[/]", False: "[bold red]CFG_HASH MISMATCH[/]", None: "CFG_HASH n/a"}[match]
    t.add_row("Card", f"openTPU D={bs['D']} MCOLS={bs['MCOLS']} LANES={bs['LANES']} · {_text(f, 'clocks.core')} · "
                      f"build {bs['build_id']} · regmap v{report['regmap']} · {hash_text}")
    pcie = report["pcie"] or {}
    link = f"ok ({pcie.get('speed')} x{pcie.get('width')})" if pcie.get("speed") else "ok (PCIe link unknown)"
    state = "[green]running[/]" if report["running"] else "idle"
    t.add_row("Link", f"{link} · {_text(f, 'memory.type')} {_text(f, 'memory.calibration')} · {state}")
    health = report.get("health") or []
    t.add_row("Health", Text("ok", style="green") if not health else
              Text("\n".join(health), style="bold red"))
    temp = f.get("temperature.die")
    hot = temp is not None and temp.value is not None and temp.value >= 85
    temp_text = f"[bold red]{temp.text()}[/]" if hot else _text(f, "temperature.die")
    board_t = f.get("temperature.board")
    board_text = f" · board {board_t.text()}" if board_t is not None and board_t.value is not None else ""
    t.add_row("Temp", f"die {temp_text} / {_text(f, 'temperature.die.limit')}{board_text}")
    pw = f.get("power.draw")
    if pw is None or pw.value is None:
        power_text = "n/a"
    elif pw.source == "measured":
        power_text = f"{pw.value:.1f}W measured" + "".join(
            f" · {label} {' '.join(f[k].text() for k in keys if k in f and f[k].value is not None)}"
            for label, keys in (("input", ("voltage.input", "current.input")), ("core", ("voltage.core", "current.core")))
            if keys[0] in f and f[keys[0]].value is not None)
    else:
        power_text = f"~{pw.value:.1f}W estimate / {_text(f, 'power.limit')} max"
    t.add_row("Power", power_text)
    used = f.get("memory.used")
    mem = (f"{used.text()} / {_text(f, 'memory.total')} used" if used is not None and used.value
           else f"{_text(f, 'memory.total')} total")
    kv = ((report["process"] or {}).get("dram") or {}) if not (report["process"] or {}).get("stale") else {}
    if isinstance(kv, dict) and kv.get("kv_capacity"):
        mem += f" (KV {kv.get('kv_used', 0) / 2**20:.0f} / {kv['kv_capacity'] / 2**20:.0f} MiB)"
    t.add_row("DRAM", f"{mem} · bandwidth {_gbs(report['dram_gbs'])} (read {_gbs(report['dram_rd_gbs'])}, "
                      f"write {_gbs(report['dram_wr_gbs'])})")
    if report["util"] is None:
        t.add_row("Util", "n/a (register map 1 bitstream: no free-running counters)")
    else:
        for label, key in UTIL_ROWS:
            t.add_row(label, bar(f[key].value if key in f else None))
        stalls = f"TMEM-deny {_text(f, 'stall.tmem_deny')} · DRAM-wait {_text(f, 'stall.dram_wait')}"
        if report["regmap"] >= 3:
            stalls += f" · MXU-starve {_text(f, 'stall.mxu_starve')}"
        t.add_row("Stalls", f"{stalls} · IPC {_text(f, 'ipc')} · over {_text(f, 'sample.ms')}")
    if history is not None:
        dev = report["device"]
        watts, degrees = history.get(dev, "power.draw"), history.get(dev, "temperature.die")
        t.add_row("History", Text.assemble(
            ("run ", "bold"), sparkline(history.get(dev, "utilization.running"), 0, 100), " 0..100%\n",
            ("mxu ", "bold"), sparkline(history.get(dev, "utilization.mxu"), 0, 100), " 0..100%\n",
            ("W   ", "bold"), sparkline(watts), spark_range(watts), "\n",
            ("C   ", "bold"), sparkline(degrees), spark_range(degrees)))
    t.add_row("Process", _process_text(report["process"]))
    return t


def _gbs(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f} GB/s"


def _process_text(p: dict | None) -> str:
    if not p:
        return "no process"
    if p.get("not_holder"):
        return f"no process (the status file names pid {p.get('pid')}, which does not hold the card's lock)"
    if p.get("stale"):
        return f"no process (stale status file from pid {p.get('pid')})"
    text = f"PID {p.get('pid')}  {p.get('cmd', '')}"
    ps = p.get("process")
    if ps:
        text += (f"\n{ps['name']} ({ps['user']}), up {ps['running_s']:.0f} s, CPU {ps['cpu_s']:.1f} s, "
                 f"RSS {ps['rss_mib']:.0f} MiB")
    if p.get("model"):
        text += f"\nModel {p['model']}   tokens {p.get('tokens', 0)}"
        if p.get("tok_s_wall"):
            text += f"   {p['tok_s_wall']:.1f} tok/s"
    return text


def error_table(dev: str, message: str) -> Table:
    t = Table(title=dev, title_justify="left", box=box.ROUNDED, show_header=False, min_width=72)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("Card", f"[bold red]cannot open[/] ({message})")
    return t


def screen(reports: list[dict], history: History | None = None) -> Group:
    """A banner (tool, version, time: the live view's clock), then a table per card."""
    from otpu_core import __version__
    stamp = (reports[0].get("time") or "").replace("T", " ") if reports else ""
    return Group(Text.assemble(("otpu-smi ", "bold"), __version__, "    ", stamp),
                 *(card_table(r, history) if r.get("ok") else error_table(r["device"], r["error"]) for r in reports))


def query_lines(obj: Any, indent: int = 0) -> list[str]:
    """`-q`: every field, nested, one `key  value` line each."""
    pad = "    " * indent
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, v in items:
        if isinstance(v, (dict, list)) and v:
            out.append(f"{pad}{k}")
            out += query_lines(v, indent + 1)
        else:
            if k == "status" and isinstance(v, int):
                v = f"0x{v:08x}"
            out.append(f"{pad}{str(k):<{max(1, 24 - 4 * indent)}} {v}")
    return out
