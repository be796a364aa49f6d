"""What `otpu-memcal status` (and smi, and the calib checks) know about each channel, gathered read-only.

From the registers: CAPS HOSTCAL, the STATUS CALIB bits, each controller's DFII mode (a
controller left in software mode was being calibrated), the current CK/DQS phase, the CPU's
state; from the results file: who calibrated each channel and when, its window and BIST, a
failure and its error, and a host calibration that never finished. Reading the CPU's mailbox
takes register writes (its address), so it is done only when the card is not in use
(`with_report`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from otpu_core.card import litedram_map as M

from . import selfcal
from .csr import Csr
from .ensure import calibrated, has_hostcal, record_cpu
from .results import Results


@dataclass
class ChannelStatus:
    ch: int
    calibrated: bool
    state: str                       # calibrated, not calibrated, interrupted, calibrating
    hardware_mode: bool | None = None
    phase: int | None = None
    result: dict | None = None       # the last result (host or CPU), failures included
    note: str = ""

    @property
    def by(self) -> str | None: return (self.result or {}).get("by")

    @property
    def when(self) -> float | None: return (self.result or {}).get("time")

    def as_dict(self) -> dict[str, Any]:
        return {"channel": self.ch, "calibrated": self.calibrated, "state": self.state,
                "hardware_mode": self.hardware_mode, "phase_steps": self.phase, "by": self.by, "time": self.when,
                "note": self.note, "result": self.result}


@dataclass
class CardStatus:
    dev: str
    hostcal: bool
    channels: list[ChannelStatus]
    cpu: selfcal.CpuState | None = None
    in_progress: dict | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def controllers(self) -> str:
        if not self.hostcal:
            return "self-calibrating (MIG)"
        return "LiteDRAM, calibrated by its CPU" if self.cpu and self.cpu.present else "LiteDRAM (host calibration)"

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.dev, "hostcal": self.hostcal, "controllers": self.controllers,
                "cpu": self.cpu.as_dict() if self.cpu else None, "in_progress": self.in_progress,
                "problems": self.problems, "channels": [c.as_dict() for c in self.channels]}


def gather(board, with_report: bool = False) -> CardStatus:
    cal = calibrated(board)
    if not has_hostcal(board):
        return CardStatus(board.t.dev, False, [ChannelStatus(ch, ok, "calibrated" if ok else "not calibrated")
                                               for ch, ok in enumerate(cal)])
    csr = Csr(board.t)
    res = Results(board.t.devname)
    cpu = selfcal.state(csr)
    if with_report and cpu.present and not cpu.running:
        if record_cpu(board, csr, res, [ch for ch, ok in enumerate(cal) if ok and _not_host(res.channel(ch))]):
            res.save()
    mark = res.in_progress()
    out = CardStatus(board.t.dev, True, [], cpu, mark, [res.problem] if res.problem else [])
    for ch, ok in enumerate(cal):
        chan = csr.chan(ch)
        hw = bool(chan.r(M.B_SDRAM, M.DFII_CONTROL) & M.CTL_SEL)
        st = ChannelStatus(ch, ok, "calibrated" if ok else "not calibrated", hw,
                           M.signed32(chan.r(M.B_PHASE, M.PHASE_DQS_STEPS)), res.channel(ch))
        if mark and ch in mark.get("channels", []):
            who = f"PID {mark['pid']} ({mark.get('cmd', '?')})"
            since = _ago(mark.get("time"))
            if mark["alive"]:
                st.state, st.note = "calibrating", f"being calibrated by {who}, started {since}"
            elif not ok:
                st.state = "interrupted"
                st.note = (f"a host calibration by {who}, started {since}, never finished (the process is gone)"
                           + ("; the controller is still in software mode" if not hw else "")
                           + ": `otpu-memcal cal` calibrates it again")
        elif not ok and not hw:
            st.note = "the controller is in software mode (a calibration stopped midway): `otpu-memcal cal`"
        elif not ok and cpu.present and cpu.done and cpu.channel(ch)["state"] == "failed":
            st.note = f"the core's CPU failed: {cpu.channel(ch)['error_text']}: `otpu-memcal cal` tries from the host"
        elif ok and st.result and st.result.get("restored_after"):
            st.note = (f"a host calibration {_ago(st.result.get('restored'))} failed ({st.result['restored_after']}); "
                       "the channel runs on the settings it had before")
        out.channels.append(st)
    return out


def _not_host(result: dict | None) -> bool:
    return not result or result.get("by") != "host"


def _ago(t: float | None) -> str:
    if not t:
        return "at an unknown time"
    s = max(0.0, time.time() - float(t))
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.0f} days ago"


def when_text(t: float | None) -> str:
    if not t:
        return "at an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t))) + f" ({_ago(t)})"
