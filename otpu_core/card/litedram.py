"""The LiteDRAM controllers of the simulated card: PHY delay windows, DFII, BIST, self-calibration.

What a host sees through the 64 KiB CSR window at BAR0 0x10000 (layout of the openTPU build's
csr.csv, host.md 1.8): per channel the PHY's read IDELAY taps and bitslips, write bitslips,
the CK/DQS phase shifter and the write-clock MMCM's DRP, the DFII software port (mode
registers, activate, precharge, refresh, reads and writes through four DFI phases), a BIST,
ECC counters and cal_ready; plus the core's self-calibration CPU.

The physics is a small model seeded by the card serial, so two cards differ:
- write side: each byte lane stores data right only while the channel's CK/DQS phase lies in
  the lane's window of phase steps (112 per tCK) and its write bitslip equals the lane's
  write latency;
- read side: each DQ bit reads right only while its sampling position (read bitslip x 12 taps
  per bit time + IDELAY tap) lies in the bit's eye (9-12 taps, bits of a lane a tap apart);
- the DRAM answers only after the JEDEC init (reset released, CKE, MR0..MR3 with CL 7 /
  CWL 6, ZQ calibration).
Anything outside a window reads back as noise. `no_calib:ch=` empties a channel's windows.

`SelfCal` is the calibration driver. It works only through `read`/`write` of CSR offsets, so
the core CPU model runs it on power-on and a host tool can run it over BAR0 unchanged.
"""
from __future__ import annotations

import dataclasses
import marshal
import math
import random
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .faults import BUS_BYTES, FaultSet, garble_read, garble_write, lane_salt, mix64
from .litedram_map import (
    ACT, BIST_ADDR_DATA, BIST_BASE, BIST_BEATS, BIST_DONE, BIST_ERRORS, BIST_LANE_BITS, BIST_LANE_ERRORS,
    BIST_LENGTH, BIST_MODE, BIST_READ, BIST_SEED, BIST_START, BIST_TICKS, BITSLIPS, BLOCK, B_BIST, B_CAL, B_CTRL,
    B_DDRPHY, B_ECC, B_IDENT, B_PHASE, B_SDRAM, B_SELFCAL, B_WCLK, CAL_READY, CH_BLOCK, CL, CMD_MASK, CMD_RDDATA,
    CMD_WRDATA, CTL_CKE, CTL_ODT, CTL_RESET_N, CTL_SEL, CTRL_BUS_ERRORS, CTRL_RESET, CTRL_SCRATCH, CWL, DATABITS,
    DATA_WORDS, DELAYS, DFII_CONTROL, DFII_PHASE0, DFII_PHASE_STRIDE, DRP_REGS, ECC_CLEAR, ECC_DED, ECC_ENABLE,
    ECC_SEC, ERROR_TEXT, ERR_DRP_TIMEOUT, ERR_FINAL, ERR_MMCM_PHASES, ERR_MMCM_UNLOCKED, ERR_NO_COMMON_PHASE,
    ERR_SHIFT_BUSY, EXPECTED_PHASES, HALF_SYS8X_TAPS, IDENTIFIER, INIT_SEQUENCE, LANES, MBOX_MAGIC, MBOX_WORDS,
    MIN_WINDOW, MR1_WLEVEL, MRS, NCHANNELS, NPHASES, PERIOD_STEPS, PER_CHANNEL, PHASE_DQS_BUSY, PHASE_DQS_SHIFT,
    PHASE_DQS_STEPS, PHY_DLY_SEL, PHY_DLY_SEL_BITS, PHY_HALF_SYS8X_TAPS, PHY_RDLY_DQ_BITSLIP,
    PHY_RDLY_DQ_BITSLIP_RST, PHY_RDLY_DQ_INC, PHY_RDLY_DQ_RST, PHY_RDPHASE, PHY_RST, PHY_WDLY_DQ_BITSLIP,
    PHY_WDLY_DQ_BITSLIP_RST, PHY_WLEVEL_EN, PHY_WLEVEL_STROBE, PHY_WRPHASE, PI_ADDRESS, PI_BADDRESS, PI_COMMAND,
    PI_ISSUE, PI_RDDATA, PI_WRDATA, PRE, RDPHASE, READ, REF, SCRATCH_RESET, SC_CONFIG, SC_DONE, SC_FAILED, SC_HOLD,
    SC_MBOX_ADR, SC_MBOX_DAT, SC_MEM_ADR, SC_MEM_DAT, SC_MEM_RDAT, SC_OK, SC_STATE, SC_STATUS, SELFCAL_MAGIC,
    STEP_PS, TCK_BITSLIPS, WCLK_DRP_ADR, WCLK_DRP_DAT_R, WCLK_DRP_DAT_W, WCLK_DRP_DRDY, WCLK_DRP_READ,
    WCLK_DRP_WRITE, WCLK_MMCM_LOCKED, WCLK_MMCM_RESET, WRITE, WRPHASE, ZQC, int_to_words, signed32, words_to_int)

# ---- the model's own physics and firmware facts ------------------------------------------------
TAPS_PER_UI = 12         # 938 ps bit time / 78.125 ps tap at DDR3-1066
WRITE_BITSLIPS = tuple(range(0, BITSLIPS, TCK_BITSLIPS))    # 0, 2, 4, 6
FW_LOG2_WORDS = 12
BUILTIN_FW_ID = 0x00010004
_DRP_DIVIDE_BY_2 = 0x0041                        # HIGH_TIME 1, LOW_TIME 1
BIST_WRITE_EFFICIENCY, BIST_READ_EFFICIENCY = 0.901, 0.910

_M64 = (1 << 64) - 1
_BEAT_MASK = (1 << DATABITS) - 1


def has_litedram(target) -> bool:
    """True when the target's board has this controller (two DDR3 channels: CAPS HOSTCAL)."""
    p = target.platform
    return p["memory"].startswith("DDR3") and p["channels"] == NCHANNELS


def _mix64(x: int) -> int:
    """splitmix64 finaliser on a Python int (the noise of a wrong sample)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _noise(key: int, bits: int) -> int:
    out, i = 0, 0
    while i * 64 < bits:
        out |= _mix64(key * 0x10001 + i) << (64 * i)
        i += 1
    return out & ((1 << bits) - 1)


def _lane_mask(lanes) -> int:
    """Bits of a two-beat phase word (2 x 72) that belong to the given byte lanes."""
    m = 0
    for l in lanes:
        m |= (0xFF << (8 * l)) | (0xFF << (DATABITS + 8 * l))
    return m


# ---- the per-serial physics --------------------------------------------------------------------

@dataclass(frozen=True)
class LaneWindow:
    """One byte lane's windows. Write: phase steps in the circular range [write_lo, write_lo+write_len)
    with write bitslip `write_bitslip`. Read: bit b samples right at positions within
    `read_half` of `read_centre + bit_skew[b]` (position = read bitslip x 12 + tap)."""
    write_lo: int
    write_len: int
    write_bitslip: int
    read_centre: float
    read_half: float
    bit_skew: tuple[int, ...]
    wlevel_edge: int

    def write_ok(self, phase: int, bitslip: int) -> bool:
        return bitslip == self.write_bitslip and (phase - self.write_lo) % PERIOD_STEPS < self.write_len

    def read_bits_ok(self, positions: list[int]) -> list[bool]:
        """Per bit: does it sample inside its eye at its position?"""
        return [abs(p - self.read_centre - s) <= self.read_half for p, s in zip(positions, self.bit_skew)]

    @property
    def write_centre(self) -> int: return (self.write_lo + self.write_len // 2) % PERIOD_STEPS

    def read_positions(self) -> range:
        """Positions where every bit of the lane reads right (empty when the lane has no eye)."""
        lo = math.ceil(max(self.read_centre + s - self.read_half for s in self.bit_skew))
        hi = math.floor(min(self.read_centre + s + self.read_half for s in self.bit_skew))
        return range(lo, hi + 1)


def lane_windows(serial: int, ch: int, faults: FaultSet) -> tuple[LaneWindow, ...]:
    """The windows of channel `ch` of card `serial` (deterministic; faults may empty them)."""
    rng = np.random.default_rng([0x11DE, serial, ch])
    centre = int(rng.integers(PERIOD_STEPS))
    base_wb = int(rng.choice(WRITE_BITSLIPS))
    empty = bool(faults.on_channel("no_calib", ch))
    lanes = []
    for _ in range(LANES):
        length = int(rng.integers(56, 84))
        lo = (centre + int(round(rng.normal(0, 4))) - length // 2) % PERIOD_STEPS
        wb = base_wb if rng.random() > 0.15 else (base_wb + 2) % BITSLIPS
        lanes.append(LaneWindow(
            write_lo=lo, write_len=0 if empty else length, write_bitslip=wb,
            read_centre=float(rng.uniform(18, 84)), read_half=-1.0 if empty else float(rng.uniform(4.5, 6.0)),
            bit_skew=tuple(int(x) for x in rng.choice([-1, 0, 0, 1], size=8)),
            wlevel_edge=(lo + length // 2 - PERIOD_STEPS // 4) % PERIOD_STEPS))
    for f in faults.on_channel("dq_slip", ch):          # that bit's eye sits `off` bit times away
        lane, bit = divmod(int(f.params["bit"]), 8)
        skew = list(lanes[lane].bit_skew)
        skew[bit] += int(f.params["off"]) * TAPS_PER_UI
        lanes[lane] = dataclasses.replace(lanes[lane], bit_skew=tuple(skew))
    return tuple(lanes)


def _bist_words(mode: int, seed: int, addrs: np.ndarray) -> np.ndarray:
    """The 8 bus words of each 64-byte beat at byte addresses `addrs` (shape (n, 8), uint64)."""
    word_addr = addrs.astype(np.uint64)[:, None] + np.arange(0, 64, 8, dtype=np.uint64)[None, :]
    if mode & BIST_ADDR_DATA:
        return word_addr
    return mix64(word_addr ^ np.uint64(seed & _M64))


def _ecc_byte(words: np.ndarray) -> np.ndarray:
    """What the ECC lane carries for a bus word (an XOR fold of its bytes)."""
    x = words ^ (words >> np.uint64(32))
    x ^= x >> np.uint64(16)
    x ^= x >> np.uint64(8)
    return x & np.uint64(0xFF)


# ---- the controller model ----------------------------------------------------------------------

def _fresh_channel() -> dict:
    return {
        "phy_rst": 0, "dly_sel": 0, "dly_sel_bits": 0xFF, "half_sys8x_taps": HALF_SYS8X_TAPS,
        "wlevel_en": 0, "rdphase": RDPHASE, "wrphase": WRPHASE,
        "rdly": [0] * LANES, "rbs": [0] * LANES, "wbs": [0] * LANES,
        "rbs_off": [[0] * 8 for _ in range(LANES)],     # per DQ bit: its read bitslip minus its lane's
        "phase_steps": 0, "control": CTL_SEL,
        "cmd": [0] * NPHASES, "addr": [0] * NPHASES, "baddr": [0] * NPHASES,
        "wrdata": [[0] * DATA_WORDS for _ in range(NPHASES)], "rddata": [[0] * DATA_WORDS for _ in range(NPHASES)],
        "mr": [None] * 4, "zq": False, "rows": {}, "mem": {}, "refreshes": 0, "reads": 0,
        "cal_ready": 0,
        "bist": {"mode": 0, "base": 0, "length": 0, "seed": [0, 0], "done": 0, "ticks": 0, "beats": 0,
                 "errors": 0, "lane_errors": [0] * LANES, "lane_bits": 0, "written": None},
        "ecc": {"enable": 0, "sec": 0, "ded": 0},
        "wclk": {"reset": 0, "adr": 0, "dat_w": 0, "dat_r": 0, "drdy": 0,
                 "drp": {str(r): v for r, v in _default_drp().items()}},
    }


def _default_drp() -> dict[int, int]:
    regs = {}
    for out, (r1, r2) in DRP_REGS.items():
        eighths = EXPECTED_PHASES.get(out, 0)
        regs[r1] = ((eighths % 8) << 13) | _DRP_DIVIDE_BY_2
        regs[r2] = eighths // 8
    return regs


# Block number (offset >> 11) -> (block base, channel or None).
_BLOCKS = tuple(next(((b, (n * BLOCK - b) // BLOCK) for b in PER_CHANNEL if b <= n * BLOCK <= b + BLOCK), (n * BLOCK, None))
                for n in range(0x10000 // BLOCK))
_MEM_KEEP = 64     # DFII bursts remembered per channel (training touches a handful)
_POWER_ON: dict[tuple, bytes] = {}     # (serial, faults) -> the state after the CPU's power-on calibration
_WINDOW_FAULTS = ("no_calib", "dq_slip")
_RDDATA_WORDS = {B_SDRAM + ch * BLOCK + DFII_PHASE0 + DFII_PHASE_STRIDE * p + PI_RDDATA + 4 * i: (ch, p, i)
                 for ch in range(NCHANNELS) for p in range(NPHASES) for i in range(DATA_WORDS)}


class LiteDram:
    """The CSR window of both LiteDRAM channels and the PHY behind it. State lives in `state`."""
    READS_KEEP_STATE = True          # a CSR read never changes the controller (the card need not store it)

    def __init__(self, target, serial: int, state: dict, faults: FaultSet):
        self.target, self.serial, self.state, self.faults = target, serial, state, faults
        self.windows = tuple(lane_windows(serial, ch, faults) for ch in range(NCHANNELS))
        self._read_cache: dict[tuple, list[bool]] = {}
        self._mask_cache: dict[int, tuple[list[bool], int]] = {}
        if "ch" not in state or any("rbs_off" not in c for c in state["ch"]):   # absent, or an older model's
            self.reset()

    # ---- lifecycle ---------------------------------------------------------------------------

    def reset(self, run_cpu: bool = True) -> None:
        """Power-on: PHYs at reset values, DRAM uninitialised; the core CPU then calibrates."""
        self.state.clear()
        self.state.update(ch=[_fresh_channel() for _ in range(NCHANNELS)], scratch=SCRATCH_RESET,
                          selfcal={"hold": 0, "config": 0b11 | (1 << 8), "state": 0,
                                   "mbox_adr": 0, "mbox": [0] * MBOX_WORDS, "mem_adr": 0, "mem": {}})
        if run_cpu:
            # The CPU's power-on run is a pure function of the card (its serial and the faults that
            # shape its windows): replay it when this process has powered that card on before.
            key = (self.serial, tuple(str(f) for kind in _WINDOW_FAULTS for f in self.faults.get(kind)))
            done = _POWER_ON.get(key)
            if done is None:
                self._run_cpu()
                if len(_POWER_ON) >= 64:
                    _POWER_ON.clear()
                _POWER_ON[key] = marshal.dumps(self.state)
            else:
                self.state.clear()
                self.state.update(marshal.loads(done))

    # ---- what the DRAM model asks ------------------------------------------------------------

    def calibrated(self, ch: int) -> bool:
        return bool(self.state["ch"][ch]["cal_ready"])

    def _phase(self, c: dict) -> int: return c["phase_steps"] % PERIOD_STEPS

    def _initialised(self, c: dict) -> bool:
        mr = c["mr"]
        return (c["control"] & (CTL_RESET_N | CTL_CKE)) == (CTL_RESET_N | CTL_CKE) and c["zq"] \
            and None not in mr and (mr[0] >> 4) & 7 == CL - 4 and (mr[2] >> 3) & 7 == CWL - 5 and not c["phy_rst"]

    def write_lanes_ok(self, ch: int) -> list[bool]:
        """Per lane: does data written now reach the DRAM intact?"""
        c = self.state["ch"][ch]
        if not self._initialised(c):
            return [False] * LANES
        ph = self._phase(c)
        return [w.write_ok(ph, c["wbs"][l]) for l, w in enumerate(self.windows[ch])]

    def read_bits_ok(self, ch: int) -> list[bool]:
        """Per DQ bit (72): does a read now sample it inside its eye?"""
        c = self.state["ch"][ch]
        if not self._initialised(c):
            return [False] * DATABITS
        key = (ch, tuple(c["rbs"]), tuple(c["rdly"]), tuple(map(tuple, c["rbs_off"])))
        out = self._read_cache.get(key)
        if out is None:          # the eyes are fixed for this card: the answer depends on the settings only
            out = []
            for l, w in enumerate(self.windows[ch]):
                out += w.read_bits_ok([(c["rbs"][l] + off) % BITSLIPS * TAPS_PER_UI + c["rdly"][l]
                                       for off in c["rbs_off"][l]])
            if len(self._read_cache) > 4096:
                self._read_cache.clear()
            self._read_cache[key] = out
        return out

    def read_lanes_ok(self, ch: int) -> list[bool]:
        bits = self.read_bits_ok(ch)
        return [all(bits[8 * l:8 * l + 8]) for l in range(LANES)]

    def _hardware_bad(self, ch: int, lanes_ok: list[bool]) -> list[int]:
        if not self.state["ch"][ch]["control"] & CTL_SEL:
            return list(range(BUS_BYTES))        # the controller is not driving the DRAM
        return [l for l in range(BUS_BYTES) if not lanes_ok[l]]

    def bad_write_lanes(self, ch: int) -> list[int]:
        """Data byte lanes whose writes land wrong now (none on a well-tuned channel)."""
        return self._hardware_bad(ch, self.write_lanes_ok(ch))

    def bad_read_lanes(self, ch: int) -> list[int]:
        """Data byte lanes whose reads sample outside their eye now (none on a well-tuned channel)."""
        return self._hardware_bad(ch, self.read_lanes_ok(ch))

    def corrupt_write(self, ch: int, addr: int, data: np.ndarray) -> np.ndarray:
        """Garble, in place, the bytes of `data` (written at channel address `addr`) on lanes whose
        write path is out of its window; returns `data`. A no-op on a well-tuned channel."""
        return garble_write(data, addr, self.bad_write_lanes(ch), lane_salt(self.serial, write=True))

    def corrupt_read(self, ch: int, addr: int, data: np.ndarray) -> np.ndarray:
        """Garble, in place, the bytes of `data` (read from channel address `addr`) on lanes whose
        read path samples outside its eye; returns `data`. A no-op on a well-tuned channel."""
        return garble_read(data, addr, self.bad_read_lanes(ch), lane_salt(self.serial, write=False))

    # ---- register access ---------------------------------------------------------------------

    @staticmethod
    def _split(offset: int) -> tuple[int, int | None, int]:
        """(block base, channel or None, offset inside the block)."""
        base, ch = _BLOCKS[offset >> 11]
        return base, ch, offset & (BLOCK - 1)

    def read(self, offset: int) -> int:
        word = _RDDATA_WORDS.get(offset)
        if word is not None:             # a DFII read-back word: most of what a calibration reads
            ch, p, i = word
            return self.state["ch"][ch]["rddata"][p][i]
        base, ch, rel = self._split(offset & 0xFFFC)
        if ch is not None:
            c = self.state["ch"][ch]
            if base == B_SDRAM:
                return self._read_dfii(c, rel)
            if base == B_DDRPHY:
                return self._read_phy(c, rel)
            if base == B_PHASE:
                return {PHASE_DQS_BUSY: 0, PHASE_DQS_STEPS: c["phase_steps"] & 0xFFFFFFFF}.get(rel, 0)
            if base == B_BIST:
                return self._read_bist(c, rel)
            if base == B_CAL:
                return c["cal_ready"] if rel == CAL_READY else 0
            if base == B_WCLK:
                return self._read_wclk(c, rel)
            if base == B_ECC:
                return {ECC_ENABLE: c["ecc"]["enable"], ECC_SEC: c["ecc"]["sec"], ECC_DED: c["ecc"]["ded"]}.get(rel, 0)
        if base == B_CTRL:
            return {CTRL_SCRATCH: self.state["scratch"], CTRL_BUS_ERRORS: 0}.get(rel, 0)
        if base == B_IDENT:
            i = rel // 4
            return ord(IDENTIFIER[i]) if i < len(IDENTIFIER) else 0
        if base == B_SELFCAL:
            return self._read_selfcal(rel)
        return 0

    def write(self, offset: int, value: int) -> None:
        value &= 0xFFFFFFFF
        base, ch, rel = self._split(offset & 0xFFFC)
        if ch is not None:
            c = self.state["ch"][ch]
            if base == B_SDRAM:
                self._write_dfii(ch, c, rel, value)
            elif base == B_DDRPHY:
                self._write_phy(ch, c, rel, value)
            elif base == B_PHASE and rel == PHASE_DQS_SHIFT:
                if not c["wclk"]["reset"]:
                    c["phase_steps"] += 1 if value & 1 else -1
            elif base == B_BIST:
                self._write_bist(ch, c, rel, value)
            elif base == B_CAL and rel == CAL_READY:
                c["cal_ready"] = value & 1
            elif base == B_WCLK:
                self._write_wclk(c, rel, value)
            elif base == B_ECC:
                if rel == ECC_ENABLE:
                    c["ecc"]["enable"] = value & 1
                elif rel == ECC_CLEAR and value:
                    c["ecc"]["sec"] = c["ecc"]["ded"] = 0
        elif base == B_CTRL:
            if rel == CTRL_SCRATCH:
                self.state["scratch"] = value
            elif rel == CTRL_RESET and value & 1:
                self.reset()
        elif base == B_SELFCAL:
            self._write_selfcal(rel, value)

    # ---- PHY ---------------------------------------------------------------------------------

    def _read_phy(self, c: dict, rel: int) -> int:
        return {PHY_RST: c["phy_rst"], PHY_DLY_SEL: c["dly_sel"], PHY_HALF_SYS8X_TAPS: c["half_sys8x_taps"],
                PHY_WLEVEL_EN: c["wlevel_en"], PHY_RDPHASE: c["rdphase"], PHY_WRPHASE: c["wrphase"],
                PHY_DLY_SEL_BITS: c["dly_sel_bits"]}.get(rel, 0)

    def _write_phy(self, ch: int, c: dict, rel: int, value: int) -> None:
        sel = [l for l in range(LANES) if c["dly_sel"] >> l & 1]
        if rel == PHY_RST:
            c["phy_rst"] = value & 1
            if value & 1:
                c["rdly"], c["rbs"], c["wbs"] = [0] * LANES, [0] * LANES, [0] * LANES
                c["rbs_off"] = [[0] * 8 for _ in range(LANES)]
        elif rel == PHY_DLY_SEL:
            c["dly_sel"] = value & ((1 << LANES) - 1)
        elif rel == PHY_HALF_SYS8X_TAPS:
            c["half_sys8x_taps"] = value & 0x1F
        elif rel == PHY_WLEVEL_EN:
            c["wlevel_en"] = value & 1
        elif rel == PHY_WLEVEL_STROBE:
            self._wlevel_strobe(ch, c)
        elif rel == PHY_RDPHASE:
            c["rdphase"] = value & (NPHASES - 1)
        elif rel == PHY_WRPHASE:
            c["wrphase"] = value & (NPHASES - 1)
        elif rel == PHY_DLY_SEL_BITS:
            c["dly_sel_bits"] = value & 0xFF
        elif not c["phy_rst"]:
            key, step, modulo = {PHY_RDLY_DQ_RST: ("rdly", 0, DELAYS), PHY_RDLY_DQ_INC: ("rdly", 1, DELAYS),
                                 PHY_RDLY_DQ_BITSLIP_RST: ("rbs", 0, BITSLIPS), PHY_RDLY_DQ_BITSLIP: ("rbs", 1, BITSLIPS),
                                 PHY_WDLY_DQ_BITSLIP_RST: ("wbs", 0, BITSLIPS),
                                 PHY_WDLY_DQ_BITSLIP: ("wbs", 1, BITSLIPS)}.get(rel, (None, 0, 1))
            if key == "rbs" and c["dly_sel_bits"] != 0xFF:
                self._bit_bitslips(c, sel, step)
            elif key is not None:
                for l in sel:
                    c[key][l] = (c[key][l] + 1) % modulo if step else 0
                    if key == "rbs" and not step:
                        c["rbs_off"][l] = [0] * 8

    @staticmethod
    def _bit_bitslips(c: dict, lanes: list[int], step: int) -> None:
        """A read-bitslip strobe with dly_sel_bits masking it to some DQ bits of the selected lanes."""
        for l in lanes:
            for i in range(8):
                if c["dly_sel_bits"] >> i & 1:
                    bit = (c["rbs"][l] + c["rbs_off"][l][i]) % BITSLIPS
                    c["rbs_off"][l][i] = ((bit + 1) % BITSLIPS if step else 0) - c["rbs"][l]

    def _wlevel_strobe(self, ch: int, c: dict) -> None:
        """Write leveling: the DRAM samples CK with DQS and returns the level on every DQ of the lane."""
        if not (c["wlevel_en"] and c["mr"][1] is not None and c["mr"][1] & MR1_WLEVEL):
            return
        ph = self._phase(c)
        high = [l for l, w in enumerate(self.windows[ch])
                if w.write_len and (ph - w.wlevel_edge) % PERIOD_STEPS < PERIOD_STEPS // 2]
        word = int_to_words(_lane_mask(high))
        c["rddata"] = [list(word) for _ in range(NPHASES)]

    # ---- DFII --------------------------------------------------------------------------------

    def _read_dfii(self, c: dict, rel: int) -> int:
        if rel == DFII_CONTROL:
            return c["control"]
        p, r = divmod(rel - DFII_PHASE0, DFII_PHASE_STRIDE)
        if not 0 <= p < NPHASES:
            return 0
        if r == PI_COMMAND:
            return c["cmd"][p]
        if r == PI_ADDRESS:
            return c["addr"][p]
        if r == PI_BADDRESS:
            return c["baddr"][p]
        if PI_WRDATA <= r < PI_WRDATA + 4 * DATA_WORDS:
            return c["wrdata"][p][(r - PI_WRDATA) // 4]
        if PI_RDDATA <= r < PI_RDDATA + 4 * DATA_WORDS:
            return c["rddata"][p][(r - PI_RDDATA) // 4]
        return 0

    def _write_dfii(self, ch: int, c: dict, rel: int, value: int) -> None:
        if rel == DFII_CONTROL:
            if not value & CTL_RESET_N:      # DRAM held in reset: it forgets its mode registers
                c["mr"], c["zq"], c["rows"] = [None] * 4, False, {}
            c["control"] = value & 0xF
            return
        p, r = divmod(rel - DFII_PHASE0, DFII_PHASE_STRIDE)
        if not 0 <= p < NPHASES:
            return
        if r == PI_COMMAND:
            c["cmd"][p] = value & 0x3F
        elif r == PI_ADDRESS:
            c["addr"][p] = value & 0xFFFF
        elif r == PI_BADDRESS:
            c["baddr"][p] = value & 7
        elif PI_WRDATA <= r < PI_WRDATA + 4 * DATA_WORDS:
            c["wrdata"][p][(r - PI_WRDATA) // 4] = value
        elif r == PI_ISSUE:
            self._issue(ch, c, p)

    def _issue(self, ch: int, c: dict, p: int) -> None:
        """Execute the command of DFI phase p (software control only, with CKE high)."""
        if c["control"] & CTL_SEL or not c["control"] & CTL_CKE:
            return
        cmd, addr, bank = c["cmd"][p], c["addr"][p], c["baddr"][p]
        kind = cmd & CMD_MASK
        rows = c["rows"]
        if kind == ACT:
            rows[str(bank)] = addr
        elif kind == PRE:
            if addr & (1 << 10):
                rows.clear()
            else:
                rows.pop(str(bank), None)
        elif kind == REF:
            if not rows:
                c["refreshes"] += 1
        elif kind == MRS:
            c["mr"][bank & 3] = addr
        elif kind == ZQC and addr & (1 << 10):
            c["zq"] = True
        elif kind == WRITE and cmd & CMD_WRDATA and str(bank) in rows:
            self._dfii_write(ch, c, p, f"{bank}:{rows[str(bank)]}:{addr & ~7}")
        elif kind == READ and cmd & CMD_RDDATA:
            self._dfii_read(ch, c, p, f"{bank}:{rows[str(bank)]}:{addr & ~7}" if str(bank) in rows else None)

    def _dfii_write(self, ch: int, c: dict, p: int, key: str) -> None:
        if not self._initialised(c):
            return
        data = [words_to_int(w) for w in c["wrdata"]]
        ok = self.write_lanes_ok(ch)
        bad = _lane_mask(l for l in range(LANES) if not ok[l])
        if p != c["wrphase"]:
            bad = _lane_mask(range(LANES))   # data launched on the wrong phase lands a beat off
        if bad:
            salt = _mix64(self.serial ^ (c["phase_steps"] << 20) ^ (sum(c["wbs"]) << 40))
            data = [(d & ~bad) | (_noise(salt + i, 2 * DATABITS) & bad) for i, d in enumerate(data)]
        mem = c["mem"]
        mem.pop(key, None)
        mem[key] = [int_to_words(d) for d in data]
        while len(mem) > _MEM_KEEP:
            mem.pop(next(iter(mem)))

    def _dfii_read(self, ch: int, c: dict, p: int, key: str | None) -> None:
        c["reads"] += 1
        salt = _mix64((self.serial << 32) ^ (ch << 31) ^ c["reads"])
        stored = c["mem"].get(key) if key is not None else None
        if stored is None or not self._initialised(c) or p != c["rdphase"]:
            c["rddata"] = [int_to_words(_noise(salt + i, 2 * DATABITS)) for i in range(NPHASES)]
            return
        bad = self._read_bad_mask(ch)
        if not bad:
            c["rddata"] = [list(words) for words in stored]
            return
        out = []
        for i, words in enumerate(stored):
            d = words_to_int(words)
            out.append(int_to_words((d & ~bad) | (_noise(salt + i, 2 * DATABITS) & bad)))
        c["rddata"] = out

    def _read_bad_mask(self, ch: int) -> int:
        """Both beats' bits of a phase word that a read now samples outside their eye."""
        bits = self.read_bits_ok(ch)
        key = id(bits)                   # read_bits_ok hands out one list per settings: its mask once
        hit = self._mask_cache.get(key)
        if hit is not None and hit[0] is bits:
            return hit[1]
        bad = 0
        for q, ok in enumerate(bits):
            if not ok:
                bad |= (1 << q) | (1 << (DATABITS + q))
        if len(self._mask_cache) > 4096:
            self._mask_cache.clear()
        self._mask_cache[key] = (bits, bad)
        return bad

    # ---- write clock MMCM --------------------------------------------------------------------

    def _read_wclk(self, c: dict, rel: int) -> int:
        w = c["wclk"]
        return {WCLK_MMCM_RESET: w["reset"], WCLK_MMCM_LOCKED: 0 if w["reset"] else 1, WCLK_DRP_ADR: w["adr"],
                WCLK_DRP_DAT_W: w["dat_w"], WCLK_DRP_DAT_R: w["dat_r"], WCLK_DRP_DRDY: w["drdy"]}.get(rel, 0)

    def _write_wclk(self, c: dict, rel: int, value: int) -> None:
        w = c["wclk"]
        if rel == WCLK_MMCM_RESET:
            if w["reset"] and not value & 1:
                self._mmcm_relock(c)
            w["reset"] = value & 1
        elif rel == WCLK_DRP_ADR:
            w["adr"], w["drdy"] = value & 0x7F, 0
        elif rel == WCLK_DRP_DAT_W:
            w["dat_w"] = value & 0xFFFF
        elif rel == WCLK_DRP_READ:
            w["dat_r"], w["drdy"] = w["drp"].get(str(w["adr"]), 0), 1
        elif rel == WCLK_DRP_WRITE:
            w["drp"][str(w["adr"])] = w["dat_w"]
            w["drdy"] = 1
            self._mmcm_relock(c)

    def _mmcm_relock(self, c: dict) -> None:
        # Reprogramming holds the MMCM in reset: the fine phase returns to 0 and the DRAM, whose
        # clock stopped, needs its init sequence again.
        c["phase_steps"] = 0
        c["mr"], c["zq"], c["rows"] = [None] * 4, False, {}

    # ---- BIST --------------------------------------------------------------------------------

    def _read_bist(self, c: dict, rel: int) -> int:
        b = c["bist"]
        if rel in (BIST_SEED, BIST_SEED + 4):
            return b["seed"][(rel - BIST_SEED) // 4]
        if BIST_LANE_ERRORS <= rel < BIST_LANE_ERRORS + 4 * LANES:
            return b["lane_errors"][(rel - BIST_LANE_ERRORS) // 4]
        if BIST_LANE_BITS <= rel < BIST_LANE_BITS + 12:
            return int_to_words(b["lane_bits"], 3)[(rel - BIST_LANE_BITS) // 4]
        return {BIST_MODE: b["mode"], BIST_BASE: b["base"], BIST_LENGTH: b["length"], BIST_DONE: b["done"],
                BIST_TICKS: b["ticks"], BIST_BEATS: b["beats"], BIST_ERRORS: b["errors"]}.get(rel, 0)

    def _write_bist(self, ch: int, c: dict, rel: int, value: int) -> None:
        b = c["bist"]
        if rel == BIST_MODE:
            b["mode"] = value & 3
        elif rel == BIST_BASE:
            b["base"] = value & ~63
        elif rel == BIST_LENGTH:
            b["length"] = value
        elif rel in (BIST_SEED, BIST_SEED + 4):
            b["seed"][(rel - BIST_SEED) // 4] = value
        elif rel == BIST_START and value & 1:
            b["done"] = 0
            if c["control"] & CTL_SEL:      # BIST traffic goes through the controller's native port
                self._run_bist(ch, c, b)

    def _run_bist(self, ch: int, c: dict, b: dict) -> None:
        chan_bytes = int(self.target.platform["channel_bytes"])
        beats = max(0, min(b["length"], (chan_bytes - b["base"]) // 64))
        seed = (b["seed"][0] << 32) | b["seed"][1]
        region = {"base": b["base"], "beats": beats, "mode": b["mode"] & BIST_ADDR_DATA, "seed": seed}
        b["beats"] = beats
        if not b["mode"] & BIST_READ:
            ok = self.write_lanes_ok(ch)
            region["bad_lanes"] = [l for l in range(LANES) if not ok[l]]
            b["written"] = region
            b["ticks"] = int(math.ceil(beats / BIST_WRITE_EFFICIENCY))
            b["errors"], b["lane_errors"], b["lane_bits"] = 0, [0] * LANES, 0
        else:
            b["ticks"] = int(math.ceil(beats / BIST_READ_EFFICIENCY))
            b["errors"], b["lane_errors"], b["lane_bits"] = self._bist_check(ch, region, b["written"])
        b["done"] = 1

    def _bist_check(self, ch: int, region: dict, written: dict | None) -> tuple[int, list[int], int]:
        """Wrong beats, wrong beats per lane and the OR of wrong DQ bits of a BIST read-back."""
        n = region["beats"]
        if n == 0:
            return 0, [0] * LANES, 0
        same = written is not None and written["mode"] == region["mode"] and written["seed"] == region["seed"]
        lo, hi = region["base"], region["base"] + 64 * n
        if not same or written["base"] > lo or written["base"] + 64 * written["beats"] < hi:
            return n, [n] * LANES, (1 << DATABITS) - 1       # reading what this BIST never wrote
        rd_ok = self.read_lanes_ok(ch)
        bad = set(written["bad_lanes"]) | {l for l in range(LANES) if not rd_ok[l]}
        stuck = self.faults.on_channel("stuck_dq", ch)
        alias_bits = sorted((int(f.params["bit"]) for f in self.faults.on_channel("addr_alias", ch)), reverse=True)
        if not stuck and not alias_bits:
            lane_bits = _lane_mask(bad) & _BEAT_MASK
            return (n if bad else 0), [n if l in bad else 0 for l in range(LANES)], lane_bits
        w_end = written["base"] + 64 * written["beats"]
        errors, lane_errors, lane_bits = 0, np.zeros(LANES, np.int64), 0
        chunk = 1 << 16
        for first in range(0, n, chunk):
            addrs = lo + 64 * np.arange(first, min(n, first + chunk), dtype=np.int64)
            expect = _bist_words(region["mode"], region["seed"], addrs)
            holder = addrs.copy()
            if alias_bits:                      # the last beat written to each aliased cell
                cell = addrs.copy()
                for bit in alias_bits:
                    cell &= ~np.int64(1 << bit)
                holder = cell.copy()
                for bit in alias_bits:
                    cand = holder | np.int64(1 << bit)
                    holder = np.where(cand < w_end, cand, holder)
                holder = np.maximum(holder, addrs)
            got = _bist_words(region["mode"], region["seed"], holder)
            got_ecc, exp_ecc = _ecc_byte(got), _ecc_byte(expect)
            for f in stuck:
                lane, bit = divmod(int(f.params["bit"]), 8)
                target = got if lane < BUS_BYTES else got_ecc
                shift = np.uint64(8 * lane + bit if lane < BUS_BYTES else bit)
                if f.params["val"]:
                    target |= np.uint64(1) << shift
                else:
                    target &= ~(np.uint64(1) << shift)
            diff = got ^ expect
            ecc_diff = got_ecc ^ exp_ecc
            lane_wrong = np.zeros((len(addrs), LANES), bool)
            for l in range(BUS_BYTES):
                lane_wrong[:, l] = ((diff >> np.uint64(8 * l)) & np.uint64(0xFF)).any(axis=1)
            lane_wrong[:, BUS_BYTES] = ecc_diff.any(axis=1)
            for l in bad:
                lane_wrong[:, l] = True
            errors += int(lane_wrong.any(axis=1).sum())
            lane_errors += lane_wrong.sum(axis=0)
            or_diff = int(np.bitwise_or.reduce(diff.reshape(-1)))
            lane_bits |= or_diff | (int(np.bitwise_or.reduce(ecc_diff.reshape(-1))) << 64)
        lane_bits |= _lane_mask(bad) & _BEAT_MASK
        return errors, [int(x) for x in lane_errors], lane_bits

    # ---- self-calibration CPU ----------------------------------------------------------------

    def _read_selfcal(self, rel: int) -> int:
        s = self.state["selfcal"]
        if rel == SC_STATUS:
            return (SELFCAL_MAGIC << 16) | (FW_LOG2_WORDS << 1) | s["hold"]
        if rel == SC_MBOX_DAT:
            return s["mbox"][s["mbox_adr"] % MBOX_WORDS]
        if rel == SC_MEM_RDAT:
            return s["mem"].get(str(s["mem_adr"]), 0)
        return {SC_HOLD: s["hold"], SC_CONFIG: s["config"], SC_STATE: s["state"], SC_MBOX_ADR: s["mbox_adr"],
                SC_MEM_ADR: s["mem_adr"]}.get(rel, 0)

    def _write_selfcal(self, rel: int, value: int) -> None:
        s = self.state["selfcal"]
        if rel == SC_HOLD:
            was = s["hold"]
            s["hold"] = value & 1
            if was and not s["hold"]:
                self._run_cpu()
        elif rel == SC_CONFIG:
            s["config"] = value & 0xFF03
        elif rel == SC_STATE:
            s["state"] = value & 0xFFFFFF
        elif rel == SC_MBOX_ADR:
            s["mbox_adr"] = value % MBOX_WORDS
        elif rel == SC_MEM_ADR:
            s["mem_adr"] = value % (1 << FW_LOG2_WORDS)
        elif rel == SC_MEM_DAT and s["hold"]:
            s["mem"][str(s["mem_adr"])] = value

    def firmware_id(self) -> int:
        mem = self.state["selfcal"]["mem"]
        if not any(mem.values()):
            return BUILTIN_FW_ID
        words = [mem.get(str(i), 0) for i in range(1 << FW_LOG2_WORDS)]
        return zlib.crc32(np.asarray(words, np.uint32).tobytes())

    def _run_cpu(self) -> None:
        """The core CPU from its reset vector: calibrate the configured channels, fill the mailbox."""
        s = self.state["selfcal"]
        channels = [ch for ch in range(NCHANNELS) if s["config"] >> ch & 1]
        stride = max(1, (s["config"] >> 8) & 0xFF)
        for ch in channels:
            self.state["ch"][ch]["cal_ready"] = 0
        mbox = [0] * MBOX_WORDS
        mbox[0], mbox[1] = MBOX_MAGIC, self.firmware_id()
        st = 0
        for ch in channels:
            try:
                result = SelfCal(self.read, self.write, ch, stride=stride).calibrate_channel()
                code = 0
            except CalFailed as e:
                result, code = e.partial, e.code
            st |= (SC_OK if code == 0 else SC_FAILED) << (2 * ch)
            st |= code << (8 + 8 * ch)
            mbox[CH_BLOCK[ch]:CH_BLOCK[ch] + 64] = encode_channel_block(result, code, stride)
        s["state"] = st | SC_DONE
        s["mbox"] = mbox


# ---- the calibration driver --------------------------------------------------------------------

class CalFailed(Exception):
    """Calibration of a channel failed; `code` is a self-cal error code, `partial` what was found."""

    def __init__(self, code: int, message: str, partial: dict):
        super().__init__(message)
        self.code, self.partial = code, partial


def longest_run(passes: list[bool], circular: bool = False) -> tuple[int, int]:
    """(start, length) of the longest run of True; circular runs may wrap. (0, 0) when none."""
    n = len(passes)
    if n == 0 or not any(passes):
        return 0, 0
    if all(passes):
        return 0, n
    seq = passes + passes if circular else passes
    best, start = (0, 0), None
    for i, p in enumerate(seq):
        if p and start is None:
            start = i
        if (not p or i == len(seq) - 1) and start is not None:
            end = i + 1 if p else i
            length = min(end - start, n)
            if length > best[1] and start < n:
                best = (start, length)
            start = None
    return best


class SelfCal:
    """Calibrate one LiteDRAM channel through CSR reads and writes only.

    Algorithm (a cheaper cousin of liblitedram's, same CSRs): JEDEC init in software mode; a
    write-latency and read-leveling pass (every lane scanned at once: for each write bitslip,
    for each read bitslip and IDELAY tap, read back a burst written once); lanes whose write
    window does not hold the current CK phase are retried a quarter tCK further on; then a
    scan of the CK phase over one tCK with the per-lane settings found, the longest run of
    phases where every lane passes, its centre, and a final calibration there that must read
    back error-free. `read`/`write` take offsets inside the LiteDRAM window plus `base`.
    """

    def __init__(self, read: Callable[[int], int], write: Callable[[int, int], None], ch: int,
                 stride: int = 1, base: int = 0, seed: int = 42):
        self._read, self._write, self.ch, self.stride, self.base = read, write, ch, max(1, stride), base
        self.patterns = [[random.Random(seed + k).getrandbits(2 * DATABITS) for _ in range(NPHASES)] for k in range(2)]

    # ---- CSR helpers -------------------------------------------------------------------------

    def _addr(self, block: int, rel: int) -> int:
        return self.base + block + (self.ch * BLOCK if block in PER_CHANNEL else 0) + rel

    def r(self, block: int, rel: int) -> int: return self._read(self._addr(block, rel))

    def w(self, block: int, rel: int, value: int) -> None: self._write(self._addr(block, rel), value)

    def _pi(self, p: int, reg: int) -> int: return DFII_PHASE0 + DFII_PHASE_STRIDE * p + reg

    def command(self, p: int, cmd: int, address: int = 0, bank: int = 0) -> None:
        self.w(B_SDRAM, self._pi(p, PI_ADDRESS), address)
        self.w(B_SDRAM, self._pi(p, PI_BADDRESS), bank)
        self.w(B_SDRAM, self._pi(p, PI_COMMAND), cmd)
        self.w(B_SDRAM, self._pi(p, PI_ISSUE), 1)

    def select(self, lanes_mask: int) -> None: self.w(B_DDRPHY, PHY_DLY_SEL, lanes_mask)

    def pulse(self, rel: int, times: int = 1) -> None:
        for _ in range(times):
            self.w(B_DDRPHY, rel, 1)

    # ---- DFII steps --------------------------------------------------------------------------

    def init(self) -> None:
        self.w(B_DDRPHY, PHY_RDPHASE, RDPHASE)
        self.w(B_DDRPHY, PHY_WRPHASE, WRPHASE)
        self.w(B_DDRPHY, PHY_DLY_SEL_BITS, 0xFF)
        self.w(B_SDRAM, DFII_CONTROL, CTL_CKE | CTL_ODT | CTL_RESET_N)
        self.w(B_DDRPHY, PHY_RST, 1)
        self.w(B_DDRPHY, PHY_RST, 0)
        for _what, address, bank, (kind, value), _wait in INIT_SEQUENCE:
            if kind == "control":
                self.w(B_SDRAM, DFII_CONTROL, value)
            else:
                self.command(0, value, address, bank)
        self.select((1 << LANES) - 1)
        for rel in (PHY_WDLY_DQ_BITSLIP_RST, PHY_RDLY_DQ_RST, PHY_RDLY_DQ_BITSLIP_RST):
            self.pulse(rel)

    def write_burst(self, k: int) -> None:
        """Open row 0 of bank 0 and write test pattern k to column 0."""
        self.command(0, PRE, 1 << 10)
        self.command(0, ACT, 0, 0)
        for p, v in enumerate(self.patterns[k]):
            for i, word in enumerate(int_to_words(v)):
                self.w(B_SDRAM, self._pi(p, PI_WRDATA) + 4 * i, word)
        self.command(WRPHASE, WRITE | CMD_WRDATA, 0, 0)
        self.w(B_SDRAM, self._pi(RDPHASE, PI_ADDRESS), 0)
        self.w(B_SDRAM, self._pi(RDPHASE, PI_BADDRESS), 0)
        self.w(B_SDRAM, self._pi(RDPHASE, PI_COMMAND), READ | CMD_RDDATA)

    def read_errors(self, k: int) -> int:
        """Re-read the burst (read command preset by write_burst); 72-bit mask of wrong DQ bits."""
        self.w(B_SDRAM, self._pi(RDPHASE, PI_ISSUE), 1)
        wrong = 0
        for p, v in enumerate(self.patterns[k]):
            got = words_to_int([self.r(B_SDRAM, self._pi(p, PI_RDDATA) + 4 * i) for i in range(DATA_WORDS)])
            x = got ^ v
            wrong |= (x | (x >> DATABITS)) & _BEAT_MASK
        return wrong

    def read_scan(self, k: int) -> list[list[int]]:
        """err[bitslip][tap] = wrong-bit mask, all lanes at once (burst k already written)."""
        self.select((1 << LANES) - 1)
        self.pulse(PHY_RDLY_DQ_BITSLIP_RST)
        scan = []
        for _b in range(BITSLIPS):
            self.pulse(PHY_RDLY_DQ_RST)
            row = []
            for _t in range(DELAYS):
                row.append(self.read_errors(k))
                self.pulse(PHY_RDLY_DQ_INC)
            scan.append(row)
            self.pulse(PHY_RDLY_DQ_BITSLIP)
        return scan

    @staticmethod
    def lane_best(scan: list[list[int]], lane: int) -> tuple[int, int, int]:
        """(window taps, bitslip, first tap) of the widest all-bits-pass run of a lane."""
        best = (0, 0, 0)
        for b, row in enumerate(scan):
            start, length = longest_run([(m >> (8 * lane)) & 0xFF == 0 for m in row])
            if length > best[0]:
                best = (length, b, start)
        return best

    def set_lane(self, lane: int, wb: int, rb: int, tap: int) -> None:
        self.select(1 << lane)
        self.pulse(PHY_WDLY_DQ_BITSLIP_RST)
        self.pulse(PHY_WDLY_DQ_BITSLIP, wb)
        self.pulse(PHY_RDLY_DQ_BITSLIP_RST)
        self.pulse(PHY_RDLY_DQ_BITSLIP, rb)
        self.pulse(PHY_RDLY_DQ_RST)
        self.pulse(PHY_RDLY_DQ_INC, tap)

    def calibrate(self) -> dict:
        """Write latency then read leveling at the current CK phase; settings left in the PHY."""
        best: dict[int, tuple[int, int, int, int]] = {}       # lane -> (taps, wb, rb, first tap)
        for wb in WRITE_BITSLIPS:
            self.select((1 << LANES) - 1)
            self.pulse(PHY_WDLY_DQ_BITSLIP_RST)
            self.pulse(PHY_WDLY_DQ_BITSLIP, wb)
            self.write_burst(0)
            scan = self.read_scan(0)
            for lane in range(LANES):
                taps, rb, first = self.lane_best(scan, lane)
                if taps >= MIN_WINDOW and taps > best.get(lane, (0,))[0]:
                    best[lane] = (taps, wb, rb, first)
        for lane, (taps, wb, rb, first) in best.items():
            self.set_lane(lane, wb, rb, first + taps // 2)
        self.select((1 << LANES) - 1)
        self.write_burst(1)
        wrong = self.read_errors(1)
        return {"lanes": {l: {"taps": t, "write_latency": wb, "bitslip": rb, "tap": f + t // 2}
                          for l, (t, wb, rb, f) in best.items()},
                "errors": [bin((wrong >> (8 * l)) & 0xFF).count("1") for l in range(LANES)]}

    # ---- CK phase ----------------------------------------------------------------------------

    def phase(self) -> int: return signed32(self.r(B_PHASE, PHASE_DQS_STEPS))

    def move_phase(self, target: int) -> None:
        for _ in range(abs(target - self.phase())):
            for _tries in range(100):
                if not self.r(B_PHASE, PHASE_DQS_BUSY):
                    break
            else:
                raise CalFailed(ERR_SHIFT_BUSY, ERROR_TEXT[ERR_SHIFT_BUSY], {})
            self.w(B_PHASE, PHASE_DQS_SHIFT, 1 if target > self.phase() else 0)

    def check_write_clock(self) -> None:
        if not self.r(B_WCLK, WCLK_MMCM_LOCKED):
            raise CalFailed(ERR_MMCM_UNLOCKED, ERROR_TEXT[ERR_MMCM_UNLOCKED], {})
        for out, want in EXPECTED_PHASES.items():
            regs = []
            for reg in DRP_REGS[out]:
                self.w(B_WCLK, WCLK_DRP_ADR, reg)
                self.w(B_WCLK, WCLK_DRP_READ, 1)
                for _tries in range(100):
                    if self.r(B_WCLK, WCLK_DRP_DRDY):
                        break
                else:
                    raise CalFailed(ERR_DRP_TIMEOUT, ERROR_TEXT[ERR_DRP_TIMEOUT], {})
                regs.append(self.r(B_WCLK, WCLK_DRP_DAT_R))
            eighths = (regs[1] & 0x3F) * 8 + (regs[0] >> 13)
            if eighths != want:
                raise CalFailed(ERR_MMCM_PHASES, f"{ERROR_TEXT[ERR_MMCM_PHASES]}: CLKOUT{out} at {eighths}/8, "
                                f"expected {want}/8", {})

    # ---- the whole channel -------------------------------------------------------------------

    def calibrate_channel(self) -> dict:
        self.w(B_CAL, CAL_READY, 0)
        self.check_write_clock()
        self.init()
        start = self.phase()
        result: dict = {"ch": self.ch, "stride": self.stride, "scan_start": start}
        # 1. find every lane's write latency and read settings, moving a quarter tCK at a time
        found: dict[int, dict] = {}
        for attempt in range(4):
            self.move_phase(start + attempt * PERIOD_STEPS // 4)
            cal = self.calibrate()
            for lane, s in cal["lanes"].items():
                found.setdefault(lane, s)
            if len(found) == LANES:
                break
        self.move_phase(start)
        if len(found) < LANES:
            missing = sorted(set(range(LANES)) - set(found))
            result.update(lanes_without_window=missing)
            raise CalFailed(ERR_NO_COMMON_PHASE, f"{ERROR_TEXT[ERR_NO_COMMON_PHASE]}: lane(s) {missing} never "
                            "read back right at any CK phase", result)
        for lane, s in found.items():
            self.set_lane(lane, s["write_latency"], s["bitslip"], s["tap"])
        self.select((1 << LANES) - 1)
        # 2. scan the CK phase over one tCK around the start
        offsets = list(range(-(PERIOD_STEPS // 2), PERIOD_STEPS // 2, self.stride))
        passes: list[list[bool]] = [[] for _ in range(LANES)]
        for off in offsets:
            self.move_phase(start + off)
            self.write_burst(0)
            wrong = self.read_errors(0)
            for lane in range(LANES):
                passes[lane].append((wrong >> (8 * lane)) & 0xFF == 0)
        common = [all(passes[l][i] for l in range(LANES)) for i in range(len(offsets))]
        first, length = longest_run(common, circular=self.stride * len(offsets) >= PERIOD_STEPS)
        result.update(scan_points=len(offsets), pass_maps=["".join("#" if p else "." for p in lane) for lane in passes])
        if length == 0:
            self.move_phase(start)
            raise CalFailed(ERR_NO_COMMON_PHASE, ERROR_TEXT[ERR_NO_COMMON_PHASE], result)
        centre = offsets[(first + length // 2) % len(offsets)]
        pick = start + centre
        result.update(dqs_steps=pick, window_steps=length * self.stride, window_ps=round(length * self.stride * STEP_PS),
                      run_first=offsets[first], run_last=offsets[(first + length - 1) % len(offsets)])
        # 3. move there and calibrate again; it must read back clean
        self.move_phase(pick)
        final = self.calibrate()
        result.update(write_latency=[final["lanes"].get(l, {}).get("write_latency", -1) for l in range(LANES)],
                      read=[final["lanes"].get(l, {"taps": 0, "bitslip": 0, "tap": 0}) for l in range(LANES)],
                      errors=final["errors"], traffic_checked=False)
        if len(final["lanes"]) < LANES or any(final["errors"]):
            raise CalFailed(ERR_FINAL, f"{ERROR_TEXT[ERR_FINAL]}: step {pick}, write latency {result['write_latency']}, "
                            f"errors per lane {final['errors']}", result)
        self.w(B_SDRAM, DFII_CONTROL, CTL_SEL | CTL_CKE | CTL_ODT | CTL_RESET_N)
        self.w(B_CAL, CAL_READY, 1)
        return result


# ---- mailbox encoding (the CPU's report; otpu-memcal decodes it) ---------------------------------

def _u16(v: int) -> int: return v & 0xFFFF


def encode_channel_block(result: dict, code: int, stride: int) -> list[int]:
    """A channel's 64 mailbox words (host.md 6.4 layout)."""
    blk = [0] * 64
    state = SC_OK if code == 0 else SC_FAILED
    blk[0] = state | (code << 8) | (int(bool(result.get("traffic_checked"))) << 17) | ((stride & 0xFF) << 24)
    blk[1] = result.get("dqs_steps", 0) & 0xFFFFFFFF
    blk[2] = _u16(result.get("window_steps", 0)) | (_u16(result.get("scan_points", 0)) << 16)
    pick = result.get("dqs_steps", 0) - result.get("scan_start", 0)
    blk[3] = _u16(pick) | (_u16(result.get("run_first", 0)) << 16)
    blk[4] = _u16(result["run_last"]) if "run_last" in result else 0xFFFF
    wl = result.get("write_latency", [-1] * LANES)
    blk[5] = sum((0xF if x < 0 else x & 0xF) << (4 * l) for l, x in enumerate(wl[:8]))
    blk[6] = 0xF if wl[8] < 0 else wl[8]
    for l, rd in enumerate(result.get("read", [])):
        blk[7 + l] = (rd["taps"] & 0xFF) | ((rd["bitslip"] & 0xFF) << 8) | ((rd["tap"] & 0xFF) << 24)
    blk[23] = result.get("scan_start", 0) & 0xFFFFFFFF
    for l, pm in enumerate(result.get("pass_maps", [])):
        bits = sum(1 << i for i, ch in enumerate(pm[:128]) if ch == "#")
        blk[24 + 4 * l:28 + 4 * l] = [(bits >> (32 * i)) & 0xFFFFFFFF for i in range(4)]
    return blk
