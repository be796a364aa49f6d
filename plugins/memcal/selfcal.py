"""The LiteDRAM core's self-calibration CPU, from the host: present, state, hold, release, wait, report, firmware.

A VexRiscv inside the LiteDRAM core runs the calibration at reset, channel 0 then 1, and
raises cal_ready (reference host.md 6.4). CSRs: `hold` (1 keeps it in reset; 0 restarts it
from the top), `config` (bits 1:0 channels, 15:8 scan stride), `status` (31:16 magic 0x5CA1,
4:1 log2 firmware words, 0 held), `state` (2 bits per channel idle / running / ok / failed,
bit 7 done, an error code per channel in 15:8 and 23:16), a 256-word mailbox with its
report and the firmware memory (written only while held).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from otpu_core.card import litedram_map as M
from otpu_core.errors import DeviceError, UsageError

from .csr import Csr

WAIT_S = 60.0        # how long the host waits for the CPU (a channel takes it about 6 s on the card)
POLL_S = 0.05


@dataclass(frozen=True)
class CpuState:
    present: bool
    held: bool = False
    done: bool = False
    fw_words: int = 0
    channels: tuple[tuple[str, int], ...] = ()      # per channel (state name, error code)

    def channel(self, ch: int) -> dict:
        name, code = self.channels[ch]
        return {"state": name, "error": code, "error_text": M.ERROR_TEXT.get(code, f"error {code}")}

    @property
    def running(self) -> bool: return self.present and not self.held and not self.done

    def describe(self) -> str:
        if not self.present:
            return "none (this bitstream's LiteDRAM core has no calibration CPU)"
        if self.held:
            return "held (the host calibrates)"
        return "done" if self.done else "running"

    def as_dict(self) -> dict:
        return {"present": self.present, "held": self.held, "done": self.done, "state": self.describe(),
                "firmware_words": self.fw_words,
                "channels": [self.channel(ch) for ch in range(len(self.channels))]}


def state(csr: Csr) -> CpuState:
    status = csr.r(M.B_SELFCAL + M.SC_STATUS)
    if status >> 16 != M.SELFCAL_MAGIC:
        return CpuState(False)
    st = csr.r(M.B_SELFCAL + M.SC_STATE)
    chans = tuple((M.SC_STATE_NAMES[(st >> (2 * ch)) & 3], (st >> (8 + 8 * ch)) & 0xFF) for ch in range(M.NCHANNELS))
    return CpuState(True, bool(status & 1), bool(st & M.SC_DONE), 1 << ((status >> 1) & 0xF), chans)


def require(csr: Csr) -> CpuState:
    cpu = state(csr)
    if not cpu.present:
        raise UsageError("this bitstream's LiteDRAM core has no calibration CPU (selfcal_status does not read 0x5CA1)",
                         hint="calibrate from the host: `otpu-memcal cal`")
    return cpu


def hold(csr: Csr) -> None:
    """Keep the CPU in reset, so it cannot recalibrate behind the host's back."""
    csr.w(M.B_SELFCAL + M.SC_HOLD, 1)


def release(csr: Csr, channels: int | None = None, stride: int | None = None) -> None:
    """Restart the CPU from the top (it drops cal_ready of the channels it calibrates). The state is
    cleared first, or a wait would see the last run's done bit."""
    hold(csr)
    if channels is not None or stride is not None:
        cfg = csr.r(M.B_SELFCAL + M.SC_CONFIG)
        if channels is not None:
            cfg = (cfg & ~3) | (channels & 3)
        if stride is not None:
            cfg = (cfg & ~0xFF00) | ((stride & 0xFF) << 8)
        csr.w(M.B_SELFCAL + M.SC_CONFIG, cfg)
    csr.w(M.B_SELFCAL + M.SC_STATE, 0)
    csr.w(M.B_SELFCAL + M.SC_HOLD, 0)


def wait(csr: Csr, timeout: float = WAIT_S, tick: Callable[[float], None] | None = None) -> CpuState:
    """Until the CPU says done (or is held); DeviceError after `timeout` seconds."""
    t0 = time.monotonic()
    while True:
        cpu = state(csr)
        if not cpu.running:
            return cpu
        waited = time.monotonic() - t0
        if waited > timeout:
            raise DeviceError(f"the LiteDRAM core's calibration CPU has not finished after {timeout:g} s",
                              hint="`otpu-memcal console --port TTY` shows its log; `otpu-memcal cal` calibrates "
                                   "from the host instead")
        if tick:
            tick(waited)
        time.sleep(POLL_S)


def mailbox(csr: Csr) -> list[int]:
    ops = []
    for i in range(M.MBOX_WORDS):
        ops += [(M.B_SELFCAL + M.SC_MBOX_ADR, i), (M.B_SELFCAL + M.SC_MBOX_DAT, None)]
    return csr.batch(ops)


def _s16(v: int) -> int: return v - 0x10000 if v & 0x8000 else v


def decode(words: list[int]) -> dict | None:
    """The CPU's report: {firmware_id, channels: {ch: result}}, None before it has reported."""
    if len(words) < M.MBOX_WORDS or words[0] != M.MBOX_MAGIC:
        return None
    chans = {}
    for ch, at in enumerate(M.CH_BLOCK):
        blk = words[at:at + 64]
        if not blk[0]:
            continue
        points = blk[2] >> 16
        stride = blk[0] >> 24
        wl = [(blk[5] >> (4 * l)) & 0xF for l in range(8)] + [blk[6] & 0xF]
        offs_bits = sum(blk[16 + i] << (32 * i) for i in range(5))
        maps = ["".join("#" if (sum(blk[24 + 4 * l + i] << (32 * i) for i in range(4)) >> k) & 1 else "."
                        for k in range(points)) for l in range(M.LANES)]
        read = []
        for l, v in enumerate(blk[7:7 + M.LANES]):
            offsets = [{0: 0, 1: 2, 3: -2}.get((offs_bits >> (2 * (8 * l + i))) & 3, 0) for i in range(8)]
            read.append({"taps": v & 0xFF, "bitslip": (v >> 8) & 0xFF, "tap": v >> 24, "offsets": offsets})
        start = M.signed32(blk[23])
        chans[ch] = {
            "ch": ch, "by": "selfcal", "state": M.SC_STATE_NAMES[blk[0] & 3], "error": (blk[0] >> 8) & 0xFF,
            "error_text": M.ERROR_TEXT.get((blk[0] >> 8) & 0xFF, "unknown"),
            "traffic_checked": bool(blk[0] >> 17 & 1), "stride": stride,
            "dqs_steps": M.signed32(blk[1]), "window_steps": blk[2] & 0xFFFF, "scan_points": points,
            "window_ps": round((blk[2] & 0xFFFF) * M.STEP_PS),
            "run_first": _s16(blk[3] >> 16), "run_last": None if blk[4] == 0xFFFF else _s16(blk[4]),
            "write_latency": [-1 if x == 0xF else x for x in wl], "read": read, "scan_start": start,
            "seconds": round(blk[22] / M.SYS_HZ, 3) if blk[22] else None, "pass_maps": maps,
            "lane_window_steps": [_longest(m, points * max(stride, 1) >= M.PERIOD_STEPS) * max(stride, 1) for m in maps],
        }
        chans[ch]["lane_window_ps"] = [round(n * M.STEP_PS) for n in chans[ch]["lane_window_steps"]]
    return {"firmware_id": words[1], "channels": chans}


def _longest(pass_map: str, circular: bool) -> int:
    if "." not in pass_map:
        return len(pass_map)
    text = pass_map + pass_map if circular else pass_map
    return min(len(pass_map), max(len(run) for run in text.split(".")))


def report(csr: Csr) -> dict | None:
    """The CPU's last report, decoded (None when there is no CPU or it has not reported)."""
    if not state(csr).present:
        return None
    return decode(mailbox(csr))


def load(csr: Csr, image: bytes, tick: Callable[[int, int], None] | None = None) -> None:
    """Hold the CPU, write a firmware image (little-endian 32-bit words, then zeros), verify it.
    The CPU stays held; `release` runs the new firmware."""
    cpu = require(csr)
    if len(image) % 4:
        raise UsageError(f"a firmware image is whole 32-bit words: {len(image)} bytes is not a multiple of 4")
    words = [int.from_bytes(image[i:i + 4], "little") for i in range(0, len(image), 4)]
    if len(words) > cpu.fw_words:
        raise UsageError(f"the firmware image has {len(words)} words; the CPU's memory holds {cpu.fw_words}")
    words += [0] * (cpu.fw_words - len(words))
    hold(csr)
    step = 256
    for at in range(0, len(words), step):
        ops = []
        for i, w in enumerate(words[at:at + step], at):
            ops += [(M.B_SELFCAL + M.SC_MEM_ADR, i), (M.B_SELFCAL + M.SC_MEM_DAT, w)]
        csr.batch(ops)
        if tick:
            tick(min(at + step, len(words)), len(words))
    for at in range(0, len(words), step):
        ops = []
        for i in range(at, min(at + step, len(words))):
            ops += [(M.B_SELFCAL + M.SC_MEM_ADR, i), (M.B_SELFCAL + M.SC_MEM_RDAT, None)]
        got = csr.batch(ops)
        bad = next((at + k for k, (g, w) in enumerate(zip(got, words[at:at + step])) if g != w), None)
        if bad is not None:
            raise DeviceError(f"firmware word {bad} reads back 0x{got[bad - at]:08x}, wrote 0x{words[bad]:08x}",
                              hint="the CPU's memory port; the CPU stays held")
