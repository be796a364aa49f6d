"""otpu-selftest on the simulated card: golden text (timings, temperatures and cycle counts
masked), JSON, exit codes for a busy card and a missing model plugin, and the stage report."""
from __future__ import annotations

import json
import re
from pathlib import Path


from otpu_core.card.runstate import DeviceLock
from otpu_core.checks import Row, Status
from otpu_core.cli import run_app
from otpu_selftest import cli
from otpu_selftest.report import group_stages

GOLDEN = Path(__file__).parent / "golden"


def normalise(text: str) -> str:
    text = re.sub(r"\(\d+\.\ds\)", "(T s)", text)
    text = re.sub(r"\d+\.\d C\b", "T C", text)
    return re.sub(r"\d+ cycles, b_reads=\d+, a_writes=\d+, b_writes=\d+", "N cycles, counters", text)


def test_golden_text_all_pass(capsys):
    rc = run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--target", "sim-small"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert normalise(out) == (GOLDEN / "selftest_sim_small.txt").read_text()


def test_json_document(capsys):
    rc = run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--target", "sim-small", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["result"] == "ALL PASS, 2 skipped" and doc["stopped_at"] is None and doc["exit_code"] == 0
    assert [s["stage"] for s in doc["stages"]] == list(cli.STAGES)
    assert {s["status"] for s in doc["stages"]} == {"PASS", "SKIP"}
    assert doc["stages"][0]["rows"][0]["name"] == "ID register"


def test_busy_card_exits_3(capsys):
    with DeviceLock("sim-g"):
        assert run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--target", "sim-small"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and "sim-g is busy: held by PID" in err and "OTPU_LOCK_WAIT" in err


def test_model_stage_needs_a_plugin(capsys, monkeypatch):
    from otpu_core import plugins
    monkeypatch.setenv("OTPU_DISABLE_PLUGINS", "chat")
    plugins.get.cache_clear()
    try:
        assert run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--model", "qwen3"]) == 2
    finally:
        plugins.get.cache_clear()
    assert "no plugin provides the model stage" in capsys.readouterr().err


def test_a_model_that_does_not_exist_is_a_usage_error(capsys):
    assert run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--target", "sim-small", "--model", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--model nosuch: no such file, directory or known model" in err and "Traceback" not in err


def test_wrong_target_stops_at_config(capsys):
    rc = run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--target", "sim-small"])
    assert rc == 0
    capsys.readouterr()
    rc = run_app(cli.app, "otpu-selftest", ["--dev", "sim:g", "--target", "ypcb-00338"])
    out = capsys.readouterr().out
    assert rc == 1 | 4 and "[PASS] link" in out and "[FAIL] config" in out and "stopped at stage 'config'" in out
    assert "card does not match target ypcb-00338: D 32 (target 128)" in out


def test_stage_lines_aggregate_rows():
    rows = [Row("mem", "a", Status.PASS, "x", 0.5, stage="addr"), Row("mem", "b", Status.FAIL, "y", 0.25,
                                                                      hint="fix b", stage="addr"),
            Row("mem", "c", Status.SKIP, "needs b (FAIL)", 0.0, stage="pattern", blocked_by="b")]
    lines = group_stages(rows)
    assert [(s.stage, s.status, s.message, s.seconds, s.hint) for s in lines] == [
        ("addr", Status.FAIL, "y", 0.75, "fix b"), ("pattern", Status.FAIL, "needs b (FAIL)", 0.0, None)]


def test_a_blackhole_card_runs_its_plugins_stages(capsys):
    assert run_app(cli.app, "otpu-selftest", ["--dev", "tt:sim", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] is None and [s["stage"] for s in doc["stages"]] == ["tt"] and doc["result"] == "ALL PASS"


def test_a_blackhole_card_is_named_in_the_header(capsys):
    assert run_app(cli.app, "otpu-selftest", ["--dev", "tt:sim"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "Tenstorrent Blackhole self-test on tt:sim"


def test_dash_h_prints_help(capsys):
    assert run_app(cli.app, "otpu-selftest", ["-h"]) == 0
    out = capsys.readouterr().out
    assert "Usage: otpu-selftest" in out and "2 bad options" in " ".join(out.split())
