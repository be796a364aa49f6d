"""`otpu rtl check|run`: the machine's RTL under Verilator against the golden simulator.

`check` runs every ISA op check of selftest/diag and every kernel case of the library on the RTL
and on the golden simulator from the same state, compares TMEM and DRAM bit for bit and prints
the RTL's cycles against the timing model's; `run` does the same for one assembly program. The
first use builds the simulator (minutes; cached in $OTPU_RTL_CACHE afterwards).
"""
from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..console import print_json, stderr, stdout
from ..errors import ChecksFailed, UsageError
from ..hookspecs import hookimpl
from .sim_cmd import parse_source, read_text

app = typer.Typer(name="rtl", no_args_is_help=True, add_completion=False,
                  help="The machine's RTL under Verilator, compared bit for bit with the golden simulator.")
TARGET_HELP = "An RTL target (nangate45-small, nangate45-card, ypcb-00338)."


def _backend(target: str):
    from ..rtlbackend import RtlBackend
    err = stderr()
    return RtlBackend(target, progress=lambda msg: err.print(msg, highlight=False))


def _row(name: str, r) -> dict:
    return {"name": name, "ok": r.ok, "result": r.message(), "rtl_cycles": r.rtl_cycles, "model_cycles": r.model_cycles,
            "ratio": round(r.ratio, 4) if r.model_cycles else None, "tmem_words": r.tmem_words, "dram_bytes": r.dram_bytes,
            "fault_pc": r.golden_fault.pc if r.golden_fault else (r.rtl_fault.pc if r.rtl_fault else None),
            "faulted": bool(r.golden_fault or r.rtl_fault)}


def _report(rows: list[dict], title: str, json_out: bool) -> None:
    if json_out:
        print_json(rows)
    else:
        table = Table(title=title)
        for col in ("program", "TMEM and DRAM", "RTL cycles", "model cycles", "ratio"):
            table.add_column(col, justify="right" if "cycles" in col or col == "ratio" else "left")
        for r in rows:
            if r["faulted"]:
                result = f"[otpu.ok]the same fault at pc {r['fault_pc']}[/]" if r["ok"] else f"[otpu.fail]{r['result']}[/]"
            else:
                result = "[otpu.ok]bit-exact[/]" if r["ok"] else f"[otpu.fail]{r['tmem_words']} words, {r['dram_bytes']} bytes differ[/]"
            table.add_row(r["name"], result, str(r["rtl_cycles"]), str(r["model_cycles"]),
                          f"{r['ratio']:.3f}" if r["ratio"] is not None else "-")
        stdout().print(table)
    bad = [r["name"] for r in rows if not r["ok"]]
    if bad:
        raise ChecksFailed(f"{len(bad)} of {len(rows)} programs differ from the golden simulator: " + ", ".join(bad[:5]))


@app.command("check")
def check_cmd(target: str = typer.Option("nangate45-small", "--target", "-t", help=TARGET_HELP),
              ops: bool = typer.Option(True, "--ops/--no-ops", help="Run the ISA op checks of selftest/diag."),
              kernels: bool = typer.Option(True, "--kernels/--no-kernels", help="Run the kernel library's cases."),
              json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every op check and kernel on the RTL and on the golden simulator; exit 1 on any difference."""
    from .. import rtlcases
    from ..rtlcheck import compare_case, compare_op_checks
    be = _backend(target)
    err = stderr()
    rows = []
    if ops:
        results, _ = compare_op_checks(be)
        rows += [_row(title, r) for title, r in results.items()]
        err.print(f"{len(rows)} op checks run", highlight=False)
    if kernels:
        for case in rtlcases.kernel_cases(target):
            err.print(f"kernel {case.name}", highlight=False)
            rows.append(_row(f"kernel: {case.name}", compare_case(be, case)))
    _report(rows, f"RTL against the golden simulator on {target}", json_out)


@app.command("run")
def run_cmd(program: Path = typer.Argument(..., help="An assembly file (otpu asm syntax), run from a zero DRAM."),
            target: str = typer.Option("nangate45-small", "--target", "-t", help=TARGET_HELP),
            json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Run one program on the RTL and on the golden simulator; exit 1 if TMEM or DRAM differ."""
    from ..rtlcheck import compare_run, reset_state
    try:
        text = read_text(program, "program file")
    except OSError as e:
        raise UsageError(f"{program}: cannot read: {e.strerror}") from None
    if not parse_source(program, text).instrs:     # refused before the RTL is built (minutes on a cold cache)
        raise UsageError(f"{program}: program has no instructions", hint="a program ends with halt")
    be = _backend(target)
    reset_state(be)
    _report([_row(program.name, compare_run(be, text))], f"{program.name} on the RTL of {target}", json_out)


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    app.add_typer(globals()["app"], name="rtl")
