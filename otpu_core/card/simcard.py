"""The simulated card: a device model of the board a target describes, answering the card contract.

State lives in the run directory so every process sees one card, as with a real one:
`<card>.bar0` (BAR0 as an mmap'd file: the control window at 0, the card's hidden state in the
window the host cannot address), `<card>.dram` (both DRAM channels, sparse), `<card>.imem`,
`<card>.trace`, `<card>.tmem` (TMEM and ACT RAM of every slice), `<card>.periph` (peripheral
state, `periphstore`), `<card>.card.json` (what the card is: target, serial, faults). `<card>.card.lock` serialises compound register operations between
processes. The card keeps calibration and DRAM contents between commands until
`power_off()` (`otpu sim reset`).

Register semantics follow `regs`: read-only registers ignore writes, undefined offsets read
0xDEADBEEF, the 4 KiB control map repeats through its window, SNAP latches every counter in one
step, TRACE_HI reads advance TRACE_ADDR, CTRL LOAD/RUN/CLEAR drive the engine (the golden
simulator, run on a thread of the process that set RUN, in time slices so another process sees
the counters move). DMA (`h2c`/`c2h`, one XDMA call each) models the XDMA engine's hazards:
a call over RUN_H2C while a program runs lands 8 KiB off and leaves the engine so until reset;
an h2c overlapping a c2h of a live process slips later host->card data by 64 bytes for good
(each call in flight is marked with its owner's pid and process start: a killed process's
transfer is finished, not an overlap); a third write after two unaligned sub-beat writes to one
beat wedges the write path (ETIMEDOUT); bytes that decode to no DRAM fail the call with EIO
(AXI DECERR). Badly placed host buffers and oversized calls are counted and cost modelled link time.
"""
from __future__ import annotations

import errno
import fcntl
import functools
import importlib
import os
import sys
import threading
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .. import target as target_mod
from ..errors import DeviceError, TargetError
from . import faults as faults_mod
from . import regs, simfiles
from .simfiles import card_name, destroy  # noqa: F401  (part of this module's API)
from .dram import Dram
from .engine import onchip_bytes
from .periphstore import PeriphStore
from .runstate import open_shared, owner_alive, pid_alive, process_start, run_dir

DMA_SLOTS = 8                 # in-flight transfers per direction the engine model tracks (the transport has one)

# Hidden state: 64-bit words at BAR0 0x20000 (a window the host's map shows as unmapped).
HIDDEN_BASE = 0x20000
_HIDDEN_NAMES = (
    "LAYOUT", "POWER_GEN", "UPTIME_BASE", "IDLE_T0_NS", "RUNNER", "SNAPS", "PREV_CTRL", "IMEM_N",
    "LAPPED", "SLIP", "WEDGED", "SUBBEAT_BEAT", "SUBBEAT_COUNT",
    *(f"{d}_{field}{i}" for d in ("H2C", "C2H") for i in range(DMA_SLOTS) for field in ("PID", "BORN", "T0_")),
    "DMA_SLOW", "DMA_OVERSIZE", "DMA_LINK_NS", "DMA_CALLS", "TRACE_POS",
    *(f"LIVE_{n}" for n in regs.COUNTER_NAMES),
)
H = {name: i for i, name in enumerate(_HIDDEN_NAMES)}
# Per direction, one row per in-flight slot: hidden indices of (owner pid, owner process start, call start ns).
_SLOTS = {d: tuple(tuple(H[f"{d.upper()}_{field}{i}"] for field in ("PID", "BORN", "T0_")) for i in range(DMA_SLOTS))
          for d in ("h2c", "c2h")}
LAYOUT = zlib.crc32(" ".join(_HIDDEN_NAMES).encode())   # a card saved by another layout powers on afresh

# Modelled XDMA link rates (bytes/s) for placed and unplaced host buffers (reference section 2.2).
H2C_RATE, H2C_SLOW_RATE = 1.70e9, 0.77e9
C2H_RATE, C2H_SLOW_RATE = 1.65e9, 1.16e9
DMA_CALL_NS = 11_700
ROOM_RECHECK_S = 0.5          # how long a reading of the DRAM filesystem's free space is trusted
THERMAL_TICK = 0.05           # the sensors convert this often: readings in between repeat the last
SCATTER_BELOW = 1 << 16      # an aliased line below this cuts host writes into pieces stored per byte
SCATTER_CHUNK = 1 << 20
SLIP_BYTES = regs.BEAT        # how far an h2c overlapping a c2h shifts every later host write

_LINK_SPEED = {"pcie-gen2-x8": ("5.0 GT/s PCIe", 8), "pcie-gen3-x8": ("8.0 GT/s PCIe", 8),
               "pcie-gen3-x16": ("8.0 GT/s PCIe", 16), "none": (None, 0)}


class SimCard:
    """One simulated card in a run directory; several processes may open it at once."""

    def __init__(self, name: str = "sim", target: str | None = None, faults: str | None = None,
                 directory: Path | None = None):
        self.name = name
        self.dir = directory or run_dir()
        self.meta_path = self.dir / f"{name}.card.json"
        self._rlock = threading.RLock()
        self._lock_fd = open_shared(self.dir / f"{name}.card.lock")
        self._depth = 0
        refit = False
        with self._locked():
            meta = simfiles.load_state(self.dir, name)
            if meta is None:
                meta = self._new_meta(target, faults)
            elif faults is not None and str(faults_mod.parse(faults)) != meta.get("faults", ""):
                # refused before it is saved: a spec this card cannot take leaves the card as it was
                faults_mod.parse(faults).validate(check_simulable(target_mod.load(meta["target"])))
                meta["faults"] = str(faults_mod.parse(faults))      # another card, in effect: power-cycle it
                self._save_meta(meta)
                refit = True
            self.meta = meta
            self.target = check_simulable(target_mod.load(meta["target"]))
            self.cfg = self.target.config()
            self.serial = int(meta["serial"])
            self.faults = faults_mod.parse(meta.get("faults", "")).validate(self.target)
            plat = self.target.platform
            self.channel_bytes = int(plat["channel_bytes"])
            self.core_hz = self.target.core_hz
            self.bar_path = self.dir / f"{name}.bar0"
            self.bar = simfiles.file_array(self.bar_path, regs.BAR0_BYTES // 4, np.uint32)
            self.hidden = np.asarray(self.bar[HIDDEN_BASE // 4:HIDDEN_BASE // 4 + 2 * len(H)]).view(np.uint64)
            self.dram = Dram(simfiles.dram_path(self.dir, name, meta), self.channel_bytes, self.target.uarch.CHASH,
                             int(plat["channels"]))
            self._room = (0.0, 0)            # (when, bytes free) on the DRAM file's filesystem, refreshed as it fills
            self.imem = simfiles.file_array(self.dir / f"{name}.imem", self.cfg.IMEM_WORDS, np.uint32)
            self.trace = simfiles.file_array(self.dir / f"{name}.trace", self.target.uarch.TRACE_DEPTH, np.uint64)
            self.onchip = np.asarray(simfiles.file_array(self.dir / f"{name}.tmem", onchip_bytes(self.cfg), np.uint8))
            self.periph = PeriphStore(self.dir / f"{name}.periph", name)
            self.periph_state = self.periph.state
            self.periphs: dict[str, Any] = {}
            self._lane_cache: tuple[int, tuple] = (-1, ())
            if refit:
                self.dram.power_off()
            if (refit or self.bar[regs.off("ID") // 4] != regs.ID_OTPU or self.hidden[H["POWER_GEN"]] == 0
                    or self.hidden[H["LAYOUT"]] != LAYOUT):
                self._power_on()
            self._sync_periph()
        self._runner: threading.Thread | None = None
        self._machine = None           # (key, (Machine, seen generations, store logs)) of engine.machine_for

    # -- identity ---------------------------------------------------------------------------------
    def _new_meta(self, target: str | None, faults: str | None) -> dict:
        t = check_simulable(target_mod.load(target))
        faults_mod.parse(faults).validate(t)
        shipped = t.path.resolve().parent == target_mod.TARGETS_DIR
        meta = {"target": t.path.stem if shipped else str(t.path), "target_name": t.name,
                "serial": simfiles.serial_of(self.name), "faults": str(faults_mod.parse(faults)) if faults else "",
                "created": time.time()}
        size = int(t.platform["channel_bytes"]) * int(t.platform["channels"])
        home = simfiles.dram_home(self.dir, size)
        if home != self.dir:
            meta["dram_dir"] = str(home)
            print(f"otpu: {simfiles.dev_of(self.name)}: the run directory {self.dir} has "
                  f"{simfiles.human(simfiles.free_bytes(self.dir))} free, too little for the card's "
                  f"{simfiles.human(size)} of DRAM: it is kept in {home}", file=sys.stderr)
        self._save_meta(meta)
        return meta

    def _save_meta(self, meta: dict) -> None:
        simfiles.save_state(self.dir, self.name, meta)

    def _check_room(self, n: int) -> None:
        """Refuse a host write the DRAM file's filesystem may not hold (a sparse page written on a
        full filesystem is a Bus error): ENOSPC naming the directory and the bytes needed."""
        when, free = self._room
        now = time.monotonic()
        if now - when > ROOM_RECHECK_S or n > free // 4:
            free = simfiles.free_bytes(self.dram.path.parent)
            when = now
        if n + simfiles.DRAM_MARGIN // 4 > free:
            raise simfiles.no_room(self.dram.path.parent, n, free, f"this {n}-byte write to {self.dram.path.name}")
        self._room = (when, free - n)

    @contextmanager
    def _locked(self):
        """Serialise a compound operation against other threads and processes on this card."""
        with self._rlock:
            if self._depth == 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- power -------------------------------------------------------------------------------------
    def _power_on(self) -> None:
        """Configuration: every register to its reset value, counters and hazards cleared."""
        gen = int(self.hidden[H["POWER_GEN"]]) + 1
        self.bar[:CTRL_WORDS] = 0
        self.hidden[:] = 0
        self.hidden[H["LAYOUT"]] = LAYOUT
        self.hidden[H["POWER_GEN"]] = gen
        self.hidden[H["IDLE_T0_NS"]] = time.time_ns()
        for reg, value in self._constants().items():
            self.bar[regs.off(reg) // 4] = value
        self.bar[regs.off("STATUS") // 4] = regs.ST_WR_IDLE
        self.trace[:] = 0
        self.onchip[:] = 0                           # TMEM and ACT RAM lose their contents
        self.periph.reset()                          # no state: the peripherals power on afresh
        self._build_periphs()
        self.periph.store()                          # what they did at power-on (the PHY calibrated)

    def power_off(self) -> None:
        """`otpu sim reset`: DRAM and every register forgotten, as after a power cycle."""
        with self._locked():
            self.bar[regs.off("CTRL") // 4] = 0
            self.dram.power_off()
            self._power_on()

    def _has(self, name: str) -> bool:
        """Does this card have the peripheral? Its module must load, and only a board with the
        LiteDRAM controllers has their CSR window (others calibrate by themselves, MIG-style)."""
        if peripheral_class(name) is None:
            return False
        if name == "litedram":
            from .litedram import has_litedram
            return has_litedram(self.target)
        return True

    def _constants(self) -> dict[str, int]:
        cfg, uarch, plat = self.cfg, self.target.uarch, self.target.platform
        has = {name: self._has(name) for name in ("thermal", "i2c", "litedram")}
        caps = regs.encode_caps(
            trace=True, temp=has["thermal"], i2c=has["i2c"], ddr=True, w4=True, pair=cfg.PAIR, dstep=cfg.DSTEP,
            chash=uarch.CHASH, trace_depth=uarch.TRACE_DEPTH, pq_window=1 << regs.PQ_WINDOW_LOG2,
            act=cfg.act_rows > cfg.MCOLS, args=True, stream=cfg.STREAM, hostcal=has["litedram"], gen=True, waitw=True)
        return {"ID": regs.ID_OTPU, "VERSION": regs.version_word(cfg.D, cfg.MCOLS, cfg.LANES),
                "REGMAP": regs.REGMAP_VERSION, "CAPS": caps, "CORE_KHZ": round(plat["core_mhz"] * 1000),
                "BUILD_ID": 0, "DDR_MTS": int(plat["memory"].split("-")[1]) if "-" in plat["memory"] else 0,
                "ACT_ROWS": cfg.act_rows, "CFG_HASH": self.target.arch_hash()}

    # -- peripherals -------------------------------------------------------------------------------
    def _sync_periph(self) -> None:
        """Reload the peripheral state another process changed; build the peripherals once."""
        self.periph.sync()
        if not self.periphs:
            self._build_periphs()

    def _build_periphs(self) -> None:
        """The peripheral objects over this process's state dicts (an empty dict powers its
        peripheral on: the LiteDRAM core CPU calibrates)."""
        self.periphs = {}
        for name in PERIPHERALS:
            cls = peripheral_class(name) if self._has(name) else None
            needs = {"thermal": self.periphs["thermal"]} if name == "i2c" and "thermal" in self.periphs else {}
            if cls is not None and (name != "i2c" or needs):
                self.periphs[name] = cls(self.target, self.serial, self.periph_state[name], self.faults, **needs)

    @contextmanager
    def _periph(self, name: str, tick: bool = True, changes: bool = True):
        """A peripheral with fresh state (the thermal model ticked to now for a reading); its
        state is stored afterwards if it changed (`changes=False`: the caller only reads a
        peripheral whose reads keep its state, so there is nothing to compare)."""
        with self._locked():
            self._sync_periph()
            ticked = tick and self._tick_thermal()
            yield self.periphs.get(name)
            self.periph.store(((name,) if changes else ()) + (("thermal", "card") if ticked else ()))

    def _tick_thermal(self) -> bool:
        """Advance the thermal model to now (at most every THERMAL_TICK); True if it moved."""
        therm = self.periphs.get("thermal")
        if therm is None:
            return False
        now = time.time()
        mark = self.periph_state["card"]
        last_t, last = mark.get("t"), mark.get("counters")
        if last_t is not None and now - last_t < THERMAL_TICK:
            return False
        live = self.live_counters()
        mark.update(t=now, counters=live)
        if last_t is None:
            return True
        d = {k: live[k] - last.get(k, 0) for k in live}
        up = max(d["UPTIME"], 1)
        activity = {"mxu": d["MXU_BUSY"] / up, "vpu": d["VPU_BUSY"] / up, "qnt": d["QNT_BUSY"] / up,
                    "dma": d["DMA_BUSY"] / up, "tmem": d["TMEM_DENY"] / up, "seq": d["RUNNING"] / up,
                    "dram_bytes_per_s": (d["DRAM_RD"] + d["DRAM_WR"]) * regs.BEAT / (now - last_t)}
        therm.tick(now - last_t, activity)
        return True

    # -- registers ---------------------------------------------------------------------------------
    def reg_read(self, off: int) -> int:
        if self.faults.faults and self.faults.has("link_down"):
            return regs.LINK_DOWN
        window = off & ~(regs.WINDOW_BYTES - 1)
        if window == regs.CTRL_BASE:
            return self._ctrl_read(off & (regs.CTRL_DECODE - 1))
        for name, base, size in WINDOWS:
            if window == base:
                with self._periph(name, changes=not _reads_keep_state(name)) as p:
                    return p.read(off - base) & 0xFFFFFFFF if p is not None else regs.UNMAPPED
        return regs.UNMAPPED

    def reg_batch(self, ops: list[tuple[int, int | None]]) -> list[int]:
        """Register accesses in order (`(off, value)` writes, `(off, None)` reads); returns the
        reads. A run inside one peripheral window takes one state sync and one store, as fast as
        the run is long: a calibration hands over a whole scan of DFII reads at once."""
        out: list[int] = []
        mask = ~(regs.WINDOW_BYTES - 1)
        # the pin registers of the I2C buses sit in the control window: a run of them is one step too
        windows = [("i2c" if off & (regs.CTRL_DECODE - 1) in _I2C_OFFS else off & mask) if off & mask == regs.CTRL_BASE
                   else off & mask for off, _ in ops]
        i = 0
        while i < len(ops):
            window = windows[i]
            if window == "i2c" and not (self.faults.faults and self.faults.has("link_down")):
                j = i + 1
                while j < len(ops) and windows[j] == "i2c":
                    j += 1
                self._i2c_run(ops[i:j], out)
                i = j
                continue
            periph = next(((name, base) for name, base, _ in WINDOWS if base == window), None)
            if periph is None or (self.faults.faults and self.faults.has("link_down")):
                off, value = ops[i]
                if value is None:
                    out.append(self.reg_read(off))
                else:
                    self.reg_write(off, value)
                i += 1
                continue
            j = i + 1
            while j < len(ops) and windows[j] == window:
                j += 1
            name, base = periph
            run = ops[i:j]
            reads = sum(v is None for _, v in run)
            with self._periph(name, tick=reads > 0, changes=reads < len(run) or not _reads_keep_state(name)) as p:
                if p is None:
                    out += [regs.UNMAPPED] * reads
                else:
                    read, write, append = p.read, p.write, out.append
                    for off, value in run:
                        if value is None:
                            append(read(off - base) & 0xFFFFFFFF)
                        else:
                            write(off - base, value & 0xFFFFFFFF)
            i = j
        return out

    def _i2c_run(self, run: list[tuple[int, int | None]], out: list[int]) -> None:
        """A run of I2C_CTRL / I2C_IN accesses under one sync and store (as `_ctrl_read` / `_ctrl_write` each)."""
        with self._locked(), self._periph("i2c", tick=any(v is None for _, v in run)) as bus:
            for off, value in run:
                o = off & (regs.CTRL_DECODE - 1)
                if value is None:
                    if o == regs.off("I2C_IN"):
                        out.append(bus.read(o - regs.I2C_BASE) if bus is not None else regs.UNMAPPED)
                    else:
                        out.append(int(self.bar[o // 4]))
                elif o == regs.off("I2C_CTRL"):
                    if bus is not None:
                        bus.write(o - regs.I2C_BASE, value)
                    self.bar[o // 4] = value & 0xF

    def reg_write(self, off: int, value: int) -> None:
        if self.faults.faults and self.faults.has("link_down"):
            return
        window = off & ~(regs.WINDOW_BYTES - 1)
        if window == regs.CTRL_BASE:
            self._ctrl_write(off & (regs.CTRL_DECODE - 1), value & 0xFFFFFFFF)
            return
        for name, base, size in WINDOWS:
            if window == base:
                with self._periph(name, tick=False) as p:
                    if p is not None:
                        p.write(off - base, value & 0xFFFFFFFF)
                return

    def bar_write_bytes(self, off: int, data: bytes) -> None:
        """What a byte-wise copy into the mapped BAR does: one AXI-Lite write per byte, each with
        only its own byte lane driven; otpu_ctrl ignores the strobes, so the register keeps the
        last byte in its lane and zeros elsewhere."""
        for i, b in enumerate(data):
            word = (off + i) & ~3
            self.reg_write(word, b << (8 * ((off + i) & 3)))

    def _ctrl_read(self, o: int) -> int:
        reg = regs.BY_OFFSET.get(o)
        if reg is None:
            return regs.UNMAPPED
        name = reg.name
        if name == "STATUS":
            return self._status()
        if name == "TEMP":
            with self._periph("thermal") as therm:
                return therm.temp_register() if therm is not None else 0
        if name == "I2C_IN":
            with self._periph("i2c") as bus:
                return bus.read(o - regs.I2C_BASE) if bus is not None else regs.UNMAPPED
        if name == "SNAP":
            return int(self.hidden[H["SNAPS"]]) & 0xFFFFFFFF
        if name == "TRACE_LO" or name == "TRACE_HI":
            with self._locked():
                addr = int(self.bar[regs.off("TRACE_ADDR") // 4]) % self.trace.size
                rec = int(self.trace[addr])
                if name == "TRACE_HI":
                    self.bar[regs.off("TRACE_ADDR") // 4] = (addr + 1) % self.trace.size
                    return rec >> 32
                return rec & 0xFFFFFFFF
        return int(self.bar[o // 4])

    def _ctrl_write(self, o: int, value: int) -> None:
        reg = regs.BY_OFFSET.get(o)
        if reg is None or reg.access is regs.Access.RO:
            return
        name = reg.name
        with self._locked():
            if name == "CTRL":
                self._ctrl(value)
            elif name == "SNAP":
                self._snap()
            elif name == "TRACE_CTRL":
                if value & regs.TR_CLEAR:
                    self.bar[regs.off("TRACE_COUNT") // 4] = 0
                    self.bar[regs.off("TRACE_DROP") // 4] = 0
                    self.hidden[H["TRACE_POS"]] = 0
                self.bar[o // 4] = value & (regs.TR_ENABLE | regs.TR_STOP_WHEN_FULL)
            elif name == "I2C_CTRL":
                with self._periph("i2c", tick=False) as bus:
                    if bus is not None:
                        bus.write(o - regs.I2C_BASE, value)
                self.bar[o // 4] = value & 0xF
            else:
                self.bar[o // 4] = value

    def _status(self) -> int:
        st = int(self.bar[regs.off("STATUS") // 4])
        runner = int(self.hidden[H["RUNNER"]])
        if runner and not pid_alive(runner):
            with self._locked():
                self._finish(regs.ST_ERROR, "the process running the simulated core exited")
            st = int(self.bar[regs.off("STATUS") // 4])
        if self.hidden[H["RUNNER"]]:  # the core runs until its engine stops, not until CTRL.RUN is cleared
            st |= regs.ST_RUN
        for ch, bit in enumerate(regs.ST_CALIB):
            if self.calibrated(ch):
                st |= bit
        return st

    def calibrated(self, ch: int) -> bool:
        """The channel's calibration ready bit (LiteDRAM cal_ready; a MIG build calibrates itself)."""
        with self._rlock:             # no card lock: a query; the thread lock keeps a reload out
            self._sync_periph()
            phy = self.periphs.get("litedram")
            if phy is None:
                return not self.faults.on_channel("no_calib", ch)
            return phy.calibrated(ch)

    # -- counters ----------------------------------------------------------------------------------
    def uptime(self) -> int:
        base = int(self.hidden[H["UPTIME_BASE"]])
        if self.hidden[H["RUNNER"]]:
            return base
        idle = max(0, time.time_ns() - int(self.hidden[H["IDLE_T0_NS"]]))
        return base + int(idle * 1e-9 * self.core_hz)

    def live_counters(self) -> dict[str, int]:
        live = {n: int(self.hidden[H[f"LIVE_{n}"]]) for n in regs.COUNTER_NAMES}
        live["UPTIME"] = self.uptime()
        return live

    def _snap(self) -> None:
        for n, v in self.live_counters().items():
            o = regs.off(n) // 4
            self.bar[o], self.bar[o + 1] = v & 0xFFFFFFFF, v >> 32
        self.hidden[H["SNAPS"]] += 1

    # -- run control -------------------------------------------------------------------------------
    def _ctrl(self, value: int) -> None:
        prev = int(self.hidden[H["PREV_CTRL"]])
        self.hidden[H["PREV_CTRL"]] = value
        self.bar[regs.off("CTRL") // 4] = value
        st_off = regs.off("STATUS") // 4
        if value & regs.CTRL_CLEAR:
            for n in regs.RUN_COUNTER_NAMES:
                self.bar[regs.off(n) // 4] = 0
            self.bar[st_off] = regs.ST_WR_IDLE
            return
        if value & regs.CTRL_LOAD and not prev & regs.CTRL_LOAD:
            self._load_program()
        if value & regs.CTRL_RUN and not prev & regs.CTRL_RUN and not self.hidden[H["RUNNER"]]:
            self._start_run()

    def _load_program(self) -> None:
        addr = int(self.bar[regs.off("PROG_ADDR") // 4])
        n = int(self.bar[regs.off("PROG_N") // 4])
        st = regs.off("STATUS") // 4
        if n * 8 > self.imem.size or addr % 4 or addr + 32 * n > self.dram.size:
            self.bar[st] |= regs.ST_AXI_ERR
            return
        self.imem[:8 * n] = self.dram.mem[addr:addr + 32 * n].view(np.uint32)
        self.hidden[H["IMEM_N"]] = n
        self.hidden[H["LIVE_DRAM_RD"]] += -(-32 * n // regs.BEAT)

    def _start_run(self) -> None:
        from .engine import CardRun
        idle = max(0, time.time_ns() - int(self.hidden[H["IDLE_T0_NS"]]))
        self.hidden[H["UPTIME_BASE"]] += int(idle * 1e-9 * self.core_hz)
        self.hidden[H["RUNNER"]] = os.getpid()
        st = regs.off("STATUS") // 4
        self.bar[st] = int(self.bar[st]) & ~(regs.ST_HALTED | regs.ST_ERROR | regs.ST_WAIT_TO | regs.ST_WR_IDLE)
        n = int(self.hidden[H["IMEM_N"]])
        args = [int(self.bar[regs.ARG_BASE // 4 + i]) for i in range(regs.ARG_COUNT)]
        run = CardRun(self, self.imem[:8 * n].copy(), args, int(self.hidden[H["POWER_GEN"]]))
        self._runner = threading.Thread(target=run.loop, name="otpu-sim-core", daemon=True)
        self._runner.start()

    def still_running(self, power_gen: int) -> bool:
        """The run may continue: same power-on, RUN still set, not held in CLEAR."""
        ctrl = int(self.bar[regs.off("CTRL") // 4])
        return (int(self.hidden[H["POWER_GEN"]]) == power_gen and ctrl & regs.CTRL_RUN
                and not ctrl & regs.CTRL_CLEAR and self.hidden[H["RUNNER"]] == os.getpid())

    def publish(self, power_gen: int, delta: dict[str, int], run: dict[str, int]) -> None:
        """Add an engine time slice's counter deltas and set the per-run registers."""
        with self._locked():
            if not self.still_running(power_gen):
                return               # the host stopped or cleared the run meanwhile: its counters stand
            for n, v in delta.items():
                self.hidden[H[f"LIVE_{n}"]] += v
            self.hidden[H["UPTIME_BASE"]] += delta.get("RUNNING", 0)
            cycles = run.get("CYCLES", 0)
            for n, v in {**run, "CYCLES_LO": cycles & 0xFFFFFFFF, "CYCLES_HI": cycles >> 32}.items():
                if n in regs.BY_NAME:
                    self.bar[regs.off(n) // 4] = v & 0xFFFFFFFF

    def record(self, records: np.ndarray) -> None:
        """Append 64-bit trace records as TRACE_CTRL says (ENABLE; ring, or the first DEPTH with
        STOP_WHEN_FULL); the engine hands a run's records over when it halts."""
        with self._locked():
            self._record(records)

    def _record(self, records: np.ndarray) -> None:
        ctrl = int(self.bar[regs.off("TRACE_CTRL") // 4])
        if not ctrl & regs.TR_ENABLE:
            return
        depth = self.trace.size
        count_off = regs.off("TRACE_COUNT") // 4
        count = int(self.hidden[H["TRACE_POS"]])
        if ctrl & regs.TR_STOP_WHEN_FULL:
            records = records[:max(0, depth - count)]
        if records.size:
            idx = (count + np.arange(records.size)) % depth
            self.trace[idx[-depth:]] = records[-depth:]
        count += records.size
        self.hidden[H["TRACE_POS"]] = count
        self.bar[count_off] = min(count, 0xFFFFFFFF)

    def finish(self, power_gen: int, error: int = 0, reason: str = "") -> None:
        with self._locked():
            if int(self.hidden[H["POWER_GEN"]]) == power_gen and self.hidden[H["RUNNER"]] == os.getpid():
                self._finish(error, reason)

    def abandon(self, power_gen: int) -> None:
        """The host stopped the run (RUN cleared, CLEAR set): the core stops without HALTED."""
        with self._locked():
            if int(self.hidden[H["POWER_GEN"]]) == power_gen and self.hidden[H["RUNNER"]] == os.getpid():
                self.hidden[H["RUNNER"]] = 0
                self.hidden[H["IDLE_T0_NS"]] = time.time_ns()
                st = regs.off("STATUS") // 4
                self.bar[st] = int(self.bar[st]) | regs.ST_WR_IDLE

    @property
    def power_gen(self) -> int: return int(self.hidden[H["POWER_GEN"]])

    def _finish(self, error: int, reason: str) -> None:
        st = regs.off("STATUS") // 4
        self.bar[st] = (int(self.bar[st]) & ~regs.ST_RUN) | regs.ST_HALTED | regs.ST_WR_IDLE | error
        self.hidden[H["RUNNER"]] = 0
        self.hidden[H["IDLE_T0_NS"]] = time.time_ns()
        self.meta_error(reason)

    def meta_error(self, reason: str) -> None:
        """Keep the last run error's text where `otpu sim` and the Board can show it."""
        (self.dir / f"{self.name}.error").write_text(reason)

    def last_error(self) -> str:
        try:
            return (self.dir / f"{self.name}.error").read_text()
        except OSError:
            return ""

    def running(self) -> bool:
        return bool(self.hidden[H["RUNNER"]])

    def join(self, timeout: float | None = None) -> None:
        """Wait for this process's engine thread (tests, and close)."""
        if self._runner is not None:
            self._runner.join(timeout)

    # -- DMA (one XDMA call each) ------------------------------------------------------------------
    # Each call in flight holds a slot per direction: the owner's pid, its process start (so a
    # recycled pid is not taken for the owner) and the call's start time. A slot whose owner has
    # died is finished: the driver completes or aborts a dead process's transfer, so it cannot
    # overlap a later one. Only a transfer of a live process counts as an overlap.
    def _live_transfers(self, direction: str) -> int:
        """Transfers of this direction in flight now, reaping those whose process died (card lock held)."""
        h = self.hidden
        live = 0
        for pid, born, t0 in _SLOTS[direction]:
            if h[pid]:
                if owner_alive(int(h[pid]), int(h[born])):
                    live += 1
                else:
                    h[pid] = h[born] = h[t0] = 0
        return live

    def _open_transfer(self, direction: str) -> tuple[int, int]:
        """Mark a transfer of this process in flight (card lock held); returns its (slot, start ns)."""
        h = self.hidden
        for attempt in range(2):
            for i, (pid, born, t0) in enumerate(_SLOTS[direction]):
                if not h[pid]:
                    start = time.time_ns()
                    h[pid], h[born], h[t0] = os.getpid(), _own_start(), start
                    return i, start
            self._live_transfers(direction)          # every slot held: free those of dead processes
        raise OSError(errno.EAGAIN, f"{DMA_SLOTS} {direction} transfers already in flight")

    def _close_transfer(self, direction: str, mark: tuple[int, int]) -> None:
        pid, born, t0 = _SLOTS[direction][mark[0]]
        with self._locked():
            h = self.hidden
            if h[pid] == os.getpid() and h[t0] == mark[1]:   # not cleared by a power cycle
                h[pid] = h[born] = h[t0] = 0

    def _dma_begin(self, direction: str, axi: int, n: int, host: int) -> tuple[int, tuple[int, int]]:
        """Account one call, apply the engine's hazards and mark it in flight; returns the AXI
        address it lands at and its in-flight mark (for `_close_transfer`)."""
        if self.faults.faults and self.faults.has("link_down"):
            raise OSError(errno.EIO, "PCIe link down")
        with self._locked():
            h = self.hidden
            h[H["DMA_CALLS"]] += 1
            if self._live_transfers("c2h" if direction == "h2c" else "h2c"):
                h[H["SLIP"]] = SLIP_BYTES
            placed = regs.write_placed(host, axi) if direction == "h2c" else regs.read_placed(host, axi)
            if n > regs.DMA_CHUNK:
                h[H["DMA_OVERSIZE"]] += 1
            if not placed:
                h[H["DMA_SLOW"]] += 1
            rate = (H2C_RATE if placed else H2C_SLOW_RATE) if direction == "h2c" else (C2H_RATE if placed else C2H_SLOW_RATE)
            h[H["DMA_LINK_NS"]] += DMA_CALL_NS + int(n / rate * 1e9)
            if direction == "c2h":
                return axi, self._open_transfer(direction)
            if h[H["WEDGED"]] or h[H["SUBBEAT_COUNT"]] >= 2:
                h[H["WEDGED"]] = 1
                raise OSError(errno.ETIMEDOUT, "H2C engine busy")
            if axi % regs.BEAT and n < regs.BEAT:
                beat = axi // regs.BEAT + 1
                h[H["SUBBEAT_COUNT"]] = h[H["SUBBEAT_COUNT"]] + 1 if h[H["SUBBEAT_BEAT"]] == beat else 1
                h[H["SUBBEAT_BEAT"]] = beat
            if n > regs.RUN_H2C and self.hidden[H["RUNNER"]]:
                h[H["LAPPED"]] = 1
            land = axi + int(h[H["SLIP"]]) + (regs.XDMA_LAP_BYTES if h[H["LAPPED"]] else 0)
            return land, self._open_transfer(direction)

    def _axi_spans(self, axi: int, n: int) -> tuple[list[tuple[int, int, int, int]], int | None]:
        """[axi, axi+n) through the AXI map: (channel, channel offset, position in the call, length)
        of each part that reaches DRAM, and the first address that decodes to no memory (None if
        every byte does). Channel windows start at 0 and 2 GiB; a channel holds `channel_bytes`."""
        spans, hole, pos = [], None, 0
        while pos < n:
            ch, off = regs.axi_channel(axi + pos)
            if ch < self.dram.channels and off < self.channel_bytes:
                length = min(n - pos, self.channel_bytes - off)
                spans.append((ch, off, pos, length))
            else:
                length = min(n - pos, regs.CH_AXI_SPAN - off)
                hole = axi + pos if hole is None else hole
            pos += length
        return spans, hole

    def _decode_error(self, what: str, axi: int, land: int, hole: int) -> OSError:
        """An AXI DECERR, as the XDMA driver reports it (EIO); the bytes that reached DRAM stay."""
        shift = land - axi
        why = (f"; this card's H2C engine lands every write {shift} bytes past its address (a slip or lap "
               "stays until reset: `otpu sim reset`)" if shift else "")
        return OSError(errno.EIO, f"{what} at AXI 0x{hole:x} decoded to no DRAM (AXI DECERR){why}")

    def h2c(self, axi: int, buf) -> None:
        """One host->card XDMA call of `buf` at an AXI address. What lands is what the pins carry:
        garbled on byte lanes out of their write window, stuck DQ bits forced, and stored at
        every address of its aliased cell (`faults.alias_class`)."""
        src = np.frombuffer(buf, dtype=np.uint8)
        self._check_room(src.size)
        land, mark = self._dma_begin("h2c", axi, src.size, src.__array_interface__["data"][0])
        try:
            parts, hole = self._axi_spans(land, src.size)
            for ch, off, pos, n in parts:
                self._store(ch, off, src[pos:pos + n])
            if hole is not None:
                raise self._decode_error("host->card write", axi, land, hole)
        finally:
            self._close_transfer("h2c", mark)

    def _store(self, ch: int, off: int, data: np.ndarray) -> None:
        """Host data at a channel offset as the pins store it (lane and stuck-bit faults, every
        address of an aliased cell)."""
        data = self.pins_write(ch, off, data)
        mask = faults_mod.alias_mask(self.faults, ch)
        if mask and mask & -mask < SCATTER_BELOW:      # pieces too small to write one by one
            spans = self._store_scattered(ch, off, data, mask)
        else:
            spans = [self.dram.write_channel(ch, cell | s, data[pos:pos + length])
                     for pos, cell, length in faults_mod.alias_segments(self.faults, ch, off, data.size)
                     for s in faults_mod.alias_class(mask)]
        with self._locked():
            for lo, hi in spans:
                self.dram.touch(lo, hi)

    def _store_scattered(self, ch: int, off: int, data: np.ndarray, mask: int) -> list[tuple[int, int]]:
        """`_store` for an aliased line low enough to cut a write into tiny pieces: per byte,
        vectorised, a chunk at a time; within a call the later byte of a cell wins."""
        from .dram import logical_bytes
        unit = min(mask & -mask, regs.BEAT)          # bytes that always move together: whole units
        if off % unit or data.size % unit:
            unit = 1
        spans = []
        for start in range(0, data.size, SCATTER_CHUNK):
            part = data[start:start + SCATTER_CHUNK].reshape(-1, unit)
            cells = (np.arange(part.shape[0], dtype=np.int64) * unit + off + start) & ~np.int64(mask)
            last = cells.size - 1 - np.unique(cells[::-1], return_index=True)[1]
            for s in faults_mod.alias_class(mask):
                at = logical_bytes(ch, cells[last] | np.int64(s), self.dram.chash)[:, None] + np.arange(unit)
                self.dram.mem[at] = part[last]
                spans.append((int(at.min()), int(at.max()) + 1))
        return spans

    def c2h(self, axi: int, buf) -> None:
        """One card->host XDMA call into `buf` from an AXI address (stuck DQ bits forced, lanes
        out of their read window garbled)."""
        dst = np.frombuffer(buf, dtype=np.uint8)
        _, mark = self._dma_begin("c2h", axi, dst.size, dst.__array_interface__["data"][0])
        try:
            parts, hole = self._axi_spans(axi, dst.size)
            for ch, off, pos, n in parts:
                part = dst[pos:pos + n]
                self.dram.read_channel(ch, off, n, part)
                if self.faults:
                    faults_mod.apply_stuck_dq(self.faults, ch, off, part)
                read_bad = self.lane_faults()[ch][1]
                if read_bad:
                    faults_mod.garble_read(part, off, read_bad, faults_mod.lane_salt(self.serial, write=False))
            if hole is not None:
                raise self._decode_error("card->host read", axi, axi, hole)
        finally:
            self._close_transfer("c2h", mark)

    def pins_write(self, ch: int, off, data: np.ndarray) -> np.ndarray:
        """What bytes written at channel offset `off` (or at the per-byte offsets of an array)
        become on the way to the cells: lanes out of their write window land as noise, stuck DQ
        bits forced. `data` itself is untouched (a copy is returned when anything changes);
        both effects are idempotent, so stored data may pass again."""
        write_bad = self.lane_faults()[ch][0]
        stuck = bool(self.faults) and self.faults.on_channel("stuck_dq", ch)
        if not write_bad and not stuck:
            return data
        out = faults_mod.garble_write(data.copy(), off, write_bad, faults_mod.lane_salt(self.serial, write=True))
        return faults_mod.apply_stuck_dq(self.faults, ch, off, out)

    def pin_fault_channels(self) -> list[int]:
        """Channels whose pins change what is written now (lanes out of their write window, stuck DQ)."""
        lanes = self.lane_faults()
        return [ch for ch in range(regs.CHANNELS)
                if lanes[ch][0] or (self.faults and self.faults.on_channel("stuck_dq", ch))]

    def lane_faults(self) -> tuple[tuple[list[int], list[int]], ...]:
        """Per channel: (data byte lanes whose writes land wrong, lanes whose reads come back
        wrong) now. A LiteDRAM PHY out of its windows (uncalibrated, or detuned through the
        CSRs) or a self-calibrating channel that never calibrated (every lane). Cached until
        the peripheral state changes."""
        with self._rlock:
            self._sync_periph()
            if self._lane_cache[0] == self.periph.seen:
                return self._lane_cache[1]
            phy = self.periphs.get("litedram")
            every = list(range(faults_mod.BUS_BYTES))
            lanes = tuple((phy.bad_write_lanes(ch), phy.bad_read_lanes(ch)) if phy is not None
                          else (every, every) if self.faults.on_channel("no_calib", ch) else ([], [])
                          for ch in range(regs.CHANNELS))
            self._lane_cache = (self.periph.seen, lanes)
            return lanes

    def dma_stats(self) -> dict[str, int]:
        return {k.lower(): int(self.hidden[H[k]]) for k in
                ("DMA_CALLS", "DMA_SLOW", "DMA_OVERSIZE", "DMA_LINK_NS", "LAPPED", "SLIP", "WEDGED")}

    @contextmanager
    def dma_in_flight(self, direction: str):
        """Hold a transfer of this process open, outside the DMA lock: for hazard tests."""
        with self._locked():
            mark = self._open_transfer(direction)
        try:
            yield
        finally:
            self._close_transfer(direction, mark)

    # -- PCIe --------------------------------------------------------------------------------------
    def link(self) -> dict:
        plat = self.target.platform
        speed, width = _LINK_SPEED.get(plat["host_link"], (None, 0))
        if self.faults.faults and self.faults.has("link_down"):
            speed, width = None, 0
        return {"vendor": plat.get("pcie_vendor"), "device": plat.get("pcie_device"), "speed": speed, "width": width}

    def close(self) -> None:
        self.join(2.0)               # a run the host stopped ends within one engine time slice
        if self._runner is not None and self._runner.is_alive():
            return                   # a run still in flight keeps using the card; it goes with the process
        self._machine = None        # its DRAM views are the maps closed below
        self.dram.close()
        self.periph.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


CTRL_WORDS = regs.WINDOW_BYTES // 4


@functools.lru_cache(maxsize=4)
def _start_of(pid: int) -> int: return process_start(pid) or 0


def _own_start() -> int:
    """This process's start (clock ticks since boot; 0 if unknown), for its in-flight marks."""
    return _start_of(os.getpid())

# Peripheral windows: (module name, BAR0 base, size). Classes come from the module of that name.
WINDOWS = (("litedram", regs.LITEDRAM_BASE, regs.LITEDRAM_BYTES), ("thermal", regs.XADC_BASE, regs.XADC_BYTES))
PERIPHERALS = ("thermal", "litedram", "i2c")
_CLASS_NAMES = {"thermal": "Thermal", "litedram": "LiteDram", "i2c": "I2cBuses"}  # i2c's devices read the thermal model


_I2C_OFFS = frozenset((regs.off("I2C_CTRL"), regs.off("I2C_IN")))


def _reads_keep_state(name: str) -> bool:
    """Whether a peripheral's register reads never change its state (its class says `READS_KEEP_STATE`)."""
    return bool(getattr(peripheral_class(name), "READS_KEEP_STATE", False))


@functools.lru_cache(maxsize=None)
def peripheral_class(name: str):
    """The peripheral class of a card module, or None when that module is absent or broken
    (the card then lacks that peripheral, and its CAPS bit says so)."""
    try:
        mod = importlib.import_module(f"{__package__}.{name}")
        return getattr(mod, _CLASS_NAMES[name])
    except ModuleNotFoundError:
        return None
    except Exception as e:       # a broken peripheral must not take the whole card down
        print(f"otpu: simulated card has no {name}: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def check_simulable(target) -> Any:
    """The target, if the simulated card can model its board: two DRAM channels of at most 2 GiB
    (the AXI map picks the channel by address bit 31, STATUS has two CALIB bits and the
    interleave alternates two channels). Otherwise a TargetError saying so."""
    plat = target.platform
    channels, channel_bytes = int(plat["channels"]), int(plat["channel_bytes"])
    if channels != regs.CHANNELS or channel_bytes > regs.CH_AXI_SPAN:
        raise TargetError(
            f"target {target.name}: the simulated card models boards with {regs.CHANNELS} DRAM channels of at most "
            f"{regs.CH_AXI_SPAN >> 30} GiB; {plat['board']} has {channels} of {channel_bytes >> 30} GiB",
            hint="simulate a two-channel target (--target ypcb-00338, nangate45-card or sim-small); "
                 "the golden simulator runs programs for any target")
    return target


def open_card(name: str, target: str | None = None, faults: str | None = None) -> SimCard:
    """Open (creating on first use) a simulated card; wraps file errors as DeviceError."""
    if faults is None:
        faults = os.environ.get(faults_mod.ENV_VAR) or None
    try:
        return SimCard(name, target, faults)
    except OSError as e:
        raise DeviceError(f"simulated card {simfiles.dev_of(name)}: cannot open its files in {run_dir()}: "
                          f"{e.strerror or e}") from None


