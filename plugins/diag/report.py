"""How otpu-diag prints: row lines under section headers, the summary matrix, what does not work,
what did not run, the diagnosis, the verdict; and the JSON document of `--json FILE`."""
from __future__ import annotations

import datetime as dt
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from otpu_core.checks import Row, Status, summary

STATUS_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.SKIP: "yellow", Status.INFO: "cyan"}


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
    return f"[{STATUS_STYLE[status]}]{n}[/]" if n and status in (Status.FAIL, Status.SKIP) else str(n)


def print_summary(console: Console, rows: list[Row], hints: list[str]) -> None:
    console.print()
    console.print("[bold]summary[/]")
    console.print(summary_table(rows))
    failed = [r for r in rows if r.status == Status.FAIL]
    skipped = [r for r in rows if r.status == Status.SKIP]
    if failed:
        console.print("[bold]does not work:[/]")
        for r in failed:
            console.print(f"  {r.section}: {escape(r.name)}: {escape(r.message)}", highlight=False)
    if skipped:
        console.print("[bold]not run:[/]")
        for r in skipped:
            console.print(f"  {r.section}: {escape(r.name)}: {escape(r.message)}", highlight=False)
    if hints:
        console.print("[bold]diagnosis:[/]")
        for h in hints:
            console.print(f"  - {escape(h)}", highlight=False)
    console.print(verdict_text(rows))


def verdict_text(rows: list[Row]) -> str:
    n = sum(r.status == Status.FAIL for r in rows)
    if n:
        return f"[bold red]{n} check{'s' if n > 1 else ''} failed[/]"
    if not any(r.status == Status.PASS for r in rows):
        return "[bold yellow]nothing passed (every check was skipped)[/]"
    return "[bold green]ALL PASS[/]"


def document(device: str, target: str | None, rows: list[Row], hints: list[str]) -> dict:
    return {"tool": "otpu-diag", "device": device, "target": target,
            "time": dt.datetime.now().isoformat(timespec="seconds"), "argv": sys.argv,
            "rows": [r.as_dict() for r in rows], "summary": summary(rows), "hints": hints,
            "failed": sum(r.status == Status.FAIL for r in rows)}
