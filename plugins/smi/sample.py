"""One card's numbers for otpu-smi: identity, link, temperature, calibration, utilisation between
two SNAP latches, DRAM bandwidth, power (measured by a plugin or estimated), the process using it.

A `Sampler` keeps the card open as a monitor (no device lock; it writes only SNAP) and keeps
the last snapshot, so in loop mode each report covers the time since the previous one.
"""
from __future__ import annotations

import datetime as dt
import sys
import time
from typing import Any

import psutil

from otpu_core import plugins, power, smi_fields
from otpu_core import target as target_mod
from otpu_core.board import Board
from otpu_core.card import regs
from otpu_core.card.runstate import lock_holders, read_status, run_dir
from otpu_core.errors import DeviceError
from otpu_core.smi_fields import Field

TEMP_LIMIT_C = 85.0      # the die limit selftest and diag judge by
CYCLE_COUNTERS = ("RUNNING", "MXU_BUSY", "MXU_MAC", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY", "TMEM_DENY", "DRAM_WAIT",
                  "MXU_STARVE")
UTIL_FIELDS = {"RUNNING": "utilization.running", "MXU_BUSY": "utilization.mxu", "MXU_MAC": "utilization.mac",
               "VPU_BUSY": "utilization.vpu", "QNT_BUSY": "utilization.quant", "DMA_BUSY": "utilization.dma",
               "DRAM": "utilization.dram", "TMEM_DENY": "stall.tmem_deny", "DRAM_WAIT": "stall.dram_wait",
               "MXU_STARVE": "stall.mxu_starve"}


def rates(a: dict[str, int], b: dict[str, int], core_khz: int | None) -> dict[str, Any]:
    """Utilisation, IPC and DRAM bandwidth between two snapshots."""
    up = b["UPTIME"] - a["UPTIME"]
    if up <= 0:
        return {"util": {}, "ipc": None, "dram_gbs": None, "dram_rd_gbs": None, "dram_wr_gbs": None, "cycles": 0,
                "seconds": 0.0}
    util = {n: (b[n] - a[n]) / up for n in CYCLE_COUNTERS if n in a and n in b}
    rd, wr = b["DRAM_RD"] - a["DRAM_RD"], b["DRAM_WR"] - a["DRAM_WR"]
    util["DRAM"] = (rd + wr) / up
    secs = up / (core_khz * 1e3) if core_khz else None
    gbs = (lambda beats: beats * regs.BEAT / secs / 1e9) if secs else (lambda beats: None)
    return {"util": util, "ipc": (b["INSTR"] - a["INSTR"]) / up, "dram_gbs": gbs(rd + wr), "dram_rd_gbs": gbs(rd),
            "dram_wr_gbs": gbs(wr), "cycles": up, "seconds": secs}


class Sampler:
    """A card opened for monitoring; `sample()` returns the report since the previous call."""

    def __init__(self, dev: str, target: str | None, power_json=None):
        self.dev = dev
        self.board = Board.open(dev, target=target, check=False, lock=False)
        self.model = power.model(power_json)
        self.prev = self.board.snapshot()
        self.prev_t = time.monotonic()

    def close(self) -> None:
        self.board.close()

    def sample(self, interval: float) -> dict[str, Any]:
        """Wait until `interval` seconds have passed since the last snapshot, then report."""
        wait = interval - (time.monotonic() - self.prev_t)
        if wait > 0:
            time.sleep(wait)
        b = self.board
        try:
            info = b.identify()
        except DeviceError as e:     # the link dropped or the bitstream changed since the card was opened
            self.prev_t = time.monotonic()
            return {"device": self.dev, "time": dt.datetime.now().isoformat(timespec="milliseconds"), "ok": False,
                    "error": e.message}
        snap = b.snapshot()
        r = rates(self.prev, snap, info.core_khz) if snap and self.prev else None
        self.prev, self.prev_t = snap, time.monotonic()
        target = b.target
        built_for = card_target(b.t, info.cfg_hash, target)
        status = _status_file(b.t.devname)
        est = self.model.estimate(r["util"]) if r else None
        report = {
            "device": self.dev, "time": dt.datetime.now().isoformat(timespec="milliseconds"), "ok": True,
            "name": built_for.platform["board"] if built_for else "openTPU (CFG_HASH of no known target)",
            "card_target": built_for.name if built_for else None, "target": target.name,
            "id": f"0x{info.id:08x}", "link": "ok", "health": info.health, "faults": info.fault_note or None,
            "pcie": info.link, "regmap": info.regmap,
            "bitstream": {"D": info.d, "MCOLS": info.mcols, "LANES": info.lanes,
                          "core_mhz": info.core_khz / 1000 if info.core_khz else None,
                          "build_id": f"{info.build_id:08x}" if info.build_id is not None else None},
            "cfg_hash": {"card": None if info.cfg_hash is None else f"0x{info.cfg_hash:08x}",
                         "target": f"0x{target.arch_hash():08x}",
                         "match": info.cfg_hash == target.arch_hash() if info.cfg_hash is not None else None},
            "calib": list(info.calibrated), "ddr_mts": info.ddr_mts, "status": info.status, "running": info.running,
            "temp_c": info.temp_c, "memory_bytes": b.dram_bytes, "counters": snap,
            "sample": {"cycles": r["cycles"], "seconds": r["seconds"], "ipc": r["ipc"]} if r else None,
            "util": r["util"] if r else None, "dram_gbs": r["dram_gbs"] if r else None,
            "dram_rd_gbs": r["dram_rd_gbs"] if r else None, "dram_wr_gbs": r["dram_wr_gbs"] if r else None,
            "power": {**est.as_dict(), "measured": False} if est else None,
            "process": status,
        }
        own = fields_of(report)
        report["fields"] = smi_fields.merge(own, contributed_fields(b))
        measured = report["fields"].get("power.draw")
        if measured is not None and measured.source == "measured":
            report["power"] = {"w": measured.value, "measured": True, "source": "measured"}
            report["fields"]["power.source"] = Field("power.source", "measured", source="measured")
        return report


def contributed_fields(board) -> list:
    """Every plugin's `otpu_smi_fields` for this card; a plugin that raises is reported once and skipped."""
    out = []
    for impl in plugins.get().hook.otpu_smi_fields.get_hookimpls():
        if impl.plugin_name in _BROKEN:
            continue
        try:
            out.append(impl.function(board=board))
        except Exception as e:
            _BROKEN.add(impl.plugin_name)
            print(f"otpu-smi: plugin '{impl.plugin_name}' failed to report fields: {type(e).__name__}: {e}",
                  file=sys.stderr)
    return out


_BROKEN: set[str] = set()


def card_target(transport, cfg_hash: int | None, asked):
    """The card's own target: what the card says it is where it can (a simulated card knows),
    else the target asked for when the CFG_HASH matches it, else the one shipped target with
    that hash (None when none or several have it: a hash names an arch, not a board)."""
    own = transport.card_target()
    if own is not None:
        return target_mod.load(own)
    if cfg_hash is None or cfg_hash == asked.arch_hash():
        return asked
    found = [t for t in (target_mod.load(n) for n in target_mod.names()) if t.arch_hash() == cfg_hash]
    return found[0] if len(found) == 1 else None


def _status_file(devname: str | None) -> dict | None:
    """The run-state file of the process holding the card, with what psutil says about that process."""
    if devname is None:
        return None
    st = read_status(run_dir() / f"{devname}.json")
    if not st or st.get("stale") or not isinstance(st.get("pid"), int):
        return st
    holders = lock_holders(run_dir() / f"{devname}.lock")
    if holders is not None and st["pid"] not in holders:
        st["stale"] = True           # a status file its PID no longer backs with the lock
        st["not_holder"] = True
        return st
    try:
        proc = psutil.Process(st["pid"])
        with proc.oneshot():
            st["process"] = {"name": proc.name(), "user": proc.username(),
                             "rss_mib": round(proc.memory_info().rss / 2**20, 1),
                             "cpu_s": round(sum(proc.cpu_times()[:2]), 2),
                             "running_s": round(time.time() - proc.create_time(), 1)}
    except (psutil.Error, OSError):
        st["stale"] = True   # gone between reading the file and asking about it
    return st


def fields_of(r: dict[str, Any]) -> list[Field]:
    """smi's own fields of a report, by catalogue name."""
    bs, util, proc = r["bitstream"], r["util"] or {}, r["process"] or {}
    live = proc if proc and not proc.get("stale") else {}
    layout = live.get("dram") if isinstance(live.get("dram"), dict) else {}
    # the runner's DRAM layout (status file): total and free bytes of the card as it placed them
    used = layout["total"] - layout["free"] if {"total", "free"} <= set(layout) else None
    mib = r["memory_bytes"] / 2**20
    pw = r["power"]
    link = r["pcie"] or {}
    out = [
        Field("device", r["device"]), Field("timestamp", r["time"].replace("-", "/").replace("T", " ")),
        Field("name", r["name"]), Field("target", r["target"]), Field("link", r["link"]),
        Field("bitstream.build", bs["build_id"]), Field("bitstream.regmap", r["regmap"]),
        Field("bitstream.config", f"D={bs['D']} MCOLS={bs['MCOLS']} LANES={bs['LANES']}"),
        Field("cfg_hash.card", r["cfg_hash"]["card"]), Field("cfg_hash.target", r["cfg_hash"]["target"]),
        Field("cfg_hash.match", r["cfg_hash"]["match"]),
        Field("pcie.link.gen.current", link.get("speed")), Field("pcie.link.width.current", link.get("width")),
        Field("clocks.core", bs["core_mhz"], "MHz"), Field("temperature.die", r["temp_c"], "C"),
        Field("temperature.die.limit", TEMP_LIMIT_C, "C"),
        Field("health", "; ".join(r["health"]) if r["health"] else "ok"),
        Field("card_target", r["card_target"]),
        Field("temperature.board", None, "C"),
        Field("power.draw", round(pw["w"], 2) if pw else None, "W", "estimate"),
        Field("power.source", f"estimate ({pw['source']})" if pw else None),
        Field("power.max", pw.get("max_w") if pw else None, "W", "estimate"),
        Field("power.limit", pw.get("max_w") if pw else None, "W", "estimate"),
        Field("memory.total", int(mib), "MiB"),
        Field("memory.used", None if used is None else int(used / 2**20), "MiB"),
        Field("memory.free", None if used is None else int(mib - used / 2**20), "MiB"),
        Field("memory.calibration", " ".join(f"ch{i} {'ok' if c else 'NOT calibrated'}" for i, c in enumerate(r["calib"]))),
        Field("memory.type", f"DDR3-{r['ddr_mts']}" if r["ddr_mts"] else None),
        Field("state", "running" if r["running"] else "idle"),
        Field("ipc", round(r["sample"]["ipc"], 3) if r["sample"] else None),
        Field("dram.bandwidth", r["dram_gbs"], "GB/s"), Field("dram.read", r["dram_rd_gbs"], "GB/s"),
        Field("dram.write", r["dram_wr_gbs"], "GB/s"),
        Field("sample.ms", round(r["sample"]["seconds"] * 1000, 1) if r["sample"] and r["sample"]["seconds"] else None,
              "ms"),
        Field("process.pid", live.get("pid")), Field("process.command", live.get("cmd")),
        Field("process.model", live.get("model")), Field("process.tokens", live.get("tokens")),
        Field("process.tok_s", live.get("tok_s_wall"), "tok/s"),
    ]
    for counter, name in UTIL_FIELDS.items():
        v = util.get(counter)
        out.append(Field(name, None if v is None else round(100 * v), "%"))
    return out
