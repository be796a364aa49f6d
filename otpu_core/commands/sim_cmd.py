"""`otpu sim`: run programs on the golden simulator (`run`), show its machine (`info`), read traces (`trace`).

This is how a user, or an external checker, pokes the machine: load DRAM images and arguments,
run a program (assembly text or a binary image), dump registers, TMEM or DRAM, and get the
timing model's cycles, counters and trace records. `run --dev` does the same on a card through
the Board (DMA in and out, the card's counters and trace), so other tools see the run.
Other modules may add commands to `app`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from .. import cliopts, isa, tracefmt
from ..console import print_json, spin_while, stderr, stdout
from ..errors import UsageError
from ..hookspecs import hookimpl
from ..outpath import check_writable, write_or_show
from .card_cmd import wait_showing_cycles
from ..target import load as load_target
from ..timing import BUSY_OF, FREE_COUNTERS, RUN_COUNTERS

app = typer.Typer(name="sim", no_args_is_help=True, add_completion=False,
                  help="The golden ISA simulator: run programs, dump state, read timing and traces.")

UNIT_LABELS = {"DMA_BUSY": "DMA", "MXU_BUSY": "MXU", "QNT_BUSY": "quantiser", "VPU_BUSY": "VPU", "COLL_BUSY": "collective"}
BATCH = 4096


def _int(text: str, what: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an integer (decimal or 0x hex)") from None


def read_text(path: Path, what: str) -> str:
    """A text file the user named; not UTF-8 is a usage error naming it."""
    try:
        return path.read_text()
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})",
                         hint="assembly is text (.s); a program image ends in .bin") from None


def parse_source(path: Path, text: str):
    """Assembly text -> an asm Program; an error names the file before the line."""
    from ..asm import AsmError, parse
    try:
        return parse(text)
    except AsmError as e:
        raise AsmError(f"{path}: {e.message}", e.hint) from None


def read_program(path: Path, with_table: bool = False) -> tuple[list[isa.Instr], list | None]:
    """(instructions, WAITC entries or None) from assembly text (.s/.asm, `!` entries) or a
    binary image (anything else; with_table: the image is followed by its wait table)."""
    if not path.is_file():
        raise UsageError(f"program file {path} does not exist")
    if path.suffix.lower() in (".s", ".asm"):
        prog = parse_source(path, read_text(path, "program file"))
        return prog.instrs, prog.waits
    data = path.read_bytes()
    if not with_table:
        return isa.decode_program(data), None
    per = isa.BYTES_PER_INSTR + 8
    if len(data) % per:
        raise UsageError(f"{path}: {len(data)} bytes is not a whole number of instructions with wait entries "
                         f"({per} bytes each)")
    return isa.split_image(data, len(data) // per, True)


def parse_dram(spec: str) -> tuple[Path, int]:
    if "@" not in spec:
        raise UsageError(f"--dram {spec!r}: expected FILE@ADDR, e.g. weights.bin@0x100000")
    name, addr = spec.rsplit("@", 1)
    path = Path(name)
    if not path.is_file():
        raise UsageError(f"--dram {spec!r}: file {name} does not exist")
    return path, _int(addr, f"--dram {spec}")


def parse_args(specs: list[str]) -> list[int]:
    args = [0] * isa.NARGS
    for spec in specs:
        if "=" not in spec:
            raise UsageError(f"--arg {spec!r}: expected N=VALUE with N in 0..7")
        n, v = spec.split("=", 1)
        k = _int(n, f"--arg {spec}")
        if not 0 <= k < isa.NARGS:
            raise UsageError(f"--arg {spec!r}: argument number must be 0..7 (ARG0..ARG7 = R8..R15)")
        val = _int(v, f"--arg {spec}")
        if not -(1 << 31) <= val < (1 << 32):
            raise UsageError(f"--arg {spec!r}: value must fit 32 bits")
        args[k] = val & 0xFFFFFFFF
    return args


def parse_dump(spec: str) -> tuple[str, int, int]:
    parts = spec.split(":")
    if parts[0] == "regs" and len(parts) == 1:
        return "regs", 0, 0
    if parts[0] in ("tmem", "dram") and len(parts) == 3:
        return parts[0], _int(parts[1], f"--dump {spec}"), _int(parts[2], f"--dump {spec}")
    raise UsageError(f"--dump {spec!r}: expected regs, tmem:ADDR:N or dram:ADDR:N")


def _dump(m, kind: str, addr: int, n: int, sid: int) -> dict:
    if kind == "regs":
        return {"kind": "regs", "slice": sid, "values": list(m.slices[sid].regs)}
    if kind == "tmem":
        words = m.read_tmem(addr, n, sid)
        return {"kind": "tmem", "slice": sid, "addr": addr, "words": words.tolist(),
                "floats": [float(x) for x in words.view(np.float32)]}
    data = m.read_dram(addr, n, sid)
    return {"kind": "dram", "slice": sid, "addr": addr, "bytes": data.tobytes().hex()}


def _run_with_progress(m) -> None:
    from ..isasim import HALTED
    spin_while(lambda: m.run_for(BATCH) != HALTED, lambda: f"simulating: {m.steps:,} instructions", stderr())


def summary(m, sid: int = 0) -> dict:
    """The golden machine's report of slice `sid` after a run."""
    return _report(m.counters(sid), m.target, sid)


def _report(c: dict[str, int], t, sid: int = 0) -> dict:
    """Cycles, instructions, unit utilisation and counters from a run's counters (machine or card)."""
    cycles = max(c["CYCLES"], 1)
    return {"slice": sid, "cycles": c["CYCLES"], "instructions": c["ICOUNT"],
            "seconds_at_core_clock": c["CYCLES"] / t.core_hz, "core_mhz": t.platform["core_mhz"],
            "utilisation": {UNIT_LABELS[k]: c[k] / cycles for k in BUSY_OF.values() if k in c},
            "dram_bytes": 64 * (c["DRAM_RD"] + c["DRAM_WR"]),
            "counters": {k: c[k] for k in RUN_COUNTERS + FREE_COUNTERS if k in c}}


@app.command("run")
def run_cmd(program: Path = typer.Argument(..., help="Program: assembly text (.s/.asm) or a binary image."),
            target: str = typer.Option(None, "--target", "-t", envvar="OTPU_TARGET",
                                       help="Target name or .toml (default ypcb-00338)."),
            dev: str = typer.Option(None, "--dev", help="Run on this card instead of a private golden machine: "
                                    "sim or sim:NAME (a simulated card other tools such as otpu-smi see), or "
                                    "/dev/xdmaN. --dram and --dump dram go by DMA; regs and tmem cannot be "
                                    "dumped from a card."),
            dram: list[str] = typer.Option([], "--dram", help="FILE@ADDR: load a file into DRAM (every slice); repeatable."),
            arg: list[str] = typer.Option([], "--arg", help="N=VALUE: run argument ARGn (R8+n); repeatable."),
            dump: list[str] = typer.Option([], "--dump", help="regs | tmem:ADDR:N | dram:ADDR:N after the run; repeatable."),
            sid: int = typer.Option(0, "--slice", help="Slice to dump and report."),
            json_out: bool = typer.Option(False, "--json", help="Print JSON."),
            trace: Path = typer.Option(None, "--trace", help="Write the slice's 64-bit trace records to this file."),
            max_steps: int = typer.Option(10_000_000, "--max-steps", help="Stop with an error after this many instructions (golden machine; a card has --timeout)."),
            timeout: float = typer.Option(600.0, "--timeout", min=0.1, help="With --dev: seconds to wait for HALT."),
            waits: bool = typer.Option(False, "--waits", help="The binary image is followed by its WAITC wait table "
                                       "(SEQ_WC targets schedule by it).")) -> None:
    """Run a program on the golden simulator (or with --dev on a card) and report cycles, instructions and
    unit utilisation."""
    cliopts.seconds(timeout, "--timeout")
    prog, table = read_program(program, waits)
    if not prog:
        raise UsageError(f"{program}: program has no instructions", hint="a program ends with halt")
    dumps = [parse_dump(d) for d in dump]
    loads = [parse_dram(d) for d in dram]
    args = parse_args(arg)
    if trace is not None:
        check_writable(trace, "--trace")
    if dev is not None:
        _refuse_on_card(dev, dumps, sid, waits)
        result, records = _run_on_card(dev, target, prog, loads, args, dumps, trace is not None, timeout)
    else:
        result, records = _run_on_machine(target, prog, table, loads, args, dumps, sid, trace is not None, max_steps)
    if trace is not None:
        write_or_show(trace, np.asarray(records, dtype="<u8").tobytes(), "--trace")
    if json_out:
        print_json(result)
        return
    _print_summary(result, trace)


def _run_on_machine(target, prog, table, loads, args, dumps, sid, want_trace: bool, max_steps: int):
    from ..isasim import Machine
    m = Machine(load_target(target), trace=want_trace, max_steps=max_steps)
    if not 0 <= sid < m.cfg.S:
        raise UsageError(f"--slice {sid}: the target has {m.cfg.S} slice(s)")
    for path, addr in loads:
        m.write_dram(addr, np.fromfile(path, np.uint8))
    m.load(prog, args, waits=table)
    _run_with_progress(m)
    result = summary(m, sid)
    result["dumps"] = [_dump(m, k, a, n, sid) for k, a, n in dumps]
    return result, (m.trace_records(sid) if want_trace else None)


def _refuse_on_card(dev: str, dumps, sid: int, waits: bool) -> None:
    """What a card cannot do, refused before it is opened."""
    for kind, _, _ in dumps:
        if kind != "dram":
            raise UsageError(f"--dump {kind}: a card's {'registers' if kind == 'regs' else 'TMEM'} cannot be read "
                             f"from the host (--dev {dev})", hint="run without --dev to dump it from the golden simulator")
    if sid != 0:
        raise UsageError(f"--slice {sid}: with --dev the card's run is reported as a whole (use --slice 0)")
    if waits:
        raise UsageError(f"--waits: a card's IMEM takes instructions only, not a WAITC table (--dev {dev})",
                         hint="run the image without its table, or without --dev")


def _run_on_card(dev: str, target, prog, loads, args, dumps, want_trace: bool, timeout: float):
    """Load, run and read back through the Board, so the run is on the card for every tool to see."""
    from ..board import Board, BoardBackend, prepare
    image = prepare(prog).image
    with Board.open(dev, target) as board:
        prog_at = BoardBackend(board).prog_at      # the program area at the top of DRAM (scrubbed if ECC)
        for path, addr in loads:
            size = path.stat().st_size
            if addr < prog_at + image.size and addr + size > prog_at:
                raise UsageError(f"--dram {path}@0x{addr:x}: {size} bytes overlap the program area at 0x{prog_at:x}")
            board.write(addr, np.fromfile(path, np.uint8))
        board.load_program(prog_at, image)
        board.set_args(args)
        before = board.snapshot()
        board.start("first" if want_trace else None)
        stats = wait_showing_cycles(board, board, timeout, stderr())
        after = board.snapshot()
        counters = {"CYCLES": stats.cycles, "ICOUNT": stats.instructions, "B_RD": stats.b_reads,
                    "B_WR": stats.b_writes, "A_RD": stats.a_reads, "SW_WR": stats.a_writes, "B_STALL": stats.b_stall}
        if before and after:
            counters.update({k: after[k] - before[k] for k in FREE_COUNTERS if k in after and k in before})
        counters.setdefault("DRAM_RD", 0)
        counters.setdefault("DRAM_WR", 0)
        result = _report(counters, board.target)
        result["device"] = board.t.dev
        result["dumps"] = [{"kind": "dram", "slice": 0, "addr": a, "bytes": board.read(a, n).tobytes().hex()}
                           for _, a, n in dumps]
        records = None
        if want_trace:
            tr = stats.trace
            records = tr["records"]
            # kept from the start, the recording stops when the buffer is full: later records are not there
            result["trace"] = {"records": int(len(records)), "depth": int(tr["depth"]),
                               "full": int(tr["count"]) >= int(tr["depth"]), "dropped": int(tr["drop"])}
    return result, records


def _table(title: str, columns: tuple[str, str], rows) -> Table:
    table = Table(title=title)
    table.add_column(columns[0])
    table.add_column(columns[1], justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def _print_summary(result: dict, trace: Path | None) -> None:
    con = stdout()
    con.print(f"halted after [bold]{result['cycles']:,}[/] cycles, {result['instructions']:,} instructions "
              f"({result['seconds_at_core_clock'] * 1e6:.1f} us at {result['core_mhz']:g} MHz)")
    con.print(_table("unit utilisation", ("unit", "busy"), ((u, f"{100 * x:.1f}%") for u, x in result["utilisation"].items())))
    con.print(_table("counters", ("counter", "value"), ((k, f"{v:,}") for k, v in result["counters"].items())))
    for d in result["dumps"]:
        if d["kind"] == "regs":
            con.print("registers: " + "  ".join(f"r{i}=0x{v:08x}" for i, v in enumerate(d["values"])))
        elif d["kind"] == "tmem":
            t = Table(title=f"TMEM {d['addr']}..{d['addr'] + len(d['words']) - 1}")
            for col in ("addr", "bits", "fp32"):
                t.add_column(col)
            for i, (w, f) in enumerate(zip(d["words"], d["floats"])):
                t.add_row(str(d["addr"] + i), f"0x{w:08x}", repr(f))
            con.print(t)
        else:
            raw = bytes.fromhex(d["bytes"])
            con.print(f"DRAM 0x{d['addr']:x} ({len(raw)} bytes):")
            for off in range(0, len(raw), 16):
                con.print(f"  {d['addr'] + off:08x}  " + " ".join(f"{b:02x}" for b in raw[off:off + 16]), markup=False)
    if trace is not None:
        kept = result.get("trace")
        note = (f" (the card's trace buffer filled at {kept['depth']:,} records: later ones are not in the file)"
                if kept and kept["full"] else "")
        con.print(f"trace records written to {trace}{note}", markup=False)


@app.command("info")
def info_cmd(target: str = typer.Option(None, "--target", "-t", envvar="OTPU_TARGET", help="Target name or .toml."),
             json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The simulated machine of a target: memories, units and the timing model's rates."""
    t = load_target(target)
    c, u = t.config(), t.uarch
    info = {"target": t.name, "slices": c.S, "D": c.D, "MCOLS": c.MCOLS, "LANES": c.LANES, "act_rows": c.act_rows,
            "max_k": c.max_k, "tmem_words": c.TMEM_WORDS, "dram_bytes_per_slice": c.DRAM_BYTES,
            "imem_instructions": c.imem_instrs, "features": {"PAIR": c.PAIR, "DSTEP": c.DSTEP, "STREAM": c.STREAM},
            "timing": {"dram_bytes_per_cycle": u.DRAM_BYTES_PER_CYCLE * u.DRAM_EFFICIENCY,
                       "dram_latency": u.DRAM_LATENCY, "mxu_chunk_bytes_per_cycle": c.D, "mxu_latency": u.MXU_LATENCY,
                       "vpu_words_per_cycle": c.LANES, "composite_cols_per_cycle": u.COMPOSITE_COLS_PER_CYCLE,
                       "vt_append_cycles_per_byte": u.VT_APPEND_CYCLES, "window_slots": u.WIN,
                       "core_mhz": t.platform["core_mhz"]}}
    if json_out:
        print_json(info)
        return
    table = Table(title=f"simulated machine: {t.name}", show_header=False)
    table.add_column("key")
    table.add_column("value")
    for k, v in info.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                table.add_row(f"{k}.{kk}", f"{vv:g}" if isinstance(vv, float) else str(vv))
        elif k != "target":
            table.add_row(k, str(v))
    stdout().print(table)


@app.command("trace")
def trace_cmd(path: Path = typer.Argument(..., help="A trace file written by `otpu sim run --trace` (or read from a card)."),
              json_out: bool = typer.Option(False, "--json", help="Print the decoded events as JSON."),
              chrome: Path = typer.Option(None, "--chrome", help="Also write a Chrome-trace JSON (chrome://tracing, Perfetto)."),
              core_mhz: float = typer.Option(133.33, "--core-mhz", help="Core clock for Chrome-trace timestamps.")) -> None:
    """Decode 64-bit trace records into the `T0 D c= ...` lines (or JSON events)."""
    cliopts.positive(core_mhz, "--core-mhz", "MHz")
    if path.is_dir():
        raise UsageError(f"trace file {path} is a directory")
    if not path.is_file():
        raise UsageError(f"trace file {path} does not exist")
    if path.stat().st_size % 8:
        raise UsageError(f"trace file {path} is {path.stat().st_size} bytes: not a whole number of 64-bit records")
    if chrome is not None:
        check_writable(chrome, "--chrome")
    records = tracefmt.read(path)
    try:
        lines = tracefmt.to_lines(records)
        events = tracefmt.unpack(records) if json_out else None
        chrome_text = tracefmt.to_chrome(records, core_mhz) if chrome is not None else None
    except (KeyError, ValueError, IndexError) as e:
        raise UsageError(f"trace file {path} does not hold trace records (a record of an unknown type or a cut "
                         f"group: {e})", hint="trace files come from `otpu sim run --trace F`") from None
    if chrome is not None:
        write_or_show(chrome, chrome_text, "--chrome")
    if json_out:
        print_json(events)
        return
    for line in lines:
        print(line)


@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The simulated cards in the run directory: target, faults, age, DRAM on disk, who holds each."""
    from ..card import simfiles
    from ..card.runstate import run_dir
    rows = [simfiles.describe(n) for n in simfiles.names()]
    if json_out:
        print_json(rows)
        return
    con = stdout()
    if not rows:
        con.print(f"no simulated cards in {run_dir()}", markup=False)
        return
    table = Table(title=f"simulated cards in {run_dir()}", title_justify="left")
    for col in ("card", "target", "faults", "age", "DRAM on disk", "held by", "state"):
        table.add_column(col, justify="right" if col == "DRAM on disk" else "left")
    for r in rows:
        held = f"PID {r['held_by']['pid']} ({r['held_by']['cmd']})" if r["held_by"] else "free"
        table.add_row(r["dev"], r["target"] or "?", r["faults"] or "none" if r["target"] else "?",
                      simfiles.age(r["created"]), simfiles.human(r["dram_bytes_on_disk"]), held, r["state"])
    con.print(table)


@app.command("rm")
def rm_cmd(cards: list[str] = typer.Argument(None, help="Cards to remove: sim, sim:NAME (or NAME)."),
           all_cards: bool = typer.Option(False, "--all", help="Remove every simulated card in the run directory.")) -> None:
    """Remove simulated cards and their files (DRAM included); a card in use is refused (exit 3)."""
    from ..card import simfiles
    from ..card.runstate import DeviceLock, run_dir
    present = simfiles.names()
    if all_cards and cards:
        raise UsageError("name cards or give --all, not both")
    if not all_cards and not cards:
        raise UsageError("name the cards to remove (or --all)", hint="`otpu sim list` shows them")
    wanted = present if all_cards else []
    for spec in cards or []:
        if not spec.strip():
            raise UsageError("an empty card name", hint="`otpu sim list` shows the cards")
        name = simfiles.card_name(spec.partition(":")[2] or None) if spec == "sim" or spec.startswith("sim:") \
            else simfiles.card_name(spec)
        if name not in present:
            raise UsageError(f"no simulated card {simfiles.dev_of(name)} in {run_dir()}",
                             hint="cards there: " + (", ".join(simfiles.dev_of(n) for n in present) or "none"))
        wanted.append(name)
    for name in dict.fromkeys(wanted):
        with DeviceLock(name).acquire(wait=0):        # busy: DeviceBusy, exit 3, naming the holder
            freed = simfiles.describe(name)["dram_bytes_on_disk"]
            simfiles.destroy(name)
        print(f"{simfiles.dev_of(name)}: removed ({simfiles.human(freed)} of DRAM freed)")


@hookimpl
def otpu_commands(app: typer.Typer) -> None:
    app.add_typer(globals()["app"], name="sim")
