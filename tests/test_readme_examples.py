"""The README's examples run as written in a fresh shell after its set-up: every bare command
name they use is a console script of this distribution (so the venv's bin on PATH, which the
README's activate line gives, is all they need), and each runs (`--help`) from there."""
from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def example_commands() -> list[str]:
    text = README.read_text()
    block = text.split("A few things to try", 1)[1].split("\n## ", 1)[0]
    return [ln.strip().split("#")[0].strip() for ln in block.splitlines() if ln.startswith("    ") and ln.strip()]


def test_every_example_is_a_console_script_on_the_venv_path():
    assert ". .venv/bin/activate" in README.read_text()
    scripts = {e.name for e in md.distribution("opentpu").entry_points if e.group == "console_scripts"}
    bindir = Path(sys.executable).parent
    names = {cmd.split()[0] for cmd in example_commands()}
    assert names and names <= scripts, names - scripts
    for name in sorted(names):
        exe = bindir / name
        assert exe.is_file(), exe
        r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}"})
        assert r.returncode == 0 and re.fullmatch(rf"{re.escape(name)} \d+\.\d+\.\d+\n", r.stdout), (name, r)
