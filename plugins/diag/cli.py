"""otpu-diag: every check whose prerequisites passed, a summary matrix and a diagnosis."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from otpu_core import checks, cliopts, plugins
from otpu_core.cli import tool_main
from otpu_core.console import stdout
from otpu_core.corechecks import device
from otpu_core.corechecks import names as N
from otpu_core.corechecks.progress import CheckProgress
from otpu_core.errors import EXIT_CHECKS_FAILED, UsageError
from otpu_core.outpath import check_writable, write_or_show

from .diagnosis import diagnose
from .report import RowPrinter, document, print_summary

SECTIONS = ("platform", "regs", "i2c", "mem", "isa", "system", "model")

HELP = ("Diagnose an openTPU card: every check whose prerequisites passed (the rest SKIP \"needs X\"), "
        "a summary per section, what does not work, what did not run, and what the failures point "
        "at. Exit 0 all pass, 1 a check failed, 2 bad options, 3 card busy or absent.")

app = typer.Typer(name="diag", add_completion=False, rich_markup_mode=None)


def _sections(only: str | None, known: list[str]) -> list[str] | None:
    if not only:
        return None
    wanted = [s.strip() for s in only.split(",") if s.strip()]
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


@app.command(help=HELP)
def diag(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
         mem: str = typer.Option("quick", "--mem", help="quick, or full (adds March C- over each whole channel)."),
         soak: int = typer.Option(0, "--soak", min=0, help="Rerun every program N times; report intermittent ones."),
         only: str = typer.Option(None, "--only", help=f"Comma-separated sections ({', '.join(SECTIONS[1:])}); "
                                                        "platform always runs."),
         json_file: Path = typer.Option(None, "--json", help="Also write every row, the hints and the verdict "
                                                             "as JSON to this file."),
         bw_mib: int = typer.Option(256, "--bw-mib", min=1, help="MiB per channel for the DMA bandwidth rows."),
         model: str = typer.Option(None, "--model", help="Also run the model section with this model (e.g. "
                                                         "qwen3-pydoc, the shipped one; needs the chat plugin)."),
         tokens: int = typer.Option(8, "--tokens", min=1, help="Tokens the model section decodes."),
         power_json: Path = typer.Option(None, "--power-json", help="Power report of the build (openTPU-power "
                                                                    "JSON) for the power estimate row.")) -> None:
    """Diagnose a card."""
    if mem not in ("quick", "full"):
        raise UsageError(f"--mem {mem}: must be quick or full")
    if json_file is not None:
        check_writable(json_file, "--json")
    if power_json is not None and not power_json.is_file():
        raise UsageError(f"--power-json {power_json}: no such file")
    registry = _registry(mem, soak, model)
    kind = checks.device_kind(dev or "")
    sections = _sections(only, list(dict.fromkeys([*SECTIONS, *registry.sections(kind)])) if kind == "otpu"
                         else registry.sections(kind))
    con = stdout()
    progress = CheckProgress(con)
    ctx = checks.CheckContext(dev or "", {"target": target, "fault": fault, "mem": mem, "soak": soak,
                                          "bw_mib": bw_mib, "power_json": power_json, "model": model, "tokens": tokens,
                                          **progress.options()})
    printer = RowPrinter(con)
    try:
        on = device.begin(ctx)
        con.print(f"{device.card_kind(ctx)} diagnostics on {on}" + (f", --mem {mem}" if kind == "otpu" else ""))
        with progress:
            rows = checks.run_all(registry, ctx, sections, on_row=printer)
    finally:
        device.close(ctx)
    hints = diagnose(rows)
    print_summary(con, rows, hints)
    if json_file is not None:
        write_or_show(json_file, json.dumps(document(ctx.dev, device.target_name(ctx), rows, hints), indent=2,
                                            default=str) + "\n", "--json")
    if any(r.status == checks.Status.FAIL for r in rows):
        raise typer.Exit(EXIT_CHECKS_FAILED)


def main() -> None:
    tool_main(app, "otpu-diag")
