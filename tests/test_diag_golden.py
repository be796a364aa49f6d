"""otpu-diag on the simulated card: golden text of a quick run (timings, temperatures, counter
values and cycle counts masked), --only, --mem full, --soak, --json and bad options."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from otpu_core.cli import run_app
from otpu_diag import cli

GOLDEN = Path(__file__).parent / "golden"


def normalise(text: str) -> str:
    text = re.sub(r"  \(\d+\.\ds\)$", "", text, flags=re.M)
    text = re.sub(r"\d+\.\d C\b", "T C", text)
    text = re.sub(r"UPTIME \+\d+ cycles", "UPTIME +N cycles", text)
    text = re.sub(r"\d+ cycles, b_reads=\d+, a_writes=\d+, b_writes=\d+", "N cycles, counters", text)
    return re.sub(r"NOP loops of (\d+) and (\d+): \d+ and \d+ cycles", r"NOP loops of \1 and \2: N and M cycles", text)


def diag(*args):
    return run_app(cli.app, "otpu-diag", ["--dev", "sim:g", "--target", "sim-small", *args])


def test_golden_text_quick(capsys):
    assert diag() == 0
    assert normalise(capsys.readouterr().out) == (GOLDEN / "diag_sim_small.txt").read_text()


def test_only_sections_and_json(tmp_path, capsys):
    report = tmp_path / "d.json"
    assert diag("--only", "regs", "--json", str(report)) == 0
    doc = json.loads(report.read_text())
    assert {r["section"] for r in doc["rows"]} == {"platform", "regs"}
    assert doc["tool"] == "otpu-diag" and doc["failed"] == 0 and doc["hints"] == []
    assert doc["summary"]["regs"] == {"PASS": 5, "WARN": 0, "FAIL": 0, "SKIP": 0, "INFO": 0}


def test_mem_full_adds_march_and_soak_counts_rounds(tmp_path, capsys):
    report = tmp_path / "d.json"
    assert diag("--only", "mem,system", "--mem", "full", "--soak", "2", "--json", str(report)) == 0
    rows = {r["name"]: r for r in json.loads(report.read_text())["rows"]}
    assert rows["channel 0 march C-"]["message"] == "6 elements, 10N over 8 MiB"
    assert rows["channel 1 march C-"]["status"] == "PASS"
    assert rows["soak"]["status"] == "PASS" and rows["soak"]["data"]["rounds"] == 2
    assert "x2, no failure" in rows["soak"]["message"]


def test_quick_run_has_no_march_or_soak(tmp_path, capsys):
    report = tmp_path / "d.json"
    assert diag("--only", "mem", "--json", str(report)) == 0
    names = {r["name"] for r in json.loads(report.read_text())["rows"]}
    assert "channel 0 march C-" not in names and "soak" not in names


@pytest.mark.parametrize("args,text", [(("--mem", "huge"), "--mem huge: must be quick or full"),
                                       (("--only", "mem,gpu"), "--only: unknown section gpu"),
                                       (("--power-json", "/nonexist/p.json"), "--power-json /nonexist/p.json: no such")])
def test_bad_options_exit_2(args, text, capsys):
    assert diag(*args) == 2
    assert text in capsys.readouterr().err


def test_soak_reports_intermittent_programs(monkeypatch):
    from otpu_core.checks import CheckContext, Status
    from otpu_core.corechecks import device, isachecks, programs

    real, calls = programs.run_check, {"n": 0}

    def flaky(ctx, check):
        if check.title == "dma: LD/ST aligned":
            calls["n"] += 1
            if calls["n"] == 1:   # fails in the first round only
                return programs.Outcome(None, None, "injected failure")
        return real(ctx, check)

    monkeypatch.setattr(programs, "run_check", flaky)
    ctx = CheckContext("sim:soak", {"target": "sim-small", "soak": 3})
    try:
        res = isachecks.soak(ctx)
    finally:
        device.close(ctx)
    assert res.status == Status.FAIL
    assert res.message == "intermittent dma: LD/ST aligned 1/3"
    assert res.data["failures"] == {"dma: LD/ST aligned": 1} and res.data["deterministic"] == {}
    assert "drift" in res.hint


def test_soak_calls_a_program_that_fails_every_round_deterministic(monkeypatch):
    from otpu_core.checks import CheckContext, Status
    from otpu_core.corechecks import device, isachecks, programs

    real = programs.run_check

    def broken(ctx, check):
        if check.title == "dma: LD/ST aligned":
            return programs.Outcome(None, None, "injected failure")
        return real(ctx, check)

    monkeypatch.setattr(programs, "run_check", broken)
    ctx = CheckContext("sim:soak", {"target": "sim-small", "soak": 2})
    try:
        res = isachecks.soak(ctx)
    finally:
        device.close(ctx)
    assert res.status == Status.FAIL and "intermittent" not in res.message
    assert res.message == "dma: LD/ST aligned fails every round (2/2): deterministic"
    assert res.data["deterministic"] == {"dma: LD/ST aligned": 2} and "not intermittent" in res.hint


def test_a_blackhole_card_runs_its_plugins_checks(capsys, tmp_path):
    report = tmp_path / "d.json"
    assert run_app(cli.app, "otpu-diag", ["--dev", "tt:sim", "--json", str(report)]) == 0
    doc = json.loads(report.read_text())
    assert doc["target"] is None and {r["section"] for r in doc["rows"]} == {"tt"}
    assert capsys.readouterr().out.splitlines()[0] == "Tenstorrent Blackhole diagnostics on tt:sim, run level 2 (medium)"


@pytest.mark.parametrize("where", ["dir", "missing"])
def test_a_bad_json_path_is_refused_before_anything_runs(where, tmp_path, capsys):
    path = tmp_path if where == "dir" else tmp_path / "nonexist" / "x.json"
    text = "is a directory" if where == "dir" else f"directory {tmp_path / 'nonexist'} does not exist"
    assert diag("--json", str(path)) == 2
    out = capsys.readouterr()
    assert f"--json {path}: {text}" in out.err and "Traceback" not in out.err
    assert out.out == ""            # refused up front: no header, no rows, the card not opened


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (writes fail with ENOSPC)")
def test_a_json_file_that_cannot_be_written_at_the_end_goes_to_stdout(capsys):
    assert diag("--only", "regs", "--json", "/dev/full") == 2      # passes the up-front check, fails to write
    out = capsys.readouterr()
    assert "--json /dev/full: could not be written (No space left on device); it is printed above instead" in out.err
    doc = json.loads(out.out[out.out.index("\n{") + 1:])       # the report, after the human-readable rows
    assert doc["tool"] == "otpu-diag" and doc["summary"]["regs"]["PASS"] == 5


def test_dash_h_prints_help(capsys):
    assert run_app(cli.app, "otpu-diag", ["-h"]) == 0
    assert "Usage: otpu-diag" in capsys.readouterr().out
