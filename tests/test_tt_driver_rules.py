"""The rules tt-kmd enforces and the ladder must follow, each shown firing on the simulated chip.

Sources: tenstorrent/tt-kmd chardev.c (needs_hw_init: only GET_DEVICE_INFO, GET_DRIVER_INFO and
RESET_DEVICE until POST_RESET; admit_chardev_open: O_EXCL against other descriptors, O_NONBLOCK
turns the wait into EAGAIN; ioctl_set_noc_cleanup: one action per descriptor), pcie.c
(set_reset_marker / is_reset_marker_zero).
"""
import errno
import json
import os
import struct
import subprocess
import sys

import pytest

from otpu_core.cli import run_app
from otpu_core.errors import DeviceBusy
from otpu_core.tt import ioctl as I
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card, open_device
from otpu_core.tt.device import DeviceGone
from otpu_core.tt.faults import parse
from otpu_core.tt.queue import ResidentQueue
from otpu_core.tt.simdev import SimDevice
from otpu_tt.cli import app
from otpu_tt.recover import Ladder


def run(args, capsys):
    code = run_app(app, "otpu-tt", args)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def python(code: str, *, wait=True):
    """Another process using the card (the way a second tool would)."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ)
    if wait:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return out
    return proc


DIE_AFTER_ASIC_RESET = ("from otpu_core.tt.card import Card\nfrom otpu_core.tt import ioctl as I\nimport os\n"
                        "c = Card('tt:sim:{name}')\nc.dev.reset_device(I.RESET_ASIC)\nos._exit(0)\n")


def test_a_card_left_needing_post_reset_is_finished_by_recover(capsys):
    python(DIE_AFTER_ASIC_RESET.format(name="pr"))
    # the hazard: the driver refuses a fresh descriptor everything but info and reset, for good
    dev = SimDevice("pr")
    try:
        assert dev.device_info().vendor_id == 0x1E52 and dev.driver_info().api == 2
        for refused in (lambda: dev.allocate_tlb(), lambda: dev.lock_ctl(I.LOCK_TEST, 0)):
            with pytest.raises(DeviceGone):
                refused()
    finally:
        dev.close()
    code, _, err = run(["core", "status", "--dev", "tt:sim:pr"], capsys)
    assert code == 3 and "never given POST_RESET" in err and "recover --all --dev tt:sim:pr" in err
    code, out, _ = run(["core", "recover", "--all", "--settle", "0", "--json", "--dev", "tt:sim:pr"], capsys)
    report = json.loads(out)
    assert code == 0 and report["fixed_at_rung"] == 0 and report["steps"][0]["name"] == "post-reset"
    assert report["before"][0]["state"] == "reset pending" and len(report["after"]) == 120
    assert "completed the reset another process left" in report["notes"][0]
    code, out, _ = run(["core", "status", "--dev", "tt:sim:pr", "--json"], capsys)
    assert code == 0 and json.loads(out)["healthy"]


@pytest.mark.parametrize("excl", [True, False])
def test_a_second_recover_is_told_who_is_resetting(capsys, excl):
    # A resetter between ASIC_RESET and POST_RESET: the reset lock file, and an O_EXCL descriptor
    # (tt-kmd >= 2.10: our open is EAGAIN) or a plain one (our descriptor is refused until POST_RESET).
    holder = python("from otpu_core.tt.card import Card\nfrom otpu_core.tt import ioctl as I\nimport time\n"
                    "c = Card('tt:sim:two')\nlock = c.exclusive()\nlock.__enter__()\n"
                    + ("c._reopen_exclusive()\n" if excl else "") +
                    "c.dev.reset_device(I.RESET_ASIC)\nprint('resetting', flush=True)\ntime.sleep(30)\n", wait=False)
    try:
        assert holder.stdout.readline().strip() == "resetting"
        code, _, err = run(["core", "recover", "--all", "--yes", "--dev", "tt:sim:two"], capsys)
        assert code == 3 and f"being reset by PID {holder.pid}" in err and "POST_RESET" not in err
    finally:
        holder.kill()
        holder.wait()


def test_an_exclusive_holder_is_named_instead_of_blocking(monkeypatch):
    holder = python("from otpu_core.tt.simdev import SimDevice\nimport time\n"
                    "d = SimDevice('ex', exclusive=True)\nprint('held', flush=True)\ntime.sleep(30)\n", wait=False)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DeviceBusy) as e:
            open_device("tt:sim:ex")
        assert f"held exclusively (O_EXCL) by PID {holder.pid}" in e.value.message and "OTPU_LOCK_WAIT" in e.value.hint
    finally:
        holder.kill()
        holder.wait()
    monkeypatch.setenv("OTPU_LOCK_WAIT", "5")
    dev = open_device("tt:sim:ex")          # the holder is gone: the open goes through
    dev.close()


def test_the_real_device_opens_nonblocking_and_names_an_exclusive_holder(tmp_path, monkeypatch):
    import otpu_core.tt.kmd as kmd
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "0").write_bytes(b"")
    (tmp_path / "proc" / "0").mkdir(parents=True)
    (tmp_path / "proc" / "0" / "pids").write_text(f"{os.getpid()}\n")
    monkeypatch.setattr(kmd, "DEV_DIR", tmp_path / "dev")
    monkeypatch.setattr(kmd, "PROC_DIR", tmp_path / "proc")
    seen = []

    def fake_open(path, flags, *a):
        seen.append(flags)
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
    monkeypatch.setattr(kmd.os, "open", fake_open)
    with pytest.raises(DeviceBusy) as e:
        open_device("tt:0")
    assert seen[0] & os.O_NONBLOCK and not seen[0] & os.O_EXCL
    assert f"held exclusively (O_EXCL) by PID {os.getpid()}" in e.value.message
    with pytest.raises(DeviceBusy):
        open_device("tt:0", exclusive=True)
    assert seen[-1] & os.O_EXCL and seen[-1] & os.O_NONBLOCK


HOLD = ("from otpu_core.tt.card import Card\nimport time, sys\n"
        "c = Card(sys.argv[1])\nprint('open', flush=True)\ntime.sleep(float(sys.argv[2]))\n")


def test_recover_stops_for_another_user_instead_of_concluding_power_cycle(capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "tt:sim:wt", "30"], stdout=subprocess.PIPE, text=True,
                              env=os.environ)
    try:
        assert holder.stdout.readline().strip() == "open"
        code, out, _ = run(["core", "recover", "--all", "--yes", "--settle", "0", "--dev", "tt:sim:wt",
                            "--fault", "hang_chip"], capsys)
        assert code == 3 and "close it and retry" in out and f"PID {holder.pid}" in out
        assert "power-cycle" not in out and "needs a power cycle" not in out
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_otpu_lock_wait_waits_for_the_other_user_to_leave(capsys, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "tt:sim:wt2", "1"], stdout=subprocess.PIPE, text=True,
                              env=os.environ)
    try:
        assert holder.stdout.readline().strip() == "open"
        monkeypatch.setenv("OTPU_LOCK_WAIT", "20")
        code, out, _ = run(["core", "recover", "--all", "--yes", "--settle", "0", "--json", "--dev", "tt:sim:wt2",
                            "--fault", "hang_chip"], capsys)
        assert code == 0 and json.loads(out)["fixed_at_rung"] == 5
    finally:
        holder.kill()
        holder.wait()


def test_an_asic_reset_that_never_lands_is_not_reported_as_done():
    # very_hung: the reset request never reaches the chip, so the driver's reset marker stays set
    # and POST_RESET fails (tt-kmd pcie.c is_reset_marker_zero); rung 5 must say so.
    with Card("tt:sim:nl", parse("very_hung")) as card:
        report = Ladder(card, yes=True, settle=0).run(None)
    step5 = next(s for s in report.steps if s.rung == 5)
    assert "did not land" in step5.result and report.fixed_at == 6


def test_each_resident_queue_keeps_its_own_close_time_cleanup():
    # The hazard: tt-kmd keeps one SET_NOC_CLEANUP action per descriptor; a second replaces the
    # first, so a process that dies with two kernels registered on one descriptor leaves one running.
    bypass = ("from otpu_core.tt.card import Card\nfrom otpu_core.tt.simchip import SimChip\n"
              "from otpu_core.tt import layout as L\nimport os\n"
              "c = Card('tt:sim:nc')\n"
              "for x in (2, 3):\n"
              "    t = c.tiles.tile('tensix', x, 5)\n"
              "    c.dev.chip.install_resident(t.index, pending=0, blocked=False)\n"
              "    c.dev.set_noc_cleanup(x, 5, L.QUEUE_CTRL + 4 * L.C_STOP, 1)\n"
              "print('two', flush=True)\nos._exit(0)\n")
    rule = ("from otpu_core.tt.card import Card\nfrom otpu_core.tt.queue import ResidentQueue\nimport os\n"
            "c = Card('tt:sim:nc')\n"
            "qs = [ResidentQueue(c.noc, c.tiles.tile('tensix', x, 6)) for x in (2, 3)]\n"
            "print('two', flush=True)\nos._exit(0)\n")
    with Card("tt:sim:nc") as card:                     # keeps the card powered across the two processes
        def stop_requested(x, y):
            ctrl = struct.unpack(f"<{L.CTRL_WORDS}I", card.noc.read(card.tiles.tile("tensix", x, y), L.QUEUE_CTRL, 64))
            return ctrl[L.C_STOP]
        assert python(bypass).strip() == "two"
        card.dev.pids()                                 # the driver notices the dead process
        assert [stop_requested(x, 5) for x in (2, 3)] == [0, 1]      # the first kernel was never retired
        assert python(rule).strip() == "two"
        card.dev.pids()
        assert [stop_requested(x, 6) for x in (2, 3)] == [1, 1]


def test_stopping_one_queue_leaves_the_other_armed():
    with Card("tt:sim:nc2") as card:
        a = ResidentQueue(card.noc, card.tiles.tile("tensix", 4, 4))
        b = ResidentQueue(card.noc, card.tiles.tile("tensix", 5, 4))
        a.stop()
        armed = [json.loads((card.dev.chip.dir / "fds.json").read_text())[t]["cleanup"] for t in
                 sorted(json.loads((card.dev.chip.dir / "fds.json").read_text()))]
        assert [L.QUEUE_CTRL + 4 * L.C_STOP] == [c[2] for c in armed if c]            # b's is still there
        b.stop()
