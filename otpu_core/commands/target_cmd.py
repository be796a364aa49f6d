"""`otpu target list|show`: the target descriptions under `targets/`."""
from __future__ import annotations

import dataclasses

import typer
from rich.table import Table

from .. import target as target_mod
from ..console import print_json, stdout
from ..hookspecs import hookimpl

app = typer.Typer(name="target", no_args_is_help=True, add_completion=False, help="Target descriptions (targets/*.toml).")


@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the shipped targets."""
    targets = [target_mod.load(n) for n in target_mod.names()]
    default = target_mod.resolve(None).stem
    if json_out:
        print_json([{"name": t.name, "default": t.path.stem == default, "arch_hash": f"0x{t.arch_hash():08x}",
                     "description": t.description} for t in targets])
        return
    table = Table(title="targets")
    for col in ("name", "S", "D", "MCOLS", "LANES", "DRAM", "board", "CFG_HASH"):
        table.add_column(col)
    for t in targets:
        a = t.arch
        name = t.name + (" (default)" if t.path.stem == default else "")
        table.add_row(name, str(a.S), str(a.D), str(a.MCOLS), str(a.LANES), _bytes(a.DRAM_BYTES * a.S),
                      t.platform["board"], f"0x{t.arch_hash():08x}")
    stdout().print(table)


@app.command("show")
def show_cmd(name: str = typer.Argument(None, help="Target name or path to a .toml (default: $OTPU_TARGET or ypcb-00338)."),
             json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show every layer of one target and its arch hash (the card's CFG_HASH)."""
    t = target_mod.load(name)
    if json_out:
        print_json(t.as_dict())
        return
    con = stdout()
    con.print(f"[bold]{t.name}[/]  {t.description}")
    con.print(f"file {t.path}   arch_hash (CFG_HASH) 0x{t.arch_hash():08x}")
    for layer, values in (("arch", dataclasses.asdict(t.arch)), ("uarch", dataclasses.asdict(t.uarch)),
                          ("tech", t.tech), ("platform", t.platform)):
        table = Table(title=layer, show_header=False, title_justify="left")
        table.add_column("key")
        table.add_column("value")
        for k, v in values.items():
            table.add_row(k, _fmt(k, v))
        con.print(table)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}"
        n /= 1024
    return str(n)


def _fmt(key: str, v) -> str:
    if key.endswith("BYTES") or key == "channel_bytes":
        return f"{v} ({_bytes(v)})"
    if key.startswith("pcie_"):
        return f"0x{v:04x}"
    return str(v).lower() if isinstance(v, bool) else str(v)


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    app.add_typer(globals()["app"], name="target")
