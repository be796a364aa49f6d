"""Tools must not break the card they test: a run that never halts is stopped and waited out
before any host write that would lap the XDMA engine; the engine's state is shown with what
clears it; injected faults are named in every tool's header."""
from __future__ import annotations

import json

import numpy as np
import pytest

from otpu_core.board import Board, BoardBackend, prepare
from otpu_core.cli import build_app, run_app
from otpu_core.corechecks import programs
from otpu_diag import cli as diag_cli
from otpu_smi import cli as smi_cli

FOREVER = "loop count=2000000000 body=@e\nld dram=0 tmem=0 n=64\ne:\nhalt\n"
COPY = "ld dram=0x2000 tmem=0 n=16\nst dram=0x3000 tmem=0 n=16\nhalt\n"


def good_program_halts_and_verifies(board: Board) -> None:
    backend = BoardBackend(board)
    data = np.random.default_rng(1).integers(0, 256, 64, dtype=np.uint8)
    board.write(0x2000, data)
    board.write(0x3000, np.zeros(64, np.uint8))
    stats = backend.run(prepare(COPY), timeout=20)
    assert stats.instructions == 3
    assert (board.read(0x3000, 64) == data).all()
    big = np.random.default_rng(2).integers(0, 256, 1 << 16, dtype=np.uint8)   # a lapped engine lands this 8 KiB on
    board.write(0x100000, big)
    assert (board.read(0x100000, big.size) == big).all()


def test_a_run_that_never_halts_is_stopped_and_the_next_program_verifies(capsys):
    prog = prepare(FOREVER)
    with Board.open("sim:s", "sim-small") as board:
        backend = BoardBackend(board)
        backend.start(prog)
        with pytest.raises(Exception) as e:
            backend.wait(timeout=0.3)
        assert "did not halt" in str(e.value) and "the run was stopped" in str(e.value)
        # the very next write is large: it must not reach the card while the core still runs
        board.write(0x200000, np.ones(1 << 16, np.uint8))
        assert board.t.card.dma_stats()["lapped"] == 0 and board.t.engine_health() == ()
        good_program_halts_and_verifies(board)


def test_diag_on_a_hung_card_leaves_its_dma_engine_healthy(monkeypatch, capsys):
    monkeypatch.setattr(programs, "RUN_TIMEOUT_S", 0.5)
    rc = run_app(diag_cli.app, "otpu-diag", ["--dev", "sim:h", "-t", "sim-small", "--fault", "hang", "--only", "isa"])
    out = capsys.readouterr().out
    assert rc == 1 | 16
    assert out.splitlines()[1] == "sim:h has injected faults: hang (they stay until `otpu sim reset --dev sim:h` clears them)"
    with Board.open("sim:h", "sim-small") as board:
        assert board.t.card.dma_stats()["lapped"] == 0 and board.info.problems == []
        big = np.arange(1 << 16, dtype=np.uint32).view(np.uint8)[: 1 << 16]
        board.write(0x100000, big)
        assert (board.read(0x100000, big.size) == big).all()
    with Board.open("sim:h", "sim-small", faults="") as board:      # the fault cleared: programs run again
        good_program_halts_and_verifies(board)


def test_a_lapped_engine_is_shown_with_what_clears_it(capsys):
    with Board.open("sim:l", "sim-small") as board:
        backend = BoardBackend(board)
        backend.start(prepare(FOREVER))
        board.t.in_run = False                                      # a host that breaks the run-time rule
        board.t.mem_write(0, 0x10000, np.zeros(1 << 16, np.uint8))
        board._stop()
    assert run_app(build_app(), "otpu", ["card", "info", "--dev", "sim:l", "-t", "sim-small", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len(info["health"]) == 1 and "lapped" in info["health"][0] and "otpu sim reset --dev sim:l" in info["health"][0]
    assert run_app(build_app(), "otpu", ["card", "info", "--dev", "sim:l", "-t", "sim-small"]) == 0
    assert "H2C engine lapped" in capsys.readouterr().out
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim:l", "-t", "sim-small", "--query", "health",
                                             "--format", "csv,noheader"]) == 0
    assert "lapped" in capsys.readouterr().out
    assert run_app(build_app(), "otpu", ["sim", "reset", "--dev", "sim:l"]) == 0
    capsys.readouterr()
    assert run_app(build_app(), "otpu", ["card", "info", "--dev", "sim:l", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["health"] == []


@pytest.mark.parametrize("argv", [["card", "info"], ["smi"], ["selftest", "--json"]])
def test_every_tool_that_opens_a_faulty_card_names_its_faults(argv, capsys):
    with Board.open("sim:n", "sim-small", faults="hot:c=90"):
        pass
    rc = run_app(build_app(), "otpu", [*argv, "--dev", "sim:n", "-t", "sim-small"])
    out = capsys.readouterr().out
    assert rc in (0, 1 | 4)
    assert "sim:n has injected faults: hot:c=90" in out and "otpu sim reset --dev sim:n" in out


def test_long_work_reports_progress_on_stderr_when_piped():
    """Piped, the bars are off but a plain line reaches stderr every few seconds."""
    import io

    from rich.console import Console

    from otpu_core.corechecks.progress import CheckProgress
    err = io.StringIO()
    p = CheckProgress(Console(file=io.StringIO()), stream=err, every=0.0)
    with p:
        p.march(1, 2, 0.5, 3.0)
        p.soak(3, 10)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("otpu: march C- channel 1: element 2/6, 25%,") and lines[1].startswith("otpu: soak: program 3 of 10, 30%")
