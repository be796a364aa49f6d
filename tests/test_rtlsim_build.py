"""otpu_core/rtlsim.py's build and run guarantees, with a stand-in `verilator` on PATH (a script that
answers --version as Verilator 5 and "links" by writing the -o file), so no real build is needed:
a build killed half-way leaves no executable in the cache, concurrent builders of one key wait on
its flock and compile once, and a simulator process dies with the Python process that started it."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

FAKE_VERILATOR = textwrap.dedent("""\
    #!{python}
    import json, os, sys, time
    args = sys.argv[1:]
    if "--version" in args:
        print("Verilator 5.006 2023-01-22 rev fake")
        sys.exit(0)
    out = args[args.index("-o") + 1]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({{"pid": os.getpid(), "out": out}}) + "\\n")
    with open(out, "w") as f:            # a half-linked executable in the build directory
        f.write("#!/bin/sh\\necho partial\\n")
    os.chmod(out, 0o755)
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
""")

BUILD = textwrap.dedent("""\
    import json, sys
    from pathlib import Path
    from otpu_core import rtlsim
    b = rtlsim.build("fake_top", [Path(sys.argv[1])], {"W": 4}, {})
    print(json.dumps({"exe": str(b.exe), "built": b.built}), flush=True)
""")


@pytest.fixture
def fake_env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "verilator"
    fake.write_text(FAKE_VERILATOR.format(python=sys.executable))
    fake.chmod(0o755)
    src = tmp_path / "fake_top.sv"
    src.write_text("module fake_top; endmodule\n")
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", OTPU_RTL_CACHE=str(tmp_path / "cache"),
               FAKE_LOG=str(tmp_path / "log.jsonl"), PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return env, src, tmp_path


def _builder(env, src, sleep):
    return subprocess.Popen([sys.executable, "-c", BUILD, str(src)], env=dict(env, FAKE_SLEEP=str(sleep)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _log(env) -> list[dict]:
    p = Path(env["FAKE_LOG"])
    return [json.loads(ln) for ln in p.read_text().splitlines()] if p.exists() else []


def _wait_for(pred, seconds=20.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:    # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_build_leaves_no_executable_and_the_next_build_starts_over(fake_env):
    env, src, tmp = fake_env
    p = _builder(env, src, sleep=60)
    assert _wait_for(lambda: len(_log(env)) == 1), p.stderr.read() if p.poll() is not None else "no build started"
    half = Path(_log(env)[0]["out"])
    assert half.is_file()                              # the stand-in "linked" inside the temporary directory
    p.kill()
    p.wait()
    compiler = _log(env)[0]["pid"]
    assert _wait_for(lambda: not _alive(compiler), 10), "the compiler outlived the killed build"
    cache = tmp / "cache"
    assert not [d for d in cache.iterdir() if d.name.startswith("fake_top-") and (d / "fake_top").exists()]
    # the next build compiles again and lands the executable
    q = _builder(env, src, sleep=0)
    out, err = q.communicate(timeout=60)
    assert q.returncode == 0, err
    res = json.loads(out)
    assert res["built"] is True and Path(res["exe"]).is_file() and Path(res["exe"]).parent.parent == cache
    assert len(_log(env)) == 2


def test_concurrent_builds_of_one_configuration_wait_on_the_flock_and_compile_once(fake_env):
    env, src, _ = fake_env
    procs = [_builder(env, src, sleep=1.5) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert len(_log(env)) == 1                         # one compile: the second builder waited for the first
    assert sorted(r["built"] for r in results) == [False, True]
    assert results[0]["exe"] == results[1]["exe"] and Path(results[0]["exe"]).is_file()


def test_the_simulator_dies_with_the_process_that_started_it(tmp_path):
    pidfile = tmp_path / "sim.pid"
    sim = tmp_path / "sim"
    sim.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 120\n")
    sim.chmod(0o755)
    runner = textwrap.dedent(f"""\
        from pathlib import Path
        from otpu_core import rtlsim
        rtlsim.run(Path({str(sim)!r}), {{}}, timeout=300)
    """)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    p = subprocess.Popen([sys.executable, "-c", runner], env=env, stderr=subprocess.PIPE, text=True)
    assert _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()), "the simulator did not start"
    pid = int(pidfile.read_text())
    assert _alive(pid)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert _wait_for(lambda: not _alive(pid), 10), "the simulator outlived its parent"
