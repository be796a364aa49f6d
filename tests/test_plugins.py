"""Plugin discovery through the `otpu` entry-point group, and plugins that fail to load."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from otpu_core import plugins

GOOD = '''
"""A third-party plugin: adds `otpu hello` and contributes one check."""
import typer
from otpu_core.hookspecs import hookimpl
from otpu_core.checks import Check, Result, Status

app = typer.Typer(name="hello")

@app.command()
def greet(name: str = "card"):
    print(f"hello {name}")

@hookimpl
def otpu_commands(app):
    app.add_typer(globals()["app"], name="hello")

@hookimpl
def otpu_checks(registry):
    registry.add(Check("platform", "hello check", lambda ctx: Result(Status.PASS, "hi")))
'''


def _install_fake_dist(root, dist, module, source, ep_name):
    """Lay out a module plus a .dist-info with an entry point, as pip would for a real package."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(f"[otpu]\n{ep_name} = {module}\n")


def _otpu(args, extra_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(extra_path), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "otpu_core", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "site"
    d.mkdir()
    return d


def test_third_party_plugin_is_discovered_and_mounted(site):
    _install_fake_dist(site, "otpu-hello", "otpu_hello_plugin", GOOD, "hello")
    r = _otpu(["plugins", "--json"], site)
    assert r.returncode == 0, r.stderr
    info = {p["name"]: p for p in json.loads(r.stdout)}
    assert info["hello"]["version"] == "0.3"
    assert info["hello"]["hooks"] == ["otpu_checks", "otpu_commands"]
    assert info["hello"]["error"] is None
    r = _otpu(["hello", "greet", "--name", "ypcb"], site)
    assert r.returncode == 0 and r.stdout.strip() == "hello ypcb"


def test_broken_plugin_is_reported_once_and_others_work(site):
    _install_fake_dist(site, "otpu-broken", "otpu_broken_plugin", "raise RuntimeError('missing firmware table')\n", "broken")
    r = _otpu(["target", "list", "--json"], site)
    assert r.returncode == 0
    assert any(t["name"] == "ypcb-00338" for t in json.loads(r.stdout))
    assert r.stderr.count("plugin 'broken'") == 1
    assert "RuntimeError: missing firmware table" in r.stderr
    r = _otpu(["plugins", "--json"], site)
    broken = [p for p in json.loads(r.stdout) if p["name"] == "broken"][0]
    assert broken["error"] == "RuntimeError: missing firmware table" and broken["hooks"] == []


def test_plugin_whose_commands_hook_raises_does_not_take_root_down(site):
    _install_fake_dist(site, "otpu-badcmd", "otpu_badcmd_plugin", '''
from otpu_core.hookspecs import hookimpl
@hookimpl
def otpu_commands(app):
    raise ValueError("bad mount")
''', "badcmd")
    r = _otpu(["target", "show", "sim-small", "--json"], site)
    assert r.returncode == 0 and json.loads(r.stdout)["arch"]["D"] == 32
    assert "plugin 'badcmd' could not add its commands: ValueError: bad mount" in r.stderr


def test_build_with_entry_point_doubles(tmp_path, monkeypatch):
    import importlib.metadata as md
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "otpu_double_plugin.py").write_text(GOOD)
    eps = [md.EntryPoint("double", "otpu_double_plugin", "otpu"), md.EntryPoint("gone", "no_such_module_xyz", "otpu")]
    import io
    err = io.StringIO()
    mgr = plugins.build(entry_points=eps, report=err)
    names = {i.name: i for i in mgr.infos}
    assert names["double"].hooks == ["otpu_checks", "otpu_commands"]
    assert names["gone"].error.startswith("ModuleNotFoundError")
    assert err.getvalue().count("failed to load") == 1
    from otpu_core.checks import collect
    reg = collect(mgr.hook)
    assert "hello check" in reg


def test_disable_env_skips_entry_points(monkeypatch):
    monkeypatch.setenv("OTPU_DISABLE_PLUGINS", "*")
    import importlib.metadata as md
    mgr = plugins.build(entry_points=[md.EntryPoint("gone", "no_such_module_xyz", "otpu")], report=None)
    assert all(i.builtin for i in mgr.infos)
