"""Register checks (section `regs`): read/write patterns, read-only values and writes, counters.

The selftest `regs` stage is the SCRATCH / PROG_ADDR / PROG_N pattern check; the rest run in
diag only. Every check restores what it changed.
"""
from __future__ import annotations

import time

from ..card import regs
from ..checks import Check, CheckContext, Result, Status
from . import device
from . import names as N

PATTERNS = (0, 0xFFFFFFFF, 0xA5A55A5A, 0x5A5AA5A5, *(1 << i for i in range(32)),
            *(0xFFFFFFFF ^ (1 << i) for i in range(32)))
RW_REGS = ("SCRATCH", "PROG_ADDR", "PROG_N")
RO_WRITABLE_NAMES = ("ID", "VERSION", "REGMAP", "CAPS", "CORE_KHZ", "BUILD_ID", "CFG_HASH")
HINT = "the AXI-Lite path (BAR0 mapping) or the core clock / reset"


def outcome(problems: list[str], passed: str, hint: str = HINT, prefix: str = "") -> Result:
    """FAIL naming every problem found, else PASS."""
    if problems:
        return Result(Status.FAIL, prefix + "; ".join(problems), hint=hint)
    return Result(Status.PASS, passed)


def stuck_masks(written: list[int], read: list[int]) -> tuple[int, int]:
    """Bits that never read 1 when written 1 (stuck at 0) and never read 0 when written 0 (stuck at 1)."""
    stuck0 = stuck1 = 0
    for w, r in zip(written, read):
        stuck0 |= w & ~r
        stuck1 |= ~w & r
    return stuck0 & 0xFFFFFFFF, stuck1 & 0xFFFFFFFF


def rw_patterns(ctx: CheckContext) -> Result:
    t = device.transport(ctx)
    bad = []
    for name in RW_REGS:
        off = regs.off(name)
        old = t.reg_read(off)
        got = []
        for p in PATTERNS:
            t.reg_write(off, p)
            got.append(t.reg_read(off))
        t.reg_write(off, old)
        s0, s1 = stuck_masks(list(PATTERNS), got)
        if s0 or s1:
            bad.append(f"{name} stuck at 0: 0x{s0:08x}, stuck at 1: 0x{s1:08x}")
    return outcome(bad, f"{len(PATTERNS)} patterns on {', '.join(RW_REGS)}")


def trace_regs(ctx: CheckContext) -> Result:
    t = device.transport(ctx)
    info = device.info(ctx)
    if not info.caps.get("trace"):
        return Result(Status.SKIP, "no trace buffer (CAPS TRACE clear)")
    depth = info.caps["trace_depth"]
    addr = regs.off("TRACE_ADDR")
    bad = []
    for p in (0, 1, depth // 2, depth - 1, 0x5A5 % depth):
        t.reg_write(addr, p)
        got = t.reg_read(addr) % depth
        if got != p:
            bad.append(f"TRACE_ADDR wrote {p} read {got}")
    ctrl = regs.off("TRACE_CTRL")
    t.reg_write(ctrl, regs.TR_ENABLE | regs.TR_STOP_WHEN_FULL)
    got = t.reg_read(ctrl) & (regs.TR_ENABLE | regs.TR_STOP_WHEN_FULL)
    t.reg_write(ctrl, 0)
    if got != regs.TR_ENABLE | regs.TR_STOP_WHEN_FULL:
        bad.append(f"TRACE_CTRL read 0x{got:x} after writing ENABLE|STOP_WHEN_FULL")
    if t.reg_read(ctrl) & (regs.TR_ENABLE | regs.TR_STOP_WHEN_FULL):
        bad.append("TRACE_CTRL did not clear")
    t.reg_write(addr, 0)
    return outcome(bad, f"trace depth {depth}")


def ro_values(ctx: CheckContext) -> Result:
    t = device.transport(ctx)
    info = device.info(ctx)
    bad = []
    if info.mcols not in (1, 2, 4, 8):
        bad.append(f"MCOLS {info.mcols}")
    if info.lanes not in (4, 8, 16):
        bad.append(f"LANES {info.lanes}")
    if info.regmap not in (2, 3):
        bad.append(f"REGMAP {info.regmap}")
    if not 10_000 <= (info.core_khz or 0) <= 300_000:
        bad.append(f"CORE_KHZ {info.core_khz}")
    depth = info.caps["trace_depth"]
    if info.caps.get("trace") and not 2 ** 8 <= depth <= 2 ** 20:
        bad.append(f"trace depth {depth}")
    if info.caps.get("ddr") and not 300 <= (info.ddr_mts or 0) <= 2133:
        bad.append(f"DDR_MTS {info.ddr_mts}")
    unmapped = t.reg_read(0xFFC)
    if unmapped != regs.UNMAPPED:
        bad.append(f"offset 0xFFC reads 0x{unmapped:08x}, not 0x{regs.UNMAPPED:08x}")
    status = t.reg_read(regs.off("STATUS"))
    if status >> 9:
        bad.append(f"STATUS has undefined bits set (0x{status:08x})")
    return outcome(bad, f"MCOLS {info.mcols} LANES {info.lanes} REGMAP {info.regmap} CORE_KHZ {info.core_khz}",
                   prefix="out of range: ")


def ro_ignore_writes(ctx: CheckContext) -> Result:
    t = device.transport(ctx)
    changed = []
    for name in RO_WRITABLE_NAMES:
        off = regs.off(name)
        before = t.reg_read(off)
        t.reg_write(off, before ^ 0xFFFFFFFF)
        after = t.reg_read(off)
        if after != before:
            changed.append(f"{name} 0x{before:08x} -> 0x{after:08x}")
    return outcome(changed, f"{len(RO_WRITABLE_NAMES)} registers unchanged",
                   prefix="writes changed read-only registers: ")


def snap_counters(ctx: CheckContext) -> Result:
    info = device.info(ctx)
    if info.regmap < 2:
        return Result(Status.SKIP, "register map 1 has no free-running counters")
    a = device.snapshot(ctx)
    time.sleep(0.01)
    b = device.snapshot(ctx)
    bad = []
    if b["snaps"] < a["snaps"] + 1:   # a monitor (otpu-smi) may latch in between: more is fine
        bad.append(f"SNAP went {a['snaps']} -> {b['snaps']}")
    up = b["UPTIME"] - a["UPTIME"]
    if up <= 0:
        bad.append("UPTIME did not grow")
    for name in regs.counter_names(info.regmap):
        d = b[name] - a[name]
        if d < 0:
            bad.append(f"{name} went backwards")
        elif name not in regs.EVENT_COUNTERS and d > up:
            bad.append(f"{name} grew {d} in {up} cycles")
    return outcome(bad, f"UPTIME +{up} cycles in 10 ms, {len(regs.counter_names(info.regmap))} counters monotonic",
                   hint="the counter block or SNAP latch of the bitstream")


def checks() -> list[Check]:
    return [
        Check("regs", N.SCRATCH, rw_patterns, needs=(N.ID,), stage="regs"),
        Check("regs", N.TRACE_RW, trace_regs, needs=(N.CONFIG,)),
        Check("regs", N.RO_VALUES, ro_values, needs=(N.CONFIG,)),
        Check("regs", N.RO_IGNORE, ro_ignore_writes, needs=(N.CONFIG,)),
        Check("regs", N.SNAP, snap_counters, needs=(N.CONFIG,)),
    ]
