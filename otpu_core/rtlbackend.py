"""`RtlBackend`: the RTL under Verilator behind the Backend interface of `IsaBackend` and
`BoardBackend` (attach, write, read, prepare, start, wait, run, counters, close), so the same
programs and the same DRAM image run on it unchanged.

The backend keeps the machine's state between runs as a card does: DRAM (a numpy buffer, adopted
when the caller passes one), TMEM and the ACT RAM. Each run writes the non-zero DRAM beats, TMEM
and ACT RAM to files, runs the simulator built for the target (`rtlsim.build`, cached), and reads
back every DRAM beat the run wrote, TMEM, the ACT RAM and the run's counters. Programs live in a
program area at the top of DRAM, as on a card; on a SEQ_WC target the wait table follows the
instructions (a program without one gets `sync` entries: each instruction waits for every older
one, the safe order for hand-written programs).

`rtl_sources()` is the RTL in build order (`Target.sources()` names the same files);
`build_for(target)` the simulator of a target; `RtlError` when a target cannot be built or a
run fails, `RtlFault` (an `RtlError`) when the program stopped the machine with an error: the
faulting instruction's pc and disassembly, as the golden simulator's `SimError` names them.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from . import isa, rtlsim
from .asm import disasm_one
from . import target as target_mod
from .board import RunStats, check_features
from .card import regs
from .rtlsim import RtlError

TB_TOP = "otpu_tb"
MODEL_DRAM_MAX = 64 << 20         # the testbench DRAM model holds at most this much
# error codes of rtl/core/otpu_defs.svh
ERRORS = {1: "illegal opcode", 2: "TMEM or DRAM range", 3: "DRAM range", 4: "shape", 5: "unsupported by the RTL",
          6: "loop", 7: "HALT CHAIN or program length", 8: "WAITW timeout", 9: "ran past the end of the program"}
RUN_TIMEOUT_S = 1800.0


class RtlFault(RtlError):
    """The RTL stopped on an error: `code` (otpu_defs.svh), its `name`, the faulting instruction's
    `pc` and `disasm` (None when pc is outside the program, or the program chains: the pc may be
    in a program the backend did not load)."""

    def __init__(self, code: int, pc: int, instrs: Sequence[isa.Instr]):
        self.code, self.pc, self.name = code, pc, ERRORS.get(code, str(code))
        chains = any(i.op == isa.Op.HALT and i.has(isa.F_CHAIN) for i in instrs)
        self.disasm = disasm_one(instrs[pc]) if 0 <= pc < len(instrs) and not chains else None
        super().__init__(f"the RTL stopped with an error at pc {pc}" + (f" ({self.disasm})" if self.disasm else "") +
                         f": {self.name}")
SYNC = isa.WaitEntry(sync=True)
# the testbench's run statistics that count, under the names of the card's counters
COUNTERS = {"cycles": "CYCLES", "icount": "ICOUNT", "dram_read_beats": "B_RD", "dram_write_beats": "B_WR"}


def tb_sources(target: target_mod.Target) -> list[Path]:
    return [*target.sources(), rtlsim.RTL_DIR / "tb" / "otpu_dram_model.sv", rtlsim.RTL_DIR / "tb" / "otpu_tb.sv"]


def tb_params(target: target_mod.Target) -> dict[str, int]:
    """The testbench's parameters: the core's (rtl_params) and the DRAM model's."""
    p = target.rtl_params()
    core = {k: int(p[k]) for k in target_mod.RTL_CORE_PARAMS}
    dram = min(target.config().DRAM_BYTES, MODEL_DRAM_MAX)
    core["DRAM_LOG2"] = dram.bit_length() - 1
    core["DRAM_LATENCY"] = int(p["DRAM_LATENCY"])
    core["DRAM_RATE_Q8"] = int(round(p["DRAM_BYTES_PER_CYCLE"] * p["DRAM_EFFICIENCY"] * 256))
    return core


def build_for(target: target_mod.Target | str | None = None, defines: dict | None = None, progress=None) -> rtlsim.Build:
    t = target if isinstance(target, target_mod.Target) else target_mod.load(target)
    target_mod.check_rtl_buildable(t)
    return rtlsim.build(TB_TOP, tb_sources(t), tb_params(t), defines, progress=progress)


@dataclass(frozen=True)
class RtlProgram:
    """A program encoded for the RTL: the image (instructions, then the wait table on SEQ_WC)."""
    image: np.ndarray
    instructions: int
    instrs: tuple
    waits: tuple | None


class RtlBackend:
    """The RTL of a target under Verilator; state (DRAM, TMEM, ACT RAM) persists across runs."""

    def __init__(self, target: str | target_mod.Target | None = None, dram: np.ndarray | None = None,
                 defines: dict | None = None, progress=None, max_cycles: int = 200_000_000):
        self.target = target if isinstance(target, target_mod.Target) else target_mod.load(target)
        self.cfg = self.target.config()
        self.build = build_for(self.target, defines, progress)
        self.params = tb_params(self.target)
        self.dram_bytes = 1 << self.params["DRAM_LOG2"]
        if dram is None:
            dram = np.zeros(self.dram_bytes, np.uint8)
        if dram.dtype != np.uint8 or dram.ndim != 1 or dram.size < self.dram_bytes:
            raise RtlError(f"the DRAM buffer must be a 1-D uint8 array of at least {self.dram_bytes} bytes")
        self.dram = dram
        self.beat = self.params["DRAM_BYTES_PER_CYCLE"]
        rows = self.cfg.act_rows
        self.tmem = np.zeros(self.cfg.TMEM_WORDS, np.uint32)
        self.act_q = np.zeros((rows, self.cfg.ACT_BLOCKS * self.cfg.D), np.int8)
        self.act_scale = np.zeros((rows, self.cfg.ACT_BLOCKS), np.uint32)
        self.act_sub = np.zeros((rows, self.cfg.ACT_BLOCKS), np.uint16)
        per_instr = isa.BYTES_PER_INSTR + (8 if self.cfg.SEQ_WC else 0)
        self.prog_at = (self.dram_bytes - per_instr * self.cfg.imem_instrs) // 4096 * 4096
        self.max_cycles = max_cycles
        self.args = [0] * isa.NARGS
        self.last: dict[str, int] = {}
        self.totals = dict.fromkeys(COUNTERS.values(), 0)
        self.seconds = 0.0
        self._started: RtlProgram | None = None

    # -- the Backend interface -------------------------------------------------------------------
    def attach(self, cfg) -> None:
        """Refuse a program compiled for features this target lacks."""
        check_features(cfg, {k.lower(): getattr(self.cfg, k) for k in ("PAIR", "DSTEP", "STREAM")},
                        f"target {self.target.name}")

    def write(self, addr: int, data) -> None:
        raw = np.ascontiguousarray(np.asarray(data) if not isinstance(data, (bytes, bytearray, memoryview))
                                   else np.frombuffer(bytes(data), np.uint8)).reshape(-1).view(np.uint8)
        if addr < 0 or addr + raw.size > self.dram_bytes:
            raise RtlError(f"DRAM write [0x{addr:x}, 0x{addr + raw.size:x}) outside the RTL model's {self.dram_bytes} bytes")
        self.dram[addr: addr + raw.size] = raw

    def read(self, addr: int, n: int) -> np.ndarray:
        if addr < 0 or addr + n > self.dram_bytes:
            raise RtlError(f"DRAM read [0x{addr:x}, 0x{addr + n:x}) outside the RTL model's {self.dram_bytes} bytes")
        return self.dram[addr: addr + n].copy()

    def prepare(self, program, waits: Sequence | None = None) -> RtlProgram:
        """Instructions, assembly text, an image or a compiled `ol` Program (which brings its wait
        table) -> an RtlProgram. `waits` overrides the wait table."""
        if isinstance(program, RtlProgram):
            return program
        from .isasim import program_and_waits
        if hasattr(program, "instrs") and hasattr(program, "waits"):
            instrs, table = list(program.instrs), program.waits
        else:
            instrs, table = program_and_waits(program)
        if waits is not None:
            table = list(waits)
        if len(instrs) > self.cfg.imem_instrs:
            raise RtlError(f"a program of {len(instrs)} instructions does not fit IMEM ({self.cfg.imem_instrs})")
        if self.cfg.SEQ_WC:
            entries = [w or isa.NO_WAIT for w in table] if table is not None else [SYNC] * len(instrs)
            image = isa.encode_program(instrs, entries)
            table = tuple(entries)
        else:
            image = isa.encode_program(instrs)
            table = None
        return RtlProgram(np.frombuffer(image, np.uint8).copy(), len(instrs), tuple(instrs), table)

    def start(self, program, args: Sequence[int] | None = None) -> None:
        prog = self.prepare(program)
        if args is not None:
            args = [int(a) & 0xFFFFFFFF for a in args]
            self.args = args + [0] * (isa.NARGS - len(args))
        self.write(self.prog_at, prog.image)
        self._started = prog

    def wait(self, timeout: float = RUN_TIMEOUT_S) -> RunStats:
        if self._started is None:
            raise RtlError("wait() without start()")
        prog, self._started = self._started, None
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="otpu-rtl-") as tmp:
            d = Path(tmp)
            self._write_inputs(d)
            plus = {"image": d / "image.bin", "tmem": d / "tmem.bin", "act": d / "act.bin", "out": d / "out",
                    "prog_addr": f"{self.prog_at:x}", "prog_n": prog.instructions, "max_cycles": self.max_cycles}
            plus.update({f"arg{i}": f"{a:x}" for i, a in enumerate(self.args)})
            rtlsim.run(self.build.exe, plus, timeout=timeout)
            stats = self._read_outputs(d / "out")
        self.seconds = time.monotonic() - t0
        self.last = stats
        for key, name in COUNTERS.items():
            self.totals[name] += stats[key]
        if stats["dram_range_error"]:
            raise RtlError(f"the run accessed DRAM outside the RTL model's {self.dram_bytes} bytes")
        if stats["error"]:
            raise RtlFault(stats["error"], stats["error_pc"], prog.instrs)
        if not stats["halted"]:
            raise RtlError(f"the program did not halt within {self.max_cycles} cycles")
        beats = self.beat // 64 if self.beat >= 64 else 1
        return RunStats(stats["cycles"], stats["icount"], stats["dram_read_beats"] * beats, stats["dram_write_beats"] * beats,
                        0, 0, 0, regs.ST_HALTED | regs.ST_WR_IDLE, self.seconds)

    def run(self, program, args: Sequence[int] | None = None, timeout: float = RUN_TIMEOUT_S) -> RunStats:
        self.start(program, args)
        return self.wait(timeout)

    def counters(self) -> dict[str, int]:
        """The counts of every run since the backend was made, as a card's counters accumulate."""
        return dict(self.totals)

    def close(self) -> None: pass

    # -- files --------------------------------------------------------------------------------------
    def _write_inputs(self, d: Path) -> None:
        bb = self.beat
        beats = self.dram[: self.dram_bytes].reshape(-1, bb)
        live = np.flatnonzero(beats.any(axis=1))
        with open(d / "image.bin", "wb") as f:
            if live.size:
                cuts = np.flatnonzero(np.diff(live) != 1) + 1
                for seg in np.split(live, cuts):
                    f.write(np.array([seg[0], seg.size], ">u4").tobytes())
                    f.write(np.ascontiguousarray(beats[seg[0]: seg[-1] + 1, ::-1]).tobytes())
        (d / "tmem.bin").write_bytes(self.tmem.astype(">u4").tobytes())
        rows, blocks, dd = self.act_q.shape[0], self.cfg.ACT_BLOCKS, self.cfg.D
        q = self.act_q.view(np.uint8).reshape(rows, blocks, dd).view("<u4").reshape(rows, blocks, dd // 4)
        rec = np.concatenate([q, self.act_scale[..., None], self.act_sub.astype(np.uint32)[..., None]], axis=2)
        (d / "act.bin").write_bytes(rec.astype(">u4").tobytes())

    def _read_outputs(self, prefix: Path) -> dict[str, int]:
        bb = self.beat
        raw = np.fromfile(str(prefix) + ".dram", np.uint8)
        if raw.size:
            recs = raw.reshape(-1, 4 + bb)
            idx = recs[:, :4].copy().view("<u4").reshape(-1)
            self.dram[: self.dram_bytes].reshape(-1, bb)[idx] = recs[:, 4:]
        self.tmem[:] = np.fromfile(str(prefix) + ".tmem", "<u4")
        rows, blocks, dd = self.act_q.shape[0], self.cfg.ACT_BLOCKS, self.cfg.D
        rec = np.fromfile(str(prefix) + ".act", "<u4").reshape(rows, blocks, dd // 4 + 2)
        self.act_q[:] = np.ascontiguousarray(rec[..., : dd // 4]).view(np.int8).reshape(rows, blocks * dd)
        self.act_scale[:] = rec[..., dd // 4]
        self.act_sub[:] = rec[..., dd // 4 + 1].astype(np.uint16)
        stats = {}
        for line in Path(str(prefix) + ".stats").read_text().splitlines():
            key, value = line.split()
            stats[key] = int(value)
        return stats
