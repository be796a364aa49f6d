"""otpu-smi with otpu-i2c installed shows measured power, board temperature and rail voltages instead of
the `~ estimate`; disabled with OTPU_DISABLE_PLUGINS it shows the estimate again (the entry point
discovery itself, in a process of its own each)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from otpu_core.cli import run_app
from otpu_smi import cli as smi_cli

QUERY = ["--query", "power.draw,power.source,temperature.board,voltage.input,voltage.core,current.core",
         "--format", "csv,noheader,nounits"]


def smi_process(*args, disable=None):
    env = dict(os.environ)
    if disable is not None:
        env["OTPU_DISABLE_PLUGINS"] = disable
    r = subprocess.run([sys.executable, "-c", "from otpu_smi.cli import main; main()", "--dev", "sim:i2c",
                        "--target", "sim-small", *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_installed_plugin_measures_and_disabled_plugin_estimates():
    w, source, board_c, vin, vcore, icore = smi_process(*QUERY).strip().split(", ")
    assert source == "measured" and 5.0 < float(w) < 15.0 and 20 < float(board_c) < 85
    assert 11.9 < float(vin) < 12.0 and 0.98 < float(vcore) <= 1.0 and float(icore) > 0.5
    off = smi_process(*QUERY, disable="i2c").strip().split(", ")
    assert off[1].startswith("estimate") and off[2:] == ["[N/A]"] * 4


def test_measured_fields_in_process(capsys):
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim:i2c", "--target", "sim-small"]) == 0
    table = capsys.readouterr().out
    assert "W measured · input " in table and " · core " in table and "estimate" not in table and "board " in table
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim:i2c", "--target", "sim-small", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)[0]
    assert card["power"] == {"w": card["fields"]["power.draw"], "measured": True, "source": "measured"}
    assert card["fields"]["temperature.board"] > 20 and card["fields"]["power.core"] > 1
    assert 0.98 < card["fields"]["voltage.core"] < 1.0 and card["fields"]["memory.calibration"].startswith("ch0 ok (CPU")
