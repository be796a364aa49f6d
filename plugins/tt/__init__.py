"""otpu-tt: Tenstorrent Blackhole p150a cards (real or simulated) — smi, core status, probe, recovery, checks.

Modules: `cli` (the Typer app, `otpu-tt` and `ft_tt_core`), `plugin` (hook implementations),
`recover` (the ladder), `snapshot` (what smi reports), `views` (Rich renderings), `checks`
(Blackhole checks for the check DAG). The device layer is `otpu_core.tt`.
"""
