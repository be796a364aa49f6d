"""How otpu-memcal prints: the BIOS-style window maps, one summary line per channel, the status block.

Maps are Rich Text: a `#` (passing phase step) or `1` (passing tap) in the pass style, a `.`
or `0` in the fail style; colour reaches a terminal only (the console decides). The data
comes from plain result dicts (`hostcal`, `selfcal.decode`), the same ones `--json` prints.
"""
from __future__ import annotations

from rich.text import Text

from otpu_core.card import litedram_map as M

from .status import CardStatus, ChannelStatus, when_text

PASS_STYLE, FAIL_STYLE = "green", "red"


def _map(chars: str, good: str) -> Text:
    t = Text()
    for c in chars:
        t.append(c, PASS_STYLE if c == good else FAIL_STYLE if c in ".0" else "")
    return t


def phase_axis(points: int, stride: int, scan_start: int | None) -> str:
    """A header under which a pass map's characters line up: offsets of the first, middle and last point."""
    lo = -(M.PERIOD_STEPS // 2)
    hi = lo + (points - 1) * stride
    left, mid, right = f"{lo:+d}", "0", f"{hi:+d}"
    width = max(points, len(left) + len(mid) + len(right) + 2)
    centre = (0 - lo) // stride
    line = [" "] * width
    line[:len(left)] = left
    line[max(len(left) + 1, centre):max(len(left) + 1, centre) + 1] = mid
    line[width - len(right):] = right
    return "".join(line) + (f"   (steps around {scan_start})" if scan_start is not None else "")


def pass_maps(r: dict) -> list[Text]:
    """Per lane its pass map over the phase sweep, its window, and the common row with the pick."""
    maps = r.get("pass_maps") or []
    if not maps:
        return []
    stride = max(1, int(r.get("stride") or 1))
    out = [Text(f"  lane {phase_axis(len(maps[0]), stride, r.get('scan_start'))}", style="dim")]
    widths = r.get("lane_window_ps") or [None] * len(maps)
    for lane, m in enumerate(maps):
        line = Text(f"  m{lane}   ")
        line.append_text(_map(m, "#"))
        if widths[lane] is not None:
            line.append(f"  {r['lane_window_steps'][lane]} steps ({widths[lane]} ps)")
        out.append(line)
    common = "".join("#" if all(m[i] == "#" for m in maps) else "." for i in range(len(maps[0])))
    line = Text("  all  ")
    line.append_text(_map(common, "#"))
    if r.get("window_steps"):
        line.append(f"  {r['window_steps']} steps ({r['window_ps']} ps) from {r['run_first']:+d} to {r['run_last']:+d}"
                    f", pick CK step {r['dqs_steps']}")
    out.append(line)
    return out


def read_leveling(r: dict) -> list[Text]:
    """`m0: b5 |000011111111110000...| window 10 taps (781 ps), tap 16` per lane."""
    out = []
    for lane, rd in enumerate(r.get("read") or []):
        line = Text(f"    m{lane}: b{rd['bitslip']} |")
        line.append_text(_map(rd.get("line") or "", "1"))
        line.append(f"| window {rd['taps']} taps ({rd['taps'] * M.TAP_PS:.0f} ps)")
        if rd["taps"]:
            line.append(f", tap {rd['tap']}")
        if any(rd.get("offsets") or []):
            line.append(f", bits' bitslip offsets {rd['offsets']}")
        out.append(line)
    return out


def bitslip_maps(r: dict) -> list[Text]:
    """The full read maps: per lane and read bitslip one character per tap (at the lane's write latency)."""
    out = []
    for lane, rows in enumerate(r.get("read_maps") or []):
        chosen = (r.get("read") or [{}] * (lane + 1))[lane].get("bitslip")
        for b, row in enumerate(rows):
            line = Text(f"    m{lane}, b{b:02d}: |")
            line.append_text(_map(row, "1"))
            line.append("|" + ("  <- chosen" if b == chosen else ""))
            out.append(line)
    return out


def write_latency(r: dict) -> str:
    return "write latency: " + " ".join(f"m{l}:{'-' if w < 0 else w}" for l, w in enumerate(r.get("write_latency") or []))


def bist_line(b: dict | None) -> str:
    if not b:
        return "BIST: not run"
    w, rd = b["write"], b["read"]
    verdict = "PASS" if not rd["errors"] else f"FAIL, per lane {rd['lane_errors']}, bits {rd['lane_bits']}"
    return (f"BIST {b['mib']:g} MiB: write {w['gbs']:.2f} GB/s ({w['percent_of_peak']:.1f}%), read {rd['gbs']:.2f} GB/s "
            f"({rd['percent_of_peak']:.1f}%), errors {rd['errors']}: {verdict}")


def describe(r: dict) -> str:
    """One line per channel, as the reference prints it."""
    if r.get("failed"):
        return f"calibration FAILED: {r.get('error', '?')}"       # the error names its channel
    text = (f"channel {r['ch']}: CK step {r.get('dqs_steps')}, common write window {r.get('window_ps')} ps "
            f"({r.get('window_steps')} steps), write latency {r.get('write_latency')}, "
            f"read taps {[x['tap'] for x in r.get('read') or []]}")
    offs = [f"lane {l} bit {i} {o:+d}" for l, x in enumerate(r.get("read") or []) for i, o in enumerate(x.get("offsets") or [])
            if o]
    if offs:
        text += ", read bitslip offsets: " + ", ".join(offs)
    if r.get("seconds") is not None:
        text += f", {r['seconds']:.1f} s"
    return text


def channel_block(r: dict, maps: bool = True, full: bool = False) -> list[Text | str]:
    """Everything about one calibrated (or failed) channel: maps, latencies, read leveling, BIST, summary."""
    out: list[Text | str] = []
    if maps and r.get("pass_maps"):
        stride = r.get("stride") or 1
        out.append(f"channel {r['ch']}: CK/DQS phase sweep over one tCK, every {stride} step{'s' if stride > 1 else ''}"
                   + (", a BIST per step" if r.get("traffic_checked") else ""))
        out += pass_maps(r)
    if r.get("write_latency"):
        out.append("  " + write_latency(r))
    if maps and r.get("read"):
        out.append("  read leveling:")
        out += read_leveling(r)
    if full:
        out += bitslip_maps(r)
    if r.get("bist"):
        out.append("  " + bist_line(r["bist"]))
    out.append(Text(describe(r), style="bold red" if r.get("failed") else "bold"))
    if r.get("failed") and r.get("hint"):
        out.append(f"  hint: {r['hint']}")
    return out


def status_lines(st: CardStatus, maps: bool = False) -> list[Text | str]:
    cpu = f", calibration CPU: {st.cpu.describe()}" if st.cpu else ""
    out: list[Text | str] = [f"{st.dev}: controllers {st.controllers}{cpu}"]
    out.append("STATUS calibration: " + ", ".join(f"channel {c.ch} {'yes' if c.calibrated else 'NO'}" for c in st.channels))
    for p in st.problems:
        out.append(Text(f"note: {p}", style="yellow"))
    for c in st.channels:
        out += _channel_status(c, maps)
    return out


def _channel_status(c: ChannelStatus, maps: bool) -> list[Text | str]:
    head = Text(f"channel {c.ch}: ")
    head.append(c.state, PASS_STYLE if c.state == "calibrated" else "bold red")
    r = c.result
    if r and not r.get("failed"):
        head.append(f", by {_by(r)} {when_text(r.get('time'))}")
    out: list[Text | str] = [head]
    if c.note:
        out.append(Text(f"  {c.note}", style="yellow"))
    if c.phase is not None:
        out.append(f"  CK/DQS phase now {c.phase} steps ({c.phase * M.STEP_PS:.0f} ps from configuration), controller in "
                   + ("hardware" if c.hardware_mode else "software") + " mode")
    if r:
        if r.get("failed"):
            out.append(Text(f"  last host calibration {when_text(r.get('time'))} FAILED: {r.get('error')}", style="red"))
            if r.get("hint"):
                out.append(f"  hint: {r['hint']}")
        if r.get("window_ps") is not None and not r.get("failed"):
            lw = r.get("lane_window_ps") or []
            out.append(f"  CK step {r.get('dqs_steps')}, common write window {r['window_ps']} ps ({r['window_steps']} steps)"
                       + (f", lane windows {min(lw)}..{max(lw)} ps" if lw else ""))
        if r.get("write_latency"):
            out.append("  " + write_latency(r) + f", read taps {[x['tap'] for x in r.get('read') or []]}")
        if r.get("bist"):
            out.append("  " + bist_line(r["bist"]))
        elif r.get("by") == "selfcal":
            out.append("  traffic " + ("checked by the CPU's BIST" if r.get("traffic_checked") else
                                       "not checked by the CPU (DFII only)"))
        if maps:
            out += pass_maps(r) + read_leveling(r)
    return out


def _by(r: dict) -> str:
    return {"host": "the host", "selfcal": "the core's CPU"}.get(r.get("by"), r.get("by") or "?")
