"""otpu-smi: what each card is, how hot and busy it is, what is wrong with it, and who is using it.

Like nvidia-smi: a table per card by default, `-L` one line per card, `-i INDEX|DEV` to pick
cards, `-l SEC` / `--loop-ms MS` to repeat (a live screen with sparklines), `-f FILE`, `--json`,
`-q` for every field nested, `--query a,b --format csv[,noheader][,nounits]` for scripts
(`--help-query` lists the fields), `otpu-smi dmon` for one line per card per interval, and
`--prometheus [--port P]` to serve every field as Prometheus metrics (exporter.py). A monitor:
it never takes a card's device lock. Exit codes: 0 ok, 2 bad options (nvidia-smi's "invalid
argument"), 3 no card or a card that cannot be opened; Ctrl-C in loop mode exits 0.
"""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.live import Live

from otpu_core import cliopts, devspec, power, smi_fields
from otpu_core.checks import device_kind
from otpu_core.cli import tool_main
from otpu_core.console import print_json, stdout
from otpu_core.errors import EXIT_DEVICE, DeviceBusy, DeviceError, UsageError
from otpu_core.outpath import check_writable, is_stdout

from . import dmon as dmon_fmt
from . import exporter
from .render import History, query_lines, screen
from .sample import Sampler

HELP = ("Show openTPU cards: identity, link, health, temperature, power, DRAM, utilisation and the "
        "process using each. Exit 0 ok, 2 bad options, 3 no card or a card that cannot be opened.")

app = typer.Typer(name="smi", add_completion=False, rich_markup_mode=None, invoke_without_command=True,
                  help=HELP)


def seconds(value: float | None, option: str, low: float, high: float = cliopts.MAX_SECONDS) -> float | None:
    return cliopts.seconds(value, option, low, high, low_inclusive=True)


def _formats(text: str) -> tuple[bool, bool]:
    parts = {p.strip() for p in text.split(",") if p.strip()}
    if "csv" not in parts or parts - {"csv", "noheader", "nounits"}:
        raise UsageError(f"--format {text}: must be csv[,noheader][,nounits]")
    return "noheader" not in parts, "nounits" not in parts


def choose(devs: list[str] | None, ids: str | None) -> list[str]:
    """The cards to show: `--dev` given, else every openTPU card found; `-i` then picks by
    position in that list (0, 1, ...) or names a card spec, comma-separated like nvidia-smi's."""
    found = list(devs or []) or [d["dev"] for d in devspec.available() if device_kind(d["dev"]) == "otpu"]
    if ids is None:
        return found
    chosen = []
    for token in (t.strip() for t in ids.split(",")):
        if not token:
            raise UsageError(f"-i {ids!r}: an empty entry", hint="write -i 0,1 or -i sim:NAME")
        if token.lstrip("-").isdigit():
            k = int(token)
            if not 0 <= k < len(found):
                raise UsageError(f"-i {token}: there {'is' if len(found) == 1 else 'are'} {len(found)} card"
                                 f"{'' if len(found) == 1 else 's'} (index 0..{len(found) - 1})",
                                 hint="otpu-smi -L lists them with their index")
            chosen.append(found[k])
        else:
            chosen.append(devspec.chosen(token))
    return list(dict.fromkeys(chosen))


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


@contextlib.contextmanager
def output(path: Path | None):
    """stdout, or `-f FILE` (written as the report goes: a loop appends a report per period)."""
    if path is None or is_stdout(path):
        yield
        return
    check_writable(path, "-f")
    try:
        fh = path.open("w")
    except OSError as e:
        raise UsageError(f"-f {path}: cannot be written ({e.strerror or e})") from None
    try:
        with contextlib.redirect_stdout(fh):
            yield
    except OSError as e:
        raise UsageError(f"-f {path}: could not be written ({e.strerror or e})") from None
    finally:
        try:
            fh.close()
        except OSError as e:
            raise UsageError(f"-f {path}: could not be written ({e.strerror or e})") from None


class Cards:
    """The open cards of one smi run, sampled together; closed at the end."""

    def __init__(self, devs: list[str], target: str | None, power_json):
        if not devs:
            raise DeviceError("no openTPU card found (no /dev/xdma*_user, no simulated card)",
                              hint="is the XDMA driver loaded? use --dev sim for the simulated card")
        self.samplers, self.errors = _open(devs, target, power_json)
        self.history = History()

    def sample(self, wait: float) -> list[dict]:
        reports = [s.sample(wait) for s in self.samplers] + self.errors
        for i, r in enumerate(reports):
            if r.get("ok"):
                r["fields"]["index"] = smi_fields.Field("index", i)
                self.history.add(r["device"], r["fields"])
        return reports

    def close(self) -> None:
        for s in self.samplers:
            s.close()


def _list_line(i: int, r: dict) -> str:
    if not r.get("ok"):
        return f"card {i}: {r['device']} (cannot open: {r['error']})"
    f = r["fields"]
    return (f"card {i}: {r['device']} (openTPU {r['name']}, target {r.get('card_target') or 'unknown'}, "
            f"CFG_HASH {f['cfg_hash.card'].text()}, {f['health'].text()})")


@app.callback(help=HELP)
def smi(ctx: typer.Context,
        dev: Optional[list[str]] = typer.Option(None, "--dev", envvar="OTPU_DEV", show_envvar=True, metavar="DEV",
                                                help="Card to show (repeatable): /dev/xdmaN, sim or sim:NAME. "
                                                     "Default: every card found."),
        ids: str = typer.Option(None, "-i", "--id", metavar="INDEX|DEV",
                                help="Only these cards: an index from -L, or a card spec; comma-separated."),
        target: cliopts.TargetName = None,
        list_cards: bool = typer.Option(False, "-L", "--list-cards", help="One line per card, then exit."),
        loop: float = typer.Option(None, "-l", "--loop", metavar="SEC", help="Repeat every SEC seconds until Ctrl-C."),
        loop_ms: int = typer.Option(None, "--loop-ms", metavar="MS", help="Repeat every MS milliseconds."),
        interval: float = typer.Option(0.2, "--interval", metavar="SEC",
                                       help="Seconds between the two counter snapshots of a single report."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON: a list of cards (with -l, one compact "
                                                             "list per line, JSON Lines)."),
        full: bool = typer.Option(False, "-q", "--query-all", help="Print every field, nested, as key value lines."),
        query: str = typer.Option(None, "--query", help="Comma-separated fields to print (see --help-query)."),
        fmt: str = typer.Option("csv", "--format", help="With --query: csv[,noheader][,nounits]."),
        help_query: bool = typer.Option(False, "--help-query", help="List the fields --query accepts."),
        out_file: Path = typer.Option(None, "-f", "--filename", metavar="FILE",
                                      help="Write the output to FILE instead of stdout."),
        power_json: Path = typer.Option(None, "--power-json", help="Power report of the build for the estimate."),
        prometheus: bool = typer.Option(False, "--prometheus", help="Serve every field of every card as Prometheus "
                                                                    "metrics on /metrics (like dcgm-exporter) "
                                                                    "until Ctrl-C."),
        port: int = typer.Option(exporter.DEFAULT_PORT, "--port", help="With --prometheus: the TCP port (0: any "
                                                                       "free port, printed)."),
        host: str = typer.Option("0.0.0.0", "--host", help="With --prometheus: the address to listen on."),
        ) -> None:
    if ctx.invoked_subcommand is not None:
        ctx.obj = {"dev": dev, "ids": ids, "target": target, "power_json": power_json, "out_file": out_file}
        return
    if help_query:
        print(smi_fields.help_text())
        return
    try:
        names = smi_fields.parse_query(query) if query is not None else None
    except smi_fields.QueryError as e:
        raise UsageError(str(e), hint="otpu-smi --help-query lists the fields") from None
    if prometheus and (loop is not None or loop_ms is not None or json_out or full or names or list_cards):
        raise UsageError("--prometheus serves metrics: leave out -l, --loop-ms, -L, --json, -q and --query")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: must be 0..65535")
    header, units = _formats(fmt)
    if loop is not None and loop_ms is not None:
        raise UsageError("-l and --loop-ms both set the period: give one of them")
    period = seconds(loop, "-l", 0.1) if loop_ms is None else seconds(loop_ms / 1000, "--loop-ms", 0.01)
    interval = seconds(interval, "--interval", 0.01, 60.0)
    if power_json is not None:
        power.require(power_json)
    devs = choose(dev, ids)
    con_out = out_file is not None and not is_stdout(out_file)
    with output(out_file):
        cards = Cards(devs, target, power_json)
        try:
            if prometheus:
                exporter.serve(cards.samplers, cards.errors, host, port, on_ready=lambda p: print(
                    f"otpu-smi: serving {len(devs)} card(s) on http://{host}:{p}/metrics (Ctrl-C stops)",
                    file=sys.stderr, flush=True))
                return
            con = stdout()

            def emit(reports: list[dict], first: bool) -> None:
                if list_cards:
                    for i, r in enumerate(reports):
                        print(_list_line(i, r))
                elif names:
                    if first and header:
                        print(smi_fields.csv_header(names, units))
                    for r in reports:
                        print(smi_fields.csv_row(r["fields"], names, units) if r.get("ok") else
                              ", ".join([smi_fields.NA] * len(names)))
                elif json_out and period is not None:
                    print(json.dumps([_jsonable(r) for r in reports], default=str, separators=(",", ":")))
                elif json_out:
                    print_json([_jsonable(r) for r in reports])
                elif full:
                    for r in reports:
                        print("\n".join(query_lines(_jsonable(r))))
                else:
                    con.print(screen(reports))
                sys.stdout.flush()

            reports = cards.sample(0.0 if list_cards else interval)
            if period is None or list_cards:
                emit(reports, True)
                if any(not r.get("ok") for r in reports):
                    raise typer.Exit(EXIT_DEVICE)      # a card that cannot be read (its table says why)
            elif names or json_out or full or con_out or not con.is_terminal:
                emit(reports, True)
                while True:
                    emit(cards.sample(period), False)
            else:
                with Live(screen(reports, cards.history), console=con, refresh_per_second=4, transient=False) as live:
                    while True:
                        live.update(screen(cards.sample(period), cards.history))
        except KeyboardInterrupt:
            return
        finally:
            cards.close()


@app.command("dmon")
def dmon(ctx: typer.Context,
         groups: str = typer.Option(dmon_fmt.DEFAULT_GROUPS, "-s", "--select", metavar="GROUPS",
                                    help="Metric groups: p power/temperature, u utilisation, c clock, m DRAM, e health."),
         delay: float = typer.Option(1.0, "-d", "--delay", metavar="SEC", help="Seconds between lines."),
         count: int = typer.Option(None, "-c", "--count", metavar="N", help="Stop after N samples (default: Ctrl-C)."),
         stamps: str = typer.Option(None, "-o", "--options", metavar="D|T|DT", help="Prefix the date, the time or both."),
         header_every: int = typer.Option(20, "--header-every", metavar="N",
                                          help="Repeat the # header every N sample lines (0: once)."),
         dev: Optional[list[str]] = typer.Option(None, "--dev", metavar="DEV", help="Card to show (repeatable)."),
         ids: str = typer.Option(None, "-i", "--id", metavar="INDEX|DEV", help="Only these cards (as otpu-smi -i)."),
         target: cliopts.TargetName = None,
         out_file: Path = typer.Option(None, "-f", "--filename", metavar="FILE", help="Write the lines to FILE."),
         ) -> None:
    """Stream one line per card per interval, like `nvidia-smi dmon`."""
    opts = dict(ctx.obj or {})
    for key, value in (("dev", dev), ("ids", ids), ("target", target), ("out_file", out_file)):
        if value is not None and value != []:
            opts[key] = value
    columns = dmon_fmt.parse_groups(groups)
    time_cols = dmon_fmt.parse_time(stamps)
    delay = seconds(delay, "-d", 0.05)
    if count is not None and count < 1:
        raise UsageError(f"-c {count}: the number of samples must be at least 1")
    if header_every < 0:
        raise UsageError(f"--header-every {header_every}: must be 0 (once) or more")
    if opts.get("power_json") is not None:
        power.require(opts["power_json"])
    devs = choose(opts.get("dev"), opts.get("ids"))
    with output(opts.get("out_file")):
        cards = Cards(devs, opts.get("target"), opts.get("power_json"))
        try:
            n, lines = 0, 0
            wait = 0.0
            while count is None or n < count:
                reports = cards.sample(wait)
                if lines == 0 or (header_every and lines % header_every == 0):
                    print("\n".join(dmon_fmt.header(columns, time_cols)))
                for i, r in enumerate(reports):
                    print(dmon_fmt.line(columns, time_cols, i, r))
                sys.stdout.flush()
                n, lines, wait = n + 1, lines + 1, delay
        except KeyboardInterrupt:
            return
        finally:
            cards.close()


def main() -> None:
    tool_main(app, "otpu-smi")
