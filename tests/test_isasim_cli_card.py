"""`otpu sim run` refusing what it cannot do before it starts (empty programs, output paths that
cannot be written, dumps a card cannot provide) and running on a card with `--dev`, where the
run is the card's: the same counters and results as the golden machine, and another process's
otpu-smi sees it."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from otpu_core import tracefmt
from otpu_core.cli import build_app, run_app

PROG = """
ld dram=r8 tmem=0 n=16
vop.mul dst=100 a=0 rows=2 cols=8 drs=8 ars=8 bmode=scalar imm=3.0
st dram=r9 tmem=100 n=16
halt
"""


def otpu(*args):
    return run_app(build_app(), "otpu", list(args))


def _program(tmp_path: Path, text: str = PROG, name: str = "p.s") -> Path:
    src = tmp_path / name
    src.write_text(text)
    return src


@pytest.mark.parametrize("name,content", [("empty.s", ""), ("comments.s", "# nothing here\n\n"), ("empty.bin", "")])
def test_an_empty_program_is_refused(name, content, tmp_path, capsys):
    src = _program(tmp_path, content, name)
    assert otpu("sim", "run", str(src), "-t", "sim-small") == 2
    out = capsys.readouterr()
    assert f"{src}: program has no instructions" in out.err and "halted" not in out.out


def test_a_nop_only_program_still_fails_as_running_past_the_end(tmp_path, capsys):
    assert otpu("sim", "run", str(_program(tmp_path, "nop\nnop\n")), "-t", "sim-small") == 2
    assert "ran past the end of the program (2 instructions) without HALT" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["dir", "missing"])
def test_a_trace_path_that_cannot_be_written_is_refused_up_front(where, tmp_path, capsys):
    trace = tmp_path if where == "dir" else tmp_path / "nonexist" / "t.trace"
    text = "is a directory" if where == "dir" else f"directory {tmp_path / 'nonexist'} does not exist"
    assert otpu("sim", "run", str(_program(tmp_path)), "-t", "sim-small", "--trace", str(trace)) == 2
    out = capsys.readouterr()
    assert f"--trace {trace}: {text}" in out.err and out.out == ""


def _card_files(name: str) -> list[str]:
    return [p.name for p in Path(os.environ["OTPU_RUN_DIR"]).glob(f"sim-{name}.*")]


@pytest.mark.parametrize("extra,text", [
    (("--dump", "regs"), "--dump regs: a card's registers cannot be read from the host (--dev sim:r)"),
    (("--dump", "tmem:0:4"), "--dump tmem: a card's TMEM cannot be read from the host (--dev sim:r)"),
    (("--slice", "1"), "--slice 1: with --dev"),
    (("--waits",), "--waits: a card's IMEM takes instructions only")])
def test_what_a_card_cannot_do_is_refused_before_it_is_opened(extra, text, tmp_path, capsys):
    assert otpu("sim", "run", str(_program(tmp_path)), "-t", "sim-small", "--dev", "sim:r", *extra) == 2
    assert text in capsys.readouterr().err
    assert _card_files("r") == []          # refused before the card was created or touched


def test_a_dram_file_over_the_program_area_is_refused(tmp_path, capsys):
    from otpu_core.board import Board, BoardBackend
    with Board.open("sim:o", "sim-small") as board:
        prog_at = BoardBackend(board).prog_at
    data = tmp_path / "x.bin"
    data.write_bytes(bytes(256))
    assert otpu("sim", "run", str(_program(tmp_path)), "-t", "sim-small", "--dev", "sim:o",
                "--dram", f"{data}@{prog_at - 128}") == 2
    assert f"overlap the program area at 0x{prog_at:x}" in capsys.readouterr().err


def test_a_run_on_the_simulated_card_matches_the_golden_machine(tmp_path, capsys):
    src = _program(tmp_path)
    x = np.arange(16, dtype=np.float32) - 5.5
    data = tmp_path / "x.bin"
    x.tofile(data)
    common = ["sim", "run", str(src), "-t", "sim-small", "--dram", f"{data}@0x1000", "--arg", "0=0x1000",
              "--arg", "1=0x2000", "--dump", "dram:0x2000:64", "--json"]
    results = {}
    for where, extra in (("machine", []), ("card", ["--dev", "sim:c"])):
        trace = tmp_path / f"{where}.trace"
        assert otpu(*common, *extra, "--trace", str(trace)) == 0
        results[where] = json.loads(capsys.readouterr().out)
        results[where]["records"] = tracefmt.unpack(tracefmt.read(trace))
    card, machine = results["card"], results["machine"]
    assert card["device"] == "sim:c" and _card_files("c")
    got = np.frombuffer(bytes.fromhex(card["dumps"][0]["bytes"]), np.float32)
    want = x.astype(np.float64) * 3.0                     # float64 reference: exact for these values
    assert np.max(np.abs(got - want)) == 0.0
    assert card["dumps"] == machine["dumps"]
    assert card["cycles"] == machine["cycles"] and card["instructions"] == machine["instructions"] == 4
    shared = set(card["counters"]) & set(machine["counters"])
    assert {k: card["counters"][k] for k in shared} == {k: machine["counters"][k] for k in shared}
    assert card["utilisation"]["DMA"] == machine["utilisation"]["DMA"] > 0
    assert [e["pc"] for e in card["records"] if e["type"] == "D"] == [0, 1, 2]      # HALT has no D record
    assert card["records"] == machine["records"]
    assert card["trace"]["records"] == len(tracefmt.read(tmp_path / "card.trace")) and not card["trace"]["full"]


def test_smi_in_another_process_sees_a_sim_run_on_the_card(tmp_path):
    src = _program(tmp_path, "loop body=@e count=300000\nnop\nnop\nnop\nnop\ne:\nhalt\n", "long.s")
    runner = subprocess.Popen([sys.executable, "-m", "otpu_core", "sim", "run", str(src), "-t", "sim-small",
                               "--dev", "sim:x", "--json", "--trace", str(tmp_path / "long.trace")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, states = [], []
    deadline = time.monotonic() + 120
    try:
        while runner.poll() is None and time.monotonic() < deadline and not any(u > 0 for u in seen):
            if not _card_files("x"):
                time.sleep(0.05)
                continue
            out = subprocess.run([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:x",
                                  "--target", "sim-small", "--query", "utilization.running,state,process.pid",
                                  "--format", "csv,noheader,nounits", "--interval", "0.3"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            util, state, pid = out.stdout.strip().split(", ")
            seen.append(int(util))
            states.append((state, pid))
        out, err = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, err
    report = json.loads(out)
    assert report["cycles"] >= 1_200_000
    assert report["trace"] == {"records": 4096, "depth": 4096, "full": True, "dropped": 0}   # sim-small TRACE_DEPTH
    assert any(u > 0 for u in seen), seen
    assert ("running", str(runner.pid)) in states     # the card's run-state names the sim run's process
