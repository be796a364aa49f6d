"""`otpu asm` and `otpu disasm`: openTPU assembly text <-> program images (8 words per instruction)."""
from __future__ import annotations

from pathlib import Path

import typer

from .. import asm, isa
from ..console import print_json, stdout
from ..errors import UsageError
from ..hookspecs import hookimpl
from ..outpath import check_writable, is_stdout, write_or_show


def _read(path: Path, what: str, binary: bool) -> bytes | str:
    try:
        return path.read_bytes() if binary else path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {path} is a directory") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not text", hint="to list a program image use `otpu disasm`") from None
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror}") from None


def _write(path: Path, data: bytes | str, option: str = "-o") -> None:
    """An output file (`-` is stdout), checked first; a write that still fails is a usage error."""
    check_writable(path, option)
    write_or_show(path, data, option)


def asm_cmd(source: Path = typer.Argument(..., help="Assembly file (.s)."),
            output: Path = typer.Option(None, "-o", "--output", help="Program image to write (default: SOURCE with .bin)."),
            waits: bool = typer.Option(None, "--waits/--no-waits",
                                       help="Append the WAITC wait table after the program (default: when the source has '!' entries)."),
            json_out: bool = typer.Option(False, "--json", help="Print a JSON summary.")) -> None:
    """Assemble openTPU assembly into a program image (little-endian, 32 bytes per instruction)."""
    if output is not None:
        check_writable(output, "-o")
    program = asm.parse(_read(source, "assembly file", binary=False))
    output = output or source.with_suffix(".bin")
    with_waits = program.waits is not None if waits is None else waits
    table = (program.waits or [isa.NO_WAIT] * len(program.instrs)) if with_waits else None
    image = isa.encode_program(program.instrs, table)
    _write(output, image)
    summary = {"source": str(source), "output": str(output), "instructions": len(program.instrs),
               "bytes": len(image), "wait_table": with_waits}
    if json_out and not is_stdout(output):
        print_json(summary)
    elif not is_stdout(output):
        stdout().print(f"{output}: {len(program.instrs)} instructions, {len(image)} bytes"
                       + (" (program + WAITC table)" if with_waits else ""))


def disasm_cmd(image: Path = typer.Argument(..., help="Program image (.bin)."),
               waits: bool = typer.Option(False, "--waits", help="The image ends with a WAITC wait table (40 bytes per instruction in all)."),
               output: Path = typer.Option(None, "-o", "--output", help="Write the assembly here instead of stdout."),
               pcs: bool = typer.Option(False, "--pc", help="End each line with a '# pc N' comment."),
               json_out: bool = typer.Option(False, "--json", help="Print JSON: per instruction pc, words, fields and text.")) -> None:
    """Disassemble a program image into assembly text that `otpu asm` turns back into the same bytes."""
    data = _read(image, "program image", binary=True)
    per = isa.BYTES_PER_INSTR + (8 if waits else 0)
    if len(data) % per:
        raise UsageError(f"{image}: {len(data)} bytes is not a whole number of {per}-byte instructions"
                         + (" (program + wait table)" if waits else ""),
                         hint=None if waits else "if the image carries a WAITC table, add --waits")
    n = len(data) // per
    instrs, table = isa.split_image(data, n, waits)
    if json_out:
        print_json([{"pc": pc, "op": i.op.name, "text": asm.disasm_one(i), "words": [f"0x{w:08x}" for w in i.words],
                     "fields": i.fields, **({"wait": f"0x{table[pc].pack():016x}"} if table else {})}
                    for pc, i in enumerate(instrs)])
        return
    text = asm.disassemble(instrs, table, pcs=pcs)
    if output:
        _write(output, text)
    else:
        stdout().out(text, end="", highlight=False)


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    app.command("asm")(asm_cmd)
    app.command("disasm")(disasm_cmd)
