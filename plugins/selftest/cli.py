"""otpu-selftest: staged bring-up of a card, one line per stage, stopping at the first failure."""
from __future__ import annotations

import typer
from rich.markup import escape

from otpu_core import checks, cliopts, devspec, plugins
from otpu_core.cli import tool_main
from otpu_core.console import print_json, stdout
from otpu_core.corechecks import device
from otpu_core.corechecks.progress import CheckProgress
from otpu_core.errors import UsageError

from .report import group_stages, stage_text, verdict_plain, verdict_text

SELFTEST_MIN_GBS = 0.5   # bring-up wants a usable link; diag's rows pass from 0.25 GB/s
STAGES = ("link", "config", "calib", "scrub", "regs", "i2c", "addr", "pattern", "bandwidth", "kernel", "vops",
          "stream")

HELP = ("Staged bring-up of an openTPU card: link, config, calib, scrub, regs, i2c, addr, pattern, "
        "bandwidth, kernel, vops, stream (and model with --model). Stops at the first failure and "
        "prints its hint. Exit 0 all pass; 2 bad options; 3 card busy or absent; a failed stage: 1 plus "
        "4 platform, 8 DRAM, 16 core, 32 I2C, 64 other (as otpu-diag).")

app = typer.Typer(name="selftest", add_completion=False, rich_markup_mode=None)


@app.command(help=HELP)
def selftest(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
             model: str = typer.Option(None, "--model", help="Also run the model stage with this model "
                                                             "(needs a plugin that provides the model check)."),
             tokens: int = typer.Option(8, "--tokens", min=1, max=1_000_000, help="Tokens the model stage decodes."),
             bw_mib: int = typer.Option(256, "--bw-mib", min=1, max=1 << 20, help="MiB per channel each way for the bandwidth "
                                                                     "stage (it passes above 0.5 GB/s)."),
             json_out: bool = typer.Option(False, "--json", help="Print one JSON document instead of lines.")) -> None:
    """Bring up a card stage by stage."""
    cliopts.nonempty(model, "--model", "a model")
    registry = checks.collect(plugins.get().hook)
    kind = checks.device_kind(devspec.chosen(dev))
    if kind == "otpu":
        stages = STAGES + (("model",) if model else ())
    else:   # another kind of card: the stages its plugin's checks name, in their order
        stages = tuple(dict.fromkeys(c.stage for c in registry.for_device(kind) if c.stage))
    if model and not any(c.stage == "model" for c in registry):
        raise UsageError("--model: no plugin provides the model stage", hint="install the otpu chat plugin")
    con = stdout()
    progress = CheckProgress(con)
    ctx = checks.CheckContext(devspec.chosen(dev), {"target": target, "fault": fault, "model": model, "tokens": tokens,
                                          "bw_mib": bw_mib, "bw_min_gbs": SELFTEST_MIN_GBS, **progress.options()})
    done: list[checks.Row] = []

    def on_row(row: checks.Row) -> None:
        if not json_out and done and done[-1].stage != row.stage:
            con.print(stage_text(group_stages([r for r in done if r.stage == done[-1].stage])[0]), highlight=False)
        done.append(row)

    try:
        on = device.begin(ctx)
        note = device.fault_note(ctx)
        if not json_out:
            con.print(f"{device.card_kind(ctx)} self-test on {on}", markup=False)
            if note:
                con.print(f"[bold yellow]{escape(note)}[/]")
        with progress:
            rows, stopped = checks.run_stages(registry, ctx, stages, on_row=on_row)
    finally:
        device.close(ctx)
    lines = group_stages(rows)
    code = checks.exit_code(rows) or (1 if stopped is not None else 0)
    if json_out:
        print_json({"tool": "otpu-selftest", "device": ctx.dev, "target": device.target_name(ctx),
                    "injected_faults": note or None, "stages": [s.as_dict() for s in lines], "stopped_at": stopped,
                    "result": verdict_plain(stopped, lines), "exit_code": code})
    else:
        if lines:
            con.print(stage_text(lines[-1]), highlight=False)
        con.print(verdict_text(stopped, lines))
    if code:
        raise typer.Exit(code)


def main() -> None:
    tool_main(app, "otpu-selftest")
