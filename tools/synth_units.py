#!/usr/bin/env python3
"""Generic yosys synthesis of each RTL unit at the nangate45-small design point: cells and
flip-flops per unit, written as the table in docs/rtl-synthesis.md.

    python tools/synth_units.py            # regenerate docs/rtl-synthesis.md
    python tools/synth_units.py --check    # exit 1 when the document is out of date

A unit that this yosys cannot read (its SystemVerilog front end is older than the constructs the
unit uses) gets a row saying so, with yosys' own first error line, instead of numbers.
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
FF = re.compile(r"^\s+(\$_(?:S?DFFE?|ALDFFE?|DFFSRE?|SDFFCE)_\w*)\s+(\d+)\s*$", re.M)
CELLS = re.compile(r"Number of cells:\s+(\d+)")


def units(t: target_mod.Target) -> list[tuple[str, list[str], dict[str, int]]]:
    p = t.rtl_params()
    lanes, d, mcols = int(p["LANES"]), int(p["D"]), int(p["MCOLS"])
    fp = ["fp/otpu_fp_add.sv", "fp/otpu_fp_mul.sv", "fp/otpu_fp_i2f.sv"]
    return [
        ("otpu_fp_add", ["fp/otpu_fp_add.sv"], {}),
        ("otpu_fp_mul", ["fp/otpu_fp_mul.sv"], {}),
        ("otpu_fp_i2f", ["fp/otpu_fp_i2f.sv"], {"W": 48}),
        ("otpu_fp_composite", [*fp, "fp/otpu_fp_composite.sv"], {"TAG_W": 16}),
        ("otpu_seq", ["core/otpu_seq.sv"], {"D": d, "BB": int(p["DRAM_BYTES_PER_CYCLE"]), "WIN": int(p["WIN"]),
                                            "SEQ_WC": int(p["SEQ_WC"])}),
        ("otpu_dma", ["core/otpu_dma.sv"], {"BB": int(p["DRAM_BYTES_PER_CYCLE"]), "LANES": lanes}),
        ("otpu_mxu", [*fp, "core/otpu_mxu.sv"], {"D": d, "MCOLS": mcols, "ROWS": mcols, "LANES": lanes}),
        ("otpu_qnt", [*fp, "fp/otpu_fp_composite.sv", "core/otpu_qnt.sv"], {"D": d, "ROWS": mcols, "LANES": lanes}),
        ("otpu_vpu", [*fp, "fp/otpu_fp_composite.sv", "core/otpu_vpu.sv"],
         {"LANES": lanes, "CLANES": int(p["COMPOSITE_COLS_PER_CYCLE"])}),
        ("otpu_coll", ["core/otpu_coll.sv"], {"LANES": lanes}),
    ]


def synth(yosys: str, top: str, files: list[str], params: dict[str, int]) -> dict:
    rtl = ROOT / "rtl"
    chparam = " ".join(f"-chparam {k} {v}" for k, v in params.items())
    script = (f"read_verilog -sv -I{rtl / 'fp'} -I{rtl / 'core'} " + " ".join(str(rtl / f) for f in files) +
              f"; hierarchy -top {top} {chparam}; synth -flatten -top {top}; stat")
    try:
        proc = subprocess.run([yosys, "-q", "-p", script], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"yosys took more than {TIMEOUT_S} s"}
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        err = next((ln for ln in out.splitlines() if "ERROR" in ln), out.strip().splitlines()[-1] if out.strip() else "")
        return {"error": re.sub(r"^.*?/rtl/", "rtl/", err.strip())}
    stat = subprocess.run([yosys, "-p", script], capture_output=True, text=True, timeout=TIMEOUT_S).stdout
    cells = CELLS.findall(stat)
    ffs = sum(int(n) for _, n in FF.findall(stat.split("=== design hierarchy ===")[-1]))
    return {"cells": int(cells[-1]) if cells else 0, "ffs": ffs}


def render(version: str, rows: list[tuple[str, dict, dict]]) -> str:
    lines = ["# RTL units under generic synthesis", "",
             f"`yosys` generic synthesis (`synth -flatten`, no cell library) of each unit of `rtl/` with the "
             f"parameters of the `{TARGET}` target (D=32, MCOLS=2, 4 lanes). Cells are yosys' internal gate "
             "cells ($_AND_, $_MUX_, ...); flip-flops are the $_DFF*_ cells among them. Regenerate with "
             "`python tools/synth_units.py` (`--check` compares).", "", f"Synthesised with {version}.", "",
             "| unit | parameters | cells | flip-flops |", "|---|---|---:|---:|"]
    for top, params, res in rows:
        ptxt = ", ".join(f"{k}={v}" for k, v in params.items()) or "-"
        if "error" in res:
            lines.append(f"| `{top}` | {ptxt} | not read by this yosys: {res['error'].replace('|', '/')} | |")
        else:
            lines.append(f"| `{top}` | {ptxt} | {res['cells']:,} | {res['ffs']:,} |")
    lines += ["", "The units yosys 0.23 (Debian 12) does not read use SystemVerilog its front end lacks: "
              "packed multi-dimensional ports such as `logic [7:0][31:0]`, and members of arrays of packed "
              "structs (the composite pipeline's per-stage context). Verilator builds them all.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/rtl-synthesis.md is out of date")
    ap.add_argument("--yosys", default=shutil.which("yosys"), help="the yosys executable")
    a = ap.parse_args()
    if not a.yosys:
        print("yosys is not on PATH: apt-get install -y yosys", file=sys.stderr)
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
