"""Board: the one object every tool holds to use a card, real or simulated, without knowing which.

`Board.open(dev, target, check, faults, lock)` resolves `--dev` to a transport (devspec),
takes the device lock, identifies the card (ID, VERSION, CAPS, REGMAP, BUILD_ID, CFG_HASH) and
refuses one built for another target than the one asked for, naming both hashes. Then:
`write`/`read` at logical DRAM addresses (interleave and CHASH applied on the host, edges
widened to whole 128-byte chunks, transfers over 16 MiB pipelined across the two channels on a
worker thread), `write_channel`/`read_channel` at raw channel offsets, registers by name,
`snapshot`, `load_program`, `set_args`, `start`/`wait` (so the host can prepare the next program
while the card runs) and `run`. Results are plain dataclasses.

`IsaBackend` (a persistent golden Machine whose DRAM is adopted, not copied) and `BoardBackend`
(the same calls on a card) share one interface, so model code runs unchanged on either:
`write`/`read`, `start`/`wait`/`run`, `poll` (is the run still going? On IsaBackend it also
advances the run, answering WAITWs only from DRAM the host wrote between polls) and
`counters` (the free-running counters: SNAP on a card, the timing model on the simulator).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import target as target_mod
from .card import regs
from .card.runstate import update_status
from .errors import DeviceError, UsageError
from .transport import DMA_CHUNK, DMA_PLACE, Transport, as_bytes, buffer_address, placed

PIPE = 2 * DMA_CHUNK          # logical bytes per pipelined piece of a large transfer
SCRUB_BLOCK = 64 << 20        # zero buffer the scrub writes repeatedly
WR_SETTLE = 2e-3
STOP_WAIT_S = 2.0             # how long a stopped run may take to leave STATUS RUN


class ConfigMismatch(UsageError):
    """The card was built for another configuration than the one asked for."""


@dataclass(frozen=True)
class CardInfo:
    """What a card says about itself."""
    dev: str
    id: int
    d: int
    mcols: int
    lanes: int
    regmap: int
    caps: dict[str, Any]
    core_khz: int | None
    build_id: int | None
    cfg_hash: int | None
    temp_c: float | None
    ddr_mts: int | None
    act_rows: int
    status: int
    calibrated: tuple[bool, bool]
    running: bool
    link: dict[str, Any]
    faults: tuple[str, ...] = ()     # injected into the card (a simulated card's fault spec tokens)
    fault_note: str = ""             # the card's sentence on its faults and what clears them
    engine: tuple[str, ...] = ()     # what is wrong with the DMA engine now, each with what clears it

    @property
    def problems(self) -> list[str]:
        """What the card reports wrong with itself now: the DMA engine, STATUS ERROR / AXI_ERR,
        each with what clears it (empty: healthy as far as it can tell)."""
        out = list(self.engine)
        if self.status & regs.ST_ERROR:
            out.append("STATUS ERROR: the last run stopped on an error (the next run or CTRL CLEAR clears it)")
        if self.status & regs.ST_AXI_ERR:
            out.append("STATUS AXI_ERR: the memory path reported an error (CTRL CLEAR clears it; check calibration)")
        return out

    @property
    def health(self) -> list[str]:
        """`problems` and the injected faults: all a monitor's health column shows."""
        return self.problems + ([self.fault_note] if self.fault_note else [])

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cfg_hash"] = None if self.cfg_hash is None else f"0x{self.cfg_hash:08x}"
        out["build_id"] = None if self.build_id is None else f"0x{self.build_id:08x}"
        out["status_bits"] = [f.name for f in regs.STATUS_FIELDS if self.status & (1 << f.lsb)]
        out["health"] = self.health
        return out


@dataclass(frozen=True)
class RunStats:
    """One run's per-run counters, as the card reports them after HALTED."""
    cycles: int
    instructions: int
    b_reads: int
    b_writes: int
    a_reads: int
    a_writes: int
    b_stall: int
    status: int
    seconds: float
    trace: dict[str, Any] | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, Any]: return {k: v for k, v in asdict(self).items() if k != "trace" or v}


def _targets_with_hash(cfg_hash: int) -> list[str]:
    return [name for name in target_mod.names() if target_mod.load(name).arch_hash() == cfg_hash]


class Board:
    """An open card: registers, DRAM and runs, over any Transport."""

    def __init__(self, transport: Transport, target: str | target_mod.Target | None = None, check: bool = True):
        self.t = transport
        self.in_run = False
        self.timed_out = False        # the last wait gave up on a run that did not halt
        self._run_t0 = 0.0
        self._trace_keep: str | None = None
        self._args: list[int] | None = None
        self._pipe: list[tuple[np.ndarray, np.ndarray]] | None = None
        try:        # a bad target or a failed check closes the transport, so its lock is not left held
            self.target = target if isinstance(target, target_mod.Target) else target_mod.load(target)
            self.info = self.identify()
            if check:
                self.check_config()
        except BaseException:
            self.close()
            raise
        self.chash = bool(self.info.caps.get("chash"))

    @classmethod
    def open(cls, dev: str | None = None, target: str | None = None, check: bool = True, faults: str | None = None,
             lock: bool = True) -> "Board":
        """Open a card by `--dev` spec (default: the first /dev/xdma*_user, else the simulated card)."""
        from .devspec import open_transport
        return cls(open_transport(dev, target=target, faults=faults, lock=lock), target=target, check=check)

    # -- identity ----------------------------------------------------------------------------------
    def identify(self) -> CardInfo:
        rd = self.t.reg_read
        ident = rd(regs.off("ID"))
        if ident == regs.LINK_DOWN:
            raise DeviceError(f"{self.t.dev}: every register reads 0xFFFFFFFF: the PCIe link is down",
                              hint=self._with_faults("check `lspci -vv` for the card's link state; reseat or power-cycle the host"))
        if ident != regs.ID_OTPU:
            raise DeviceError(f"{self.t.dev}: no openTPU on the card (ID register 0x{ident:08x}, want 0x{regs.ID_OTPU:08x})",
                              hint="is the openTPU bitstream loaded?")
        version = rd(regs.off("VERSION"))
        regmap = rd(regs.off("REGMAP"))
        regmap = 1 if regmap in (0, regs.UNMAPPED) else regmap
        status = rd(regs.off("STATUS"))
        caps: dict[str, Any] = {}
        core_khz = build_id = cfg_hash = temp_c = ddr_mts = None
        d, mcols, lanes = version >> 16, (version >> 8) & 0xFF, version & 0xFF
        act_rows = mcols
        if regmap >= 2:
            caps = regs.decode_caps(rd(regs.off("CAPS")))
            core_khz = rd(regs.off("CORE_KHZ")) or None
            build_id = rd(regs.off("BUILD_ID"))
            temp = rd(regs.off("TEMP"))
            if caps["temp"] and temp & regs.TEMP_VALID:
                temp_c = round(regs.temp_code_to_c(temp & 0xFFF), 2)
            if caps["ddr"]:
                ddr_mts = rd(regs.off("DDR_MTS")) or None
            if caps["act"]:
                act_rows = rd(regs.off("ACT_ROWS"))
            h = rd(regs.off("CFG_HASH"))
            cfg_hash = None if h == regs.UNMAPPED else h
        calibrated = (bool(status & regs.ST_CALIB0), bool(status & regs.ST_CALIB1))
        return CardInfo(self.t.dev, ident, d, mcols, lanes, regmap, caps, core_khz, build_id, cfg_hash, temp_c, ddr_mts,
                        act_rows, status, calibrated, bool(status & regs.ST_RUN and not status & regs.ST_HALTED),
                        self.t.link(), self.t.injected_faults(), self.t.fault_note(), self.t.engine_health())

    def _with_faults(self, hint: str | None) -> str | None:
        """A failure hint, followed by the card's note on its injected faults when it has any."""
        note = self.t.fault_note()
        return f"{hint}. {note}" if hint and note else hint or note or None

    def check_config(self) -> None:
        """Refuse a card built for another target than `self.target` (CFG_HASH, else VERSION)."""
        want = self.target.arch_hash()
        info = self.info
        if info.cfg_hash is not None:
            if info.cfg_hash != want:
                known = _targets_with_hash(info.cfg_hash)
                theirs = known[-1] if known else None
                raise ConfigMismatch(
                    f"the card's CFG_HASH is 0x{info.cfg_hash:08x}"
                    + (f" (target {' or '.join(known)})" if known else "")
                    + f" but target {self.target.name} has 0x{want:08x}",
                    hint=(f"use --target {theirs}" if theirs else "use the target the bitstream was built for")
                    + ", or --no-check to skip this check")
            return
        cfg = self.target.config()
        card = (info.d, info.mcols, info.lanes)
        if card != (cfg.D, cfg.MCOLS, cfg.LANES):
            raise ConfigMismatch(f"the bitstream is D={info.d} MCOLS={info.mcols} LANES={info.lanes} but target "
                                 f"{self.target.name} is D={cfg.D} MCOLS={cfg.MCOLS} LANES={cfg.LANES}",
                                 hint="use the target the bitstream was built for, or --no-check")

    # -- registers ---------------------------------------------------------------------------------
    def reg(self, name: str) -> int:
        """A control register by name (a 64-bit counter reads low then high word)."""
        r = self.register(name)
        lo = self.t.reg_read(r.offset)
        return lo | (self.t.reg_read(r.offset + 4) << 32) if r.size == 8 else lo

    def set_reg(self, name: str, value: int) -> None:
        r = self.register(name)
        if r.access is regs.Access.RO:
            raise UsageError(f"register {name} is read-only")
        self.t.reg_write(r.offset, value)

    @staticmethod
    def register(name: str) -> regs.Reg:
        """The register-map entry of a control register name (any case); a UsageError naming it if none."""
        try:
            return regs.BY_NAME[name.upper()]
        except KeyError:
            raise UsageError(f"no register named {name!r}", hint="`otpu card regs` lists them") from None

    def status(self) -> int: return self.t.reg_read(regs.off("STATUS"))

    def snapshot(self) -> dict[str, int] | None:
        """Latch every free-running counter (SNAP) and read the shadows; None on a v1 bitstream."""
        if self.info.regmap < 2:
            return None
        self.t.reg_write(regs.off("SNAP"), 1)
        names = regs.counter_names(self.info.regmap)
        offs = [o for n in names for o in (regs.off(n), regs.off(n) + 4)]
        words = self.t.reg_read_many(offs)
        out = {n: words[2 * i] | (words[2 * i + 1] << 32) for i, n in enumerate(names)}
        out["snaps"] = self.t.reg_read(regs.off("SNAP"))
        return out

    # -- DRAM --------------------------------------------------------------------------------------
    @property
    def dram_bytes(self) -> int: return self.t.channel_bytes * self.t.channels

    def _running(self) -> bool:
        if self.in_run:
            return True
        st = self.status()
        return bool(st & regs.ST_RUN and not st & regs.ST_HALTED)

    def write_channel(self, ch: int, offset: int, data) -> None:
        """Raw bytes at a channel offset (no interleave)."""
        self.t.in_run = self._running()
        self.t.mem_write(ch, offset, data)

    def read_channel(self, ch: int, offset: int, nbytes: int) -> np.ndarray:
        return self.t.mem_read(ch, offset, nbytes)

    def _check_logical(self, addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > self.dram_bytes:
            raise UsageError(f"DRAM bytes [0x{addr:x}, 0x{addr + n:x}) are outside the card's {self.dram_bytes} bytes")

    def write(self, addr: int, data) -> None:
        """Bytes at a logical DRAM address (the accelerator's view).

        Only the 64-byte beats that hold data are written (a partial beat is merged on the
        host by the transport): never a whole chunk around them, since the card may be writing
        its other beat meanwhile. Ranges are written in address order."""
        src = as_bytes(data)
        n = src.size
        self._check_logical(addr, n)
        if n == 0:
            return
        self.t.in_run = self._running()
        lo, hi = -(-addr // regs.CHUNK) * regs.CHUNK, (addr + n) // regs.CHUNK * regs.CHUNK
        if hi <= lo:
            self._write_beats(addr, src)
            return
        self._write_beats(addr, src[:lo - addr])
        middle = src[lo - addr:hi - addr]
        if middle.size <= PIPE or self.t.in_run or not self.t.threaded:
            a, b = regs.split(lo, middle, self.chash)
            self._write_pair(lo // 2, a, b)
        else:
            self._pipelined_write(lo, middle)
        self._write_beats(hi, src[hi - addr:])

    def _write_beats(self, addr: int, part: np.ndarray) -> None:
        """A short logical range (edges of a write), beat by beat to the channel holding each."""
        pos = addr
        while pos < addr + part.size:
            stop = min(addr + part.size, (pos // regs.BEAT + 1) * regs.BEAT)
            ch, off = regs.beat_channel(pos, self.chash)
            self.t.mem_write(ch, off, part[pos - addr:stop - addr])
            pos = stop

    def _pipelined_write(self, lo: int, src: np.ndarray) -> None:
        """De-interleave piece i+1 on this thread while a worker DMAs piece i."""
        bufs = self._pipe_buffers(lo)
        with ThreadPoolExecutor(1, thread_name_prefix="otpu-dma") as pool:
            pending = None
            for i, pos in enumerate(range(0, src.size, PIPE)):
                piece = src[pos:pos + PIPE]
                a, b = regs.split(lo + pos, piece, self.chash, out=bufs[i % 2])
                if pending is not None:
                    pending.result()
                off = (lo + pos) // 2
                pending = pool.submit(self._write_pair, off, a, b)
            pending.result()

    def _pipe_buffers(self, lo: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Two pairs of per-channel buffers placed for the channel offsets of a transfer at `lo`,
        kept between transfers (fresh pages would cost a fault each)."""
        half = PIPE // 2
        if self._pipe is None:
            self._pipe = [(placed(half + 4096, 0), placed(half + 4096, 0)) for _ in range(2)]
        views = []
        for pair in self._pipe:
            views.append(tuple(buf[s:s + half] for ch, buf in enumerate(pair)
                               for s in [(regs.axi_address(ch, lo // 2) + DMA_PLACE - buffer_address(buf)) % 4096]))
        return views

    def _write_pair(self, off: int, a: np.ndarray, b: np.ndarray) -> None:
        self.t.mem_write(0, off, a)
        self.t.mem_write(1, off, b)

    def read(self, addr: int, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """Bytes at a logical DRAM address (into `out` when given and the range is chunk-aligned)."""
        self._check_logical(addr, n)
        lo, hi = addr // regs.CHUNK * regs.CHUNK, -(-(addr + n) // regs.CHUNK) * regs.CHUNK
        if out is not None and (lo, hi) == (addr, addr + n) and as_bytes(out).size >= n:
            out = as_bytes(out)[:n]
        else:
            out = placed(hi - lo, 0) if hi - lo >= PIPE else np.empty(hi - lo, np.uint8)
        if hi - lo <= PIPE or not self.t.threaded:
            half = (hi - lo) // 2
            a = self.t.mem_read(0, lo // 2, half)
            b = self.t.mem_read(1, lo // 2, half)
            regs.join(lo, a, b, self.chash, out=out)
        else:
            self._pipelined_read(lo, out)
        return out[addr - lo:addr - lo + n]

    def _pipelined_read(self, lo: int, out: np.ndarray) -> None:
        """A worker reads piece i+1 while this thread interleaves piece i."""
        bufs = self._pipe_buffers(lo)
        starts = list(range(0, out.size, PIPE))

        def fetch(i: int):
            pos = starts[i]
            m = min(PIPE, out.size - pos) // 2
            a, b = bufs[i % 2]
            self.t.mem_read(0, (lo + pos) // 2, m, a[:m])
            self.t.mem_read(1, (lo + pos) // 2, m, b[:m])
            return a[:m], b[:m]

        with ThreadPoolExecutor(1, thread_name_prefix="otpu-dma") as pool:
            pending = pool.submit(fetch, 0)
            for i, pos in enumerate(starts):
                a, b = pending.result()
                pending = pool.submit(fetch, i + 1) if i + 1 < len(starts) else None
                regs.join(lo + pos, a, b, self.chash, out=out[pos:pos + 2 * a.size])

    def scrub(self, force: bool = False, progress: Callable[[int, int], None] | None = None) -> bool:
        """Zero both channels once per configuration, then mark SCRATCH = DRAM_INIT.

        ECC DRAM cannot read a beat that was never written since power-up (the read hangs), so
        a card whose transport says `ecc` is scrubbed before first use. Skipped when SCRATCH
        already holds the marker, unless `force`. Returns whether it scrubbed. `progress(done,
        total)` is called after each block (a full card takes a few seconds)."""
        if not force and (not self.t.ecc or self.reg("SCRATCH") == regs.DRAM_INIT):
            return False
        block = min(SCRUB_BLOCK, self.t.channel_bytes)
        zeros = placed(block, 0)
        zeros[:] = 0
        total, done = self.t.channels * self.t.channel_bytes, 0
        self.t.in_run = self._running()
        for ch in range(self.t.channels):
            for off in range(0, self.t.channel_bytes, block):
                n = min(block, self.t.channel_bytes - off)
                self.t.mem_write(ch, off, zeros[:n])
                done += n
                if progress is not None:
                    progress(done, total)
        self.set_reg("SCRATCH", regs.DRAM_INIT)
        return True

    # -- runs --------------------------------------------------------------------------------------
    def load_program(self, addr: int, words) -> None:
        """Write a program image to DRAM and load it into IMEM (PROG_ADDR, PROG_N, CTRL.LOAD)."""
        image = as_bytes(words)
        if image.size % 32:
            raise UsageError(f"a program image is whole 32-byte instructions, got {image.size} bytes")
        if image.size > self.target.config().IMEM_WORDS * 4:
            raise UsageError(f"program of {image.size // 32} instructions does not fit IMEM "
                             f"({self.target.config().imem_instrs})")
        self.write(addr, image)
        w = self.t.reg_write
        w(regs.off("CTRL"), 0)
        w(regs.off("PROG_ADDR"), addr)
        w(regs.off("PROG_N"), image.size // 32)
        w(regs.off("CTRL"), regs.CTRL_LOAD)
        self.t.poll(regs.off("STATUS"), regs.ST_LOADING, 0, timeout=10)
        if self.status() & regs.ST_AXI_ERR:
            raise DeviceError(f"loading {image.size // 32} instructions from 0x{addr:x} failed (AXI error)",
                              hint=self._with_faults(None))

    def set_args(self, args: Sequence[int]) -> None:
        """Run arguments ARG0..ARG7 (R8..R15 at each run start); only changed ones are written."""
        if len(args) > regs.ARG_COUNT:
            raise UsageError(f"at most {regs.ARG_COUNT} run arguments, got {len(args)}")
        if self.info.regmap >= 2 and not self.info.caps.get("args"):
            raise ConfigMismatch("this bitstream has no ARG registers (CAPS bit25)")
        vals = [int(a) & 0xFFFFFFFF for a in args] + [0] * (regs.ARG_COUNT - len(args))
        for i, v in enumerate(vals):
            if self._args is None or self._args[i] != v or not self.t.keeps_state:
                self.t.reg_write(regs.ARG_BASE + 4 * i, v)
        self._args = vals

    def start(self, trace: str | None = None) -> None:
        """Start the loaded program; `trace` = "first" or "last" records the hardware trace."""
        w = self.t.reg_write
        if trace is not None:
            if trace not in ("first", "last"):
                raise UsageError(f"trace keeps 'first' or 'last' records, not {trace!r}")
            if self.info.regmap < 2 or not self.info.caps.get("trace"):
                raise ConfigMismatch("this bitstream has no trace buffer (CAPS bit0)")
            w(regs.off("TRACE_CTRL"), regs.TR_CLEAR)
            w(regs.off("TRACE_CTRL"), regs.TR_ENABLE | (regs.TR_STOP_WHEN_FULL if trace == "first" else 0))
        self._trace_keep = trace
        w(regs.off("CTRL"), regs.CTRL_CLEAR)
        self.in_run = self.t.in_run = True
        self._run_t0 = time.monotonic()
        w(regs.off("CTRL"), regs.CTRL_RUN)

    def wait(self, timeout: float = 600.0, expect: float = 0.0) -> RunStats:
        """Wait for HALTED, read the run's counters (and trace), raise on ERROR or AXI_ERR."""
        st_off = regs.off("STATUS")
        self.timed_out = False
        try:
            self.t.poll(st_off, regs.ST_HALTED, regs.ST_HALTED, timeout=timeout,
                        expect=max(0.0, expect - (time.monotonic() - self._run_t0)))
        except DeviceError:
            self.timed_out = True
            stopped = self._stop()
            waited = time.monotonic() - self._run_t0
            what = ("the run was stopped" if stopped else
                    f"the core still reports RUN {STOP_WAIT_S:g}s after CTRL=0: host writes stay in "
                    f"{regs.RUN_H2C}-byte calls until it stops")
            raise DeviceError(f"{self.t.dev}: the program did not halt within {waited:.1f}s; {what}",
                              hint=self._with_faults("a loop that never ends, a WAITW nobody answers, or a hung sequencer")) from None
        settle = time.monotonic() + WR_SETTLE
        while not self.status() & regs.ST_WR_IDLE and time.monotonic() < settle:
            pass
        self.in_run = self.t.in_run = False
        names = ("STATUS", *regs.RUN_COUNTER_NAMES)
        vals = dict(zip(names, self.t.reg_read_many([regs.off(n) for n in names])))
        trace = self._read_trace() if self._trace_keep else None
        self._stop()
        st = vals["STATUS"]
        stats = RunStats(vals["CYCLES_LO"] | vals["CYCLES_HI"] << 32, vals["ICOUNT"], vals["B_RD"], vals["B_WR"],
                         vals["A_RD"], vals["SW_WR"], vals["B_STALL"], st, time.monotonic() - self._run_t0, trace)
        if st & regs.ST_ERROR:
            detail = self.t.last_error()
            if st & regs.ST_WAIT_TO:
                raise DeviceError(f"{self.t.dev}: a WAITW timed out" + (f": {detail}" if detail else ""),
                                  hint=self._with_faults(None))
            raise UsageError(f"{self.t.dev}: the card stopped on an illegal instruction" + (f": {detail}" if detail else ""),
                             hint=self._with_faults(None))
        if st & regs.ST_AXI_ERR:
            detail = self.t.last_error()
            raise DeviceError(f"{self.t.dev}: the memory path reported an error (AXI_ERR)" + (f": {detail}" if detail else ""),
                              hint=self._with_faults(None))
        if self.t.devname is not None:
            update_status(self.t.devname, last_cycles=stats.cycles, last_run=time.time(),
                          core_khz=self.info.core_khz)
        return stats

    def run(self, timeout: float = 600.0, trace: str | None = None, expect: float = 0.0) -> RunStats:
        self.start(trace)
        return self.wait(timeout, expect)

    def _stop(self) -> bool:
        """Clear RUN and wait (up to STOP_WAIT_S) until the core says it stopped. Until STATUS RUN
        clears, the card is still running: every host write keeps to the run-time rule (at most
        RUN_H2C per call), as `write` decides from STATUS. Returns whether it stopped."""
        self.t.reg_write(regs.off("CTRL"), 0)
        if self._trace_keep:
            self.t.reg_write(regs.off("TRACE_CTRL"), 0)
            self._trace_keep = None
        deadline = time.monotonic() + STOP_WAIT_S
        while (st := self.status()) & regs.ST_RUN and not st & regs.ST_HALTED:
            if time.monotonic() >= deadline:
                self.in_run = False
                self.t.in_run = True
                return False
            time.sleep(0.002)
        self.in_run = self.t.in_run = False
        return True

    def _read_trace(self) -> dict[str, Any]:
        rd, w = self.t.reg_read, self.t.reg_write
        self.t.poll(regs.off("TRACE_CTRL"), regs.TR_BUSY, 0, timeout=1)
        count, drop = rd(regs.off("TRACE_COUNT")), rd(regs.off("TRACE_DROP"))
        depth = self.info.caps["trace_depth"]
        keep = self._trace_keep
        n = min(count, depth)
        start = count % depth if keep == "last" and count > depth else 0
        w(regs.off("TRACE_ADDR"), start)
        words = self.t.reg_read_many([o for _ in range(n) for o in (regs.off("TRACE_LO"), regs.off("TRACE_HI"))])
        lo = np.array(words[0::2], dtype=np.uint64)
        hi = np.array(words[1::2], dtype=np.uint64)
        return {"records": lo | (hi << np.uint64(32)), "count": count, "drop": drop, "depth": depth, "keep": keep,
                "wrapped": keep == "last" and count > depth, "lost": max(0, count - depth)}

    # -- lifetime ----------------------------------------------------------------------------------
    def close(self) -> None:
        if self.in_run:
            self._stop()
        self.t.close()

    def __enter__(self) -> "Board": return self

    def __exit__(self, *exc) -> None: self.close()



# Backends ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prepared:
    """A program encoded once (on a compile thread, ahead of its run): image words and length, and
    its WAITC table (None: none; only a SEQ_WC target schedules by it)."""
    image: np.ndarray
    instructions: int
    waits: tuple | None = None


def prepare(program, waits: Sequence | None = None) -> Prepared:
    """Instructions, assembly text or an image -> a Prepared program (idempotent); `waits` is its
    WAITC table, one entry per instruction (a compiled program's `waits`)."""
    if isinstance(program, Prepared) and waits is None:
        return program
    from . import isa
    if isinstance(program, Prepared):
        program = isa.decode_program(program.image.view(np.uint32))
    elif isinstance(program, str):
        from .asm import assemble
        program = assemble(program)
    elif isinstance(program, (bytes, bytearray, memoryview, np.ndarray)):
        program = isa.decode_program(as_bytes(program).view(np.uint32))   # validates the image
    program = list(program)
    if waits is not None and len(waits) != len(program):
        raise UsageError(f"the wait table has {len(waits)} entries for {len(program)} instructions")
    image = np.frombuffer(isa.encode_program(program), dtype=np.uint8)
    return Prepared(image, image.size // 32, tuple(waits) if waits is not None else None)


def check_features(cfg, caps_or_cfg: dict[str, bool], where: str) -> None:
    for name in ("PAIR", "DSTEP", "STREAM"):
        if getattr(cfg, name) and not caps_or_cfg.get(name.lower()):
            raise ConfigMismatch(f"the program is compiled with {name} but {where} has none")


class IsaBackend:
    """The golden simulator behind the Backend interface; its DRAM may be a caller's buffer (adopted)."""

    def __init__(self, target: str | target_mod.Target | None = None, dram: np.ndarray | None = None,
                 timing: bool = True):
        """`timing=False` skips the timing model (no cycles or counters; results are the same bits)."""
        from .isasim import Machine
        self.target = target if isinstance(target, target_mod.Target) else target_mod.load(target)
        self.cfg = self.target.config()
        self.machine = Machine(self.target, drams=[dram] if dram is not None else None, timing=timing)
        self._t0 = 0.0

    def attach(self, cfg) -> None:
        """Refuse a program compiled for features this target lacks."""
        check_features(cfg, {k.lower(): getattr(self.cfg, k) for k in ("PAIR", "DSTEP", "STREAM")},
                        f"target {self.target.name}")

    def write(self, addr: int, data) -> None: self.machine.write_dram(addr, as_bytes(data))

    def read(self, addr: int, n: int) -> np.ndarray: return self.machine.read_dram(addr, n)

    def prepare(self, program, waits: Sequence | None = None) -> Prepared: return prepare(program, waits)

    def start(self, program, args: Sequence[int] | None = None) -> None:
        from . import isa
        prog = prepare(program)
        self.machine.load(isa.decode_program(prog.image.view(np.uint32)), args, waits=prog.waits)
        self._t0 = time.monotonic()

    def poll(self, budget: int = 1024) -> bool:
        """Run up to `budget` instructions; True while the program has not halted (a WAITW the
        host has not answered yet leaves it running, as on a card)."""
        from .isasim import HALTED
        if self.machine.halted:
            return False
        self.machine.wait_for_host = True
        try:
            return self.machine.run_for(budget) != HALTED
        finally:
            self.machine.wait_for_host = False

    def counters(self) -> dict[str, int]: return dict(self.machine.counters())

    def wait(self, timeout: float = 600.0) -> RunStats:
        self.machine.run()
        c = self.machine.counters()
        return RunStats(c.get("CYCLES", 0), c.get("ICOUNT", 0), c.get("B_RD", 0), c.get("B_WR", 0), c.get("A_RD", 0),
                        c.get("SW_WR", 0), c.get("B_STALL", 0), regs.ST_HALTED | regs.ST_WR_IDLE,
                        time.monotonic() - self._t0)

    def run(self, program, args: Sequence[int] | None = None, timeout: float = 600.0) -> RunStats:
        self.start(program, args)
        return self.wait(timeout)

    def close(self) -> None: pass


class BoardBackend:
    """A card behind the Backend interface: programs live in a program area at the top of DRAM."""

    def __init__(self, board: Board, prog_at: int | None = None):
        self.board = board
        self.cfg = board.target.config()
        area = self.cfg.IMEM_WORDS * 4
        self.prog_at = prog_at if prog_at is not None else (board.dram_bytes - area) // 4096 * 4096
        if self.prog_at < 0 or self.prog_at + area > board.dram_bytes or self.prog_at % regs.CHUNK:
            raise UsageError(f"program area at 0x{self.prog_at:x} ({area} bytes) does not fit the card's DRAM")
        self._resident: Prepared | None = None
        self._started: Prepared | None = None
        self._expect: dict[int, float] = {}      # program length -> seconds its last run took
        board.scrub()

    def attach(self, cfg) -> None:
        """Refuse a program compiled for features this bitstream lacks (CAPS PAIR / DSTEP / STREAM)."""
        check_features(cfg, self.board.info.caps, f"the bitstream on {self.board.t.dev}")

    def write(self, addr: int, data) -> None: self.board.write(addr, data)

    def read(self, addr: int, n: int) -> np.ndarray: return self.board.read(addr, n)

    def prepare(self, program, waits: Sequence | None = None) -> Prepared:
        """As IsaBackend.prepare; CTRL.LOAD reads instructions only, so a card runs a loaded program
        without its wait table (a HALT CHAIN image carries one)."""
        return prepare(program, waits)

    def start(self, program, args: Sequence[int] | None = None) -> None:
        prog = prepare(program)
        if prog is not self._resident or not self.board.t.keeps_state:
            self.board.load_program(self.prog_at, prog.image)
            self._resident = prog
        if args is not None:
            self.board.set_args(args)
        self._started = prog
        self.board.start()

    def wait(self, timeout: float = 600.0) -> RunStats:
        """As Board.wait, polling around when a program of this length last finished (the poll
        then sleeps through the run and spins only at its end)."""
        n = self._started.instructions if self._started is not None else 0
        stats = self.board.wait(timeout, expect=self._expect.get(n, 0.0))
        self._expect[n] = stats.seconds
        return stats

    def run(self, program, args: Sequence[int] | None = None, timeout: float = 600.0) -> RunStats:
        self.start(program, args)
        return self.wait(timeout)

    def poll(self, budget: int = 0) -> bool:
        """True while the started program has not halted (one STATUS read)."""
        return not self.board.status() & regs.ST_HALTED

    def counters(self) -> dict[str, int] | None: return self.board.snapshot()

    def close(self) -> None: self.board.close()
