"""`otpu ol compile`: compile an `ol` kernel from a Python file and report what it became.

The file defines the kernel function and, unless the kernel takes no arguments, a function
`<kernel>_args(target)` returning its keyword arguments (layouts placed with
`otpu_core.ol.runtime.Image` or `otpu_core.kernels.decoder.AddressPlan`). `--arg NAME=INT`
adds or overrides integer arguments. The report: instructions, TMEM words, what each peephole
saved, WAITC entries and times; `-o` writes the program image (with `--waits`, the WAITC table
after it), `--asm` the assembly listing.
"""
from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from pathlib import Path

import typer
from rich.table import Table

from .. import asm, target as target_mod
from ..console import print_json, stdout
from ..errors import OtpuError, UsageError
from ..hookspecs import hookimpl
from ..outpath import check_writable, write_or_show
from ..ol.cache import cached_compile
from ..ol.program import compile_kernel

ol_app = typer.Typer(name="ol", no_args_is_help=True, add_completion=False,
                  help="The ol kernel language: compile kernels and see what they become.")


def _load_module(path: Path):
    if path.is_dir():
        raise UsageError(f"kernel file {path} is a directory")
    if not path.is_file():
        raise UsageError(f"kernel file {path} does not exist")
    if path.suffix != ".py":
        raise UsageError(f"kernel file {path} is not a Python file (.py)", hint="kernels are written in Python")
    try:
        path.read_text()
    except UnicodeDecodeError:
        raise UsageError(f"kernel file {path} is not UTF-8 text") from None
    spec = importlib.util.spec_from_file_location(f"_ol_user_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise UsageError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # the user's module failed while importing: report it, not a traceback
        raise UsageError(f"{path}: importing it failed: {e}") from None
    return module


def _user_call(path: Path, fn, *args, **kwargs):
    """Call into the user's file; a plain Python error there becomes a usage error naming its line."""
    try:
        return fn(*args, **kwargs)
    except OtpuError:
        raise
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        where = f" at {path.name}:{frames[-1].lineno}: {frames[-1].line}" if frames else ""
        raise UsageError(f"the kernel failed: {e}{where}") from None


def _parse_args(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = int(value, 0)
        except ValueError:
            raise UsageError(f"--arg {item!r}: expected NAME=INTEGER") from None
        if not sep or not name.strip():
            raise UsageError(f"--arg {item!r}: expected NAME=INTEGER")
    return out


@ol_app.command("compile")
def compile_cmd(file: Path = typer.Argument(..., help="Python file defining the kernel."),
                kernel: str = typer.Option(..., "--kernel", "-k", help="Name of the kernel function in FILE."),
                target: str = typer.Option(None, "--target", "-t", help="Target name or .toml (default: $OTPU_TARGET or ypcb-00338)."),
                arg: list[str] = typer.Option([], "--arg", help="Integer kernel argument NAME=VALUE (repeatable)."),
                no_peepholes: bool = typer.Option(False, "--no-peepholes", help="Compile without the fusion peepholes."),
                cache: bool = typer.Option(False, "--cache", help="Use the on-disk program cache ($OTPU_CACHE)."),
                output: Path = typer.Option(None, "-o", "--output", help="Write the program image here."),
                waits: bool = typer.Option(False, "--waits", help="Append the WAITC table to the image."),
                listing: Path = typer.Option(None, "--asm", help="Write the assembly listing (with wait entries) here."),
                json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Compile KERNEL from FILE for a target and print instructions, TMEM, peephole savings and WAITC."""
    for path, option in ((output, "--output"), (listing, "--asm")):
        if path is not None:
            check_writable(path, option)
    module = _load_module(file)
    fn = getattr(module, kernel, None)
    if not callable(fn):
        raise UsageError(f"{file} has no kernel function {kernel!r}")
    t = target_mod.load(target)
    args_fn = getattr(module, f"{kernel}_args", None)
    kwargs = dict(_user_call(file, args_fn, t) if callable(args_fn) else {})
    given = _parse_args(arg)
    params = inspect.signature(fn).parameters
    unknown = [k for k in given if k not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values())]
    if unknown:
        raise UsageError(f"--arg {unknown[0]}=...: {kernel} has no parameter {unknown[0]!r}",
                         hint=f"its parameters: {', '.join(params) or 'none'}")
    kwargs.update(given)
    compile_fn = cached_compile if cache else compile_kernel
    prog = _user_call(file, compile_fn, fn, t, peepholes=not no_peepholes, **kwargs)
    if output is not None:
        write_or_show(output, prog.image(with_waits=waits), "--output")
    if listing is not None:
        write_or_show(listing, asm.disassemble(prog.instrs, prog.waits), "--asm")
    s = prog.stats
    report = {"kernel": kernel, "target": t.name, "arch_hash": f"0x{t.arch_hash():08x}", "instructions": s.instrs,
              "imem_instructions": t.config().imem_instrs, "tmem_peak_words": s.tmem_peak,
              "tmem_words_moved": s.tmem_traffic, "peepholes": s.peepholes,
              "peephole_saved_instructions": s.peephole_instrs, "peephole_saved_words": s.peephole_words,
              "waitc_entries_waiting": s.waits, "waitc_ms": round(s.waitc_s * 1e3, 3),
              "compile_ms": round(s.compile_s * 1e3, 3), "cached": s.cached,
              "run_args": [[list(p) for p in combo] for combo in prog.run_args]}
    if json_out:
        print_json(report)
        return
    con = stdout()
    con.print(f"[bold]{kernel}[/] on {t.name} (CFG_HASH {report['arch_hash']}): {s.instrs} instructions "
              f"(IMEM {report['imem_instructions']}), TMEM high-water mark {s.tmem_peak} words, "
              f"{s.tmem_traffic} TMEM words moved per run")
    con.print(f"compiled in {report['compile_ms']} ms{' (from the cache)' if s.cached else ''}; "
              f"WAITC {report['waitc_ms']} ms, {s.waits} entries wait")
    if s.peepholes:
        table = Table(title="peephole savings")
        for col in ("rule", "instructions", "TMEM words"):
            table.add_column(col)
        for rule, v in sorted(s.peepholes.items()):
            table.add_row(rule, str(v["instrs"]), str(v["words"]))
        con.print(table)
    if prog.run_args:
        con.print("run-time arguments: " + "; ".join(
            f"ARG{7 - k} = " + " + ".join(f"{c}*{n}" for n, c in combo) for k, combo in enumerate(prog.run_args)))


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    app.add_typer(ol_app, name="ol")
