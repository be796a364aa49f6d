"""The one check DAG, and the two policies over it: staged bring-up and full diagnosis.

Plugins contribute `Check`s through the `otpu_checks(registry)` hook; a check names the checks
it `needs` (of any plugin), so the graph spans plugins without imports. `run_all` is the
diagnosis policy (every check whose prerequisites passed, the rest SKIP "needs X (FAIL)");
`run_stages` is the bring-up policy (stages in order, stop at the first failure).
"""
from __future__ import annotations

import enum
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .errors import DeviceError, UsageError


class Status(str, enum.Enum):
    """PASS; WARN (inside its limits, but near one: DCGM's Warn); FAIL; SKIP (checked nothing);
    INFO (a figure, no verdict)."""
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    INFO = "INFO"

    def __str__(self) -> str: return self.value


OK_STATUSES = (Status.PASS, Status.WARN, Status.INFO)


@dataclass
class Result:
    """What a check function returns.

    A SKIP that is `vacuous` says there was nothing to check on this card (no ECC to scrub,
    no stream engine): it is reported as SKIP, yet the checks that need it still run, since
    nothing they rely on is missing. `blocked_by` names a check whose failure kept this one
    from running (the row is then "not run", never FAIL)."""
    status: Status
    message: str = ""
    data: dict[str, Any] | None = None
    hint: str | None = None
    vacuous: bool = False
    blocked_by: str | None = None


@dataclass
class CheckContext:
    """Shared by the checks of one run: the device spec, options, and a cache for open devices."""
    dev: str
    options: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, "Row"] = field(default_factory=dict)

    @property
    def device_kind(self) -> str: return device_kind(self.dev)


def device_kind(dev: str) -> str:
    """Which family of checks applies: Blackhole specs start with `tt`, everything else is an openTPU card."""
    return "tt" if dev.startswith("tt") else "otpu"


@dataclass(frozen=True)
class Check:
    section: str
    name: str
    fn: Callable[[CheckContext], Result]
    needs: tuple[str, ...] = ()
    devices: tuple[str, ...] = ("otpu",)
    stage: str | None = None  # the bring-up stage this check belongs to, if any
    title: str = ""
    group: str | None = None  # finer grouping used by diagnosis (e.g. ISA op-check groups)
    # Called once before any check of the run: validates the options this check reads. A UsageError
    # raised here ends the run (exit 2) instead of becoming a FAIL row: the input was wrong, not the card.
    prepare: Callable[[CheckContext], None] | None = None


@dataclass
class Row:
    section: str
    name: str
    status: Status
    message: str
    seconds: float
    data: dict[str, Any] | None = None
    hint: str | None = None
    group: str | None = None
    stage: str | None = None
    blocked_by: str | None = None  # set when SKIPped because this prerequisite did not pass
    vacuous: bool = False          # a SKIP with nothing to check: dependents still run

    @property
    def satisfies(self) -> bool:
        """Whether checks that need this one may run."""
        return self.status in OK_STATUSES or (self.status == Status.SKIP and self.vacuous)

    @property
    def stops(self) -> bool:
        """Whether this row ends a staged run: a failure, or a check that could not run."""
        return self.status == Status.FAIL or self.blocked_by is not None

    def as_dict(self) -> dict[str, Any]:
        return {"section": self.section, "name": self.name, "status": self.status.value, "message": self.message,
                "seconds": round(self.seconds, 3), "data": self.data, "hint": self.hint, "group": self.group,
                "stage": self.stage, "blocked_by": self.blocked_by, "vacuous": self.vacuous}


class Registry:
    """The checks of one run, in the order plugins added them."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def add(self, check: Check) -> None:
        if not isinstance(check, Check):
            raise TypeError(f"otpu_checks: expected a Check, got {type(check).__name__}")
        if check.name in self._checks:
            raise ValueError(f"otpu_checks: two checks are named '{check.name}'")
        self._checks[check.name] = check

    def __iter__(self): return iter(self._checks.values())

    def __len__(self) -> int: return len(self._checks)

    def __contains__(self, name: str) -> bool: return name in self._checks

    def get(self, name: str) -> Check: return self._checks[name]

    def for_device(self, kind: str) -> list[Check]: return [c for c in self if kind in c.devices]

    def sections(self, kind: str) -> list[str]:
        return list(dict.fromkeys(c.section for c in self.for_device(kind)))

    def ordered(self, checks: Iterable[Check]) -> list[Check]:
        """Registration order, each check after everything it needs; a cycle or unknown need is an error."""
        out: list[Check] = []
        state: dict[str, int] = {}

        def visit(c: Check, path: tuple[str, ...]) -> None:
            if state.get(c.name) == 2:
                return
            if state.get(c.name) == 1:
                raise UsageError(f"check graph has a cycle: {' -> '.join(path + (c.name,))}")
            state[c.name] = 1
            for need in c.needs:
                if need not in self._checks:
                    raise UsageError(f"check '{c.name}' needs '{need}', which no plugin provides")
                visit(self._checks[need], path + (c.name,))
            state[c.name] = 2
            out.append(c)

        for c in checks:
            visit(c, ())
        return out


# Checks of these plugins may be taken over by another plugin adding a check of the same name.
OVERRIDABLE_PLUGINS = ("otpu_core.corechecks.plugin",)


def collect(hook, report=sys.stderr) -> Registry:
    """Ask every plugin for its checks, one plugin at a time (`hook` is the manager's hook relay).

    A plugin whose `otpu_checks` raises is reported once and left out; the other plugins'
    checks still run. A plugin adding a check named like one of an overridable (core) plugin
    replaces it in place, keeping its position in the order; two other plugins adding one name
    is a conflict: the first is kept and the second reported.
    """
    found: dict[str, tuple[Check, str]] = {}
    for impl in hook.otpu_checks.get_hookimpls():   # in registration order
        scratch = Registry()
        try:
            impl.function(registry=scratch)
        except Exception as e:
            _say(report, f"plugin '{impl.plugin_name}' could not add its checks: {type(e).__name__}: {e}")
            continue
        for check in scratch:
            held = found.get(check.name)
            if held is None or held[1] in OVERRIDABLE_PLUGINS:
                found[check.name] = (check, impl.plugin_name)
            elif impl.plugin_name not in OVERRIDABLE_PLUGINS:
                _say(report, f"plugin '{impl.plugin_name}' adds check '{check.name}', which plugin "
                             f"'{held[1]}' already provides; keeping the first")
    registry = Registry()
    for check, _ in found.values():
        registry.add(check)
    return registry


def _say(report, text: str) -> None:
    if report is not None:
        print(f"otpu: {text}", file=report)


def run_one(check: Check, ctx: CheckContext) -> Row:
    """Run one check, or SKIP it when a prerequisite did not pass.

    A busy or vanished card (DeviceError) and an input error found while running (UsageError:
    a bad --power-json, a fault spec the card refuses) end the whole run, with their exit codes;
    any other exception is a FAIL row saying the check itself broke (the traceback's tail in
    its data), never an exception class name in the message."""
    for need in check.needs:
        row = ctx.rows.get(need)
        if row is None or not row.satisfies:
            status = row.status.value if row else "not run"
            out = Row(check.section, check.name, Status.SKIP, f"needs {need} ({status})", 0.0,
                      group=check.group, stage=check.stage, blocked_by=need)
            ctx.rows[check.name] = out
            return out
    t0 = time.perf_counter()
    try:
        res = check.fn(ctx)
        if not isinstance(res, Result):
            raise TypeError(f"check returned {type(res).__name__}, not Result")
    except (DeviceError, UsageError):
        raise
    except Exception as e:
        tail = traceback.format_exc().strip().splitlines()[-3:]
        why = (e.strerror if isinstance(e, OSError) and e.strerror else str(e)) or "no message"
        res = Result(Status.FAIL, f"the check itself failed: {why}", {"traceback": tail},
                     hint="a bug in this check, not a finding about the card: report it with the traceback "
                          "in the --json rows")
    out = Row(check.section, check.name, res.status, res.message, time.perf_counter() - t0, res.data, res.hint,
              check.group, check.stage, blocked_by=res.blocked_by, vacuous=res.vacuous and res.status == Status.SKIP)
    ctx.rows[check.name] = out
    return out


def _prepare(chosen: Iterable[Check], ctx: CheckContext) -> None:
    for c in chosen:
        if c.prepare is not None:
            c.prepare(ctx)


def run_all(registry: Registry, ctx: CheckContext, sections: Iterable[str] | None = None,
            on_row: Callable[[Row], None] | None = None, always: Iterable[str] = ("platform",)) -> list[Row]:
    """Diagnosis policy: every check of the chosen sections (plus what they need) runs or is SKIPped."""
    wanted = None if sections is None else set(sections) | set(always)
    chosen = [c for c in registry.for_device(ctx.device_kind) if wanted is None or c.section in wanted]
    _prepare(chosen, ctx)
    rows = []
    for check in registry.ordered(chosen):
        row = run_one(check, ctx)
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def run_stages(registry: Registry, ctx: CheckContext, stages: Iterable[str],
               on_row: Callable[[Row], None] | None = None) -> tuple[list[Row], str | None]:
    """Bring-up policy: the checks of each stage in order; stop at the first stage that does not pass.

    Returns the rows of the stages that ran and the name of the failed stage (None: all passed).
    Prerequisites outside the stage list run silently first, and their failure fails the stage.
    """
    mine = registry.for_device(ctx.device_kind)
    _prepare([c for c in mine if c.stage in set(stages)], ctx)
    rows: list[Row] = []
    for stage in stages:
        stage_checks = [c for c in mine if c.stage == stage]
        for check in registry.ordered(stage_checks):
            if check.name in ctx.rows:
                continue
            row = run_one(check, ctx)
            if check.stage != stage:  # a hidden prerequisite: shown only if it stops the run
                if not row.stops:
                    continue
                row.stage = stage
            rows.append(row)
            if on_row:
                on_row(row)
            if row.stops:
                return rows, stage
    return rows, None


# Exit code of a run with failures: 1 plus a bit per part of the board that failed (memtester's
# bit-OR habit), so a script tells a DRAM failure (9) from a core failure (17). 2 (usage) and
# 3 (card busy or absent) stay codes of their own, never combined with these bits.
FAIL_BITS = {"platform": 4, "dram": 8, "core": 16, "i2c": 32, "other": 64}
DRAM_CHECKS = ("DDR3 calibration channel", "DRAM initialized")


def failure_part(row: Row) -> str:
    """Which part of FAIL_BITS a failed row belongs to."""
    if row.section == "mem" or row.name.startswith(DRAM_CHECKS):
        return "dram"
    if row.section in ("regs", "isa", "system"):
        return "core"
    return row.section if row.section in FAIL_BITS else "other"


def exit_code(rows: Iterable[Row]) -> int:
    """0 without a FAIL, else 1 | the FAIL_BITS of every part that failed."""
    parts = {failure_part(r) for r in rows if r.status == Status.FAIL}
    if not parts:
        return 0
    code = 1
    for part in parts:
        code |= FAIL_BITS[part]
    return code


def skipped(rows: Iterable[Row]) -> int:
    """How many rows are SKIP (checked nothing): a verdict counts them, never reads them as PASS."""
    return sum(r.status == Status.SKIP for r in rows)


def summary(rows: Iterable[Row]) -> dict[str, dict[str, int]]:
    """PASS/FAIL/SKIP/INFO counts per section, sections in first-seen order."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        counts = out.setdefault(r.section, {s.value: 0 for s in Status})
        counts[r.status.value] += 1
    return out
