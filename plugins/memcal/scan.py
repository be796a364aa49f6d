"""`otpu-memcal scan`: a channel's full window maps, measured without changing its running settings.

The running settings (CK/DQS phase, each lane's write latency, read bitslip, bit offsets and
tap) cannot be read back from the PHY, so they come from what calibrated the channel: the
host's saved result or the CPU's report. The scan takes the channel out of service
(cal_ready low, software mode), saves the DRAM the test bursts overwrite (the first bytes of
the channel, and the BIST region when steps run a BIST), measures the read maps at every write
latency and the phase sweep at the running read settings, then puts every setting back,
checks it reads back error-free, returns the DRAM to the controller with its bytes restored
and raises cal_ready again.
"""
from __future__ import annotations

import math

from otpu_core.card import litedram_map as M
from otpu_core.errors import UsageError

from .csr import Csr
from .dfii import Dram
from .hostcal import Progress, restore
from .leveling import write_latency
from .sweep import DqsPhase, sweep

SAVED_BYTES = 4096         # the DFII bursts land in the first row's first columns


def scan_channel(board, csr: Csr, ch: int, settings: dict, stride: int, bist_mib: float,
                 progress: Progress | None = None) -> dict:
    """The maps of channel `ch` (a result-shaped dict); the channel is back at `settings` afterwards."""
    if bist_mib * (1 << 20) > board.t.channel_bytes:
        raise UsageError(f"--bist-mib {bist_mib:g}: the channel has only {board.t.channel_bytes >> 20} MiB")
    keep = SAVED_BYTES if not bist_mib else max(SAVED_BYTES, math.ceil(bist_mib * (1 << 20) / 4096) * 4096)
    saved = board.read_channel(ch, 0, keep).copy()
    chan = csr.chan(ch)
    chan.w(M.B_CAL, M.CAL_READY, 0)
    try:
        dram, dqs = Dram(chan), DqsPhase(chan)
        dram.software()
        dram.prepare()
        start = int(settings["dqs_steps"])
        dqs.move(start)
        lev = write_latency(dram, progress=(lambda d, n: progress("read maps", d, n)) if progress else None)
        dram.set_write_bitslip({lane: max(0, w) for lane, w in enumerate(settings["write_latency"])})
        writes = []
        for lane, r in enumerate(settings["read"]):
            writes += dram.set_read(lane, int(r["bitslip"]), int(r["tap"]), r.get("offsets"))
        dram.apply(writes)
        sw = sweep(dram, dqs, chan, start, stride, bist_mib,
                   progress=(lambda k, n: progress("sweep", k, n)) if progress else None)
    finally:
        restore(csr, ch, settings)
        board.write_channel(ch, 0, saved)
    first, length = sw.common()
    windows = sw.lane_windows()
    return {"ch": ch, "by": "scan", "stride": stride, "scan_start": start, "scan_points": len(sw.points),
            "pass_maps": sw.maps(), "traffic_checked": bool(bist_mib),
            "lane_window_steps": [n * stride for _, n in windows],
            "lane_window_ps": [round(n * stride * M.STEP_PS) for _, n in windows],
            "dqs_steps": start, "window_steps": length * stride, "window_ps": round(length * stride * M.STEP_PS),
            "run_first": sw.points[first] if length else None,
            "run_last": sw.points[(first + length - 1) % len(sw.points)] if length else None,
            "centre_offset": sw.points[(first + length // 2) % len(sw.points)] if length else None,
            "write_latency": settings["write_latency"], "read": lev.as_dict()["read"], "windows": lev.as_dict()["windows"],
            "read_maps": lev.maps, "bist_failed_steps": sw.bist_failed}
