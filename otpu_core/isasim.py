"""The golden ISA simulator: `Slice` and `Machine`, every opcode exactly as the reference states.

The simulator is the specification: compiler, simulated card, RTL and real card must match its
TMEM and DRAM bits. It executes in program order (each instruction's writes are visible before
the next starts); the optional `TimingModel` (otpu_core/timing.py) schedules the same stream on
the target's units to give cycles, counters and trace records.

- `Slice`: 16 registers (R0 reads 0; R8..R15 = ARG0..ARG7 at each run start), IMEM (decoded
  program), DRAM (a numpy uint8 buffer the caller may supply, e.g. an np.memmap of a sparse
  file), TMEM, ACT RAM with scales, a 4-deep hardware loop stack.
- `Machine`: S slices, BAR and GATHER across them, WAITW with a host callback, HALT CHAIN
  (a new program from DRAM, keeping TMEM, ACT RAM, DRAM and the arguments).

Hooks for the simulated card: `Machine.run_for(n)` runs at most n instructions and returns
(so another process can watch counters move), `Machine.step()` one instruction,
`Machine.on_step(slice, pc, instr)` a callback after each instruction, `Machine.counters()`.

Errors are `SimError`s naming slice, pc, the disassembled instruction and the reason.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import isa, mxu
from .isa import Instr, IsaError, Op
from .sim import matrix, vector
from .sim.costs import work_of
from .sim.fault import Fault, SimError
from .sim.memory import ActRam, Dram, Tmem
from .target import Config, Target
from .target import load as load_target
from .timing import TimingModel

__all__ = ["Machine", "Slice", "SimError", "Fault", "RUNNING", "HALTED", "WAITING", "POLLING"]

MASK32 = 0xFFFFFFFF
RUNNING, HALTED, WAITING, POLLING = "running", "halted", "waiting", "polling"
DEFAULT_MAX_STEPS = 10_000_000


def _disasm(ins: Instr) -> str:
    from .asm import disasm_one
    return disasm_one(ins)


def as_program(program: Sequence[Instr] | bytes | np.ndarray | str) -> list[Instr]:
    """The instructions of a program given as instructions, an image (bytes / uint32 words) or
    assembly text."""
    return program_and_waits(program)[0]


def program_and_waits(program: Sequence[Instr] | bytes | np.ndarray | str) -> tuple[list[Instr], list | None]:
    """(instructions, WAITC wait entries or None) from instructions, a program image (bytes /
    uint32 words) or assembly text (whose `!` entries become the wait table)."""
    if isinstance(program, str):
        from .asm import parse
        prog = parse(program)
        return prog.instrs, prog.waits
    if isinstance(program, (bytes, bytearray, memoryview, np.ndarray)):
        try:
            return isa.decode_program(program), None
        except IsaError as e:     # names the instruction index and word
            raise SimError("illegal-opcode", e.message, hint=e.hint) from None
    return list(program), None


class Slice:
    """One slice: sequencer state and memories."""

    def __init__(self, cfg: Config, sid: int = 0, dram: np.ndarray | None = None):
        self.cfg, self.sid = cfg, sid
        self.dram = Dram(cfg.DRAM_BYTES, dram)
        self.tmem = Tmem(cfg.TMEM_WORDS)
        self.act = ActRam(cfg.act_rows, cfg.ACT_BLOCKS, cfg.D)
        self.args = [0] * isa.NARGS
        self.regs = [0] * isa.NREGS
        self.prog: list[Instr] = []
        self.waits: list | None = None        # WAITC entries (SEQ_WC targets)
        self.pc = 0
        self.loops: list[list[int]] = []      # [start, end, remaining] per active loop
        self.state = HALTED
        self.chain: tuple[int, int] | None = None
        self.icount = 0                       # instructions executed, over every run
        self.stalls = 0                       # WAITWs that had to wait
        self.polls = 0                        # failed polls of the current WAITW
        self.chains = 0
        self.timing: TimingModel | None = None
        self.wcache = mxu.WeightCache()

    # -- runs -------------------------------------------------------------------------------------
    def set_args(self, args: Sequence[int] | None) -> None:
        args = list(args or [])
        if len(args) > isa.NARGS:
            raise SimError("shape", f"at most {isa.NARGS} run arguments, got {len(args)}")
        self.args = [int(a) & MASK32 for a in args] + [0] * (isa.NARGS - len(args))

    def start(self, program: Sequence[Instr], new_run: bool = True, waits: Sequence | None = None) -> None:
        """Start a program: registers from the arguments, pc 0, empty loop stack; memories stay.
        A HALT CHAIN (new_run=False) continues the run: its counters keep counting. `waits` is
        the WAITC table; on a SEQ_WC target it replaces the scoreboard in the timing model."""
        if len(program) > self.cfg.imem_instrs:
            raise SimError("out-of-range", f"slice {self.sid}: program of {len(program)} instructions "
                                           f"does not fit IMEM ({self.cfg.imem_instrs})")
        if waits is not None and len(waits) != len(program):
            raise SimError("shape", f"slice {self.sid}: {len(waits)} wait entries for {len(program)} instructions")
        self.prog = list(program)
        self.waits = [w or isa.NO_WAIT for w in waits] if waits is not None and self.cfg.SEQ_WC else None
        self.regs = [0] * isa.ARG0 + list(self.args)
        self.pc, self.loops, self.chain, self.polls = 0, [], None, 0
        self.state = RUNNING if self.prog else HALTED
        if self.timing is not None:
            if new_run:
                self.timing.reset_run(self.sid)
            table = 8 * len(self.prog) if self.waits is not None else 0
            self.timing.load_program(self.sid, isa.BYTES_PER_INSTR * len(self.prog) + table)

    def error(self, f: Fault, pc: int | None = None) -> SimError:
        pc = self.pc if pc is None else pc
        text = _disasm(self.prog[pc]) if 0 <= pc < len(self.prog) else None
        return SimError(f.kind, f.reason, self.sid, pc, text)

    # -- sequencing -------------------------------------------------------------------------------
    def advance(self) -> None:
        """After every instruction but LOOP: close or repeat the innermost loop ending here, pc += 1."""
        loops = self.loops
        if loops and loops[-1][1] == self.pc:
            top = loops[-1]
            if top[2] > 1:
                top[2] -= 1
                self.pc = top[0]
                return
            loops.pop()      # no outer body ends here: that is refused when the outer LOOP runs
        self.pc += 1

    def step(self) -> Instr:
        """Execute the instruction at pc (state must be RUNNING or POLLING)."""
        pc = self.pc
        if pc >= len(self.prog):
            raise self.error(Fault("program-end", f"ran past the end of the program ({len(self.prog)} "
                                                  "instructions) without HALT"), pc=len(self.prog) - 1)
        ins = self.prog[pc]
        try:
            EXEC[ins.op](self, ins)
        except Fault as f:
            raise self.error(f, pc) from None
        if self.state not in (WAITING, POLLING):
            self.icount += 1
        return ins

    def resolved(self, ins: Instr) -> list[int]:
        return ins.resolve(self.regs)

    def issue(self, ins: Instr, w: list[int], **cost) -> None:
        if self.timing is not None:
            self.timing.issue(self.sid, self.pc, int(ins.op), (w[1], w[2], w[3]),
                              work_of(ins, w, self.cfg, self.timing.ua, **cost),
                              wait=self.waits[self.pc] if self.waits is not None else None)


# -- sequencer instructions ---------------------------------------------------------------------
def _nop(sl: Slice, ins: Instr) -> None:
    sl.issue(ins, list(ins.words))
    sl.advance()


def _li(sl: Slice, ins: Instr) -> None:
    if ins.rd:
        sl.regs[ins.rd] = ins.words[1]
    sl.issue(ins, list(ins.words))
    sl.advance()


def _addi(sl: Slice, ins: Instr) -> None:
    if ins.rd:
        sl.regs[ins.rd] = (sl.regs[ins.ra] + ins.words[1]) & MASK32
    sl.issue(ins, list(ins.words))
    sl.advance()


def _loop(sl: Slice, ins: Instr) -> None:
    w = sl.resolved(ins)
    body, count = w[1], w[2]
    if body < 1:
        raise Fault("loop-end", "LOOP body must be at least one instruction")
    end = sl.pc + body
    if any(lp[1] == end for lp in sl.loops):
        raise Fault("loop-end", f"nested loop bodies end on the same instruction (pc {end})")
    sl.issue(ins, w)
    if count == 0:
        sl.pc = end + 1
        return
    if len(sl.loops) >= isa.LOOP_DEPTH:
        raise Fault("loop-depth", f"hardware loops nest at most {isa.LOOP_DEPTH} deep")
    sl.loops.append([sl.pc + 1, end, count])
    sl.pc += 1


def _halt(sl: Slice, ins: Instr) -> None:
    if ins.has(isa.F_CHAIN):
        sl.chain = (sl.regs[ins.ra], sl.regs[ins.rb])
    if sl.timing is not None:
        sl.timing.halt(sl.sid, final=sl.chain is None)
    sl.state = HALTED


def _rld(sl: Slice, ins: Instr) -> None:
    w = sl.resolved(ins)
    addr = w[1]
    sl.tmem.check(addr, 1, "RLD")
    v = int(sl.tmem.t[addr])
    if not ins.has(isa.F_RAW):
        v = isa.f2i(v)
    if ins.has(isa.F_MUL):
        v = (v * w[2]) & MASK32
    if ins.rd:
        sl.regs[ins.rd] = v
    if sl.timing is not None:
        sl.timing.rld(sl.sid, sl.pc, int(ins.op), addr)
    sl.advance()


def _collective(sl: Slice, ins: Instr) -> None:
    sl.state = WAITING        # the Machine resolves BAR / GATHER when every live slice waits


def _waitw(sl: Slice, ins: Instr) -> None:
    w = sl.resolved(ins)
    v = sl.dram.word(w[1], "WAITW")
    f = ins.fields
    if not isa.waitw_holds(v, w[3], f["cmp"], f["mask"]):
        if sl.polls == 0:
            sl.stalls += 1
        sl.polls += 1
        if f["timeout"] and sl.polls * max(f["interval"], 1) >= f["timeout"]:
            raise Fault("waitw-timeout", f"WAITW timed out after {sl.polls} polls of DRAM 0x{w[1]:x} "
                                         f"(word 0x{v:08x}, timeout {f['timeout']} cycles)")
        sl.state = POLLING
        return
    sl.tmem.check(w[2], 1, "WAITW")
    sl.tmem.t[w[2]] = v
    sl.issue(ins, w, polls=sl.polls)
    sl.polls = 0
    sl.state = RUNNING
    sl.advance()


# -- DMA -----------------------------------------------------------------------------------------
def _ld(sl: Slice, ins: Instr) -> None:
    w = sl.resolved(ins)
    n = w[3]
    sl.tmem.check(w[2], n, "LD")
    data = sl.dram.read_words(w[1], n, "LD")
    sl.tmem.t[w[2]: w[2] + n] = data
    sl.issue(ins, w)
    sl.advance()


def _st(sl: Slice, ins: Instr) -> None:
    w = sl.resolved(ins)
    n = w[3]
    data = sl.tmem.read(w[2], n, "ST")
    sl.dram.write_words(w[1], data, "ST")
    sl.issue(ins, w)
    sl.advance()


def _unit_op(fn: Callable) -> Callable[[Slice, Instr], None]:
    """An opcode whose semantics live in sim/vector.py or sim/matrix.py."""
    def run(sl: Slice, ins: Instr) -> None:
        w = sl.resolved(ins)
        cost = fn(sl, ins, w)
        sl.issue(ins, w, **(cost or {}))
        sl.advance()
    run.__name__ = fn.__name__
    return run


EXEC: dict[Op, Callable[[Slice, Instr], None]] = {
    Op.NOP: _nop, Op.HALT: _halt, Op.LI: _li, Op.ADDI: _addi, Op.LOOP: _loop, Op.BAR: _collective,
    Op.RLD: _rld, Op.WAITW: _waitw, Op.LD: _ld, Op.ST: _st, Op.DSTEP: _unit_op(vector.dstep),
    Op.STREAM: _unit_op(vector.stream), Op.MM: _unit_op(matrix.mm), Op.QACT: _unit_op(matrix.qact),
    Op.QST: _unit_op(matrix.qst), Op.VOP: _unit_op(vector.vop), Op.GATHER: _collective,
}


class Machine:
    """S slices run in lock-step at collectives; `run`, `run_for`, `step` drive them."""

    def __init__(self, target: Target | str | None = None, programs=None, drams: Sequence[np.ndarray | None] | None = None,
                 args: Sequence[int] | None = None, cfg: Config | None = None, timing: bool = True,
                 trace: bool = False, host: Callable[["Machine"], None] | None = None,
                 max_steps: int = DEFAULT_MAX_STEPS):
        self.target = target if isinstance(target, Target) else load_target(target)
        self.cfg = cfg or self.target.config()
        drams = list(drams) if drams is not None else [None] * self.cfg.S
        if len(drams) != self.cfg.S:
            raise SimError("shape", f"{len(drams)} DRAM buffers for {self.cfg.S} slices")
        self.slices = [Slice(self.cfg, s, d) for s, d in enumerate(drams)]
        self.timing = TimingModel(self.target, self.cfg.S, trace=trace) if timing else None
        for sl in self.slices:
            sl.timing = self.timing
        self.host = host
        self.max_steps = max_steps
        self.steps = 0
        self.on_step: Callable[[Slice, int, Instr], None] | None = None
        # True: run_for returns POLLING when only WAITWs remain and the host callback (if any)
        # changed nothing, instead of raising the WAITW timeout (a card whose host is another
        # process retries later and applies the cycle timeout itself).
        self.wait_for_host = False
        # Host calls in a row that may leave every WAITW failing before it is a timeout (the
        # reference gives the host one chance); a WAITW's own timeout field also applies.
        self.host_patience = 1
        self._idle_host_calls = 0
        if programs is not None:
            self.load(programs, args)

    # -- programs ---------------------------------------------------------------------------------
    def load(self, programs, args: Sequence[int] | None = None, waits: Sequence | None = None) -> None:
        """Start new programs (one for all slices, or one per slice); DRAM, TMEM, ACT RAM stay.
        `args` (ARG0..ARG7) persist across runs until set again. `waits`: the WAITC table of a
        single program (assembly text carries its own)."""
        per_slice = isinstance(programs, (list, tuple)) and programs and not isinstance(programs[0], Instr)
        progs = [program_and_waits(p) for p in (programs if per_slice else [programs] * self.cfg.S)]
        if len(progs) != self.cfg.S:
            raise SimError("shape", f"{len(progs)} programs for {self.cfg.S} slices")
        for sl, (prog, table) in zip(self.slices, progs):
            if args is not None:
                sl.set_args(args)
            sl.start(prog, waits=waits if waits is not None else table)
        self.steps = self._idle_host_calls = 0

    def set_args(self, args: Sequence[int]) -> None:
        for sl in self.slices:
            sl.set_args(args)

    @property
    def halted(self) -> bool:
        return all(sl.state == HALTED for sl in self.slices)

    def _chain(self, sl: Slice) -> None:
        """HALT CHAIN: fetch the next program from the slice's DRAM and start it."""
        addr, n = sl.chain
        halt_pc = sl.pc
        try:
            if addr % self.cfg.D:
                raise Fault("misaligned", f"HALT CHAIN program address 0x{addr:x} is not a multiple of D={self.cfg.D}")
            if not 0 < n <= self.cfg.imem_instrs:
                raise Fault("chain", f"HALT CHAIN program length {n} is not in 1..{self.cfg.imem_instrs}")
            size = (isa.BYTES_PER_INSTR + (8 if self.cfg.SEQ_WC else 0)) * n   # SEQ_WC: the wait table follows
            sl.dram.check(addr, size, 4, "HALT CHAIN")
            try:
                prog, waits = isa.split_image(sl.dram.bytes[addr: addr + size].tobytes(), n, self.cfg.SEQ_WC)
            except IsaError as e:
                raise Fault("illegal-opcode", f"HALT CHAIN program at 0x{addr:x}: {e.message}") from None
        except Fault as f:
            raise sl.error(f, halt_pc) from None
        sl.start(prog, new_run=False, waits=waits)
        sl.chains += 1

    # -- running ----------------------------------------------------------------------------------
    def _run_slice(self, sl: Slice, budget: int) -> int:
        """Run one slice until it blocks, halts or spends `budget` instructions; returns steps taken."""
        taken = 0
        on_step = self.on_step
        while taken < budget and sl.state == RUNNING:
            pc = sl.pc
            ins = sl.step()
            if sl.state in (POLLING, WAITING):
                break               # a WAITW still waiting, or a collective: the Machine decides
            taken += 1
            if on_step is not None:
                on_step(sl, pc, ins)
            if sl.state == HALTED and sl.chain is not None:
                self._chain(sl)
        return taken

    def _resolve_collective(self) -> bool:
        live = self.slices
        if not all(sl.state == WAITING for sl in live):
            if any(sl.state == WAITING for sl in live) and all(sl.state in (WAITING, HALTED) for sl in live):
                sl = next(s for s in live if s.state == WAITING)
                raise sl.error(Fault("collective", "collective with a halted slice: every slice must reach it"))
            return False
        ops = {sl.prog[sl.pc].op for sl in live}
        if len(ops) > 1:
            sl = live[0]
            raise sl.error(Fault("collective", "slices disagree on the collective: "
                                 + ", ".join(f"slice {s.sid} {s.prog[s.pc].op.name}" for s in live)))
        op = ops.pop()
        ws = [s.resolved(s.prog[s.pc]) for s in live]
        if op == Op.GATHER:
            try:
                vector.gather(live, [s.prog[s.pc] for s in live], ws)
            except Fault as f:
                raise live[0].error(f) from None
        if self.timing is not None:
            self.timing.collective([(s.sid, s.pc, int(op), (w[1], w[2], w[3]),
                                     work_of(s.prog[s.pc], w, self.cfg, self.timing.ua)) for s, w in zip(live, ws)])
        for s in live:
            ins = s.prog[s.pc]
            pc = s.pc
            s.state = RUNNING
            s.icount += 1
            s.advance()
            if self.on_step is not None:
                self.on_step(s, pc, ins)
        self.steps += len(live)
        return True

    def run_for(self, n: int) -> str:
        """Run at most n instructions (all slices together); returns RUNNING, HALTED or POLLING."""
        left = n
        while left > 0:
            if self.steps >= self.max_steps:
                sl = next((s for s in self.slices if s.state != HALTED), self.slices[0])
                raise sl.error(Fault("step-limit", f"more than {self.max_steps} instructions executed; "
                                     "a loop that never ends?"))
            progressed = 0
            for sl in self.slices:
                taken = self._run_slice(sl, min(left, self.max_steps - self.steps))
                self.steps += taken
                left -= taken
                progressed += taken
                if left <= 0:
                    break
            if self.halted:
                return HALTED
            if left <= 0:
                return RUNNING
            if self._resolve_collective():
                left -= 1
                continue
            if progressed:
                continue
            # nothing ran and no collective resolved: every live slice is polling a WAITW
            polling = [s for s in self.slices if s.state == POLLING]
            if self._poll_host(polling):
                self._idle_host_calls = 0
                continue
            self._idle_host_calls += 1
            if self.host is not None and self._idle_host_calls < self.host_patience:
                continue
            if self.wait_for_host:
                return POLLING
            sl = polling[0]
            raise sl.error(Fault("waitw-timeout", f"WAITW timed out: the DRAM word at 0x{sl.resolved(sl.prog[sl.pc])[1]:x} "
                                 "never satisfied the compare" + ("" if self.host else " (no host callback)")))
        return HALTED if self.halted else RUNNING

    def _poll_host(self, polling: list[Slice]) -> bool:
        """Nothing can run but WAITWs: let the host (if any) act once, then re-poll. True if one now holds."""
        if self.host is not None:
            self.host(self)
        progressed = False
        for sl in polling:
            before = sl.pc
            ins = sl.step()
            if sl.state == RUNNING:
                progressed = True
                self.steps += 1
                if self.on_step is not None:
                    self.on_step(sl, before, ins)
        return progressed

    def run(self, max_steps: int | None = None) -> "Machine":
        """Run until every slice has halted."""
        if max_steps is not None:
            self.max_steps = max_steps
        while self.run_for(1 << 20) != HALTED:
            pass
        return self

    def step(self) -> tuple[int, int, Instr] | None:
        """Execute one instruction; returns (slice, pc, instruction), or None when nothing ran
        (all halted, or waiting for the host). A collective executes on every slice at once and
        returns slice 0's part."""
        if self.halted:
            return None
        done: list[tuple[int, int, Instr]] = []
        outer = self.on_step

        def record(sl: Slice, pc: int, ins: Instr) -> None:
            done.append((sl.sid, pc, ins))
            if outer is not None:
                outer(sl, pc, ins)
        self.on_step = record
        try:
            self.run_for(1)
        finally:
            self.on_step = outer
        return done[0] if done else None

    # -- host access ------------------------------------------------------------------------------
    def _targets(self, sid: int | None) -> list[Slice]:
        if sid is None:
            return self.slices
        if not 0 <= sid < len(self.slices):
            raise SimError("out-of-range", f"slice {sid} does not exist (S={len(self.slices)})")
        return [self.slices[sid]]

    def write_dram(self, addr: int, data, sid: int | None = None) -> None:
        """Host write of bytes into DRAM (every slice when sid is None), as a DMA would."""
        buf = np.frombuffer(bytes(data), np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        for sl in self._targets(sid):
            try:
                sl.dram.check(addr, buf.size, 1, "host write")
            except Fault as f:
                raise SimError(f.kind, f.reason, sl.sid) from None
            sl.dram.bytes[addr: addr + buf.size] = buf
            sl.dram.note_write(addr, addr + buf.size)

    def read_dram(self, addr: int, n: int, sid: int = 0) -> np.ndarray:
        sl = self._targets(sid)[0]
        try:
            sl.dram.check(addr, n, 1, "host read")
        except Fault as f:
            raise SimError(f.kind, f.reason, sl.sid) from None
        return sl.dram.bytes[addr: addr + n].copy()

    def write_tmem(self, addr: int, words, sid: int | None = None) -> None:
        """Host-side TMEM preset (tests and tools): raw 32-bit words, or floats rounded to fp32."""
        arr = np.asarray(words)
        vals = arr.astype(np.float32).view(np.uint32) if arr.dtype.kind == "f" else arr.astype(np.uint32)
        for sl in self._targets(sid):
            try:
                sl.tmem.write(addr, vals.reshape(-1), "host write")
            except Fault as f:
                raise SimError(f.kind, f.reason, sl.sid) from None

    def read_tmem(self, addr: int, n: int, sid: int = 0) -> np.ndarray:
        sl = self._targets(sid)[0]
        try:
            return sl.tmem.read(addr, n, "host read")
        except Fault as f:
            raise SimError(f.kind, f.reason, sl.sid) from None

    # -- results ----------------------------------------------------------------------------------
    def counters(self, sid: int = 0) -> dict[str, int]:
        if self.timing is None:
            sl = self.slices[sid]
            return {"ICOUNT": sl.icount}
        return self.timing.counters(sid)

    def trace_records(self, sid: int = 0) -> list[int]:
        if self.timing is None or not self.timing.trace:
            raise SimError("shape", "tracing is off: build the Machine with trace=True")
        return self.timing.records(sid)

    @property
    def slice(self) -> Slice:
        return self.slices[0]
