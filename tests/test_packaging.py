"""pyproject lists every package and maps every plugin, so a non-editable install ships the whole suite."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_core_package_is_listed():
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "otpu_core").rglob("__init__.py")}
    listed = set(PROJECT["tool"]["setuptools"]["packages"])
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def test_every_plugin_dir_is_mapped_scripted_and_registered():
    mapping = PROJECT["tool"]["setuptools"]["package-dir"]
    scripts = PROJECT["project"]["scripts"]
    eps = PROJECT["project"]["entry-points"]["otpu"]
    for d in sorted(p for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists()):
        pkg = f"otpu_{d.name}"
        assert mapping.get(pkg) == f"plugins/{d.name}", pkg
        assert pkg in PROJECT["tool"]["setuptools"]["packages"], pkg
        assert eps.get(d.name) == f"{pkg}.plugin", pkg
        assert scripts.get(f"otpu-{d.name}", "").startswith(f"{pkg}.cli:"), pkg
