"""ISA op checks (section `isa`, one row per program, grouped by unit) and the system checks
(section `system`): the all-units demo, masked DRAM writes, the stream program, the cycle
counters and the soak. Selftest stages: kernel (demo, masked writes), vops (the RDOT / OUTER /
LOG2 group and the reductions), stream."""
from __future__ import annotations

import functools
import time

from .. import opchecks
from ..checks import Check, CheckContext, Result, Status
from ..target import load as load_target
from . import device, programs
from . import names as N

# A program runs from DRAM and leaves its results there: every ISA and system check needs a
# card that answers, is configured, has calibrated and initialized DRAM, and whose DRAM stores
# data and addresses right. A memory fault then skips them ("needs channel 1 address bits
# (FAIL)") instead of failing a hundred programs for the one cause.
CORE = (N.ID, N.CONFIG, N.calib(0), N.calib(1), N.SCRUB)
MEMORY = (*(n for ch in (0, 1) for n in (N.data_bits(ch), N.addr_bits(ch))), N.INTERLEAVE)
NEEDS = CORE + MEMORY
VOPS_GROUPS = ("vpu-new", "vpu-reduce")
CAP_OF_GROUP = {"gen": "gen", "waitw": "waitw"}
CYCLES_N = 20_000
KERNEL_HINT = "run the op checks (otpu-diag --only isa) and compare the failing unit's counters with the simulator"
VOPS_HINT = ("a VPU fault on a current bitstream (register map 3); on an older map the bitstream predates these "
             "functions")


def _by_title(ctx: CheckContext) -> dict[str, opchecks.OpCheck]:
    if "opchecks" not in ctx.cache:
        cfg = device.target(ctx).config()
        ctx.cache["opchecks"] = {c.title: c for c in opchecks.op_checks(cfg, gen=True, waitw=True)}
    return ctx.cache["opchecks"]


def missing_caps(ctx: CheckContext, check: opchecks.OpCheck) -> list[str]:
    """CAPS bits the program needs that the card does not report."""
    need = (*check.caps, *([CAP_OF_GROUP[check.group]] if check.group in CAP_OF_GROUP else []))
    caps = device.info(ctx).caps
    return [c for c in need if not caps.get(c)]


def op_row(ctx: CheckContext, title: str) -> Result:
    check = _by_title(ctx)[title]
    missing = missing_caps(ctx, check)
    if missing:
        return Result(Status.SKIP, f"the card has no {', '.join(c.upper() for c in missing)} (CAPS)")
    hint = VOPS_HINT if check.group in VOPS_GROUPS else KERNEL_HINT
    return programs.result_of(check, programs.run_check(ctx, check), hint)


def _system(ctx: CheckContext, make) -> Result:
    check = make(device.target(ctx).config())
    out = programs.run_check(ctx, check)
    extra = ""
    if out.ok:
        s = out.stats
        extra = f" ({s.cycles} cycles, b_reads={s.b_reads}, a_writes={s.a_writes}, b_writes={s.b_writes})"
    return programs.result_of(check, out, KERNEL_HINT, extra)


def stream(ctx: CheckContext) -> Result:
    caps = device.info(ctx).caps
    if not caps.get("stream") or not caps.get("dstep"):
        return Result(Status.SKIP, "no stream engine on this card (CAPS STREAM clear): nothing to check",
                      vacuous=True)
    return _system(ctx, opchecks.stream_check)


def cycle_counters(ctx: CheckContext) -> Result:
    b = device.board(ctx)
    n = CYCLES_N
    runs = []
    if programs.hung_on(ctx):
        return programs.not_run(ctx)
    for k in (n, 2 * n):
        snap0 = b.snapshot()
        t0 = time.perf_counter()
        stats, error = programs.run_program(ctx, opchecks.nop_loop(k), timeout=60, title=f"NOP loop of {k}")
        wall = time.perf_counter() - t0
        if error:
            return Result(Status.FAIL, error, {"hung": bool(programs.hung_on(ctx))},
                          hint=programs.HANG_HINT if programs.hung_on(ctx) else KERNEL_HINT)
        snap1 = b.snapshot()
        runs.append((k, stats.cycles, wall, None if snap0 is None else snap1["UPTIME"] - snap0["UPTIME"]))
    bad = []
    for k, cycles, wall, up in runs:
        if cycles < k:
            bad.append(f"{cycles} cycles for a {k}-cycle loop")
        if up is not None and up < cycles:
            bad.append(f"UPTIME grew {up} during a {cycles}-cycle run")
    if runs[1][1] <= runs[0][1]:
        bad.append("CYCLES did not grow with the loop")
    khz = device.info(ctx).core_khz
    if khz and device.transport(ctx).physical_timing:
        for k, cycles, wall, _ in runs:
            dev_s = cycles / (khz * 1e3)
            if not 0.5 * wall < dev_s <= 1.02 * wall and wall > 0.05:
                bad.append(f"device time {dev_s:.3f} s against wall {wall:.3f} s")
    if bad:
        return Result(Status.FAIL, "; ".join(bad), hint="the core clock (CORE_KHZ) or the cycle counters")
    return Result(Status.PASS, f"NOP loops of {n} and {2 * n}: {runs[0][1]} and {runs[1][1]} cycles")


def soak(ctx: CheckContext) -> Result:
    """Every program N times. A program that fails in some rounds only is intermittent (timing
    margin, temperature, drift); one that fails in every round is a deterministic fault, named
    as one (its own row already says what is wrong)."""
    rounds = int(ctx.options.get("soak", 0))
    if rounds <= 0:
        return Result(Status.SKIP, "only with --soak N")
    if programs.hung_on(ctx):
        return programs.not_run(ctx)
    cfg = device.target(ctx).config()
    progs = list(_by_title(ctx).values()) + [opchecks.demo_check(cfg), opchecks.masked_check(cfg)]
    progs = [p for p in progs if not missing_caps(ctx, p)]
    fails: dict[str, int] = {}
    report = ctx.options.get("soak_progress")
    for r in range(rounds):
        for i, p in enumerate(progs):
            out = programs.run_check(ctx, p)
            if not out.ran:
                return programs.not_run(ctx)
            if not out.ok:
                fails[p.title] = fails.get(p.title, 0) + 1
            if report:
                report(r * len(progs) + i + 1, rounds * len(progs))
    if not fails:
        return Result(Status.PASS, f"{len(progs)} programs x{rounds}, no failure", {"rounds": rounds})
    intermittent = {name: k for name, k in fails.items() if k < rounds}
    every = {name: k for name, k in fails.items() if k == rounds}
    parts = [f"intermittent {name} {k}/{rounds}" for name, k in intermittent.items()]
    parts += [f"{name} fails every round ({k}/{rounds}): deterministic" for name, k in every.items()]
    hint = ("timing margin (WNS), temperature or calibration drift" if intermittent else
            "not intermittent: these programs fail every time, a deterministic fault their own rows name")
    return Result(Status.FAIL, ", ".join(parts), {"rounds": rounds, "failures": fails,
                                                  "intermittent": intermittent, "deterministic": every}, hint=hint)


def checks() -> list[Check]:
    titles = [(c.group, c.title) for c in opchecks.op_checks(load_target("sim-small").config(), gen=True, waitw=True)]
    out = [Check("isa", title, functools.partial(op_row, title=title), needs=NEEDS, group=group,
                 stage="vops" if group in VOPS_GROUPS else None)
           for group, title in titles]
    out += [
        Check("system", N.DEMO, functools.partial(_system, make=opchecks.demo_check), needs=NEEDS, stage="kernel"),
        Check("system", N.MASKED, functools.partial(_system, make=opchecks.masked_check), needs=NEEDS, stage="kernel"),
        Check("system", N.STREAM, stream, needs=NEEDS, stage="stream"),
        Check("system", N.CYCLES, cycle_counters, needs=NEEDS),
        Check("system", N.SOAK, soak, needs=NEEDS),
    ]
    return out
