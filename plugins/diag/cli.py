"""otpu-diag: every check whose prerequisites passed, a summary matrix and a diagnosis."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from otpu_core import checks, cliopts, devspec, plugins
from otpu_core.cli import tool_main
from otpu_core.console import stderr, stdout
from otpu_core.corechecks import device
from otpu_core.corechecks import names as N
from otpu_core.corechecks.progress import CheckProgress
from otpu_core.errors import UsageError
from otpu_core.outpath import check_writable, is_stdout, write_or_show

from . import history, levels
from .diagnosis import diagnose
from .report import RowPrinter, document, history_table, print_summary

SECTIONS = ("platform", "regs", "i2c", "mem", "isa", "system", "model")

HELP = ("Diagnose an openTPU card: every check whose prerequisites passed (the rest SKIP \"needs X\"), "
        "a summary per section, what does not work, what did not run, and what the failures point "
        "at. Run levels as DCGM's: -r 1 quick (platform, registers, I2C), -r 2 medium (the default: "
        "adds memory, ISA and system), -r 3 long (adds March C- and a soak). Exit 0 no failure; 2 bad "
        "options; 3 card busy or absent; otherwise 1 plus 4 platform, 8 DRAM, 16 core, 32 I2C, 64 "
        "other (bits OR-ed: 9 is a DRAM failure, 17 a core failure).")

app = typer.Typer(name="diag", add_completion=False, rich_markup_mode=None)


def _sections(only: str | None, known: list[str]) -> list[str] | None:
    if only is None:
        return None
    wanted = [s.strip() for s in only.split(",") if s.strip()]
    if not wanted:
        raise UsageError(f"--only {only!r}: name at least one section", hint=f"sections: {', '.join(known)}")
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise UsageError(f"--only: unknown section {', '.join(unknown)}", hint=f"sections: {', '.join(known)}")
    return wanted


def _registry(mem: str, soak: int, model: str | None) -> checks.Registry:
    """The DAG with the checks this run's options leave out removed (March C- without --mem full,
    soak without --soak, the model section without --model)."""
    dropped = set()
    if mem != "full":
        dropped |= {N.march(0), N.march(1)}
    if soak <= 0:
        dropped.add(N.SOAK)
    full = checks.collect(plugins.get().hook)
    if model and not any(c.section == "model" for c in full):
        raise UsageError("--model: no plugin provides the model section", hint="install the otpu chat plugin")
    reg = checks.Registry()
    for c in full:
        if c.name not in dropped and (model or c.section != "model"):
            reg.add(c)
    return reg


def show_history(dev: str | None, json_file: Path | None) -> None:
    entries, bad = history.read(dev)
    if bad:
        stderr().print(f"otpu-diag: {bad} line(s) of {history.path()} are not JSON and were skipped", markup=False)
    if json_file is not None:
        write_or_show(json_file, json.dumps(entries, indent=2) + "\n", "--json")
        return
    con = stdout()
    if not entries:
        con.print(f"no diag runs recorded{' for ' + dev if dev else ''} in {history.path()}", markup=False)
    else:
        con.print(history_table(entries))


@app.command(help=HELP)
def diag(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
         level: str = typer.Option(None, "-r", "--run", metavar="LEVEL",
                                   help="Run level: 1 / quick, 2 / medium (default), 3 / long."),
         mem: str = typer.Option(None, "--mem", help="quick, or full (adds March C- over each whole channel). "
                                                     "Default: the run level's (full at -r 3)."),
         soak: int = typer.Option(None, "--soak", min=0, max=1_000_000,
                                  help="Rerun every program N times; report intermittent ones (default: the run "
                                       "level's, 10 at -r 3)."),
         only: str = typer.Option(None, "--only", help=f"Comma-separated sections ({', '.join(SECTIONS[1:])}); "
                                                        "platform always runs."),
         json_file: Path = typer.Option(None, "--json", help="Also write every row, the hints and the verdict "
                                                             "as JSON to this file (- for stdout; the report then "
                                                             "goes to stderr)."),
         bw_mib: int = typer.Option(256, "--bw-mib", min=1, max=1 << 20,
                                    help="MiB per channel for the DMA bandwidth rows."),
         model: str = typer.Option(None, "--model", help="Also run the model section with this model (e.g. "
                                                         "qwen3-pydoc, the shipped one; needs the chat plugin)."),
         tokens: int = typer.Option(8, "--tokens", min=1, help="Tokens the model section decodes."),
         power_json: Path = typer.Option(None, "--power-json", help="Power report of the build (openTPU-power "
                                                                    "JSON) for the power estimate row."),
         show_hist: bool = typer.Option(False, "--history", help="Show the results of earlier runs (of --dev when "
                                                                  "given) kept in the run directory, and exit.")) -> None:
    """Diagnose a card."""
    if json_file is not None:
        check_writable(json_file, "--json")
    if show_hist:
        show_history(dev, json_file)
        return
    lv = levels.parse(level)
    if only is not None and lv.sections is not None:
        raise UsageError(f"--only and -r {lv.number} both choose the sections: give one of them")
    mem = lv.mem if mem is None else mem
    soak = lv.soak if soak is None else soak
    if mem not in ("quick", "full"):
        raise UsageError(f"--mem {mem}: must be quick or full")
    if power_json is not None:
        from otpu_core import power
        power.require(power_json)        # a report that cannot be read is a usage error before anything runs
    cliopts.nonempty(model, "--model", "a model")
    registry = _registry(mem, soak, model)
    kind = checks.device_kind(devspec.chosen(dev))
    known = list(dict.fromkeys([*SECTIONS, *registry.sections(kind)])) if kind == "otpu" else registry.sections(kind)
    # a level names the openTPU sections; another kind of card runs its plugin's sections at every level
    sections = _sections(only, known) if lv.sections is None or kind != "otpu" else list(lv.sections)
    con = stderr() if is_stdout(json_file) else stdout()
    progress = CheckProgress(con)
    ctx = checks.CheckContext(devspec.chosen(dev), {
        "target": target, "fault": fault, "mem": mem, "soak": soak, "bw_mib": bw_mib, "power_json": power_json,
        "model": model, "tokens": tokens, **progress.options()})
    printer = RowPrinter(con)
    try:
        on = device.begin(ctx)
        con.print(f"{device.card_kind(ctx)} diagnostics on {on}, run level {lv.number} ({lv.name})"
                  + (f", --mem {mem}" + (f", --soak {soak}" if soak else "") if kind == "otpu" else ""),
                  markup=False)
        note = device.fault_note(ctx)
        if note:
            con.print(f"[bold yellow]{escape(note)}[/]")
        with progress:
            rows = checks.run_all(registry, ctx, sections, on_row=printer)
    finally:
        device.close(ctx)
    hints = diagnose(rows)
    print_summary(con, rows, hints)
    code = checks.exit_code(rows)
    kept = history.append(history.record(ctx.dev, device.target_name(ctx), lv.number, rows, hints, code))
    if kept is not None:
        stderr().print(f"otpu-diag: results history not kept: {kept}", markup=False)
    if json_file is not None:
        doc = document(ctx.dev, device.target_name(ctx), rows, hints)
        doc.update(level=lv.number, exit_code=code)
        write_or_show(json_file, json.dumps(doc, indent=2, default=str) + "\n", "--json")
    if code:
        raise typer.Exit(code)


def main() -> None:
    tool_main(app, "otpu-diag")
