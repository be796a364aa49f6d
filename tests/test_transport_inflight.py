"""In-flight DMA marks: a transfer whose process was killed is finished, a live overlap still slips;
addresses past the end of DRAM are an AXI decode error, never a crash."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from otpu_core.card import regs
from otpu_core.card.simcard import DMA_SLOTS, H, _own_start
from otpu_core.errors import DeviceError
from otpu_core.transport.sim import SimTransport

# A second process starts one 4 KiB transfer on the test's card outside the DMA lock (as a
# process bypassing the rules would) and stops inside it until it is killed.
PAUSED_TRANSFER = """
import sys, time
from otpu_core.card.simcard import open_card
card = open_card("sim")
direction = sys.argv[1]
def stop_here(*args, **kw):
    print("in flight", flush=True)
    time.sleep(120)
setattr(card.dram, "read_channel" if direction == "c2h" else "write_channel", stop_here)
buf = bytearray(4096)
(card.c2h if direction == "c2h" else card.h2c)(0, memoryview(buf))
"""


@pytest.fixture
def paused():
    """Start a process paused inside a transfer ('h2c' or 'c2h'); returns it once it is in flight."""
    procs = []

    def start(direction: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", PAUSED_TRANSFER, direction], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "in flight"
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
        p.stdout.close()


def payload(n: int, seed: int) -> np.ndarray: return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("direction", ["c2h", "h2c"])
def test_a_transfer_of_a_process_killed_mid_dma_does_not_slip_later_ones(sim, paused, direction):
    p = paused(direction)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    # Same direction first: its own mark must not stand in for the dead one (the bug this guards).
    if direction == "c2h":
        sim.mem_read(0, 0, 4096)
    else:
        sim.mem_write(0, 8192, payload(4096, 1))
    data = payload(8192, 2)
    sim.mem_write(1, 0, data)
    got = sim.mem_read(1, 0, 8192)
    assert sim.card.dma_stats()["slip"] == 0
    assert np.array_equal(got, data)
    assert not sim.card.hidden[H["C2H_PID0"]] and not sim.card.hidden[H["H2C_PID0"]]   # reaped


@pytest.mark.parametrize("direction", ["c2h", "h2c"])
def test_an_overlap_with_a_live_process_still_slips(sim, paused, direction):
    paused(direction)                                     # alive, paused inside its transfer
    data = payload(128, 3)
    if direction == "c2h":
        sim.mem_write(0, 4096, data)                      # our h2c overlaps its c2h
    else:
        sim.mem_read(0, 4096, 64)                         # our c2h overlaps its h2c
        sim.mem_write(0, 4096, data)
    assert sim.card.dma_stats()["slip"] == 64
    assert np.array_equal(sim.mem_read(0, 4096 + 64, 128), data)   # landed 64 bytes on


def test_a_mark_whose_pid_was_recycled_is_not_taken_for_its_owner(sim):
    card = sim.card
    card.hidden[H["C2H_PID0"]] = os.getpid()              # this pid, but a process that started at another time
    card.hidden[H["C2H_BORN0"]] = _own_start() + 1
    sim.mem_write(0, 0, b"\x05" * 64)
    assert card.dma_stats()["slip"] == 0 and sim.mem_read(0, 0, 64).tolist() == [5] * 64
    assert card.hidden[H["C2H_PID0"]] == 0


def test_marks_are_released_and_reused(sim):
    for _ in range(3 * DMA_SLOTS):
        sim.mem_write(0, 0, b"\x01" * 64)
        sim.mem_read(0, 0, 64)
    assert all(not sim.card.hidden[H[f"{d}_PID{i}"]] for d in ("H2C", "C2H") for i in range(DMA_SLOTS))


def slip(card) -> None:
    with card.dma_in_flight("c2h"):
        card.h2c(0, memoryview(bytearray(64)))
    assert card.dma_stats()["slip"] == 64


def test_a_slipped_write_past_the_end_of_dram_is_an_axi_decode_error(sim):
    slip(sim.card)
    top = sim.channel_bytes - 64
    with pytest.raises(DeviceError, match=r"DECERR.*64 bytes past") as e:
        sim.mem_write(1, top, payload(64, 4))             # lands past channel 1: nothing there
    assert e.value.exit_code == 3
    with pytest.raises(DeviceError, match="DECERR"):
        sim.mem_write(0, top, payload(64, 5))             # past channel 0's 8 MiB, inside its 2 GiB window
    data = payload(256, 6)
    sim.mem_write(1, top - 4096, data)                    # the card still works (64 bytes on, as slipped)
    assert np.array_equal(sim.mem_read(1, top - 4096 + 64, 256), data)


def test_a_slipped_write_at_the_top_of_a_2_gib_channel_follows_the_axi_map():
    t = SimTransport(name="big", target="ypcb-00338")
    try:
        slip(t.card)
        top = t.channel_bytes - 64
        data = payload(64, 7)
        t.mem_write(0, top, data)                         # channel 0's top + 64 is channel 1's first beat
        assert np.array_equal(t.mem_read(1, 0, 64), data)
        with pytest.raises(DeviceError, match="DECERR"):
            t.mem_write(1, top, data)                     # channel 1's top + 64 is AXI 4 GiB: no DRAM
    finally:
        t.close()


def test_a_direct_read_past_the_end_is_a_decode_error_not_a_crash(sim):
    buf = bytearray(128)
    with pytest.raises(OSError, match="DECERR"):
        sim.card.c2h(regs.axi_address(1, sim.channel_bytes - 64), memoryview(buf))
    with pytest.raises(OSError, match="DECERR"):
        sim.card.c2h(1 << 32, memoryview(buf))
