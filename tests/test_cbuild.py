"""Native kernels (otpu_core/cbuild.py): built once per source and compiler, found in the cache
afterwards, a numpy fallback (None) when disabled or broken, and an error instead under CI."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import textwrap

import pytest

from otpu_core import cbuild

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OTPU_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OTPU_NATIVE", raising=False)
    monkeypatch.delenv("OTPU_CI", raising=False)
    cbuild.load.cache_clear()
    yield tmp_path / "cache"
    cbuild.load.cache_clear()


def _source(tmp_path, body: str, name: str = "k.c"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_a_kernel_is_built_once_and_then_found_in_the_cache(cache, tmp_path):
    src = _source(tmp_path, "int add3(int a) { return a + 3; }\n")
    lib = cbuild.load("k", src)
    assert lib is not None and lib.add3(ctypes.c_int(4)) == 7
    built = sorted(p.name for p in cache.iterdir() if p.is_dir())
    assert len(built) == 1 and built[0].startswith("k-")
    cbuild.load.cache_clear()
    assert cbuild.load("k", src).add3(ctypes.c_int(1)) == 4
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == built
    src.write_text("int add3(int a) { return a + 30; }\n")      # new bytes, new key
    cbuild.load.cache_clear()
    assert cbuild.load("k", src).add3(ctypes.c_int(1)) == 31
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 2


def test_otpu_native_0_gives_the_numpy_path(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("OTPU_NATIVE", "0")
    assert cbuild.load("k", _source(tmp_path, "int f(void) { return 1; }\n")) is None
    assert not cache.exists()


def test_typed_declares_once_and_follows_otpu_native_on_every_call(cache, tmp_path, monkeypatch):
    src = _source(tmp_path, "double half(double x) { return x / 2; }\n")
    declared = []

    def declare(lib):
        lib.half.argtypes, lib.half.restype = [ctypes.c_double], ctypes.c_double
        declared.append(lib)

    cbuild._declared.cache_clear()
    lib = cbuild.typed("k", src, declare)
    assert lib.half(3.0) == 1.5                       # wrong without the declared signature
    assert cbuild.typed("k", src, declare) is lib and len(declared) == 1
    monkeypatch.setenv("OTPU_NATIVE", "0")            # set in a running process: off from the next call
    assert cbuild.typed("k", src, declare) is None
    monkeypatch.setenv("OTPU_NATIVE", "1")
    assert cbuild.typed("k", src, declare) is lib
    cbuild._declared.cache_clear()


def test_the_simulator_and_the_tile_packer_kernels_follow_otpu_native_alike(monkeypatch):
    from otpu_core import simnative
    from otpu_core.tt import tilepack
    monkeypatch.delenv("OTPU_NATIVE", raising=False)
    assert (simnative.lib() is None) == (tilepack.library() is None)
    monkeypatch.setenv("OTPU_NATIVE", "0")
    assert simnative.lib() is None and tilepack.library() is None


def test_a_source_that_does_not_compile_falls_back_with_a_warning_and_leaves_nothing(cache, tmp_path, capsys):
    assert cbuild.load("bad", _source(tmp_path, "int f(void) { return }\n")) is None
    err = capsys.readouterr().err
    assert "native kernel bad unavailable" in err and "numpy path" in err
    assert [p for p in cache.iterdir() if p.is_dir()] == []


def test_under_ci_a_failed_build_is_an_error(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("OTPU_CI", "1")
    with pytest.raises(cbuild.NativeError, match="native kernel bad unavailable"):
        cbuild.load("bad", _source(tmp_path, "int f(void) { return }\n"))


def test_concurrent_loads_of_one_source_compile_once(cache, tmp_path):
    src = _source(tmp_path, "int g(void) { return 5; }\n")
    code = ("import sys; from pathlib import Path; from otpu_core import cbuild; "
            "print(cbuild.load('g', Path(sys.argv[1])).g())")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(src)], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    assert [p.communicate()[0].strip() for p in procs] == ["5", "5", "5"]
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]     # no scratch left behind
