"""The fault matrix: every fault kind of the simulated card, and every value class of its
parameters (each channel, each DQ byte lane and both stuck levels, address lines inside a beat
and between beats, VPU lanes), through otpu-selftest and otpu-diag.

Each case asserts the stage selftest stops at and the pin its hint names; the rows diag fails
(exactly those, nothing downstream of the cause) and its diagnosis (the right pin and only
that: no hint about the sequencer, the clock, the VPU or GATHER for a memory fault). The
expectations are written from the fault spec, not from an earlier run. Every DQ bit of both
channels at both levels, and every address line, are swept in the slow job
(test_every_dq_bit_and_address_line). Each case has its own sim-small card (tests/conftest.py).
"""
from __future__ import annotations

import json

import pytest

from otpu_core.cli import run_app
from otpu_core.corechecks import calib, programs
from otpu_core.corechecks import names as N
from otpu_diag import cli as diag_cli
from otpu_selftest import cli as selftest_cli

CHAN_BITS = 23            # sim-small: 8 MiB per channel, address lines 3..22


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setattr(calib, "WAIT_S", 0.3)
    monkeypatch.setattr(programs, "RUN_TIMEOUT_S", 1.0)


def selftest(fault, capsys):
    rc = run_app(selftest_cli.app, "otpu-selftest", ["--dev", "sim:f", "--target", "sim-small", "--fault", fault])
    return rc, capsys.readouterr().out


def diag(fault, tmp_path, capsys, *extra):
    report = tmp_path / "diag.json"
    rc = run_app(diag_cli.app, "otpu-diag", ["--dev", "sim:f", "--target", "sim-small", "--fault", fault,
                                             "--json", str(report), *extra])
    out = capsys.readouterr().out
    doc = json.loads(report.read_text())
    return rc, out, doc, {r["name"]: r for r in doc["rows"]}


def failing(doc) -> set[str]:
    return {r["name"] for r in doc["rows"] if r["status"] == "FAIL"}


def stop_line(out: str, stage: str) -> tuple[str, str]:
    """The single FAIL line of a selftest run and the hint under it."""
    lines = [ln for ln in out.splitlines() if "[FAIL]" in ln]
    assert len(lines) == 1 and lines[0].split()[1] == stage, out
    hint = out.split(lines[0], 1)[1].splitlines()[1]
    assert hint.strip().startswith("hint:"), out
    return lines[0], hint


def lane_hint(ch: int, bit: int) -> str:
    lane = bit // 8
    return (f"channel {ch} byte lane {lane} errors -> DQ[{8 * lane + 7}:{8 * lane}] pinout / calibration of that "
            f"lane; only DQ{bit} (stuck or shorted bit)")


# ---- stuck DQ bits: every lane of both channels, both levels ---------------------------------

# each byte lane once, the channel and the level alternating, a different bit of each lane (half
# of them in the slow job)
STUCK = [pytest.param(lane % 2, 8 * lane + (3 * lane) % 8, (lane // 2) % 2,
                      marks=() if lane in (0, 3, 5, 6) else pytest.mark.slow) for lane in range(8)]


@pytest.mark.parametrize("ch,bit,val", STUCK)
def test_stuck_dq_is_named_down_to_the_pin(ch, bit, val, tmp_path, capsys):
    fault = f"stuck_dq:ch={ch},bit={bit},val={val}"
    rc, out = selftest(fault, capsys)
    assert rc == 1 | 8, out                               # a DRAM failure
    line, hint = stop_line(out, "addr")
    assert f"DQ{bit})" in line and "aliased" in line and "address bit" not in line.replace("no aliased address bit", "")
    assert lane_hint(ch, bit) in hint and "address bit" not in hint
    rc, out, doc, rows = diag(fault, tmp_path, capsys, "--only", "mem")
    assert rc == 1 | 8
    other = 1 - ch
    assert all(rows[n(other)]["status"] == "PASS" for n in (N.data_bits, N.addr_bits, N.random_blocks, N.subbeat))
    assert {N.data_bits(ch), N.addr_bits(ch)} <= failing(doc)
    assert all(name.startswith(f"channel {ch}") or name == N.INTERLEAVE for name in failing(doc))
    assert all(rows[name]["data"]["bad_bits"] == [bit] for name in failing(doc) if name != N.INTERLEAVE)
    assert not rows[N.addr_bits(ch)]["data"]["addr_bits"]
    assert doc["hints"] == [lane_hint(ch, bit)]


def test_a_memory_fault_skips_the_programs_instead_of_failing_them(tmp_path, capsys):
    rc, out, doc, rows = diag("stuck_dq:ch=1,bit=44,val=0", tmp_path, capsys)
    assert rc == 1 | 8, out
    assert failing(doc) <= {n(1) for n in (N.data_bits, N.addr_bits, N.random_blocks, N.subbeat)} | {N.INTERLEAVE}
    programs_ = [r for r in doc["rows"] if r["section"] in ("isa", "system")]
    assert programs_ and all(r["status"] == "SKIP" and r["message"].startswith("needs channel 1") for r in programs_
                             if r["name"] != N.SOAK)
    assert doc["hints"][0] == lane_hint(1, 44)
    assert len(doc["hints"]) == 2 and doc["hints"][1].startswith(f"the {len(programs_)} ISA and system checks were not run")
    for word in ("sequencer", "clock", "VPU", "GATHER", "MXU"):
        assert word not in " ".join(doc["hints"]), doc["hints"]


# ---- aliased address lines: inside a beat and between beats, both channels -------------------

# inside a beat, the first line between beats, the middle, the top (two of them in the slow job)
ALIAS = [pytest.param(ch, bit, marks=() if bit in (3, 6, CHAN_BITS - 1) else pytest.mark.slow)
         for ch, bit in [(0, 3), (1, 5), (1, 6), (1, 14), (0, CHAN_BITS - 1)]]


@pytest.mark.parametrize("ch,abit", ALIAS)
def test_aliased_address_line_is_named_and_only_it(ch, abit, tmp_path, capsys):
    fault = f"addr_alias:ch={ch},bit={abit}"
    rc, out = selftest(fault, capsys)
    assert rc == 1 | 8, out
    line, hint = stop_line(out, "addr")
    assert f"address bit {abit} aliases" in line
    assert hint.count("address bit") == 1 and f"channel {ch} address bit {abit}" in hint and "DQ" not in hint
    rc, out, doc, rows = diag(fault, tmp_path, capsys, "--only", "mem")
    assert rows[N.addr_bits(ch)]["status"] == "FAIL"
    assert list(rows[N.addr_bits(ch)]["data"]["addr_bits"]) == [str(abit)]
    assert rows[N.addr_bits(1 - ch)]["status"] == "PASS"
    assert len(doc["hints"]) == 1 and doc["hints"][0].startswith(f"channel {ch} address bit {abit} aliases")


# ---- calibration, link, hang, temperature, VPU lanes -------------------------------------------

@pytest.mark.parametrize("ch", [0, 1])
def test_a_channel_that_never_calibrates(ch, tmp_path, capsys):
    rc, out = selftest(f"no_calib:ch={ch}", capsys)
    assert rc == 1 | 8
    line, hint = stop_line(out, "calib")
    assert f"ch{ch} NOT calibrated" in line and f"ch{1 - ch}" not in line and "calibration CPU" in hint
    rc, out, doc, rows = diag(f"no_calib:ch={ch}", tmp_path, capsys)
    assert failing(doc) == {N.calib(ch)}
    assert len(doc["hints"]) == 1 and doc["hints"][0].startswith(f"DDR3 channel {ch} not calibrated")


def test_a_dead_link(tmp_path, capsys):
    rc, out = selftest("link_down", capsys)
    assert rc == 1 | 4
    line, hint = stop_line(out, "link")
    assert "0xffffffff" in line and "lspci" in hint
    rc, out, doc, rows = diag("link_down", tmp_path, capsys)
    assert failing(doc) == {N.ID, N.PCIE}
    assert len(doc["hints"]) == 1 and doc["hints"][0].startswith("nothing answers on BAR0")


def test_a_hung_sequencer_fails_one_program_and_runs_no_other(tmp_path, capsys):
    rc, out = selftest("hang", capsys)
    assert rc == 1 | 16                                   # a core failure
    line, hint = stop_line(out, "kernel")
    assert "did not halt" in line and "the core did not halt" in hint
    rc, out, doc, rows = diag("hang", tmp_path, capsys)
    assert rc == 1 | 16
    first = [r for r in doc["rows"] if r["section"] == "isa"][0]["name"]
    assert failing(doc) == {first}
    later = [r for r in doc["rows"] if r["section"] in ("isa", "system") and r["name"] != first]
    assert later and all(r["status"] == "SKIP" and r["message"].startswith("not run: the core hung on") for r in later)
    assert doc["hints"] == [f"the core hung on '{first}' (it did not halt): a hung sequencer or memory path; reload "
                            f"the bitstream (a simulated card: `otpu sim reset`); the {len(later)} programs after it "
                            "were not run"]


def test_a_hot_die(tmp_path, capsys):
    rc, out = selftest("hot:c=95", capsys)
    assert rc == 1 | 4
    line, hint = stop_line(out, "config")
    assert "95.0 C" in line and "heatsink" in hint
    rc, out, doc, rows = diag("hot:c=95", tmp_path, capsys, "--only", "regs")
    assert failing(doc) == {N.TEMP}
    assert len(doc["hints"]) == 1 and doc["hints"][0].startswith("die temperature out of range (95.0 C)")


@pytest.mark.parametrize("lane,bit", [(3, 7), pytest.param(6, 30, marks=pytest.mark.slow)])
def test_a_vpu_lane_fault_names_the_lane(lane, bit, tmp_path, capsys):
    fault = f"vpu_lane:lane={lane},bit={bit}"
    rc, out = selftest(fault, capsys)
    assert rc == 1 | 16
    line, hint = stop_line(out, "kernel")
    assert f"VPU lane {lane}" in hint
    rc, out, doc, rows = diag(fault, tmp_path, capsys, "--only", "isa")
    bad = {rows[n]["group"] for n in failing(doc)} - {None}
    assert bad and all(g.startswith("vpu") or g == "gen" for g in bad), bad
    assert doc["hints"] == [f"VPU programs fail: a VPU lane or the TMEM ports (wrong words all on VPU lane {lane})"]


def test_the_ecc_lane_of_a_card_without_ecc_is_refused(capsys):
    rc, out = selftest("stuck_dq:ch=0,bit=66,val=1", capsys)
    err = capsys.readouterr().err
    assert rc == 2
    assert run_app(diag_cli.app, "otpu-diag", ["--dev", "sim:f", "-t", "sim-small", "--fault",
                                               "stuck_dq:ch=0,bit=70,val=0"]) == 2
    assert "ECC byte lane" in capsys.readouterr().err


# ---- the slow sweep: every DQ bit, both levels, both channels; every address line -------------

@pytest.mark.slow
@pytest.mark.parametrize("ch", [0, 1])
def test_every_dq_bit_and_address_line(ch):
    """The memory rows themselves (as both tools run them) for all 64 DQ bits at both levels and
    all 20 address lines of a channel: the address row names a line only for an address fault,
    and every data fault is named by its one DQ bit. One card, its fault model swapped between
    specs (a power cycle per spec would cost seconds each)."""
    from otpu_core import checks
    from otpu_core.card import faults as faults_mod
    from otpu_core.corechecks import device, memchecks
    ctx = checks.CheckContext("sim:sweep", {"target": "sim-small"})
    try:
        card = device.transport(ctx).card
        specs = [f"stuck_dq:ch={ch},bit={b},val={v}" for b in range(64) for v in (0, 1)]
        specs += [f"addr_alias:ch={ch},bit={b}" for b in range(3, CHAN_BITS)]
        for spec in specs:
            card.faults = faults_mod.parse(spec).validate(card.target)
            card._lane_cache = (-1, ())
            addr, data = memchecks.address_bits(ctx, ch), memchecks.data_bits(ctx, ch)
            kind, params = spec.split(":")
            p = dict(kv.split("=") for kv in params.split(","))
            assert addr.status == checks.Status.FAIL, spec
            if kind == "stuck_dq":
                bit = int(p["bit"])
                assert not addr.data["addr_bits"] and addr.data["bad_bits"] == [bit], (spec, addr.message)
                assert data.data["bad_bits"] == [bit] and addr.hint == lane_hint(ch, bit), spec
            else:
                assert list(addr.data["addr_bits"]) == [p["bit"]], (spec, addr.message)
                assert addr.hint.count("address bit") == 1 and "DQ" not in addr.hint, spec
    finally:
        device.close(ctx)

def test_a_warm_die_is_warn_not_fail(tmp_path, capsys):
    rc, out, doc, rows = diag("hot:c=80", tmp_path, capsys, "--only", "regs")
    assert rc == 0 and rows[N.TEMP]["status"] == "WARN" and "near the 85 C limit" in rows[N.TEMP]["message"]
    assert "near a limit:" in out and out.rstrip().splitlines()[-1].startswith("ALL PASS") and "1 near a limit" in out
