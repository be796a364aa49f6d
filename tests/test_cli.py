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


def test_error_text_is_printed_as_typed_not_as_markup(capsys):
    app = typer.Typer()

    @app.command()
    def go():
        raise UsageError("/tmp/x[/b].toml: [arch] D = 48 at tmem:abc:2")

    assert run_app(app, "t", []) == 2
    assert "t: error: /tmp/x[/b].toml: [arch] D = 48 at tmem:abc:2" in capsys.readouterr().err


def test_unwritable_output_path_is_a_usage_error(tmp_path, capsys):
    app = typer.Typer()

    @app.command()
    def go():
        (tmp_path / "missing" / "out.json").write_text("x")

    assert run_app(app, "t", []) == 2
    err = capsys.readouterr().err
    assert "out.json: No such file or directory" in err and "Traceback" not in err


def test_dash_h_is_help_on_every_tool():
    for script in ("otpu_selftest.cli", "otpu_diag.cli", "otpu_smi.cli", "otpu_tt.cli"):
        r = subprocess.run([sys.executable, "-c", f"import sys; sys.argv[0] = 'x'; from {script} import main; main()", "-h"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and "Usage:" in r.stdout, (script, r.stderr)


def test_target_errors_show_the_layer_to_the_user(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[arch]\nDD = 1\n")
    r = _otpu("target", "show", str(bad))
    assert r.returncode == 2 and "[arch] unknown key 'DD'" in r.stderr
    r = _otpu("target", "show", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr
