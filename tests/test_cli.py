"""The root command: version, help, target commands, and the exit-code contract."""
import json
import subprocess
import sys

import typer

from otpu_core import __version__
from otpu_core.cli import run_app
from otpu_core.errors import ChecksFailed, DeviceBusy, UsageError


def _otpu(*args):
    return subprocess.run([sys.executable, "-m", "otpu_core", *args], capture_output=True, text=True, timeout=120)


def test_version_and_help():
    r = _otpu("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"otpu {__version__}"
    r = _otpu("--help")
    assert r.returncode == 0 and "target" in r.stdout and "plugins" in r.stdout


def test_target_show_json_and_errors():
    r = _otpu("target", "show", "ypcb-00338", "--json")
    doc = json.loads(r.stdout)
    assert doc["arch"]["D"] == 128 and doc["platform"]["channels"] == 2 and doc["arch_hash"].startswith("0x")
    r = _otpu("target", "show", "nope")
    assert r.returncode == 2 and "unknown target 'nope'" in r.stderr and "Traceback" not in r.stderr
    r = _otpu("target", "list")
    assert r.returncode == 0 and "ypcb-00338 (default)" in r.stdout


def test_bad_flag_is_usage_error():
    r = _otpu("target", "list", "--frobnicate")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_run_app_maps_errors_to_exit_codes(capsys):
    app = typer.Typer()

    @app.command()
    def go(kind: str):
        raise {"usage": UsageError("bad input", hint="fix it"), "busy": DeviceBusy("busy: held by PID 7 (otpu-chat)"),
               "checks": ChecksFailed("2 checks failed")}[kind]

    assert run_app(app, "t", ["usage"]) == 2
    err = capsys.readouterr().err
    assert "t: error: bad input" in err and "hint: fix it" in err
    assert run_app(app, "t", ["busy"]) == 3
    assert "held by PID 7" in capsys.readouterr().err
    assert run_app(app, "t", ["checks"]) == 1
