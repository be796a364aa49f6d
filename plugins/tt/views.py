"""Rich renderings for otpu-tt: the smi screen, the card list, the core grid, probes and the ladder summary."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from otpu_core.tt import consts as K
from otpu_core.tt.coords import TileMap, harvest_label
from otpu_core.tt.probe import CoreState

from .recover import RUNGS, Report

STATE_STYLE = {
    "in reset": (".", "dim"), "idle": ("o", "green"), "resident": ("R", "bold green"), "running": (">", "cyan"),
    "foreign fw": ("f", "cyan"),
    "hung": ("H", "bold yellow"), "wedged": ("W", "bold red"), "unresponsive": ("X", "bold red"),
    "chip hung": ("!", "bold red"), "link lost": ("L", "bold magenta"), "reset pending": ("P", "bold magenta"),
}
CHIP_STATES = ("chip hung", "link lost", "reset pending")
SPINNER = ("●∙∙", "∙●∙", "∙∙●", "∙●∙")


def _na(value, fmt: str = "{}") -> str:
    return "N/A" if value is None else fmt.format(value)


def _limit(value: float | None, limit: float | None, unit: str, fmt: str = "{:g}") -> Text:
    style = "red" if value is not None and limit and value >= limit else ("green" if value is not None else "dim")
    return Text(f"{_na(value, fmt)} / {_na(limit, fmt)} {unit}", style=style)


def smi(snap: dict, unopened: list[dict] = ()) -> Group:
    parts = []
    for d in snap["device_info"]:
        b, t, f, lim = d["board_info"], d["telemetry"], d["firmwares"], d["limits"]
        grid = Table.grid(padding=(0, 2))
        for _ in range(4):
            grid.add_column()
        pcie = f"Gen{b['pcie_speed']} x{b['pcie_width']}" if b["pcie_speed"] else "?"
        pcie += f" (max Gen{b['pcie_max_speed']} x{b['pcie_max_width']})" if b.get("pcie_max_speed") else ""
        hb = "N/A" if t["heartbeat"] is None else f"{SPINNER[t['heartbeat'] % len(SPINNER)]} {t['heartbeat']}"
        grid.add_row("card", f"{_na(b['board_type'])}  {d['dev']}", "bus", b["bus_id"])
        grid.add_row("serial", _na(b["board_id"]), "ASIC id", _na(b["asic_id"]))
        grid.add_row("firmware", f"bundle {_na(f['fw_bundle_version'])}  CM {_na(f['cm_fw'])}", "ETH / DM / GDDR",
                     f"{_na(f['eth_fw'])} / {_na(f['dm_app_fw'])} / {_na(f['gddr_fw'])}")
        grid.add_row("AICLK", _limit(t["aiclk"], lim["asic_fmax"], "MHz"), "voltage",
                     _limit(t["voltage"], lim["vdd_max"], "V", "{:.3f}"))
        grid.add_row("power", _limit(t["power"], lim["tdp_limit"], "W"), "current", _limit(t["current"], lim["tdc_limit"], "A"))
        temp = _limit(t["asic_temperature"], lim["thm_limit"], "°C", "{:.1f}")
        if lim["therm_trip_l1_limit"] is not None:      # tt-smi shows the shutdown limit; the throttle point beside
            temp.append(f" (throttles at {lim['therm_trip_l1_limit']:g})", style="dim")
        grid.add_row("ASIC temp", temp, "board power", _limit(t["board_power"], lim["board_power_limit"], "W"))
        grid.add_row("heartbeat", hb, "fan", f"{_na(t['fan_speed'])} RPM")
        throttled = _throttling(d["throttling"])
        if b["dram_status"] is None:
            dram = Text("N/A", style="dim")
        else:
            dram = Text(f"trained, {b['dram_speed']}", style="green") if b["dram_status"] else Text("NOT trained", style="bold red")
        grid.add_row("throttling", throttled, "DRAM", dram)
        grid.add_row("PCIe", pcie, "Tensix", f"{_na(b['tensix_enabled'])} enabled, " + harvest_label(b["harvested_x"], b["harvested_noc0_x"]))
        parts.append(grid)
        procs = Table(title="processes", title_justify="left")
        for col in ("PID", "user", "device", "command"):
            procs.add_column(col)
        for p in d["processes"]:
            procs.add_row(str(p["pid"]), p["user"], p["device"], p["cmdline"])
        parts.append(procs)
    for e in [*unopened, *snap.get("errors", [])]:
        text = Text(f"{e['dev']}", style="bold")
        if e.get("bus_id"):
            text.append(f" ({e['bus_id']})")
        text.append(f": {e['error']}", style="bold red")
        if e.get("hint"):
            text.append(f"\n  hint: {e['hint']}", style="dim")
        parts.append(text)
    return Group(*parts)


def _throttling(th: dict | None) -> Text:
    if th is None:
        return Text("N/A", style="dim")
    if not th["throttled"]:
        return Text("none", style="green")
    return Text(f"{th['arbiter']} (AICLK held at or below {th['max_mhz']} MHz)", style="bold red")


STATUS_STYLE = {"ok": "green", "degraded": "yellow"}


def card_list(rows: list[dict]) -> Table:
    table = Table(title="Blackhole cards")
    for col in ("dev", "node", "bus", "board", "serial", "Tensix", "status"):
        table.add_column(col)
    for r in rows:
        status = Text(r["status"], style=STATUS_STYLE.get(r["health"], "red"))
        if r.get("detail"):
            status.append(f": {r['detail']}")
        table.add_row(r["dev"], r.get("node") or "", r.get("bus_id") or "?", r.get("board_type") or "?",
                      r.get("board_id") or "?", str(r.get("tensix_enabled") or ""), status)
    return table


def core_grid(tiles: TileMap, states: list[CoreState]) -> Group:
    by_xy = {(s.tile.x, s.tile.y): s for s in states}
    xs = [x for x in K.TRANSLATED_TENSIX_X]
    grid = Table(title="Tensix cores (translated x, y)", show_lines=False, pad_edge=False)
    grid.add_column("y\\x", justify="right")
    for x in xs:
        grid.add_column(str(x), justify="center")
    for y in K.TENSIX_ROWS:
        row = [str(y)]
        for x in xs:
            s = by_xy.get((x, y))
            if s is None:
                row.append(Text("-", style="dim") if x in tiles.harvested_x else Text(" "))
            else:
                glyph, style = STATE_STYLE.get(s.state, ("?", "red"))
                row.append(Text(glyph, style=style))
        grid.add_row(*row)
    legend = Text("  ".join(f"{g} {name}" for name, (g, _) in STATE_STYLE.items()) + "  - off (harvested)", style="dim")
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    summary = Text(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    remembered = [s for s in states if s.data.get("remembered")]
    if remembered:
        summary.append(f"  ({len(remembered)} found unresponsive before and not read again; --reprobe reads them)",
                       style="dim")
    parts = [grid, legend, summary]
    chip_wide = [s for s in states if s.state in CHIP_STATES]
    if chip_wide:
        parts.append(Text(f"the whole chip: {chip_wide[0].detail}", style=STATE_STYLE[chip_wide[0].state][1]))
    bad = [s for s in states if s.state not in CHIP_STATES and (not s.healthy or s.state in ("resident", "running"))]
    if bad:
        table = Table(title="what they are doing", title_justify="left")
        for col in ("core", "state", "detail"):
            table.add_column(col)
        for s in bad:
            table.add_row(f"{s.tile.x},{s.tile.y}", Text(s.state, style=STATE_STYLE.get(s.state, ("", ""))[1]), s.detail)
        parts.append(table)
    return Group(*parts)


PROBE_FIELDS = (("soft_reset", "soft reset"), ("pcs", "PC snapshots"), ("queue_state", "resident queue"),
                ("posted", "posted"), ("completed", "completed"), ("pending", "pending"), ("exit", "last exit"))


def probe_view(s: CoreState, next_step: str | None = None) -> Table:
    table = Table(title=f"Tensix {s.tile.x},{s.tile.y}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("core", f"{s.tile.x},{s.tile.y} translated (NOC0 {s.tile.noc0[0]},{s.tile.noc0[1]})")
    table.add_row("state", Text(s.state, style=STATE_STYLE.get(s.state, ("", ""))[1]))
    table.add_row("detail", s.detail)
    for key, label in PROBE_FIELDS:
        value = s.data.get(key)
        if value in (None, "", {}):
            continue
        if key == "pcs":
            value = ", ".join(f"{r.upper()} {pc}" for r, pc in value.items())
        table.add_row(label, str(value))
    if next_step:
        table.add_row("next", next_step)
    return table


def recover_view(report: Report) -> Group:
    table = Table(title="recovery ladder")
    for col in ("rung", "action", "cores", "result", "took"):
        table.add_column(col)
    for st in report.steps:
        style = "green" if st.result == "fixed" else ("red" if st.result.startswith(("failed", "still", "needs", "refused"))
                                                      else "yellow")
        cores = ", ".join(st.targets) if len(st.targets) <= 4 else f"{len(st.targets)} cores"
        table.add_row(f"{st.rung} {st.name}", _action(st.rung), cores, Text(st.result, style=style), f"{st.seconds:.3f} s")
    parts = [table] if report.steps else []
    if report.fixed_at is not None:
        parts.append(Text(f"recovered at rung {report.fixed_at}", style="bold green"))
    elif not report.steps and report.recovered:
        parts.append(Text("every core is healthy: nothing to do", style="green"))
    if report.needs_yes:
        would = Table(title="would run next (needs --yes)", title_justify="left")
        would.add_column("rung")
        would.add_column("action")
        for r in report.needs_yes:
            would.add_row(f"{r.number} {r.name}", r.action)
        parts.append(would)
        if report.then_power_cycle:
            last = RUNGS[-1]
            parts.append(Text(f"if those do not help: {last.number} {last.name}, the honest answer, not an action "
                              f"this tool takes ({last.action})", style="dim"))
    for note in report.notes:
        parts.append(Text(note, style="yellow"))
    if report.busy:
        parts.append(Text(f"stopped: {report.busy}", style="bold red"))
    elif not report.recovered and not report.needs_yes:
        bad = [s for s in report.after if not s.healthy]
        parts.append(Text(f"still bad: {', '.join(f'{s.tile.x},{s.tile.y} ({s.state})' for s in bad[:8])}"
                          + (" ..." if len(bad) > 8 else ""), style="bold red"))
    return Group(*parts)


def _action(n: int) -> str:
    return next(r.action for r in RUNGS if r.number == n)
