"""`otpu sim run|info|trace` through the real CLI entry (exit codes, JSON, dumps, traces)."""
import json
import subprocess
import sys

import numpy as np

from otpu_core import isa, tracefmt
from otpu_core.asm import assemble
from otpu_core.cli import build_app, run_app

PROG = """
ld dram=r8 tmem=0 n=16
vop.mul dst=100 a=0 rows=2 cols=8 drs=8 ars=8 bmode=scalar imm=3.0
vop.rsum dst=200 a=100 rows=2 cols=8 drs=1 ars=8
st dram=r9 tmem=100 n=16
halt
"""


def otpu(*args):
    return run_app(build_app(), "otpu", list(args))


def test_run_assembly_with_dram_args_dumps_and_json(tmp_path, capsys):
    src = tmp_path / "p.s"
    src.write_text(PROG)
    data = tmp_path / "x.bin"
    np.arange(16, dtype=np.float32).tofile(data)
    trace = tmp_path / "out.trace"
    rc = otpu("sim", "run", str(src), "--target", "sim-small", "--dram", f"{data}@0x1000", "--arg", "0=0x1000",
              "--arg", "1=0x2000", "--dump", "tmem:200:2", "--dump", "dram:0x2000:8", "--dump", "regs", "--json",
              "--trace", str(trace))
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["instructions"] == 5 and out["cycles"] == out["counters"]["CYCLES"] > 0
    tm, dr, regs = out["dumps"]
    assert tm["floats"] == [3.0 * sum(range(8)), 3.0 * sum(range(8, 16))]
    assert bytes.fromhex(dr["bytes"]) == np.array([0.0, 3.0], np.float32).tobytes()
    assert regs["values"][8] == 0x1000 and regs["values"][9] == 0x2000
    assert 0 < out["utilisation"]["DMA"] <= 1 and out["utilisation"]["MXU"] == 0
    events = tracefmt.unpack(tracefmt.read(trace))
    assert [e["pc"] for e in events if e["type"] == "D"] == [0, 1, 2, 3]


def test_run_binary_image_and_table_output(tmp_path, capsys):
    img = tmp_path / "p.bin"
    img.write_bytes(isa.encode_program(assemble("li rd=r1 imm=7\nhalt")))
    assert otpu("sim", "run", str(img), "--target", "sim-small", "--dump", "regs") == 0
    out = capsys.readouterr().out
    assert "halted after" in out and "r1=0x00000007" in out and "unit utilisation" in out


def test_trace_command_prints_lines_and_chrome_json(tmp_path, capsys):
    src = tmp_path / "p.s"
    src.write_text(PROG)
    trace, chrome = tmp_path / "t.trace", tmp_path / "t.json"
    assert otpu("sim", "run", str(src), "-t", "sim-small", "--trace", str(trace), "--json") == 0
    capsys.readouterr()
    assert otpu("sim", "trace", str(trace), "--chrome", str(chrome)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("T0 D c=") and any(line.startswith("T0 H c=") for line in lines)
    assert len(json.loads(chrome.read_text())["traceEvents"]) == 4


def test_info_json(capsys):
    assert otpu("sim", "info", "--target", "ypcb-00338", "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["D"] == 128 and info["timing"]["dram_bytes_per_cycle"] == 128 * 0.88


def test_bad_program_exits_2_with_the_sim_error_and_no_traceback(tmp_path):
    src = tmp_path / "bad.s"
    src.write_text("ld dram=2 tmem=0 n=1\nhalt\n")
    r = subprocess.run([sys.executable, "-m", "otpu_core", "sim", "run", str(src), "-t", "sim-small"],
                       capture_output=True, text=True, env={"OTPU_DISABLE_PLUGINS": "*", "PATH": ""})
    assert r.returncode == 2
    assert "slice 0, pc 0 (ld dram=2 n=1): LD: DRAM address 0x2 is not a multiple of 4" in r.stderr
    assert "Traceback" not in r.stderr


def test_usage_errors_exit_2(tmp_path, capsys):
    src = tmp_path / "p.s"
    src.write_text("halt\n")
    assert otpu("sim", "run", str(tmp_path / "missing.s")) == 2
    assert otpu("sim", "run", str(src), "--arg", "9=1") == 2
    assert otpu("sim", "run", str(src), "--dump", "tmem:1") == 2
    assert otpu("sim", "run", str(src), "--dram", "nofile@0") == 2
    bad = tmp_path / "odd.bin"
    bad.write_bytes(b"\x00" * 12)
    assert otpu("sim", "run", str(bad)) == 2
    assert otpu("sim", "trace", str(bad)) == 2
    err = capsys.readouterr().err
    assert "argument number must be 0..7" in err and "expected regs, tmem:ADDR:N" in err


def test_binary_image_with_its_wait_table_on_a_seq_wc_target(tmp_path, capsys):
    from otpu_core.asm import parse
    prog = parse("ld dram=0 tmem=0 n=8\nvop.add dst=100 a=0 rows=1 cols=8 drs=8 ars=8 bmode=scalar imm=1.0 ! ld=0\n"
                 "halt ! sync")
    img = tmp_path / "p.bin"
    img.write_bytes(isa.encode_program(prog.instrs, [w or isa.NO_WAIT for w in prog.waits]))
    assert otpu("sim", "run", str(img), "-t", "nangate45-small", "--waits", "--json") == 0
    assert json.loads(capsys.readouterr().out)["instructions"] == 3
    weak = tmp_path / "weak.bin"        # no wait on the LD: the table is refused as a hazard
    weak.write_bytes(isa.encode_program(prog.instrs, [isa.NO_WAIT] * 3))
    assert otpu("sim", "run", str(weak), "-t", "nangate45-small", "--waits") == 2
    assert "pc 1" in capsys.readouterr().err
    assert otpu("sim", "run", str(img), "-t", "nangate45-small") == 2     # the table read as instructions
