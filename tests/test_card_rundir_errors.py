"""A run directory that cannot be used is a usage error naming the variable, the path and why."""
import subprocess
import sys

import pytest

from otpu_core.card.runstate import run_dir
from otpu_core.errors import UsageError


def otpu(*args, env_dir):
    import os
    env = {**os.environ, "OTPU_RUN_DIR": str(env_dir)}
    return subprocess.run([sys.executable, "-m", "otpu_core", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("command", [("card", "info", "--dev", "sim"), ("smi", "--dev", "sim")])
def test_a_run_dir_that_is_a_file_is_a_usage_error(tmp_path, command):
    afile = tmp_path / "not-a-dir"
    afile.write_text("x")
    r = otpu(*command, env_dir=afile)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert f"run directory {afile} (from OTPU_RUN_DIR)" in r.stderr and "it is a file, not a directory" in r.stderr


def test_a_run_dir_under_a_file_names_the_file(tmp_path, monkeypatch):
    afile = tmp_path / "f"
    afile.write_text("x")
    monkeypatch.setenv("OTPU_RUN_DIR", str(afile / "sub"))
    with pytest.raises(UsageError, match=f"{afile / 'sub'} .from OTPU_RUN_DIR.*{afile} is a file") as e:
        run_dir()
    assert e.value.exit_code == 2 and "OTPU_RUN_DIR" in e.value.hint


def test_a_run_dir_that_cannot_be_created_says_why(tmp_path, monkeypatch):
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o500)
    monkeypatch.setenv("OTPU_RUN_DIR", str(locked / "run"))
    import os
    if os.access(locked, os.W_OK):          # root writes anywhere: use a path no one can create
        monkeypatch.setenv("OTPU_RUN_DIR", "/proc/otpu-run")
    with pytest.raises(UsageError, match=r"\(from OTPU_RUN_DIR\) cannot be used: (Permission denied|No such file)"):
        run_dir()
