"""Every DMA rule twice: through the transport (no corruption) and bypassed (the card corrupts or refuses).

The XDMA transport runs with real syscalls on file-backed device nodes; the simulated card's
XDMA engine model is what punishes a bypassed rule.
"""
import errno
import os
import threading
import time

import numpy as np
import pytest

from otpu_core import transport as tp
from otpu_core.board import Board
from otpu_core.card import regs
from otpu_core.errors import DeviceError, UsageError
from otpu_core.transport.sim import SimTransport
from otpu_core.transport.xdma import XdmaTransport

RNG = np.random.default_rng(5)


def data(n: int) -> np.ndarray: return RNG.integers(0, 256, n, dtype=np.uint8)


def misplaced(n: int, card: int) -> np.ndarray:
    """A buffer whose (host - card) mod 4096 is 16, glibc's usual large-array offset: bad for reads and writes."""
    buf = tp.placed(n + 4096, card)
    skip = 4096 - tp.DMA_PLACE + 16
    assert (tp.buffer_address(buf[skip:]) - card) % 4096 == 16
    return buf[skip:skip + n]


@pytest.fixture
def nodes(tmp_path):
    base = tmp_path / "xdma0"
    with open(f"{base}_user", "wb") as f:
        f.truncate(1 << 20)
    with open(f"{base}_h2c_0", "wb") as f:
        f.truncate(1 << 32)               # sparse: both channels' AXI windows
    os.link(f"{base}_h2c_0", f"{base}_c2h_0")
    return str(base)


@pytest.fixture
def later(sim):
    """Run a function on a timer thread; every timer is cancelled and joined before `sim` closes."""
    timers = []

    def start(delay: float, fn) -> threading.Timer:
        timer = threading.Timer(delay, fn)
        timers.append(timer)
        timer.start()
        return timer

    yield start
    for timer in timers:
        timer.cancel()
        timer.join()


# -- XDMA transport on file-backed nodes --------------------------------------------------------------

def test_xdma_registers_are_32_bit_words_at_their_offsets(nodes):
    t = XdmaTransport(nodes)
    t.reg_write(regs.off("SCRATCH"), 0xA1B2C3D4)
    assert t.reg_read(regs.off("SCRATCH")) == 0xA1B2C3D4
    t.close()
    with open(f"{nodes}_user", "rb") as f:
        f.seek(regs.off("SCRATCH"))
        assert f.read(4) == bytes.fromhex("d4c3b2a1")     # little-endian word where the map says


def test_xdma_chunks_calls_and_round_trips_unaligned_ranges(nodes, monkeypatch):
    t = XdmaTransport(nodes)
    sizes = []
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, buf, off: sizes.append(len(buf)) or real(fd, buf, off))
    payload = data((20 << 20) + 77)
    t.mem_write(1, 13, payload)
    assert max(sizes) <= tp.DMA_CHUNK and len(sizes) >= 3
    assert np.array_equal(t.mem_read(1, 13, payload.size), payload)
    with open(f"{nodes}_h2c_0", "rb") as f:            # landed at AXI address 0x8000_0000 + 13
        f.seek(0x8000_0000 + 13)
        assert f.read(64) == payload[:64].tobytes()
    t.close()


def test_xdma_missing_nodes_and_busy_device(nodes, tmp_path):
    with pytest.raises(DeviceError, match="no device node"):
        XdmaTransport(str(tmp_path / "xdma9"))
    t = XdmaTransport(nodes)
    with pytest.raises(DeviceError, match=f"busy: held by PID {os.getpid()}"):
        XdmaTransport(nodes)
    t.close()
    XdmaTransport(nodes).close()                       # free again after close


def test_xdma_placement_bounces_misplaced_buffers(nodes):
    t = XdmaTransport(nodes)
    payload = misplaced(1 << 20, regs.axi_address(0, 0))
    payload[:] = data(1 << 20)
    t.mem_write(0, 0, payload)
    assert t.stats["bounced"] == 1
    out = misplaced(1 << 20, 0)
    t.mem_read(0, 0, 1 << 20, out)
    assert t.stats["bounced"] == 2 and np.array_equal(out, payload)
    t.close()


# -- Rule: at most DMA_CHUNK per call ---------------------------------------------------------------

def test_call_size_rule():
    sim = SimTransport(name="big")                 # ypcb-00338: 2 GiB channels
    try:
        calls = []
        real = sim.card.h2c
        sim.card.h2c = lambda axi, buf: calls.append(len(buf)) or real(axi, buf)
        payload = data(20 << 20)
        sim.mem_write(0, 0, payload)
        sim.card.h2c = real
        assert max(calls) <= tp.DMA_CHUNK and len(calls) == 3
        assert sim.card.dma_stats()["dma_oversize"] == 0
        assert np.array_equal(sim.mem_read(0, 0, payload.size), payload)
        # Bypassed: one call of more than 8 MiB is counted as an oversized call (the driver pins it all).
        big = tp.placed(tp.DMA_CHUNK + 4096, 0)
        sim.card.h2c(0, memoryview(big))
        assert sim.card.dma_stats()["dma_oversize"] == 1
    finally:
        sim.close()


# -- Rule: whole 64-byte beats only -----------------------------------------------------------------

def test_sub_beat_writes_are_merged_on_the_host(sim):
    base = data(256)
    sim.mem_write(0, 0, base)
    for off, val in ((5, 1), (9, 2), (13, 3), (40, 4)):         # several unaligned sub-beat updates of beat 0
        sim.mem_write(0, off, bytes([val]))
        base[off] = val
    sim.mem_write(0, 100, b"xyz")
    base[100:103] = np.frombuffer(b"xyz", np.uint8)
    assert np.array_equal(sim.mem_read(0, 0, 256), base)
    assert sim.card.dma_stats()["wedged"] == 0


def test_sub_beat_writes_bypassed_wedge_the_write_path(sim):
    card = sim.card
    card.h2c(5, memoryview(bytearray(b"ab")))
    card.h2c(9, memoryview(bytearray(b"cd")))                  # second unaligned sub-beat write to beat 0
    with pytest.raises(OSError) as e:
        card.h2c(4096, memoryview(bytearray(64)))              # ... then any write
    assert e.value.errno == errno.ETIMEDOUT
    with pytest.raises(DeviceError, match="wedged"):
        sim.mem_write(0, 8192, data(128))                      # even a well-formed write now times out
    assert sim.mem_read(0, 0, 64)[5:7].tobytes() == b"ab"      # reads still work
    assert sim.reg_read(regs.off("ID")) == regs.ID_OTPU        # and registers
    card.power_off()                                           # "reload"
    sim.mem_write(0, 8192, b"\x01" * 128)
    assert sim.mem_read(0, 8192, 128).tolist() == [1] * 128


# -- Rule: buffer placement -------------------------------------------------------------------------

def test_placement_rule(sim):
    payload = misplaced(1 << 20, 0)
    payload[:] = data(1 << 20)
    sim.mem_write(0, 0, payload)
    out = misplaced(1 << 20, 0)
    sim.mem_read(0, 0, 1 << 20, out)
    assert np.array_equal(out, payload)
    stats = sim.card.dma_stats()
    assert stats["dma_slow"] == 0 and sim.stats["bounced"] == 2
    # Bypassed: the same buffer handed to the engine directly takes the slow path (0.77 vs 1.70 GB/s).
    before = stats["dma_link_ns"]
    sim.card.h2c(0, memoryview(payload))
    slow = sim.card.dma_stats()
    assert slow["dma_slow"] == 1
    assert slow["dma_link_ns"] - before > 1.9 * (1 << 20) / 1.70e9 * 1e9



# shared/reference/host.md 2 "Buffer placement" (FeSens/openTPU) and seed 000 "DMA placement", as data:
# d = host address - card address; a write runs at full rate iff d mod 64 == 0, a read iff
# 32 <= d mod 4096 <= 4064. (d, write at full rate, read at full rate)
PLACEMENT = [(0, True, False), (16, False, False), (32, False, True), (48, False, True), (64, True, True),
             (2048, True, True), (4032, True, True), (4064, False, True), (4080, False, False), (4096 + 64, True, True),
             (-4096 + 32, False, True)]


@pytest.mark.parametrize("d, write_ok, read_ok", PLACEMENT)
def test_placement_rule_edges_are_the_published_ones(d, write_ok, read_ok):
    card = 0x8000_0000 + 0x123000
    assert regs.write_placed(card + d, card) is write_ok and regs.read_placed(card + d, card) is read_ok


def test_a_write_buffer_32_bytes_off_is_bounced_and_a_read_one_is_not(sim):
    payload = tp.placed(1 << 20, 32)                    # d mod 4096 = 2048 + 32: fine to read, slow to write
    assert (tp.buffer_address(payload) - 0) % 4096 == (tp.DMA_PLACE + 32) % 4096
    payload[:] = data(1 << 20)
    sim.mem_write(0, 0, payload)
    assert sim.stats["bounced"] == 1
    sim.mem_read(0, 0, 1 << 20, payload)
    assert sim.stats["bounced"] == 1

# -- Rule: at most RUN_H2C per call while a program runs ----------------------------------------------

LONG = """loop count=200000 body=@end
ld dram=0 tmem=0 n=64
end:
halt
"""


def _start_long(board: Board) -> None:
    from otpu_core.board import prepare
    board.load_program(0x80000, prepare(LONG).image)
    board.start()
    board.t.poll(regs.off("STATUS"), regs.ST_RUN, regs.ST_RUN, timeout=5)


def test_run_h2c_rule_through_the_board():
    board = Board.open("sim", "sim-small")
    try:
        _start_long(board)
        payload = data(64 << 10)
        calls = []
        real = board.t.card.h2c
        board.t.card.h2c = lambda axi, buf: calls.append(len(buf)) or real(axi, buf)
        board.write(0x100000, payload)
        board.t.card.h2c = real
        assert board.t.card.running() and max(calls) <= tp.RUN_H2C
        board.set_reg("CTRL", 0)
        assert np.array_equal(board.read(0x100000, payload.size), payload)
        assert board.t.card.dma_stats()["lapped"] == 0
    finally:
        board.close()


def test_run_h2c_bypassed_lands_8k_off_until_reset():
    board = Board.open("sim", "sim-small")
    try:
        card = board.t.card
        _start_long(board)
        payload = tp.placed(16384, 0)
        payload[:] = data(16384)
        card.h2c(0x40000, memoryview(payload))                # one 16 KiB call while the run is in flight
        board.set_reg("CTRL", 0)
        assert card.dma_stats()["lapped"] == 1
        got = board.read_channel(0, 0x40000, 16384 + 8192)
        assert not np.array_equal(got[:16384], payload)
        assert np.array_equal(got[8192:8192 + 16384], payload)   # it landed 8 KiB further on
        board.write_channel(0, 0x60000, b"\x05" * 64)            # sticky: later writes land 8 KiB off too
        assert board.read_channel(0, 0x60000 + 8192, 64).tolist() == [5] * 64
        assert not board.read_channel(0, 0x60000, 64).any()
    finally:
        board.close()


# -- Rule: host->card and card->host never overlap ---------------------------------------------------

def test_dma_lock_keeps_concurrent_transfers_apart(sim):
    payload = data(1 << 20)
    errors = []

    def writer():
        for k in range(20):
            sim.mem_write(1, k * 4096, payload[k * 4096:(k + 1) * 4096])

    def reader():
        for _ in range(20):
            sim.mem_read(0, 0, 65536)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and sim.card.dma_stats()["slip"] == 0
    assert np.array_equal(sim.mem_read(1, 0, 20 * 4096), payload[:20 * 4096])


def test_overlapping_h2c_and_c2h_slip_later_writes_by_64_bytes(sim):
    card = sim.card
    with card.dma_in_flight("c2h"):                 # another process's read, not behind the DMA lock
        card.h2c(0, memoryview(bytearray(b"\x07" * 64)))
    assert card.dma_stats()["slip"] == 64
    sim.mem_write(0, 4096, b"\x09" * 128)           # permanent: even rule-abiding writes land 64 bytes on
    assert sim.mem_read(0, 4096 + 64, 128).tolist() == [9] * 128
    assert not sim.mem_read(0, 4096, 64).any()


def test_bounds_and_channel_are_checked(sim):
    with pytest.raises(UsageError, match="outside"):
        sim.mem_write(0, sim.channel_bytes - 10, data(64))
    with pytest.raises(UsageError, match="channel 2"):
        sim.mem_read(2, 0, 64)
    with pytest.raises(UsageError, match="aligned word"):
        sim.reg_read(0x3)


def test_trace_bar_prints_every_access(monkeypatch, capsys):
    monkeypatch.setenv("OTPU_TRACE_BAR", "1")
    t = SimTransport(name="traced", target="sim-small")
    t.reg_write(regs.off("SCRATCH"), 5)
    t.reg_read(regs.off("SCRATCH"))
    t.close()
    err = capsys.readouterr().err
    assert "W 0x00038 <- 0x00000005" in err and "R 0x00038 -> 0x00000005" in err


def test_poll_returns_soon_after_the_condition(sim, later):
    t0 = time.monotonic()
    later(0.05, lambda: sim.card.reg_write(regs.off("SCRATCH"), 1))
    sim.poll(regs.off("SCRATCH"), 1, 1, timeout=5)
    assert 0.04 < time.monotonic() - t0 < 0.5
    with pytest.raises(DeviceError, match="timed out"):
        sim.poll(regs.off("SCRATCH"), 2, 2, timeout=0.05)


def test_dma_lock_holds_off_another_process(sim):
    import subprocess
    import sys
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time\nfrom otpu_core.card.runstate import dma_lock\n"
        "with dma_lock('sim'):\n    print('locked', flush=True)\n    time.sleep(0.6)\n")],
        stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        sim.mem_read(0, 0, 4096)                         # waits for the other process's transfer
        assert time.monotonic() - t0 > 0.3
    finally:
        holder.wait(timeout=10)


def test_poll_backs_off_instead_of_hammering_the_bar(sim, later):
    reads = []
    real = sim._reg_read
    sim._reg_read = lambda off: reads.append(off) or real(off)
    later(0.05, lambda: sim.card.reg_write(regs.off("SCRATCH"), 3))
    t0 = time.monotonic()
    sim.poll(regs.off("SCRATCH"), 3, 3, timeout=5)
    took = time.monotonic() - t0
    assert 0.045 < took < 0.2 and len(reads) < 2000, (took, len(reads))


def test_poll_with_an_expected_time_sleeps_then_spins_at_the_end(sim, later):
    reads = []
    real = sim._reg_read
    sim._reg_read = lambda off: reads.append(time.monotonic()) or real(off)
    event = []
    t0 = time.monotonic()
    later(0.1, lambda: (event.append(time.monotonic()), sim.card.reg_write(regs.off("SCRATCH"), 5)))
    sim.poll(regs.off("SCRATCH"), 5, 5, timeout=5, expect=0.1)
    seen = time.monotonic()
    assert seen - event[0] < 0.01                    # spinning when it came: seen at once
    assert len([t for t in reads if t - t0 < 0.09]) < 20   # asleep for most of the expected time
