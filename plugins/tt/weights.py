"""`otpu-tt convert`, `otpu-tt weights info|check` and `otpu-tt upload`: the FTTW weights artifact.

The work is `otpu_core.tt`'s (`convert`, `fttw`, `wcheck`, `upload`); this module parses the
options, shows progress (a bar on a terminal, a plain line on stderr every few seconds when piped)
and renders the results as Rich tables or `--json`.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from otpu_core.console import print_json, stderr, stdout
from otpu_core.errors import EXIT_CHECKS_FAILED, UsageError
from otpu_core.outpath import check_writable
from otpu_core.tt import bfp
from otpu_core.tt.convert import convert
from otpu_core.tt.fttw import LAYOUT_TITLES, FttwFile
from otpu_core.tt.ledger import Ledger
from otpu_core.tt.upload import upload
from otpu_core.tt.wcheck import check

from .cliopts import opened

weights_app = typer.Typer(name="weights", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                          help="FTTW weight files: info (the tensor directory), check (the precision gate against the GGUF).")

PLAIN_EVERY = 2.0          # seconds between progress lines when stderr is not a terminal


class Meter:
    """Progress of a long copy: a transient bar on a terminal, else a line on stderr every few seconds."""

    def __init__(self, verb: str):
        self.verb, self.con = verb, stderr()
        self.t0 = self.last = time.monotonic()
        self.bar: Progress | None = None
        self.task = None

    def __enter__(self) -> "Meter":
        if self.con.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), DownloadColumn(),
                                TimeRemainingColumn(), console=self.con, transient=True)
            self.bar.start()
        return self

    def __call__(self, done: int, total: int, name: str) -> None:
        if self.bar is not None:
            if self.task is None:
                self.task = self.bar.add_task(self.verb, total=total)
            self.bar.update(self.task, completed=done, description=f"{self.verb} {name}")
            return
        now = time.monotonic()
        if now - self.last >= PLAIN_EVERY:
            self.last = now
            pct = 100 * done / total if total else 100
            print(f"{self.verb}: {pct:.0f}% ({_size(done)} of {_size(total)}, {now - self.t0:.0f} s) {name}",
                  file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _format_option(text: str) -> bfp.TileFormat:
    fmt = bfp.format_named(text)
    if fmt is None:
        raise UsageError(f"--default {text}: not a tile format; use bfp8, bfp4, bf16 or fp32")
    return fmt


def _gguf_type(code: int) -> str:
    import gguf
    try:
        return gguf.GGMLQuantizationType(code).name
    except ValueError:
        return str(code)


def _gate(min_pcc: float, max_abs: float | None) -> str:
    text = f"PCC >= {min_pcc:g}"
    if max_abs is not None and not math.isinf(max_abs):
        text += " exact" if max_abs == 0 else f", max-abs <= {max_abs:g}"
    return text


# ---- convert ---------------------------------------------------------------------------------

def convert_cmd(model: Path = typer.Argument(..., metavar="MODEL.gguf", help="The GGUF checkpoint."),
                out: Path = typer.Argument(..., metavar="OUT.fttw", help="The FTTW file to write."),
                ledger: Path = typer.Option(None, "--ledger", metavar="FILE",
                                            help="Precision ledger (TOML): per-tensor format, layout and gate."),
                default: str = typer.Option("bfp8", "--default", metavar="FORMAT",
                                            help="Format of 2-D tensors no ledger rule names: bfp8, bfp4, bf16 or fp32."),
                json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Convert a GGUF checkpoint to an FTTW file: tiles in the card's formats, face by face, ready to upload.

    Streams 32-row strips, so memory stays at a few strip buffers whatever the model's size. 1-D tensors
    stay fp32; embeddings (*embd.weight) keep GGUF's row order (SOURCE); other matrices are transposed to
    K x N with column-major tiles (MATMUL_NMAJOR). A ledger can change any of it per tensor."""
    fmt = _format_option(default)
    book = Ledger.load(ledger) if ledger is not None else Ledger()
    check_writable(out, "OUT.fttw")
    if out.exists() and model.exists() and out.resolve() == model.resolve():
        raise UsageError(f"OUT.fttw {out} is the model itself; name another file")
    with Meter("convert") as meter:
        result = convert(model, out, book, fmt, progress=meter)
    for i, glob in result.unused_rules:
        stderr().print(Text.assemble(("warning:", "bold yellow"), f" ledger rule {i} (match '{glob}') matched no tensor"))
    if json_out:
        print_json(result.as_dict())
        return
    table = Table(title=f"{out}: {len(result.entries)} tensors from {model.name}")
    for col in ("format", "tensors", "bytes"):
        table.add_column(col, justify="right" if col != "format" else "left")
    for name, row in result.as_dict()["by_format"].items():
        table.add_row(name, str(row["tensors"]), _size(row["bytes"]))
    stdout().print(table)
    rate = result.source_bytes / result.seconds / 1e6 if result.seconds else 0
    stdout().print(f"{_size(result.source_bytes)} of GGUF tensors to {_size(result.file_bytes)} in "
                   f"{result.seconds:.1f} s ({rate:.0f} MB/s)", markup=False)


# ---- weights info / check --------------------------------------------------------------------

@weights_app.command("info")
def info_cmd(path: Path = typer.Argument(..., metavar="FILE", help="An FTTW file."),
             json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The tensor directory: name, shape, source type, format, layout, tile grid, file offset, DRAM place, gate."""
    with FttwFile(path) as f:
        h, entries = f.header, f.entries
    if json_out:
        print_json({"path": str(path), "version": h.version, "tensors": h.tensor_count, "file_bytes": h.file_bytes,
                    "data_offset": h.data_offset, "dram_base": h.dram_base,
                    "entries": [{**e.as_dict(), "source_type": _gguf_type(e.source_type)} for e in entries]})
        return
    table = Table(title=f"{path}: FTTW v{h.version}, {h.tensor_count} tensors, {_size(h.file_bytes)}")
    for col in ("#", "name", "shape", "from", "format", "layout", "tiles", "offset", "bytes", "DRAM", "crc32", "gate"):
        table.add_column(col, justify="right" if col in ("#", "offset", "bytes") else "left")
    for i, e in enumerate(entries):
        tiles = "-" if e.layout == "flat" else f"{e.tile_rows}x{e.tile_cols}" + (f" x{e.matrices}" if e.matrices > 1 else "")
        table.add_row(str(i), e.name, "x".join(map(str, e.shape)), _gguf_type(e.source_type), e.fmt.name,
                      LAYOUT_TITLES[e.layout], tiles, f"{e.offset:#x}", _size(e.nbytes), f"{e.bank}:{e.dram_addr:#x}",
                      f"{e.crc32:08x}", _gate(e.min_pcc, e.max_abs))
    stdout().print(table)


@weights_app.command("check")
def check_cmd(path: Path = typer.Argument(..., metavar="FILE", help="An FTTW file."),
              model: Path = typer.Argument(..., metavar="MODEL.gguf", help="The GGUF checkpoint it was converted from."),
              json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The precision gate: every tensor unpacked and compared with its fp32 source, PCC and max-abs error.
    A tensor fails under its gate (set by the ledger at convert time) or when its CRC-32 does not match.
    Exit 0 all pass, 1 any fails."""
    with Meter("check") as meter:
        results = check(path, model, progress=meter)
    failed = [r for r in results if not r.passed]
    worst = {}
    for r in results:
        if r.pcc is not None and (r.format not in worst or r.pcc < worst[r.format].pcc):
            worst[r.format] = r
    if json_out:
        print_json({"path": str(path), "model": str(model), "tensors": len(results), "failed": len(failed),
                    "worst": {k: {"name": v.name, "pcc": v.pcc, "max_abs": v.max_abs} for k, v in worst.items()},
                    "results": [r.as_dict() for r in results]})
    else:
        table = Table(title=f"{path} against {model}")
        for col in ("name", "format", "layout", "PCC", "max-abs", "gate", "result"):
            table.add_column(col, justify="right" if col in ("PCC", "max-abs") else "left")
        for r in results:
            verdict = Text("PASS", "green") if r.passed else Text.assemble(("FAIL", "red"), " ", r.problem)
            table.add_row(r.name, r.format, r.layout, "-" if r.pcc is None else f"{r.pcc:.6f}",
                          "-" if r.max_abs is None else f"{r.max_abs:.3g}", _gate(r.min_pcc, r.max_abs_limit),
                          verdict)
        con = stdout()
        con.print(table)
        summary = "; ".join(f"worst {k} PCC {v.pcc:.6f} ({v.name})" for k, v in sorted(worst.items()))
        con.print(f"{len(results)} tensors: {len(results) - len(failed)} pass, {len(failed)} fail. {summary}", markup=False)
    if failed:
        raise typer.Exit(EXIT_CHECKS_FAILED)


# ---- upload ----------------------------------------------------------------------------------

def upload_cmd(path: Path = typer.Argument(..., metavar="FILE", help="An FTTW file."),
               dev: str = typer.Option(None, "--dev", "-d", help="Card: tt:0 (first real card), tt:sim or tt:sim:NAME "
                                       "(simulated). Default: first /dev/tenstorrent node, else tt:sim."),
               verify: bool = typer.Option(False, "--verify", help="Read every chunk back and compare (slow on a "
                                           "real card: reads from the card run at a few MB/s)."),
               json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Copy an FTTW file into card DRAM over the NoC: header and directory to bank 0 at 0, each tensor to the
    bank and address its directory entry names. A byte copy: the file is already in the card's format."""
    with FttwFile(path) as f, opened(dev) as card, Meter("upload") as meter:
        result = upload(card, f, verify=verify, progress=meter)
        spec = card.spec
    if json_out:
        print_json({"path": str(path), "dev": spec, **result.as_dict()})
        return
    rate = result.bytes / result.seconds / 1e6 if result.seconds else 0
    stdout().print(f"{spec}: {result.tensors} tensors, {_size(result.bytes)} into DRAM banks "
                   f"{', '.join(map(str, result.banks))} in {result.seconds:.1f} s ({rate:.0f} MB/s)"
                   + ("; read back and verified" if result.verified else ""), markup=False)
