"""otpu-memcal as a user runs it: status, cal (maps, JSON, results file), selfcal (firmware), scan (the
running settings untouched), a calibration killed by SIGKILL that status names and cal repairs,
a card without HOSTCAL, the calib check taking over from the core, and a clear error for every
bad option value."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from otpu_core.board import Board
from otpu_core.card import litedram_map as M
from otpu_core.card import regs
from otpu_core.checks import CheckContext, Status
from otpu_core.cli import run_app
from otpu_core.corechecks import device
from otpu_memcal import checks as memcal_checks
from otpu_memcal import cli, smi
from otpu_memcal.results import path_for

FAST = ["--stride", "8", "--bist-mib", "1", "--sweep-bist-mib", "0"]


def memcal(*args):
    return run_app(cli.app, "otpu-memcal", list(args))


def phy_settings(dev, ch):
    """The simulated PHY's settings of a channel, as the hardware holds them."""
    with Board.open(dev, "sim-small", check=False, lock=False) as b:
        c = b.t.card.periph_state["litedram"]["ch"][ch]
        return {k: json.loads(json.dumps(c[k])) for k in ("phase_steps", "wbs", "rbs", "rdly", "rbs_off", "cal_ready", "control")}


def test_status_names_who_calibrated_each_channel(capsys):
    assert memcal("status", "--dev", "sim:m", "--target", "sim-small") == 0
    out = capsys.readouterr().out
    assert "controllers LiteDRAM, calibrated by its CPU, calibration CPU: done" in out
    assert "STATUS calibration: channel 0 yes, channel 1 yes" in out
    assert "channel 0: calibrated, by the core's CPU" in out and "common write window" in out
    assert "traffic not checked by the CPU (DFII only)" in out
    assert memcal("status", "--dev", "sim:m", "--target", "sim-small", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hostcal"] and doc["cpu"]["state"] == "done" and [c["state"] for c in doc["channels"]] == ["calibrated"] * 2
    r = doc["channels"][1]["result"]
    assert r["by"] == "selfcal" and len(r["pass_maps"]) == M.LANES and r["window_ps"] > 500


def test_cal_prints_the_maps_saves_the_result_and_smi_shows_it(capsys):
    assert memcal("cal", "--dev", "sim:m", "--target", "sim-small", "--force", "--channel", "0", *FAST) == 0
    out = capsys.readouterr().out
    assert "channel 0: CK/DQS phase sweep over one tCK, every 8 steps" in out
    maps = [line for line in out.splitlines() if line.startswith("  m") and "steps (" in line]
    assert len(maps) == M.LANES and all(set(line.split()[1]) <= {"#", "."} for line in maps)
    assert "  all  " in out and "pick CK step" in out and "write latency: m0:" in out and "read leveling:" in out
    assert out.count("window ") >= M.LANES and "BIST 1 MiB: write" in out and "errors 0: PASS" in out
    assert out.rstrip().endswith("calibration: PASS (by host)")
    saved = json.loads(path_for("sim-m").read_text())
    assert saved["channels"]["0"]["by"] == "host" and "in_progress" not in saved
    with Board.open("sim:m", "sim-small", check=False, lock=False) as b:
        text = smi.fields(b)[0]
    assert text.name == "memory.calibration" and text.value.startswith("ch0 ok (host ") and "ch1 ok (CPU " in text.value
    assert memcal("cal", "--dev", "sim:m", "--target", "sim-small") == 0
    assert "both channels are calibrated (--force to redo)" in capsys.readouterr().err


def test_cal_json_and_the_bitslip_maps(capsys):
    assert memcal("cal", "--dev", "sim:m", "--target", "sim-small", "--force", "--channel", "1", "--json", *FAST) == 0
    doc = json.loads(capsys.readouterr().out)
    r = doc["channels"]["1"]
    assert doc["by"] == "host" and doc["failures"] == {}
    assert len(r["read_maps"]) == M.LANES and all(len(rows) == M.BITSLIPS for rows in r["read_maps"])
    assert all(len(row) == M.DELAYS and set(row) <= {"0", "1"} for rows in r["read_maps"] for row in rows)
    assert r["bist"]["read"]["errors"] == 0 and 85 < r["bist"]["read"]["percent_of_peak"] < 95
    assert r["accesses"] > 1000 and r["seconds"] > 0


def test_a_failed_channel_exits_1_with_the_error_and_hint(capsys):
    rc = memcal("cal", "--dev", "sim:m", "--target", "sim-small", "--fault", "no_calib:ch=1", *FAST)
    out, err = capsys.readouterr()
    assert rc == 1
    assert "the core's CPU left channel 1 uncalibrated (channel 1: failed, no CK phase common to every lane)" in err
    assert "calibration FAILED: channel 1: no DQS phase works for every lane" in out and "hint: not one lane" in out
    assert memcal("status", "--dev", "sim:m", "--target", "sim-small") == 0
    out = capsys.readouterr().out
    assert "channel 1: not calibrated" in out and "last host calibration" in out and "FAILED" in out


def test_a_card_without_hostcal_is_told_so(tmp_path, capsys):
    text = open("targets/sim-small.toml").read().replace('memory = "DDR3-1066"', 'memory = "DDR4-2400"')
    mig = tmp_path / "mig.toml"
    mig.write_text(text)
    assert memcal("cal", "--dev", "sim:mig", "--target", str(mig)) == 2
    err = capsys.readouterr().err
    assert "no LiteDRAM CSR window (CAPS bit27 HOSTCAL clear)" in err and "calibrate themselves (MIG)" in err
    assert memcal("status", "--dev", "sim:mig", "--target", str(mig)) == 0
    assert "controllers self-calibrating (MIG)" in capsys.readouterr().out
    with Board.open("sim:mig", str(mig), check=False, lock=False) as b:
        assert smi.fields(b) is None


def test_selfcal_reruns_the_cpu_and_loads_firmware(tmp_path, capsys):
    image = tmp_path / "fw.bin"
    image.write_bytes(np.arange(64, dtype="<u4").tobytes())
    assert memcal("selfcal", "--dev", "sim:m", "--target", "sim-small", "--firmware", str(image), "--channel", "1",
                  "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["firmware_id"] not in (None, "0x00010004") and doc["channels"]["1"]["state"] == "ok"
    with Board.open("sim:m", "sim-small", check=False, lock=False) as b:
        words = [b.t.reg_read(regs.LITEDRAM_BASE + M.B_SELFCAL + a) for a in (M.SC_HOLD, M.SC_CONFIG)]
    assert words == [0, 0b11 | (1 << 8)]                    # released, its configuration as before
    rc = memcal("selfcal", "--dev", "sim:m", "--target", "sim-small", "--fault", "no_calib:ch=0", "--channel", "0")
    assert rc == 1 and "channel 0: calibration FAILED: error 5 (no CK phase common to every lane)" in capsys.readouterr().out


def test_scan_maps_a_channel_and_leaves_it_as_it_was(capsys):
    before = phy_settings("sim:m", 1)
    with Board.open("sim:m", "sim-small") as b:
        data = np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8)
        b.write_channel(1, 0, data)
    assert memcal("scan", "--dev", "sim:m", "--target", "sim-small", "--channel", "1", "--stride", "8") == 0
    out = capsys.readouterr().out
    assert out.count("<- chosen") == M.LANES and "m8, b07: |" in out and "  all  " in out
    assert phy_settings("sim:m", 1) == before
    with Board.open("sim:m", "sim-small") as b:
        assert np.array_equal(b.read_channel(1, 0, 4096), data)
        assert b.status() & regs.ST_CALIB1


def test_sigkill_mid_calibration_is_named_by_status_and_repaired_by_cal(capsys):
    # No BIST in the sweep: its traffic runs with the controller in hardware mode, and a kill landing
    # there would leave hardware_mode true by chance.
    p = subprocess.Popen([sys.executable, "-c", "from otpu_memcal.cli import main; main()", "cal", "--dev", "sim:kill",
                          "--target", "sim-small", "--force", "--channel", "0", "--stride", "4",
                          "--sweep-bist-mib", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while "sweep" not in p.stderr.readline():
            assert p.poll() is None and time.monotonic() < deadline
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert memcal("status", "--dev", "sim:kill", "--target", "sim-small", "--json") == 0
    ch0 = json.loads(capsys.readouterr().out)["channels"][0]
    assert ch0["state"] == "interrupted" and not ch0["calibrated"] and ch0["hardware_mode"] is False
    assert "never finished (the process is gone)" in ch0["note"] and "`otpu-memcal cal`" in ch0["note"]
    assert memcal("cal", "--dev", "sim:kill", "--target", "sim-small", *FAST) == 0
    assert "calibration: PASS" in capsys.readouterr().out
    assert memcal("status", "--dev", "sim:kill", "--target", "sim-small", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["in_progress"] is None and doc["channels"][0]["state"] == "calibrated"


def test_the_calib_check_calibrates_what_the_cpu_left():
    ctx = CheckContext("sim:chk", {"target": "sim-small", "fault": "dq_slip:ch=0,bit=3,off=2",
                                   "memcal": {"stride": 8, "bist_mib": 1, "sweep_bist_mib": 0}})
    try:
        assert device.board(ctx).info.calibrated == (False, True)
        r0 = memcal_checks.calibrated(ctx, 0)
        r1 = memcal_checks.calibrated(ctx, 1)
    finally:
        device.close(ctx)
    assert (r0.status, r0.message, r0.data["by"]) == (Status.PASS, "ch0 ok", "host")
    assert (r1.status, r1.message) == (Status.PASS, "ch1 ok")


@pytest.mark.parametrize("args,words", [
    (("cal", "--stride", "0"), "--stride"), (("cal", "--stride", "57"), "--stride"),
    (("cal", "--channel", "2"), "--channel"), (("cal", "--channel", "x"), "--channel"),
    (("cal", "--bist-mib", "nan"), "--bist-mib nan: must be a finite number"),
    (("cal", "--bist-mib", "-1"), "--bist-mib -1.0: must be a finite number"),
    (("cal", "--bist-mib", "0"), "--bist-mib 0.0: must be a finite number of MiB > 0"),
    (("cal", "--sweep-bist-mib", "inf"), "--sweep-bist-mib inf"),
    (("selfcal", "--timeout", "0"), "--timeout 0.0: must be a finite number of seconds > 0"),
    (("selfcal", "--stride", "0"), "--stride"),
    (("scan", "--bist-mib", "-2"), "--bist-mib -2.0"),
    (("console", "--port", "/dev/null", "--baud", "0"), "--baud"),
    (("console", "--port", "/dev/null", "--timeout", "nan"), "--timeout nan"),
    (("console",), "--port"),
])
def test_bad_option_values_exit_2_naming_the_option(args, words, capsys):
    assert memcal(*args) == 2
    assert words in capsys.readouterr().err


def test_firmware_that_cannot_be_used_exits_2(tmp_path, capsys):
    assert memcal("selfcal", "--firmware", str(tmp_path)) == 2
    assert "is a directory" in capsys.readouterr().err
    assert memcal("selfcal", "--firmware", str(tmp_path / "none.bin")) == 2
    assert "none.bin: cannot be read" in capsys.readouterr().err
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x02\x03")
    assert memcal("selfcal", "--dev", "sim:m", "--target", "sim-small", "--firmware", str(odd)) == 2
    assert "odd.bin: a firmware image is whole little-endian 32-bit words; 3 bytes is not a multiple of 4" in \
        capsys.readouterr().err


def test_version_and_help(capsys):
    assert memcal("--version") == 0 and capsys.readouterr().out.startswith("otpu-memcal ")
    for command in ("status", "cal", "selfcal", "scan", "console"):
        assert memcal(command, "--help") == 0
        assert "--help" in capsys.readouterr().out
    assert os.path.exists(cli.__file__)
