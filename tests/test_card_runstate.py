"""Run directory, device lock, status file and DMA lock."""
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from otpu_core.card import runstate
from otpu_core.errors import DeviceBusy, UsageError


def test_run_dir_precedence(monkeypatch, tmp_path):
    assert runstate.run_dir() == tmp_path / "run"             # conftest sets OTPU_RUN_DIR
    monkeypatch.delenv("OTPU_RUN_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    assert runstate.run_dir() == tmp_path / "xdg" / "otpu"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runstate.run_dir().name == f"otpu-{os.getuid()}"


def test_lock_names_the_holder_and_frees_on_release():
    a = runstate.DeviceLock("card0").acquire()
    assert a.path.read_text().strip() == str(os.getpid())
    assert stat.S_IMODE(a.path.stat().st_mode) == 0o666
    status = runstate.read_status(a.status_path)
    assert status["pid"] == os.getpid() and "python" in status["cmd"] and "stale" not in status
    with pytest.raises(DeviceBusy) as e:
        runstate.DeviceLock("card0").acquire()
    assert e.value.message.startswith(f"card0 is busy: held by PID {os.getpid()} (")
    assert "OTPU_LOCK_WAIT" in e.value.hint
    a.release()
    assert not a.status_path.exists()
    runstate.DeviceLock("card0").acquire().release()


def test_lock_wait_gets_the_card_when_it_is_freed(monkeypatch):
    a = runstate.DeviceLock("card1").acquire()
    threading.Timer(0.3, a.release).start()
    monkeypatch.setenv("OTPU_LOCK_WAIT", "5")
    t0 = time.monotonic()
    b = runstate.DeviceLock("card1").acquire()
    assert 0.2 < time.monotonic() - t0 < 3
    b.release()


def test_symlinked_lock_file_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (runstate.run_dir() / "card2.lock").symlink_to(victim)
    with pytest.raises(UsageError, match="symlink"):
        runstate.DeviceLock("card2").acquire()
    assert victim.read_text() == "keep me"


def test_status_file_is_atomic_and_goes_stale_with_its_process():
    lock = runstate.DeviceLock("card3").acquire()
    for i in range(50):
        assert runstate.update_status("card3", tokens=i)
        assert runstate.read_status(lock.status_path)["tokens"] == i
    assert not [p for p in runstate.run_dir().iterdir() if p.name.endswith(".tmp")]
    lock.release()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    runstate.write_status(runstate.run_dir() / "card4.json", {"pid": int(dead.stdout)})
    assert runstate.read_status(runstate.run_dir() / "card4.json")["stale"] is True


def test_dma_lock_is_reentrant_and_excludes_other_threads():
    lock = runstate.dma_lock("card5")
    assert lock is runstate.dma_lock("card5")
    order = []

    def other():
        with lock:
            order.append("other")

    with lock:
        with lock:                                   # nested in one thread: no deadlock
            t = threading.Thread(target=other)
            t.start()
            time.sleep(0.05)
            order.append("first")
    t.join()
    assert order == ["first", "other"]
    assert (runstate.run_dir() / "card5.dma").exists()


def test_an_unwritable_status_file_is_reported_once_and_the_lock_still_works(capsys):
    (runstate.run_dir() / "card6.json").mkdir()           # a directory where the file should go
    lock = runstate.DeviceLock("card6").acquire()
    assert "no status file" in capsys.readouterr().err
    assert not runstate.update_status("card6", tokens=1)
    lock.release()
