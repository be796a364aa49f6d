"""How otpu-diag prints: row lines under section headers, the summary matrix, what does not work,
what did not run, the diagnosis, the verdict; and the JSON document of `--json FILE`."""
from __future__ import annotations

import datetime as dt
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from otpu_core.checks import Row, Status, skipped, summary

STATUS_STYLE = {Status.PASS: "green", Status.WARN: "bold yellow", Status.FAIL: "bold red", Status.SKIP: "yellow",
                Status.INFO: "cyan"}


def row_text(row: Row) -> str:
    secs = f"  ({row.seconds:.1f}s)" if row.seconds >= 0.1 else ""
    return (f"  [{STATUS_STYLE[row.status]}]\\[{row.status.value}][/] {row.section:<8} {escape(row.name):<44} "
            f"{escape(row.message)}{secs}")


class RowPrinter:
    """Prints rows as they finish, with a header line whenever the section changes."""

    def __init__(self, console: Console):
        self.console, self.section = console, None

    def __call__(self, row: Row) -> None:
        if row.section != self.section:
            self.section = row.section
            self.console.print(f"[bold]{row.section}[/]")
        self.console.print(row_text(row), highlight=False)


def summary_table(rows: list[Row]) -> Table:
    table = Table(title=None, show_edge=False, pad_edge=False)
    table.add_column("section")
    for s in Status:
        table.add_column(s.value, justify="right")
    counts = summary(rows)
    total = {s.value: 0 for s in Status}
    for section, c in counts.items():
        table.add_row(section, *(_cell(s, c[s.value]) for s in Status))
        for k, v in c.items():
            total[k] += v
    table.add_row("[bold]total[/]", *(_cell(s, total[s.value]) for s in Status))
    return table


def _cell(status: Status, n: int) -> str:
    return f"[{STATUS_STYLE[status]}]{n}[/]" if n and status in (Status.FAIL, Status.WARN, Status.SKIP) else str(n)


def print_summary(console: Console, rows: list[Row], hints: list[str]) -> None:
    console.print()
    console.print("[bold]summary[/]")
    console.print(summary_table(rows))
    failed = [r for r in rows if r.status == Status.FAIL]
    warned = [r for r in rows if r.status == Status.WARN]
    skips = [r for r in rows if r.status == Status.SKIP]
    if failed:
        console.print("[bold]does not work:[/]")
        for r in failed:
            console.print(f"  {r.section}: {escape(r.name)}: {escape(r.message)}", highlight=False)
    if warned:
        console.print("[bold]near a limit:[/]")
        for r in warned:
            console.print(f"  {r.section}: {escape(r.name)}: {escape(r.message)}", highlight=False)
    if skips:
        console.print("[bold]not run:[/]")
        for r in skips:
            console.print(f"  {r.section}: {escape(r.name)}: {escape(r.message)}", highlight=False)
    if hints:
        console.print("[bold]diagnosis:[/]")
        for h in hints:
            console.print(f"  - {escape(h)}", highlight=False)
    console.print(verdict_text(rows))


def verdict_text(rows: list[Row]) -> str:
    """`N checks failed`, `ALL PASS` (with the warnings and skips counted), or `nothing passed`."""
    n = sum(r.status == Status.FAIL for r in rows)
    extra = "".join(f", {k} {what}" for k, what in ((sum(r.status == Status.WARN for r in rows), "near a limit"),
                                                      (skipped(rows), "skipped")) if k)
    if n:
        return f"[bold red]{n} check{'s' if n > 1 else ''} failed[/]{extra}"
    if not any(r.status in (Status.PASS, Status.WARN) for r in rows):
        return "[bold yellow]nothing passed (every check was skipped)[/]"
    return f"[bold green]ALL PASS[/]{extra}"


def history_table(entries: list[dict]) -> Table:
    """Earlier runs, oldest first: when, card, level, counts, exit code and the first failure."""
    table = Table(title="otpu-diag history", title_justify="left")
    for col in ("time", "device", "target", "level", "PASS", "WARN", "FAIL", "SKIP", "exit", "first failure"):
        table.add_column(col, justify="right" if col in ("level", "PASS", "WARN", "FAIL", "SKIP", "exit") else "left")
    for e in entries:
        c = e.get("counts") or {}
        failed = e.get("failed") or []
        first = f"{failed[0].get('name')}: {failed[0].get('message')}" if failed else ""
        table.add_row(*(escape(str(x)) for x in (e.get("time", "?"), e.get("device", "?"), e.get("target") or "",
                                                 e.get("level", "?"), c.get("PASS", 0), c.get("WARN", 0),
                                                 c.get("FAIL", 0), c.get("SKIP", 0), e.get("exit_code", "?"), first)))
    return table


def document(device: str, target: str | None, rows: list[Row], hints: list[str]) -> dict:
    return {"tool": "otpu-diag", "device": device, "target": target,
            "time": dt.datetime.now().isoformat(timespec="seconds"), "argv": sys.argv,
            "rows": [r.as_dict() for r in rows], "summary": summary(rows), "hints": hints,
            "failed": sum(r.status == Status.FAIL for r in rows)}
