"""Simulated cards on disk: `otpu sim list` and `otpu sim rm`, a corrupt or deleted state file
reported (never silently a new card), a full filesystem named with the space needed, and DRAM
kept where there is room."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from otpu_core.board import Board
from otpu_core.card import simfiles
from otpu_core.card.runstate import DeviceLock, run_dir
from otpu_core.cli import build_app, run_app


def otpu(*args):
    return run_app(build_app(), "otpu", list(args))


def make(name="sim:x", target="sim-small", faults=None):
    with Board.open(name, target, faults=faults) as b:
        b.write(0, np.ones(1 << 20, np.uint8))


def test_list_shows_each_card_and_rm_removes_it(capsys):
    make("sim:x")
    make("sim:y", faults="hot:c=80")
    assert otpu("sim", "list", "--json") == 0
    rows = {r["dev"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"sim:x", "sim:y"}
    assert rows["sim:y"]["faults"] == "hot:c=80" and rows["sim:x"]["target"] == "sim-small"
    assert rows["sim:x"]["dram_bytes_on_disk"] >= 1 << 20 and rows["sim:x"]["held_by"] is None
    with DeviceLock("sim-x"):
        assert otpu("sim", "list", "--json") == 0
        assert json.loads(capsys.readouterr().out)[0]["held_by"]["pid"] == os.getpid()
        assert otpu("sim", "rm", "sim:x") == 3                  # in use: refused, nothing removed
        assert "sim-x is busy: held by PID" in capsys.readouterr().err
    assert (run_dir() / "sim-x.card.json").exists()
    assert otpu("sim", "rm", "sim:x") == 0
    assert capsys.readouterr().out.startswith("sim:x: removed (1.0 MiB of DRAM freed)")
    assert not any(p.name.startswith("sim-x.") and p.name != "sim-x.lock" for p in run_dir().iterdir())
    assert otpu("sim", "rm", "sim:nope") == 2 and "cards there: sim:y" in capsys.readouterr().err
    assert otpu("sim", "rm") == 2
    assert otpu("sim", "rm", "--all") == 0 and otpu("sim", "list") == 0
    assert "no simulated cards in" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["corrupt", "deleted"])
def test_a_damaged_state_file_is_reported_not_replaced(damage, capsys):
    make("sim:x")
    state = run_dir() / "sim-x.card.json"
    if damage == "corrupt":
        state.write_text("{not json")
    else:
        state.unlink()
    assert otpu("card", "info", "--dev", "sim:x") == 3
    err = capsys.readouterr().err
    assert ("is corrupt" if damage == "corrupt" else "is gone while its other files remain") in err
    assert "otpu sim reset --dev sim:x" in err and "Traceback" not in err
    assert not state.exists() or state.read_text() == "{not json"      # nothing made up in its place
    assert otpu("sim", "list", "--json") == 0
    assert json.loads(capsys.readouterr().out)[0]["state"] == ("corrupt state file" if damage == "corrupt"
                                                               else "state file missing")
    assert otpu("sim", "reset", "--dev", "sim:x") == 0                  # reset makes a new card
    capsys.readouterr()
    assert otpu("card", "info", "--dev", "sim:x", "--json") == 0


def test_a_full_filesystem_is_named_with_the_space_needed(monkeypatch, capsys):
    make("sim:x")
    monkeypatch.setattr(simfiles, "free_bytes", lambda path: 10 << 20)
    with Board.open("sim:x", "sim-small") as b:
        with pytest.raises(Exception) as e:
            b.write(0, np.zeros(8 << 20, np.uint8))
    text = str(e.value)
    assert f"{run_dir()} has 10.0 MiB free" in text and "needs" in text and "OTPU_RUN_DIR" in text
    rc = run_app(build_app(), "otpu", ["diag", "--dev", "sim:x", "-t", "sim-small", "--only", "mem"])
    err = capsys.readouterr().err
    assert rc == 3 and "10.0 MiB free" in err and "Traceback" not in err


def test_dram_goes_where_there_is_room(monkeypatch, tmp_path, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("OTPU_CACHE", str(cache))
    small = str(run_dir())
    monkeypatch.setattr(simfiles, "free_bytes", lambda path: (1 << 20) if str(path) == small else 1 << 40)
    make("sim:x")
    assert "too little for the card's 16.0 MiB of DRAM: it is kept in" in capsys.readouterr().err
    meta = json.loads((run_dir() / "sim-x.card.json").read_text())
    assert meta["dram_dir"] == str(cache / "sim") and (cache / "sim" / "sim-x.dram").exists()
    with Board.open("sim:x", "sim-small") as b:                         # another open finds it there
        assert (b.read(0, 1 << 20) == 1).all()
    assert otpu("sim", "rm", "sim:x") == 0
    assert not (cache / "sim" / "sim-x.dram").exists()
