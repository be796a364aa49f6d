"""Thermal and power model of the simulated card, and its XADC register window.

Power follows load: the FPGA draws a fixed part plus each unit's dynamic watts scaled by its
utilisation (the shape of host.md 5.4's estimate), the DDR3 devices draw more with DRAM traffic,
and the board's 12 V input carries both through the regulators plus the board's own loads.
Temperatures follow power: the die and the board are first-order thermal nodes, each moving
towards `ambient + R x power` with its own time constant, updated with the exact exponential
so a step of any length is monotone and never overshoots. The card starts at its idle steady
state (it has been powered while the host booted).

Readouts: the control register TEMP (`temp_register`), the XADC Wizard window (temperature and
supply results, min/max, alarms; offsets as Xilinx's XADC Wizard AXI map, which the public
openTPU sources do not state), and the values the I2C sensors report (`board_c`, `rails`).
All mutable state lives in the JSON-able `state` dict the card persists.
"""
from __future__ import annotations

import math

import numpy as np

from . import regs
from .faults import FaultSet

# Activity dict given to tick(): unit utilisations 0..1 and DRAM traffic.
ACTIVITY_UNITS = ("mxu", "vpu", "qnt", "dma", "tmem", "seq")
DRAM_RATE_KEY = "dram_bytes_per_s"

# Watts. FPGA dynamic power of each unit at 100% utilisation on the reference 128x4 MXU, and the
# fixed part (host.md 5.4's example: total 6.0 W, units 2.95 W, fixed 3.05 W).
UNIT_W = {"mxu": 1.20, "vpu": 0.35, "qnt": 0.15, "dma": 0.30, "tmem": 0.40, "seq": 0.10}
DRAM_CTRL_W = 0.45          # LiteDRAM controllers + PHY at full DRAM bandwidth
FPGA_FIXED_W = 3.05
AUX_RAILS_W = 1.20          # VCCAUX, VCCO, transceivers: the part of the FPGA not on VCCINT
DRAM_IDLE_W = 0.90          # per channel, DDR3 devices with refresh
DRAM_ACTIVE_W = 1.10        # per channel at full bandwidth
BOARD_MISC_W = 2.00         # fan, clocks, PCIe edge logic
VR_EFFICIENCY = 0.87
INPUT_V = 12.0
VCCINT_V, VCCAUX_V, VCCBRAM_V, VREFP_V = 1.00, 1.80, 1.00, 1.25
VCCINT_DROOP_OHM = 0.002    # load line of the core regulator
INPUT_DROOP_OHM = 0.010     # 12 V cable and connector

# Thermal nodes: degrees C per watt and seconds.
DIE_R, DIE_TAU = 4.0, 30.0
BOARD_R, BOARD_TAU = 1.6, 300.0

# XADC Wizard AXI-Lite map (offsets inside the window).
XADC_SRR, XADC_SR, XADC_AOSR, XADC_CONVSTR, XADC_SYSMONRR = 0x000, 0x004, 0x008, 0x00C, 0x010
XADC_TEMP, XADC_VCCINT, XADC_VCCAUX, XADC_VPVN, XADC_VREFP, XADC_VREFN, XADC_VCCBRAM = (
    0x200, 0x204, 0x208, 0x20C, 0x210, 0x214, 0x218)
XADC_MAX_TEMP, XADC_MAX_VCCINT, XADC_MAX_VCCAUX, XADC_MAX_VCCBRAM = 0x280, 0x284, 0x288, 0x28C
XADC_MIN_TEMP, XADC_MIN_VCCINT, XADC_MIN_VCCAUX, XADC_MIN_VCCBRAM = 0x290, 0x294, 0x298, 0x29C
XADC_ALM_TEMP_HI, XADC_ALM_OT_HI, XADC_ALM_TEMP_LO, XADC_ALM_OT_LO = 0x340, 0x34C, 0x350, 0x35C
XADC_RESET_KEY = 0x0000000A
AOSR_OT, AOSR_ALM0, AOSR_ANY = 1 << 0, 1 << 1, 1 << 8
SR_EOC, SR_EOS = 1 << 5, 1 << 6

_SUPPLIES = {XADC_VCCINT: "vccint", XADC_VCCAUX: "vccaux", XADC_VCCBRAM: "vccbram"}
_MAXMIN = {XADC_MAX_TEMP: ("max", "temp"), XADC_MAX_VCCINT: ("max", "vccint"), XADC_MAX_VCCAUX: ("max", "vccaux"),
           XADC_MAX_VCCBRAM: ("max", "vccbram"), XADC_MIN_TEMP: ("min", "temp"), XADC_MIN_VCCINT: ("min", "vccint"),
           XADC_MIN_VCCAUX: ("min", "vccaux"), XADC_MIN_VCCBRAM: ("min", "vccbram")}
_THRESHOLDS = {XADC_ALM_TEMP_HI: 85.0, XADC_ALM_OT_HI: 125.0, XADC_ALM_TEMP_LO: 60.0, XADC_ALM_OT_LO: 70.0}


def xadc_supply_code(volts: float) -> int:
    """12-bit XADC supply code: V = code / 4096 x 3 V."""
    return int(np.clip(round(volts / 3.0 * 4096), 0, 4095))


class Thermal:
    """Die and board temperature, rail power and the XADC window of one card."""

    def __init__(self, target, serial: int, state: dict, faults: FaultSet):
        self.target, self.serial, self.state, self.faults = target, serial, state, faults
        rng = np.random.default_rng([0x7E3A, serial])
        self.ambient_c = float(28.0 + 4.0 * rng.random())
        cfg = target.config()
        self.mxu_scale = cfg.D * cfg.MCOLS / 512.0
        self.channels = int(target.platform["channels"])
        self.dram_peak = target.uarch.DRAM_BYTES_PER_CYCLE * target.core_hz
        hot = faults.get("hot")
        self.hot_c = max(f.params["c"] for f in hot) if hot else None
        if "die_c" not in state:
            self.reset()

    # ---- power ----------------------------------------------------------------------------

    def power_of(self, activity: dict) -> dict:
        """Watts of each rail for an activity dict (missing keys count as idle)."""
        util = {u: min(max(float(activity.get(u, 0.0)), 0.0), 1.0) for u in ACTIVITY_UNITS}
        dram_util = min(max(float(activity.get(DRAM_RATE_KEY, 0.0)) / self.dram_peak, 0.0), 1.0)
        dynamic = sum(UNIT_W[u] * util[u] for u in ACTIVITY_UNITS) + UNIT_W["mxu"] * (self.mxu_scale - 1) * util["mxu"]
        fpga = FPGA_FIXED_W + dynamic + DRAM_CTRL_W * dram_util
        dram = self.channels * (DRAM_IDLE_W + DRAM_ACTIVE_W * dram_util)
        board = (fpga + dram) / VR_EFFICIENCY + BOARD_MISC_W
        return {"fpga_w": fpga, "vccint_w": fpga - AUX_RAILS_W, "dram_w": dram, "board_w": board,
                "dram_util": dram_util}

    def _steady(self, power: dict) -> tuple[float, float]:
        return self.ambient_c + DIE_R * power["fpga_w"], self.ambient_c + BOARD_R * power["board_w"]

    # ---- lifecycle ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Power-on: idle load, temperatures at their idle steady state, min/max and alarms cleared."""
        power = self.power_of({})
        die, board = self._steady(power)
        self.state.clear()
        self.state.update(die_c=die, board_c=board, power=power, seconds=0.0,
                          thresholds={str(k): regs.temp_c_to_code(v) for k, v in _THRESHOLDS.items()},
                          alarm_temp=False, alarm_ot=False)
        self._reset_minmax()

    def tick(self, seconds: float, activity: dict) -> None:
        """Advance the model by `seconds` of wall time under a constant `activity`."""
        if seconds < 0:
            raise ValueError("thermal tick: negative time step")
        power = self.power_of(activity)
        die_ss, board_ss = self._steady(power)
        s = self.state
        s["die_c"] += (die_ss - s["die_c"]) * -math.expm1(-seconds / DIE_TAU)
        s["board_c"] += (board_ss - s["board_c"]) * -math.expm1(-seconds / BOARD_TAU)
        s["power"] = power
        s["seconds"] += seconds
        self._track()

    # ---- readings ----------------------------------------------------------------------------

    @property
    def die_c(self) -> float:
        t = self.state["die_c"]
        return t if self.hot_c is None else max(t, self.hot_c)

    @property
    def board_c(self) -> float:
        # An overheating die heats the board around it too (it is the LM73's neighbour).
        t = self.state["board_c"]
        return t if self.hot_c is None else max(t, self.hot_c - (DIE_R - BOARD_R) * FPGA_FIXED_W)

    @property
    def power(self) -> dict: return self.state["power"]

    def rails(self) -> dict:
        """What the board's power sensors measure: 12 V input and the VCCINT regulator."""
        p = self.power
        vccint_a = p["vccint_w"] / VCCINT_V          # the core draws its current; the rail droops under it
        vccint_v = VCCINT_V - VCCINT_DROOP_OHM * vccint_a
        input_a = p["board_w"] / INPUT_V
        input_v = INPUT_V - INPUT_DROOP_OHM * input_a
        return {"input_v": input_v, "input_a": input_a, "input_w": input_v * input_a,
                "vccint_v": vccint_v, "vccint_a": vccint_a, "vccint_w": vccint_v * vccint_a,
                "vccint_in_w": vccint_v * vccint_a / VR_EFFICIENCY}

    def supply_volts(self) -> dict:
        return {"vccint": self.rails()["vccint_v"], "vccaux": VCCAUX_V, "vccbram": VCCBRAM_V}

    def temp_register(self) -> int:
        """The control register TEMP: valid bit and the XADC die-temperature code."""
        return regs.TEMP_VALID | regs.temp_c_to_code(self.die_c)

    # ---- XADC window -------------------------------------------------------------------------

    def _codes(self) -> dict:
        codes = {"temp": regs.temp_c_to_code(self.die_c)}
        codes.update({k: xadc_supply_code(v) for k, v in self.supply_volts().items()})
        return codes

    def _reset_minmax(self) -> None:
        codes = self._codes()
        self.state["max"] = dict(codes)
        self.state["min"] = dict(codes)

    def _track(self) -> None:
        s, codes = self.state, self._codes()
        for k, c in codes.items():
            s["max"][k] = max(s["max"][k], c)
            s["min"][k] = min(s["min"][k], c)
        th = s["thresholds"]
        t = codes["temp"]
        if t > th[str(XADC_ALM_TEMP_HI)]:
            s["alarm_temp"] = True
        elif t < th[str(XADC_ALM_TEMP_LO)]:
            s["alarm_temp"] = False
        if t > th[str(XADC_ALM_OT_HI)]:
            s["alarm_ot"] = True
        elif t < th[str(XADC_ALM_OT_LO)]:
            s["alarm_ot"] = False

    def read(self, offset: int) -> int:
        self._track()
        if offset == XADC_TEMP:
            return self._codes()["temp"] << 4
        if offset in _SUPPLIES:
            return self._codes()[_SUPPLIES[offset]] << 4
        if offset == XADC_VREFP:
            return xadc_supply_code(VREFP_V) << 4
        if offset in (XADC_VPVN, XADC_VREFN, XADC_SRR, XADC_CONVSTR, XADC_SYSMONRR):
            return 0
        if offset in _MAXMIN:
            which, key = _MAXMIN[offset]
            return self.state[which][key] << 4
        if offset == XADC_SR:
            return SR_EOC | SR_EOS          # continuous mode, channel 0 (temperature)
        if offset == XADC_AOSR:
            bits = (AOSR_OT if self.state["alarm_ot"] else 0) | (AOSR_ALM0 if self.state["alarm_temp"] else 0)
            return bits | (AOSR_ANY if bits else 0)
        if str(offset) in self.state["thresholds"]:
            return self.state["thresholds"][str(offset)] << 4
        return 0

    def write(self, offset: int, value: int) -> None:
        if offset in (XADC_SRR, XADC_SYSMONRR) and (offset == XADC_SYSMONRR or value == XADC_RESET_KEY):
            self._reset_minmax()
        elif str(offset) in self.state["thresholds"]:
            self.state["thresholds"][str(offset)] = (value >> 4) & 0xFFF
            self._track()
