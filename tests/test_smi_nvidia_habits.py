"""What nvidia-smi users reach for first, on otpu-smi: -L, -i INDEX|DEV, --loop-ms, -f FILE,
dmon streaming with -s groups and repeated headers, value / limit columns, the health column,
sparklines on their own range, and the card's own target."""
from __future__ import annotations

import json
import re

import pytest

from otpu_core.board import Board
from otpu_core.cli import build_app, run_app
from otpu_smi import cli as smi_cli
from otpu_smi.render import sparkline


def smi(*args):
    return run_app(smi_cli.app, "otpu-smi", list(args))


@pytest.fixture
def two_cards():
    for name in ("a", "b"):
        with Board.open(f"sim:{name}", "sim-small", faults="hot:c=70" if name == "b" else None):
            pass


def test_list_cards_one_line_each_and_select_by_index_or_spec(two_cards, capsys):
    assert smi("-L", "-t", "sim-small") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["card 0", "card 1"]
    assert lines[0].startswith("card 0: sim:a (openTPU sim-small, target sim-small, CFG_HASH 0x") and lines[0].endswith(", ok)")
    assert "sim:b has injected faults: hot:c=70" in lines[1]
    assert smi("-i", "1", "-t", "sim-small", "--query", "device,index", "--format", "csv,noheader") == 0
    assert capsys.readouterr().out.strip() == "sim:b, 0"
    assert smi("-i", "sim:a,0", "-t", "sim-small", "--query", "device", "--format", "csv,noheader") == 0
    assert capsys.readouterr().out.split() == ["sim:a"]            # the same card named twice is shown once
    assert smi("-i", "2", "-t", "sim-small") == 2
    assert "-i 2: there are 2 cards (index 0..1)" in capsys.readouterr().err


@pytest.mark.parametrize("args,text", [
    (("-l", "nan"), "-l nan: must be a number of seconds"), (("-l", "inf"), "-l inf"),
    (("-l", "0"), "-l 0: must be"), (("--loop-ms", "-5"), "--loop-ms -0.005"),
    (("-l", "1", "--loop-ms", "100"), "give one of them"), (("--interval", "1e9"), "--interval"),
    (("-i", ""), "-i '': an empty entry")])
def test_bad_periods_and_selections_are_usage_errors(args, text, capsys):
    assert smi("--dev", "sim:a", "-t", "sim-small", *args) == 2
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err


def test_loop_ms_and_a_file(tmp_path):
    import subprocess
    import sys
    out = tmp_path / "smi.csv"
    p = subprocess.Popen([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:a", "-t",
                          "sim-small", "--query", "timestamp,utilization.running", "--format", "csv,noheader",
                          "--loop-ms", "100", "-f", str(out)], stderr=subprocess.PIPE, text=True)
    import time
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
        time.sleep(0.1)
    p.send_signal(__import__("signal").SIGINT)
    assert p.wait(timeout=20) == 0
    rows = out.read_text().splitlines()
    assert len(rows) >= 3 and all(r.endswith("%") for r in rows)
    stamps = [r.split(", ")[0] for r in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_dmon_streams_one_line_per_card_with_headers(two_cards, capsys):
    assert run_app(build_app(), "otpu", ["smi", "dmon", "-t", "sim-small", "-c", "3", "-d", "0.05", "-s", "pe",
                                         "--header-every", "2", "-o", "T"]) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [i for i, ln in enumerate(lines) if ln.startswith("#")]
    assert heads == [0, 1, 6, 7]                        # two header lines, again after 2 samples
    assert lines[0].split() == ["#", "Time", "card", "pwr", "temp", "err"]
    assert lines[1].split() == ["#", "HH:MM:SS", "Idx", "W", "C", "-"]
    data = [ln.split() for ln in lines if not ln.startswith("#")]
    assert len(data) == 6 and [d[1] for d in data] == ["0", "1"] * 3
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", d[0]) for d in data)
    assert [d[4] for d in data[:2]] == ["0", "1"]        # sim:b has one problem: its injected fault
    assert float(data[1][3]) >= 70.0
    assert run_app(smi_cli.app, "otpu-smi", ["dmon", "--dev", "sim:a", "-t", "sim-small", "-s", "x"]) == 2


def test_value_limit_columns_health_and_json(capsys):
    with Board.open("sim:a", "sim-small", faults="hot:c=90"):
        pass
    assert smi("--dev", "sim:a", "-t", "sim-small") == 0
    out = capsys.readouterr().out
    assert re.search(r"die \d+\.\d+ C / 85\.00 C", out) and re.search(r"estimate / \d+\.\d+ W max", out)
    assert "│ Health  │ sim:a has injected faults: hot:c=90" in out
    assert smi("--dev", "sim:a", "-t", "sim-small", "--json") == 0
    doc = json.loads(capsys.readouterr().out)[0]
    assert doc["health"] == ["sim:a has injected faults: hot:c=90 (they stay until `otpu sim reset --dev sim:a` "
                             "clears them)"]
    assert doc["fields"]["temperature.die.limit"] == 85.0 and doc["fields"]["power.limit"] == doc["fields"]["power.max"]


def test_sparklines_use_their_own_range():
    assert sparkline([40.0, 40.5, 41.0]) == "▁▅█"          # a one-degree rise fills the height
    assert sparkline([3.0, 3.0]) == "▁▁"
    assert sparkline([0, 50, 100], 0, 100) == "▁▅█"


def test_the_card_says_its_own_target_not_the_first_sharing_its_hash(capsys):
    with Board.open("sim:asic", "nangate45-card"):
        pass
    assert smi("--dev", "sim:asic", "-t", "ypcb-00338", "--query", "card_target,target,cfg_hash.match",
               "--format", "csv,noheader") == 0
    assert capsys.readouterr().out.strip() == "nangate45-card, ypcb-00338, yes"   # same arch hash, another board
