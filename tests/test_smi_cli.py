"""otpu-smi on the simulated card: table, JSON, -q, --query CSV, --help-query, exit codes, loop
mode and Ctrl-C, and a run in another process showing up in its utilisation."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import re
import textwrap
import time
from pathlib import Path

import pytest

from otpu_core import plugins, power, smi_fields, target
from otpu_core.hookspecs import hookimpl
from otpu_core.cli import run_app
from otpu_smi import cli as smi_cli
from otpu_smi.render import bar, sparkline
from otpu_smi.sample import Sampler, rates


@pytest.fixture(autouse=True)
def _smi_on_its_own(monkeypatch):
    """smi's own fields: this repository's sensor and calibration plugins say nothing here (tests/test_i2c_smi.py
    has them), here and in the smi processes these tests start."""
    monkeypatch.setenv("OTPU_DISABLE_PLUGINS", "i2c,memcal")
    for module in ("otpu_i2c.smi", "otpu_memcal.smi"):
        monkeypatch.setattr(f"{module}.fields", lambda board: None, raising=False)


def smi(*args):
    return run_app(smi_cli.app, "otpu-smi", ["--dev", "sim:s", "--target", "sim-small", *args])


def test_table_has_every_row_in_a_closed_box(capsys):
    assert smi() == 0
    out = capsys.readouterr().out
    frame = [line for line in out.splitlines() if line[:1] in "╭│├╰"]
    assert frame[0].startswith("╭") and frame[-1].startswith("╰")
    assert len({len(line) for line in frame}) == 1
    for text in ("D=32 MCOLS=4 LANES=8", "CFG_HASH match", "5.0 GT/s PCIe x8", "ch0 ok ch1 ok", "die ",
                 "W estimate", "16 MiB total", "MXU", "░░░░░░░░░░", "IPC", "no process"):
        assert text in out, text


def test_json_fields(capsys):
    assert smi("--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, list) and len(doc) == 1
    card = doc[0]
    assert card["ok"] and card["device"] == "sim:s" and card["regmap"] == 3 and card["name"] == "sim-small"
    assert card["bitstream"]["D"] == 32 and card["calib"] == [True, True] and card["cfg_hash"]["match"] is True
    assert card["cfg_hash"]["card"] == card["cfg_hash"]["target"] == f"0x{target.load('sim-small').arch_hash():08x}"
    assert 20 < card["temp_c"] < 85
    m = power.board_model()
    assert m.fixed_w <= card["power"]["w"] <= m.max_w and card["power"]["measured"] is False
    assert set(card["util"]) >= {"RUNNING", "MXU_BUSY", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY", "DRAM"}
    assert card["fields"]["memory.total"] == 16 and card["fields"]["utilization.mxu"] == 0
    assert 150 < card["sample"]["seconds"] * 1000 < 1000


def test_query_csv_formats(capsys):
    assert smi("--query", "name,memory.total,utilization.mxu,temperature.board", "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["name, memory.total [MiB], utilization.mxu [%], temperature.board [C]",
                     "sim-small, 16 MiB, 0 %, [N/A]"]
    assert smi("--query", "index,name,memory.total", "--format", "csv,noheader,nounits") == 0
    assert capsys.readouterr().out.splitlines() == ["0, sim-small, 16"]


def test_help_query_and_bad_options(capsys):
    assert run_app(smi_cli.app, "otpu-smi", ["--help-query"]) == 0
    out = capsys.readouterr().out
    for name in smi_fields.CATALOGUE:
        assert f"  {name} " in out
    assert smi("--query", "name,power.drwa") == 2
    assert "unknown field power.drwa" in capsys.readouterr().err
    assert smi("--query", "name", "--format", "xml") == 2


def test_full_query_is_nested(capsys):
    assert smi("-q") == 0
    lines = capsys.readouterr().out.splitlines()
    assert "bitstream" in lines and any(line.startswith("    D ") for line in lines)
    assert any(line.startswith("status ") and "0x" in line for line in lines)


def test_missing_card_exit_3(capsys):
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "/dev/xdma9"]) == 3     # absent: a device error, not usage
    assert "no device node /dev/xdma9_user" in capsys.readouterr().out


def test_rates_bars_and_sparklines():
    a = {"UPTIME": 0, "RUNNING": 0, "MXU_BUSY": 0, "DRAM_RD": 0, "DRAM_WR": 0, "INSTR": 0}
    b = {"UPTIME": 1_000_000, "RUNNING": 800_000, "MXU_BUSY": 600_000, "DRAM_RD": 700_000, "DRAM_WR": 20_000,
         "INSTR": 5_000}
    r = rates(a, b, 100_000)
    assert r["util"]["RUNNING"] == 0.8 and r["util"]["MXU_BUSY"] == 0.6 and r["util"]["DRAM"] == 0.72
    assert r["dram_gbs"] == pytest.approx(0.72 * 64 * 100e6 / 1e9)   # 4.608 GB/s at 100 MHz
    assert r["ipc"] == 0.005 and r["seconds"] == 0.01
    assert bar(50) == "█████░░░░░  50%" and bar(None) == "n/a"
    assert sparkline([0, 50, 100], 0, 100) == "▁▅█"


def test_loop_json_is_one_document_per_line():
    p = subprocess.Popen([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:s",
                          "--target", "sim-small", "--json", "-l", "0.2"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    docs = [json.loads(p.stdout.readline()) for _ in range(2)]
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=20) == 0
    assert [d[0]["device"] for d in docs] == ["sim:s", "sim:s"] and docs[1][0]["time"] > docs[0][0]["time"]


def test_loop_mode_repeats_and_ctrl_c_exits_0(tmp_path):
    env = dict(os.environ)   # conftest points OTPU_RUN_DIR at this test's run directory
    p = subprocess.Popen([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:s",
                          "--target", "sim-small", "--query", "utilization.running", "--format", "csv,noheader",
                          "-l", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    lines = [p.stdout.readline() for _ in range(3)]
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=20) == 0
    assert all(line.strip().endswith("%") for line in lines)


def test_a_run_in_another_process_shows_in_utilisation(tmp_path):
    env = dict(os.environ)   # conftest points OTPU_RUN_DIR at this test's run directory
    runner = textwrap.dedent("""
        import sys, numpy as np
        from otpu_core import isa, opchecks
        from otpu_core.board import Board
        b = Board.open("sim:busy", target="sim-small")
        b.load_program(opchecks.PROG_AT, np.frombuffer(isa.encode_program(opchecks.nop_loop(900_000)), np.uint8))
        print("started", flush=True)
        b.run(timeout=120)
        b.close()
    """)
    idle = Sampler("sim:busy", "sim-small")
    try:
        before = idle.sample(0.2)["fields"]
        p = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, env=env, text=True)
        assert p.stdout.readline().strip() == "started"
        time.sleep(0.3)
        idle.sample(0.0)                       # start the interval inside the run
        busy_report = idle.sample(0.3)
        busy = busy_report["fields"]
        assert p.wait(timeout=120) == 0
        idle.sample(0.05)
        after = idle.sample(0.3)["fields"]
    finally:
        idle.close()
    assert before["utilization.running"].value == 0
    assert busy["utilization.running"].value > 50, busy["utilization.running"]
    assert busy["process.pid"].value == p.pid and busy["state"].value == "running"
    assert busy_report["process"]["process"]["name"].startswith("python")   # psutil's view of the runner
    assert after["utilization.running"].value == 0 and after["process.pid"].value is None


def test_live_screen_on_a_terminal_has_sparklines_and_ctrl_c_exits_0(tmp_path):
    import pty
    import select
    env = {**os.environ, "COLUMNS": "120", "LINES": "60", "TERM": "xterm"}
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:s",
                          "--target", "sim-small", "-l", "0.2"], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and seen.count("History".encode()) < 3:
        if select.select([master], [], [], 0.5)[0]:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=20)
    os.close(master)
    text = seen.decode("utf-8", "replace")
    assert rc == 0
    assert text.count("History") >= 3            # the screen was redrawn in place, several times
    assert "\x1b[" in text                        # cursor movement: Rich Live, not scrolling tables
    assert any(ch in text for ch in "▁▂▃▄▅▆▇█")  # sparklines
    assert "Traceback" not in text


def normalise(text: str) -> str:
    """Mask the time, the die temperature and the sampling interval, keeping the box aligned."""
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+", "TIME", text)
    return re.sub(r"(?<=die )\d+\.\d+|(?<=over )\d+\.\d+", lambda m: "#" * len(m.group()), text)


def test_golden_table(capsys):
    assert smi() == 0
    assert normalise(capsys.readouterr().out) == (Path(__file__).parent / "golden" / "smi_sim_small.txt").read_text()


class MeasuredPower:
    """A sensor plugin as the i2c plugin would be: measured power and board temperature."""

    @hookimpl
    def otpu_smi_fields(self, board):
        return [smi_fields.Field("power.draw", 21.5, "W", "measured"),
                smi_fields.Field("temperature.board", 43.0, "C", "measured")]


def test_a_sensor_plugin_replaces_the_estimate(capsys):
    mgr = plugins.get()
    plugin = MeasuredPower()
    mgr.pm.register(plugin, name="test-sensor")
    try:
        assert smi() == 0
        out = capsys.readouterr().out
        assert smi("--query", "power.draw,power.source,temperature.board", "--format", "csv,noheader") == 0
        csv = capsys.readouterr().out.strip()
    finally:
        mgr.pm.unregister(plugin)
    assert "21.5W measured" in out and "board 43.00 C" in out and "estimate" not in out
    assert csv == "21.50 W, measured, 43.00 C"


class BrokenSensor:
    @hookimpl
    def otpu_smi_fields(self, board):
        raise RuntimeError("bus stuck")


def test_a_broken_sensor_plugin_is_reported_and_skipped(capsys):
    mgr = plugins.get()
    plugin = BrokenSensor()
    mgr.pm.register(plugin, name="test-broken-sensor")
    try:
        assert smi("--query", "power.source", "--format", "csv,noheader") == 0
    finally:
        mgr.pm.unregister(plugin)
    out, err = capsys.readouterr()
    assert out.strip().startswith("estimate")
    assert "plugin 'test-broken-sensor' failed to report fields: RuntimeError: bus stuck" in err


def test_runner_status_file_fills_memory_and_process(capsys):
    from otpu_core.card.runstate import DeviceLock, run_dir, write_status
    smi()                                                 # the card exists
    capsys.readouterr()
    lock = DeviceLock("sim-s").acquire()                  # this process holds the card, as a runner does
    write_status(run_dir() / "sim-s.json", {"pid": os.getpid(), "cmd": "otpu-chat qwen3", "model": "qwen3-0.6b",
                                            "tokens": 12, "tok_s_wall": 3.5,
                                            "dram": {"total": 16 << 20, "free": 6 << 20, "kv_capacity": 4 << 20,
                                                     "kv_used": 1 << 20}})
    assert smi("--query", "memory.used,memory.free,process.pid,process.model,process.tokens",
               "--format", "csv,noheader,nounits") == 0
    assert capsys.readouterr().out.strip() == f"10, 6, {os.getpid()}, qwen3-0.6b, 12"
    assert smi() == 0
    out = capsys.readouterr().out
    assert "10 MiB / 16 MiB used (KV 1 / 4 MiB)" in out and "Model qwen3-0.6b   tokens 12   3.5 tok/s" in out
    assert f"PID {os.getpid()}  otpu-chat qwen3" in out
    lock.release()
    write_status(run_dir() / "sim-s.json", {"pid": os.getpid(), "cmd": "otpu-chat qwen3"})   # left behind
    assert smi("--query", "process.pid", "--format", "csv,noheader") == 0
    assert capsys.readouterr().out.strip() == "[N/A]"
    assert smi() == 0
    assert f"the status file names pid {os.getpid()}, which does not hold the card's lock" in capsys.readouterr().out


def test_smi_loop_in_another_process_sees_utilisation_rise_and_fall():
    import threading

    import numpy as np

    from otpu_core import isa, opchecks
    from otpu_core.board import Board

    board = Board.open("sim:rise", target="sim-small")
    smi_proc = subprocess.Popen([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:rise",
                                 "--target", "sim-small", "--query", "utilization.running,state",
                                 "--format", "csv,noheader,nounits", "-l", "0.25"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(smi_proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        while len(lines) < 2:
            time.sleep(0.05)
        board.load_program(opchecks.PROG_AT,
                           np.frombuffer(isa.encode_program(opchecks.nop_loop(900_000)), np.uint8))
        board.run(timeout=120)
        n = len(lines)
        while len(lines) < n + 3:
            time.sleep(0.05)
    finally:
        smi_proc.send_signal(signal.SIGINT)
        assert smi_proc.wait(timeout=20) == 0
        board.close()
    samples = [(int(u), s) for u, s in (line.strip().split(", ") for line in lines)]
    assert samples[0] == (0, "idle")
    assert max(u for u, _ in samples) > 50 and any(s == "running" for _, s in samples)
    assert samples[-1] == (0, "idle")


def test_no_card_at_all_exits_3(monkeypatch, capsys):
    from otpu_core import devspec
    monkeypatch.setattr(devspec, "available", lambda: [{"dev": "tt:0", "kind": "tt:", "description": "Blackhole"}])
    assert run_app(smi_cli.app, "otpu-smi", []) == 3
    assert "no openTPU card found" in capsys.readouterr().err


def test_a_card_whose_link_is_down_shows_why_and_exits_3(capsys):
    from otpu_selftest import cli as selftest_cli
    run_app(selftest_cli.app, "otpu-selftest", ["--dev", "sim:down", "--target", "sim-small", "--fault", "link_down"])
    capsys.readouterr()
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim:down", "--dev", "sim:s", "--target", "sim-small"]) == 3
    out = capsys.readouterr().out
    assert "cannot open" in out and "PCIe link is down" in out and "CFG_HASH match" in out   # the other card is shown


@pytest.mark.parametrize("devs,env,text", [
    (["foo:1"], {}, "unknown device 'foo:1'"),
    (["tt:0"], {}, "tt:0 is a Tenstorrent Blackhole card, not an openTPU card"),
    (["sim:s", "foo:1"], {}, "unknown device 'foo:1'"),
    (["sim:f"], {"OTPU_SIM_FAULTS": "bogus"}, "unknown fault kind 'bogus'")])
def test_usage_errors_exit_2_not_3(devs, env, text, capsys, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = [a for d in devs for a in ("--dev", d)]
    assert run_app(smi_cli.app, "otpu-smi", [*args, "--target", "sim-small"]) == 2
    out = capsys.readouterr()
    assert text in out.err and out.out == ""      # an error, not a table row saying "cannot open"


def test_dash_h_prints_help(capsys):
    assert run_app(smi_cli.app, "otpu-smi", ["-h"]) == 0
    assert "Usage: otpu-smi" in capsys.readouterr().out


def test_a_missing_power_report_is_a_usage_error(tmp_path, capsys):
    assert smi("--power-json", str(tmp_path / "none.json")) == 2      # not silently the board's estimate
    assert f"--power-json {tmp_path / 'none.json'}: no such file" in capsys.readouterr().err
