"""Every fault kind of the simulated card, through both tools: the failing row and the hint.

One table: for each fault spec, the stage otpu-selftest must stop at and words its hint must
contain, and the row otpu-diag must fail and words its diagnosis must contain. Each case runs
on its own simulated card (sim-small) in its own run directory (tests/conftest.py).
"""
from __future__ import annotations

import json

import pytest

from otpu_core.cli import run_app
from otpu_core.corechecks import calib, programs
from otpu_diag import cli as diag_cli
from otpu_selftest import cli as selftest_cli

FAULTS = [
    # fault, selftest stage, selftest hint words, diag failing row, diagnosis words
    ("link_down", "link", "lspci", "ID register", "nothing answers on BAR0"),
    ("stuck_dq:ch=1,bit=44,val=0", "addr", "only DQ44 (stuck or shorted bit)", "channel 1 data bits (walking 1 / 0)",
     "channel 1 byte lane 5 errors -> DQ[47:40] pinout / calibration of that lane; only DQ44 (stuck or shorted bit)"),
    ("addr_alias:ch=0,bit=20", "addr", "address bit 20", "channel 0 address bits",
     "channel 0 address bit 20 aliases with offset 0x100000"),
    ("no_calib:ch=1", "calib", "calibration CPU", "DDR3 calibration channel 1", "DDR3 channel 1 not calibrated"),
    ("hang", "kernel", "the core did not halt", "all-units demo", "every op-check group fails"),
    ("vpu_lane:lane=3,bit=7", "kernel", "VPU lane 3", "vpu: ADD FULL", "wrong words all on VPU lane 3"),
    ("hot:c=95", "config", "heatsink", "die temperature", "die temperature out of range (95.0 C)"),
]


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setattr(calib, "WAIT_S", 0.3)
    monkeypatch.setattr(programs, "RUN_TIMEOUT_S", 1.0)


@pytest.mark.parametrize("fault,stage,hint,row,diagnosis", FAULTS)
def test_selftest_stops_at_the_faulty_stage(fault, stage, hint, row, diagnosis, capsys):
    rc = run_app(selftest_cli.app, "otpu-selftest", ["--dev", "sim:f", "--target", "sim-small", "--fault", fault])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert f"stopped at stage '{stage}'" in out
    failing = [line for line in out.splitlines() if "[FAIL]" in line]
    assert len(failing) == 1 and failing[0].split()[1] == stage, out
    hint_line = out.split(failing[0], 1)[1].splitlines()[1]
    assert hint_line.strip().startswith("hint:") and hint in hint_line, out


@pytest.mark.parametrize("fault,stage,hint,row,diagnosis", FAULTS)
def test_diag_names_the_failing_row_and_diagnosis(fault, stage, hint, row, diagnosis, capsys, tmp_path):
    report = tmp_path / "diag.json"
    rc = run_app(diag_cli.app, "otpu-diag", ["--dev", "sim:f", "--target", "sim-small", "--fault", fault,
                                             "--json", str(report)])
    out = capsys.readouterr().out
    assert rc == 1, out
    doc = json.loads(report.read_text())
    rows = {r["name"]: r for r in doc["rows"]}
    assert rows[row]["status"] == "FAIL", rows[row]
    assert any(diagnosis in h for h in doc["hints"]), doc["hints"]
    assert "does not work:" in out and "diagnosis:" in out and f"{doc['failed']} check" in out
    assert doc["failed"] == sum(r["status"] == "FAIL" for r in doc["rows"])


def mem_rows(tmp_path, fault):
    report = tmp_path / "diag.json"
    run_app(diag_cli.app, "otpu-diag", ["--dev", "sim:f", "--target", "sim-small", "--only", "mem",
                                        "--fault", fault, "--json", str(report)])
    doc = json.loads(report.read_text())
    return doc, {r["name"]: r for r in doc["rows"]}


def test_diag_stuck_bit_leaves_the_other_channel_alone(capsys, tmp_path):
    doc, rows = mem_rows(tmp_path, "stuck_dq:ch=1,bit=44,val=0")
    for name in ("data bits (walking 1 / 0)", "random blocks", "sub-beat updates (host merge)"):
        assert rows[f"channel 0 {name}"]["status"] == "PASS"
        assert rows[f"channel 1 {name}"]["status"] == "FAIL"
        assert rows[f"channel 1 {name}"]["data"]["bad_bits"] == [44]
    assert not any(h.startswith("channel 0") for h in doc["hints"])


def test_diag_dependents_of_a_failed_calibration_are_skipped(capsys, tmp_path):
    doc, rows = mem_rows(tmp_path, "no_calib:ch=1")
    assert rows["channel 1 data bits (walking 1 / 0)"]["message"] == "needs DDR3 calibration channel 1 (FAIL)"
    assert rows["channel 0 data bits (walking 1 / 0)"]["status"] == "SKIP"   # needs the scrub, which needs both
    assert rows["interleave patterns"]["status"] == "SKIP"
    assert "not run:" in capsys.readouterr().out
