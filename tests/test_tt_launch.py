"""Launch protocol and resident dispatch on the simulated chip, checked against independent arithmetic."""
import os
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from otpu_core.tt import consts as K
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card
from otpu_core.tt.launch import LaunchTimeout, boot, launch, run_sum, signal, wait
from otpu_core.tt.queue import QueueError, ResidentQueue


@pytest.fixture
def card():
    with Card("tt:sim:run") as c:
        yield c


def test_sum_kernel_matches_numpy(card):
    rng = np.random.default_rng(7)
    words = rng.integers(0, 2**32, size=3000, dtype=np.uint64)
    expected = int(words.sum()) % 2**32            # independent: numpy in 64-bit, then wrapped
    t = card.tiles.tile("tensix", 12, 9)
    assert run_sum(card.noc, t, words.tolist()) == expected
    assert run_sum(card.noc, t, [1, 2, 3]) == 6      # a second run on the same core, new nonce


def test_fresh_mailbox_reads_done_but_completion_needs_the_nonce(card):
    t = card.tiles.tile("tensix", 5, 5)
    boot(card.noc, t)
    assert signal(card.noc, t) == K.RUN_MSG_DONE     # booted and idle: DONE although nothing ran
    with pytest.raises(LaunchTimeout):
        wait(card.noc, t, nonce=0x1234, count=1, timeout=0.05)


def test_kernel_text_that_is_not_a_kernel_wedges_the_core(card):
    t = card.tiles.tile("tensix", 6, 6)
    nonce, count = launch(card.noc, t, 99, bytes(8))    # kind 99 does not exist
    with pytest.raises(LaunchTimeout):
        wait(card.noc, t, nonce, count, timeout=0.05)
    from otpu_core.tt.probe import probe
    assert probe(card.noc, t).state == "wedged"


def _l1_words(card, t, addr, n):
    return np.frombuffer(card.noc.read(t, addr, 4 * n), dtype="<u4")


def test_resident_queue_ops_against_a_host_model(card):
    t = card.tiles.tile("tensix", 10, 2)
    q = ResidentQueue(card.noc, t, slots=16)
    base = L.USER_BASE
    model = np.zeros(64, dtype=np.uint64)
    card.noc.write(t, base, bytes(256))
    rng = np.random.default_rng(3)
    for i in range(100):                            # more than the ring: wraps six times
        idx, inc = int(rng.integers(0, 32)), int(rng.integers(0, 2**32))
        q.submit(L.OP_ADD, base + 4 * idx, inc)
        model[idx] = (model[idx] + inc) % 2**32
    q.submit(L.OP_FILL, base + 4 * 40, 8, 0xA5A5A5A5)
    model[40:48] = 0xA5A5A5A5
    q.submit(L.OP_COPY, base, base + 4 * 48, 4 * 8)
    model[48:56] = model[0:8]
    q.wait()
    got = _l1_words(card, t, base, 64).astype(np.uint64)
    assert np.array_equal(got, model), f"max-abs error {int(np.max(np.abs(got.astype(np.int64) - model.astype(np.int64))))}"
    assert q.state()["completed"] == 102 and q.state()["state"] == "polling"
    assert q.stop() == "stop request"


def test_submit_batch_wraps_and_completes(card):
    t = card.tiles.tile("tensix", 11, 3)
    q = ResidentQueue(card.noc, t, slots=64)
    card.noc.write(t, L.USER_BASE, bytes(4))
    total = 0
    for n in (32, 32, 40, 32):                       # the third batch crosses the ring's end
        d = np.zeros((n, 8), np.uint32)
        d[:, 0], d[:, 2], d[:, 3] = L.OP_ADD, L.USER_BASE, np.arange(1, n + 1)
        q.submit_batch(d)
        q.wait()
        total += n * (n + 1) // 2
    assert struct.unpack("<I", card.noc.read(t, L.USER_BASE, 4))[0] == total
    assert q.state()["completed"] == 136


def test_stop_sentinel_in_stream(card):
    t = card.tiles.tile("tensix", 1, 9)
    q = ResidentQueue(card.noc, t)
    q.submit(L.OP_NOP)
    q.submit(L.OP_STOP)
    with pytest.raises(QueueError, match="STOP sentinel"):
        q.wait(count=q.posted + 1, timeout=0.5)
    assert q.state()["state"] == "exited" and q.state()["completed"] == 2


def test_idle_spin_limit_bounds_residency(card):
    t = card.tiles.tile("tensix", 2, 7)
    q = ResidentQueue(card.noc, t, idle_spin_limit=20_000)     # 20 ms of polling at 1 loop/us
    time.sleep(0.05)
    assert q.state()["exit"] == "idle spin limit"
    q.submit(L.OP_NOP)
    with pytest.raises(QueueError, match="exited"):
        q.wait(timeout=0.2)


def test_a_dying_host_retires_its_kernel_through_noc_cleanup(card):
    code = ("from otpu_core.tt.card import Card\n"
            "from otpu_core.tt.queue import ResidentQueue\n"
            "import os\n"
            "c = Card('tt:sim:run')\n"
            "q = ResidentQueue(c.noc, c.tiles.tile('tensix', 4, 8))\n"
            "print('resident', flush=True)\n"
            "os._exit(0)\n")                         # dies without closing anything
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60)
    assert out.stdout.strip() == "resident", out.stderr
    card.dev.pids()                                  # the driver notices the dead process
    ctrl = struct.unpack(f"<{L.CTRL_WORDS}I", card.noc.read(card.tiles.tile("tensix", 4, 8), L.QUEUE_CTRL, 64))
    assert ctrl[L.C_STOP] == 1 and ctrl[L.C_STATE] == L.QSTATE_EXITED


def test_frozen_needs_every_pc_sample_equal():
    from otpu_core.tt.probe import _frozen
    loop = [{"brisc": 0x1040 + 4 * (i % 2)} for i in range(8)]          # a live two-instruction poll loop
    assert _frozen(loop) == []
    assert _frozen([{"brisc": 0x5A2C, "trisc0": 0x5A30}] * 8) == ["brisc", "trisc0"]
    assert _frozen([{"brisc": 0x10}] * 4 + [{}] * 4) == []               # went into reset meanwhile
