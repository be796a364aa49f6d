"""The options every card tool shares, spelled once: `--dev`, `--target`, `--no-check`, `--fault`.

Use them as annotated parameter types in a Typer command, e.g.
`def info(dev: cliopts.Dev = None, target: cliopts.TargetName = None, no_check: cliopts.NoCheck = False,
fault: cliopts.Fault = None)`, then `Board.open(dev, target, check=not no_check, faults=fault)`.
"""
from __future__ import annotations

from typing import Annotated, Optional

import typer

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
