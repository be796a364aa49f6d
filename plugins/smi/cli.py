"""otpu-smi: what each card is, how hot and busy it is, and who is using it.

Like nvidia-smi: a table per card by default, `-l SEC` to repeat (a live screen with
sparklines), `--json`, `-q` for every field nested, `--query a,b --format csv[,noheader][,nounits]`
for scripts (`--help-query` lists the fields); `--prometheus [--port P]` serves every field as
Prometheus metrics (exporter.py). A monitor: it never takes a card's device lock.
Exit codes: 0 ok, 2 bad options (nvidia-smi's "invalid argument"), 3 no card or a card that
cannot be opened; Ctrl-C in loop mode exits 0.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.live import Live

from otpu_core import cliopts, devspec, smi_fields
from otpu_core.cli import tool_main
from otpu_core.console import print_json, stdout
from otpu_core.checks import device_kind
from otpu_core.errors import EXIT_DEVICE, DeviceBusy, DeviceError, UsageError

from . import exporter
from .render import History, query_lines, screen
from .sample import Sampler

HELP = ("Show openTPU cards: identity, link, temperature, power, DRAM, utilisation and the process "
        "using each. Exit 0 ok, 2 bad options, 3 no card or a card that cannot be opened.")

app = typer.Typer(name="smi", add_completion=False, rich_markup_mode=None)


def _formats(text: str) -> tuple[bool, bool]:
    parts = {p.strip() for p in text.split(",") if p.strip()}
    if "csv" not in parts or parts - {"csv", "noheader", "nounits"}:
        raise UsageError(f"--format {text}: must be csv[,noheader][,nounits]")
    return "noheader" not in parts, "nounits" not in parts


def _open(devs: list[str], target: str | None, power_json) -> tuple[list[Sampler], list[dict]]:
    """A Sampler per card; a card that is absent or unreadable becomes an error row (exit 3 at the
    end, the other cards still shown). A usage error (unknown --dev kind, bad --target or fault
    spec) ends the run at once with exit 2."""
    samplers, errors = [], []
    try:
        for dev in devs:
            try:
                samplers.append(Sampler(dev, target, power_json))
            except DeviceBusy:
                raise
            except DeviceError as e:
                errors.append({"device": dev, "ok": False, "error": e.message})
    except BaseException:
        for s in samplers:
            s.close()
        raise
    return samplers, errors


def _jsonable(report: dict) -> dict:
    out = {k: v for k, v in report.items() if k != "fields"}
    if "fields" in report:
        out["fields"] = {name: f.value for name, f in report["fields"].items()}
    return out


@app.command(help=HELP)
def smi(dev: Optional[list[str]] = typer.Option(None, "--dev", envvar="OTPU_DEV", show_envvar=True, metavar="DEV",
                                                help="Card to show (repeatable): /dev/xdmaN, sim or sim:NAME. "
                                                     "Default: every card found."),
        target: cliopts.TargetName = None,
        loop: float = typer.Option(None, "-l", "--loop", min=0.1, help="Repeat every SEC seconds until Ctrl-C."),
        interval: float = typer.Option(0.2, "-i", "--interval", min=0.01,
                                       help="Seconds between the two counter snapshots of a single report."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON: a list of cards (with -l, one compact "
                                                             "list per line, JSON Lines)."),
        full: bool = typer.Option(False, "-q", "--query-all", help="Print every field, nested, as key value lines."),
        query: str = typer.Option(None, "--query", help="Comma-separated fields to print (see --help-query)."),
        fmt: str = typer.Option("csv", "--format", help="With --query: csv[,noheader][,nounits]."),
        help_query: bool = typer.Option(False, "--help-query", help="List the fields --query accepts."),
        power_json: Path = typer.Option(None, "--power-json", help="Power report of the build for the estimate."),
        prometheus: bool = typer.Option(False, "--prometheus", help="Serve every field of every card as Prometheus "
                                                                    "metrics on /metrics (like dcgm-exporter) "
                                                                    "until Ctrl-C."),
        port: int = typer.Option(exporter.DEFAULT_PORT, "--port", help="With --prometheus: the TCP port (0: any "
                                                                       "free port, printed)."),
        host: str = typer.Option("0.0.0.0", "--host", help="With --prometheus: the address to listen on."),
        ) -> None:
    """Show openTPU cards."""
    if help_query:
        print(smi_fields.help_text())
        return
    try:
        names = smi_fields.parse_query(query) if query else None
    except smi_fields.QueryError as e:
        raise UsageError(str(e), hint="otpu-smi --help-query lists the fields") from None
    if prometheus and (loop is not None or json_out or full or names):
        raise UsageError("--prometheus serves metrics: leave out -l, --json, -q and --query")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: must be 0..65535")
    header, units = _formats(fmt)
    if power_json is not None and not power_json.is_file():
        raise UsageError(f"--power-json {power_json}: no such file")
    devs = list(dev or []) or [d["dev"] for d in devspec.available() if device_kind(d["dev"]) == "otpu"]
    if not devs:
        raise DeviceError("no openTPU card found (no /dev/xdma*_user, no simulated card)",
                          hint="is the XDMA driver loaded? use --dev sim for the simulated card")
    samplers, errors = _open(devs, target, power_json)
    if prometheus:
        try:
            exporter.serve(samplers, errors, host, port, on_ready=lambda p: print(
                f"otpu-smi: serving {len(devs)} card(s) on http://{host}:{p}/metrics (Ctrl-C stops)",
                file=sys.stderr, flush=True))
        except KeyboardInterrupt:
            return
        finally:
            for s in samplers:
                s.close()
        return
    history = History()
    con = stdout()

    def sample_all(wait: float) -> list[dict]:
        reports = [s.sample(wait) for s in samplers] + errors
        for i, r in enumerate(reports):
            if r.get("ok"):
                r["fields"]["index"] = smi_fields.Field("index", i)
                history.add(r["device"], r["fields"])
        return reports

    def emit(reports: list[dict], first: bool) -> None:
        if names:
            if first and header:
                print(smi_fields.csv_header(names, units))
            for r in reports:
                print(smi_fields.csv_row(r["fields"], names, units) if r.get("ok") else
                      ", ".join([smi_fields.NA] * len(names)))
        elif json_out and loop is not None:
            print(json.dumps([_jsonable(r) for r in reports], default=str, separators=(",", ":")))
        elif json_out:
            print_json([_jsonable(r) for r in reports])
        elif full:
            for r in reports:
                print("\n".join(query_lines(_jsonable(r))))
        else:
            con.print(screen(reports))
        sys.stdout.flush()

    try:
        reports = sample_all(interval)
        if loop is None:
            emit(reports, True)
            if any(not r.get("ok") for r in reports):
                raise typer.Exit(EXIT_DEVICE)      # a card that cannot be read (its table says why)
        elif names or json_out or full or not con.is_terminal:
            emit(reports, True)
            while True:
                emit(sample_all(loop), False)
        else:
            with Live(screen(reports, history), console=con, refresh_per_second=4, transient=False) as live:
                while True:
                    live.update(screen(sample_all(loop), history))
    except KeyboardInterrupt:
        return
    finally:
        for s in samplers:
            s.close()


def main() -> None:
    tool_main(app, "otpu-smi")
