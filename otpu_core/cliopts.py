"""The options every card tool shares, spelled once: `--dev`, `--target`, `--no-check`, `--fault`.

Use them as annotated parameter types in a Typer command, e.g.
`def info(dev: cliopts.Dev = None, target: cliopts.TargetName = None, no_check: cliopts.NoCheck = False,
fault: cliopts.Fault = None)`, then `Board.open(dev, target, check=not no_check, faults=fault)`.
"""
from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from .errors import UsageError

Dev = Annotated[Optional[str], typer.Option(
    "--dev", envvar="OTPU_DEV", show_envvar=True,
    help="Card: /dev/xdmaN (a real card), sim or sim:NAME (a simulated card). "
         "Default: the first /dev/xdma*_user, else sim.")]
TargetName = Annotated[Optional[str], typer.Option(
    "--target", "-t", envvar="OTPU_TARGET", show_envvar=True,
    help="Target the card must be built for (name or .toml path; default ypcb-00338).")]
NoCheck = Annotated[bool, typer.Option(
    "--no-check", help="Do not refuse a card whose CFG_HASH differs from the target's.")]
Fault = Annotated[Optional[str], typer.Option(
    "--fault", envvar="OTPU_SIM_FAULTS", show_envvar=True,
    help="Simulated card only: faults to inject, e.g. 'stuck_dq:ch=1,bit=44,val=0;hot:c=95'. They replace "
         "the card's faults (a power cycle: DRAM and calibration are lost) and stay until `otpu sim reset`; "
         "'' clears them; omitted, the card keeps its faults.")]
ResetFault = Annotated[Optional[str], typer.Option(
    "--fault", envvar="OTPU_SIM_FAULTS", show_envvar=True,
    help="Faults the card comes back with, e.g. 'hang' (default: none).")]


MAX_SECONDS = 86400.0


def seconds(value: float | None, option: str, low: float = 0.0, high: float = MAX_SECONDS,
            low_inclusive: bool = False) -> float | None:
    """A period or timeout: a finite number of seconds above `low` (or from it) and at most
    `high`, else a UsageError naming the option (click's ranges let nan through). None stays None."""
    if value is None:
        return None
    above = value >= low if low_inclusive else value > low
    if not math.isfinite(value) or not above or value > high:
        edge = "from" if low_inclusive else "above"
        raise UsageError(f"{option} {value:g}: must be a number of seconds {edge} {low:g} and at most {high:g}")
    return value


def positive(value: float, option: str, unit: str = "") -> float:
    """A finite number above 0, else a UsageError naming the option."""
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{option} {value:g}: must be a finite number above 0{(' ' + unit) if unit else ''}")
    return value


def nonempty(value: str | None, option: str, what: str) -> str | None:
    """None (not given) stays None; an empty or blank string is a UsageError naming the option."""
    if value is not None and not value.strip():
        raise UsageError(f"{option} {value!r}: empty; name {what}")
    return value
