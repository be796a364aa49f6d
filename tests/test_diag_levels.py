"""otpu-diag's DCGM habits: run levels, the results history, `--json -` on stdout."""
from __future__ import annotations

import json

from otpu_core.card.runstate import run_dir
from otpu_core.cli import run_app
from otpu_diag import cli, levels


def diag(*args):
    return run_app(cli.app, "otpu-diag", ["--dev", "sim:lv", "--target", "sim-small", *args])


def test_levels_choose_sections_and_checks():
    assert levels.parse("1").sections == ("platform", "regs", "i2c") and levels.parse("quick").number == 1
    assert levels.parse(None).number == 2 and levels.parse("medium").sections is None
    lv3 = levels.parse("long")
    assert (lv3.mem, lv3.soak) == ("full", 10)


def test_level_1_json_on_stdout_and_the_history(capsys):
    assert diag("-r", "1", "--json", "-") == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)                                   # stdout is the document alone
    assert doc["level"] == 1 and doc["exit_code"] == 0
    assert {r["section"] for r in doc["rows"]} == {"platform", "regs", "i2c"}
    assert "run level 1 (quick)" in err and "ALL PASS" in err
    assert diag("-r", "1", "--fault", "hot:c=95") == 1 | 4
    capsys.readouterr()
    with open(run_dir() / "diag-history.jsonl", "a") as f:
        f.write("{cut short\n")                              # a line a full disk cut: skipped, counted
    assert run_app(cli.app, "otpu-diag", ["--history", "--dev", "sim:lv", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    runs = json.loads(out)
    assert [(r["level"], r["exit_code"]) for r in runs] == [(1, 0), (1, 5)]
    assert runs[1]["failed"][0]["name"] == "die temperature" and "1 line(s)" in err
    assert run_app(cli.app, "otpu-diag", ["--history"]) == 0
    table = capsys.readouterr().out
    assert "otpu-diag history" in table and "die temperature" in table


def test_bad_levels_are_usage_errors(capsys):
    assert diag("-r", "4") == 2
    assert "not a run level" in capsys.readouterr().err
    assert diag("-r", "1", "--only", "mem") == 2
    assert "give one of them" in capsys.readouterr().err
