"""otpu-diag's diagnosis rules and report on synthetic rows (no card needed)."""
from __future__ import annotations

import io

import numpy as np
from rich.console import Console

from otpu_core.checks import Row, Status
from otpu_core.corechecks import names as N
from otpu_diag.diagnosis import diagnose
from otpu_diag.report import print_summary, row_text, verdict_text

P, F, S, I = Status.PASS, Status.FAIL, Status.SKIP, Status.INFO


def row(section, name, status, msg="", group=None, data=None):
    return Row(section, name, status, msg, 0.0, data, None, group)


def isa_rows(failing_groups, groups=("control", "dma", "mxu", "quant", "vpu", "vpu-reduce", "vpu-new",
                                     "vpu-composite", "vpu-edge"), partial=()):
    out = []
    for g in groups:
        for k in range(3):
            bad = g in failing_groups or (g in partial and k == 0)
            out.append(row("isa", f"{g}: p{k}", F if bad else P, group=g))
    return out


def config_row(regmap):
    return row("platform", N.CONFIG, P, data={"regmap": regmap})


def test_every_group_failing_blames_the_core():
    hints = diagnose(isa_rows({"control", "dma", "mxu", "quant", "vpu", "vpu-reduce", "vpu-new", "vpu-composite",
                               "vpu-edge"}))
    assert len(hints) == 1 and hints[0].startswith("every op-check group fails")


def test_mxu_only_blames_the_dsp_path_and_partial_mxu_the_flags():
    assert diagnose(isa_rows({"mxu"})) == [
        "every MXU program fails while VPU and DMA pass: the MXU / DSP datapath"]
    assert diagnose(isa_rows(set(), partial=("mxu",))) == [
        "some MXU programs fail: the flag paths (ACC / RMAX / ASCALE epilogue) or ACT RAM addressing"]


def test_only_vpu_new_depends_on_the_register_map():
    new3 = diagnose([config_row(3), *isa_rows({"vpu-new"})])
    new2 = diagnose([config_row(2), *isa_rows({"vpu-new"})])
    assert new3 == ["only RDOT / OUTER / LOG2 fail on register map 3: a VPU fault in those functions"]
    assert new2[0].startswith("only RDOT / OUTER / LOG2 fail on an older register map")


def test_composite_edge_quant_and_vpu_lanes():
    assert any("composite lanes" in h for h in diagnose(isa_rows({"vpu-composite"})))
    assert diagnose(isa_rows({"vpu-edge"})) == ["only edge values fail: FTZ / inf / NaN handling differs from "
                                                "otpu_core/fp32.py"]
    assert any(h.startswith("quantiser programs fail") for h in diagnose(isa_rows({"quant"})))
    rows = isa_rows(set())
    rows[12] = row("isa", "vpu: x", F, group="vpu", data={"vpu_lanes": [3]})
    assert diagnose(rows) == ["VPU programs fail: a VPU lane or the TMEM ports (wrong words all on VPU lane 3)"]


def test_lane_hints_sum_over_a_channel_and_address_bits_win():
    lanes = np.zeros(8, int)
    bits = np.zeros(64, int)
    lanes[5], bits[44] = 7, 7
    r1 = row("mem", N.data_bits(1), F, data={"channel": 1, "lanes": lanes.tolist(), "bits": bits.tolist()})
    r2 = row("mem", N.random_blocks(1), F, data={"channel": 1, "lanes": lanes.tolist(), "bits": bits.tolist()})
    assert diagnose([r1, r2]) == ["channel 1 byte lane 5 errors -> DQ[47:40] pinout / calibration of that lane; "
                                  "only DQ44 (stuck or shorted bit)"]
    alias = row("mem", N.addr_bits(0), F, data={"channel": 0, "lanes": [1] * 8, "bits": [1] * 64,
                                                "addr_bits": {"20": "aliases with offset 0x100000"}})
    assert diagnose([alias]) == ["channel 0 address bit 20 aliases with offset 0x100000 -> that address line "
                                 "(A / BA pinout) or the controller's address width"]
    lanes[:] = 0
    lanes[0], bits[:] = 20, 0
    bits[3] = 20
    march = row("mem", N.march(0), F, data={"channel": 0, "lanes": lanes.tolist(), "bits": bits.tolist(),
                                            "addr_bits": {"14": "1 in every wrong word"}})
    assert diagnose([march]) == [
        "channel 0 byte lane 0 errors -> DQ[7:0] pinout / calibration of that lane; only DQ3 (stuck or shorted bit)",
        "channel 0 address bit 14 1 in every wrong word -> that address line (A / BA pinout) or the controller's "
        "address width"]



def test_a_lane_fault_is_named_instead_of_the_interleave():
    """A byte lane that fails every pattern also fails the interleave ones: the diagnosis names the
    lane, and does not blame the host's split/join of beats, which is not broken."""
    lanes, bits = np.zeros(8, int), np.zeros(64, int)
    lanes[2], bits[17] = 9, 9
    data = {"channel": 0, "lanes": lanes.tolist(), "bits": bits.tolist()}
    rows = [row("mem", N.data_bits(0), F, data=data), row("mem", N.INTERLEAVE, F, data=data)]
    assert diagnose(rows) == ["channel 0 byte lane 2 errors -> DQ[23:16] pinout / calibration of that lane; "
                              "only DQ17 (stuck or shorted bit)"]
    assert diagnose([row("mem", N.data_bits(0), P), row("mem", N.INTERLEAVE, F)])[0].startswith("interleave patterns")

def test_platform_rules_in_order():
    rows = [row("platform", N.ID, F), row("platform", N.PCIE, F, data={"gts": 2.5, "width": 4}),
            row("platform", N.calib(1), F),
            row("mem", N.INTERLEAVE, F), row("i2c", N.I2C_PINS, F), row("system", N.SOAK, F),
            row("mem", N.bandwidth(0), F), row("platform", N.TEMP, F, data={"temp_c": 95.0})]
    hints = diagnose(rows)
    starts = ["nothing answers on BAR0", "PCIe link below Gen1 x8", "DDR3 channel 1 not calibrated",
              "interleave patterns fail", "die temperature out of range (95.0 C)", "I2C bus fault",
              "intermittent failures under soak", "DMA bandwidth low"]
    order = [next(i for i, h in enumerate(hints) if h.startswith(s)) for s in starts]
    assert sorted(order[:4]) == order[:4] and len(hints) == len(starts)


def test_report_matrix_lists_and_verdict():
    rows = [row("platform", N.ID, P, "ID 0x4f545055"), row("platform", N.POWER, I, "idle"),
            row("mem", N.data_bits(0), F, "12 wrong bytes"), row("mem", N.data_bits(1), S, "needs X (FAIL)")]
    buf = io.StringIO()
    print_summary(Console(file=buf, width=120, color_system=None), rows, ["a hint"])
    out = buf.getvalue()
    matrix = [line for line in out.splitlines() if line.startswith(("platform", "mem", "total"))]
    counts = [line.replace("│", " ").split()[-5:] for line in matrix]      # PASS WARN FAIL SKIP INFO
    assert counts == [["1", "0", "0", "0", "1"], ["0", "0", "1", "1", "0"], ["1", "0", "1", "1", "1"]]
    assert "does not work:\n  mem: channel 0 data bits (walking 1 / 0): 12 wrong bytes" in out
    assert "not run:\n  mem: channel 1 data bits (walking 1 / 0): needs X (FAIL)" in out
    assert "diagnosis:\n  - a hint" in out and out.rstrip().endswith("1 check failed, 1 skipped")
    assert verdict_text([row("a", "b", S)]).endswith("nothing passed (every check was skipped)[/]")
    assert verdict_text([row("a", "b", P)]) == "[bold green]ALL PASS[/]"
    assert verdict_text([row("a", "b", P), row("a", "c", S), row("a", "d", S)]) == "[bold green]ALL PASS[/], 2 skipped"
    assert verdict_text([row("a", "b", P), row("a", "w", Status.WARN)]) == "[bold green]ALL PASS[/], 1 near a limit"


def test_row_line_layout():
    r = Row("platform", N.ID, P, "ID 0x4f545055", 0.25)
    plain = Console(file=io.StringIO(), width=200, color_system=None)
    plain.print(row_text(r))
    line = plain.file.getvalue().rstrip("\n")
    assert line == f"  [PASS] platform {N.ID:<44} ID 0x4f545055  (0.2s)"
    fast = Row("regs", "x", F, "bad", 0.05)
    plain.file = io.StringIO()
    plain.print(row_text(fast))
    assert plain.file.getvalue().rstrip("\n") == f"  [FAIL] regs     {'x':<44} bad"
