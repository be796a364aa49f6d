"""`otpu setup`: is this host ready for a real card? The PCIe device, its link, the xdma driver,
the device nodes, this user's access and the udev rules, each with the command that fixes it."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from .. import hostsetup
from ..console import print_json, stdout
from ..errors import EXIT_CHECKS_FAILED, UsageError
from ..hookspecs import hookimpl

STYLE = {"PASS": "green", "WARN": "bold yellow", "FAIL": "bold red"}


def setup_cmd(check: bool = typer.Option(False, "--check", help="Report what is missing, exit 1 if anything is "
                                                                "(what `otpu setup` does: it never changes the host)."),
              udev_rules: bool = typer.Option(False, "--udev-rules", help="Print the udev rules file to install."),
              json_out: bool = typer.Option(False, "--json", help="Print JSON."),
              root: Path = typer.Option(Path("/"), "--root", hidden=True, help="Look under this tree (tests).")) -> None:
    """Check that this host can use a real openTPU card: the PCIe device and link, the xdma
    driver, the device nodes, your access to them and the udev rules, each with its fix. Changes
    nothing. Exit 0 ready (warnings allowed), 1 something is missing."""
    if udev_rules:
        print(hostsetup.UDEV_RULES, end="")
        return
    if not root.is_dir():
        raise UsageError(f"--root {root}: not a directory")
    report = hostsetup.check(root)
    if json_out:
        print_json(report.as_dict())
    else:
        table = Table(title="otpu setup --check", title_justify="left")
        for col in ("", "item", "found", "fix"):
            table.add_column(col)
        for i in report.items:
            table.add_row(f"[{STYLE[i.status]}]{i.status}[/]", escape(i.name), escape(i.found), escape(i.fix))
        con = stdout()
        con.print(table)
        con.print("[bold green]ready for a card[/]" if report.ok else
                  "[bold red]not ready: fix the FAIL rows above[/] (`otpu setup --udev-rules` prints the rules)")
    if not report.ok:
        raise typer.Exit(EXIT_CHECKS_FAILED)


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    app.command("setup")(setup_cmd)
