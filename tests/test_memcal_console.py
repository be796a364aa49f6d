"""otpu-memcal console: the core CPU's calibration log read over a serial port (pyserial), tested
through a pseudo-terminal pair whose other end replays a log in the reference's format."""
from __future__ import annotations

import json
import os
import termios
import threading
import time

import pytest

from otpu_core.cli import run_app
from otpu_memcal import cli

LOG = """\
LiteDRAM self-calibration, firmware 0x00010004
scratch 0x12345678 (ok), bus errors 0, channels [0, 1], DQS phase steps ch0 0, ch1 0 (16.7 ps each, 112 per tCK)
DDR3 channel 0
scan of the common CK phase, every 1 steps
all lanes: 45 steps (753 ps) around +50
write latency: m0:6 m1:6 m2:6 m3:6 m4:6 m5:6 m6:6 m7:6 m8:6
read leveling:
  m0: b5 |00001111111111000000000000000000| window 10 taps (781 ps), tap 9
  m1: b4 |00000000111111111110000000000000| window 11 taps (859 ps), tap 13
check at the chosen taps: pass
calibration: PASS
DDR3 channel 1
all lanes: 72 steps (1205 ps) around +64
write latency: m0:0 m1:0 m2:0 m3:0 m4:0 m5:0 m6:0 m7:0 m8:-
calibration: {verdict}
BIST: PASS
"""


@pytest.fixture
def pty_pair():
    master, slave = os.openpty()
    yield master, slave
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def replay(pair, text, delay=0.01):
    """Write the log into the terminal once the tool has opened its end (pyserial puts it in raw mode
    and drops what was waiting), as a card's CPU starts talking after a reset."""
    master, slave = pair

    def run():
        deadline = time.monotonic() + 30
        while termios.tcgetattr(slave)[3] & termios.ICANON and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        for line in text.splitlines(keepends=True):
            os.write(master, line.replace("\n", "\r\n").encode())
            time.sleep(delay)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return os.ttyname(slave), t


def test_a_passing_log_is_printed_and_summarised(pty_pair, capsys):
    port, t = replay(pty_pair, LOG.format(verdict="PASS"))
    assert run_app(cli.app, "otpu-memcal", ["console", "--port", port, "--timeout", "20"]) == 0
    t.join(5)
    out = capsys.readouterr().out
    assert "all lanes: 45 steps (753 ps) around +50" in out and "m1: b4 |0000000011111" in out
    assert out.rstrip().endswith("calibration log: PASS")


def test_json_summary_and_a_failing_channel_exits_1(pty_pair, capsys):
    port, _ = replay(pty_pair, LOG.format(verdict="FAIL"))
    assert run_app(cli.app, "otpu-memcal", ["console", "--port", port, "--baud", "921600", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["finished"] and not doc["passed"] and doc["expected"] == [0, 1]
    c0, c1 = doc["channels"]["0"], doc["channels"]["1"]
    assert (c0["verdict"], c0["window_steps"], c0["window_ps"], c0["around"]) == ("PASS", 45, 753, 50)
    assert c0["write_latency"] == {str(lane): 6 for lane in range(9)} and c0["read_taps"] == {"0": 10, "1": 11}
    assert doc["channels"]["1"]["write_latency"]["8"] is None
    assert (c1["verdict"], c1["window_ps"], c1["bist"]) == ("FAIL", 1205, "PASS")
    assert doc["log"][0] == "LiteDRAM self-calibration, firmware 0x00010004"


def test_a_log_that_never_ends_times_out(pty_pair, capsys):
    port, _ = replay(pty_pair, LOG.split("calibration: PASS")[0])
    assert run_app(cli.app, "otpu-memcal", ["console", "--port", port, "--timeout", "1"]) == 1
    out, err = capsys.readouterr()
    assert "scan of the common CK phase" in out
    assert "no end of the calibration within 1 s" in err


def test_a_port_that_does_not_exist_exits_3(tmp_path, capsys):
    assert run_app(cli.app, "otpu-memcal", ["console", "--port", str(tmp_path / "ttyUSB9")]) == 3
    err = capsys.readouterr().err
    assert "serial port" in err and "ttyUSB9" in err and "dialout" in err
