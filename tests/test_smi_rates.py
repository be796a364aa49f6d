"""otpu-smi's rates between two SNAP latches, against the formulas of shared/reference/host.md 1.3
(FeSens/openTPU board.py `rates`) worked out by hand: utilisation = counter delta / UPTIME delta,
DRAM utilisation in beats per cycle, DRAM GB/s = (dRD + dWR) x 64 / (dUPTIME / (CORE_KHZ x 1000))
/ 1e9, IPC = dINSTR / dUPTIME."""
import pytest

from otpu_smi.sample import rates

NAMES = ("UPTIME", "RUNNING", "MXU_BUSY", "MXU_MAC", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY", "TMEM_DENY", "DRAM_RD",
         "DRAM_WR", "DRAM_WAIT", "INSTR", "MXU_STARVE")
BEFORE = dict.fromkeys(NAMES, 5 << 32)          # high words set: only the differences matter


def after(**delta):
    return {n: BEFORE[n] + delta.get(n, 0) for n in NAMES}


def test_one_second_at_133_mhz():
    # 133,330,000 cycles = 1 s at CORE_KHZ 133330; 50,000,000 beats read and 25,000,000 written
    b = after(UPTIME=133_330_000, RUNNING=133_330_000, MXU_BUSY=66_665_000, DMA_BUSY=13_333_000,
              DRAM_RD=50_000_000, DRAM_WR=25_000_000, INSTR=1_333_300)
    r = rates(BEFORE, b, 133330)
    assert r["cycles"] == 133_330_000 and r["seconds"] == pytest.approx(1.0, rel=1e-12)
    assert r["util"]["RUNNING"] == 1.0 and r["util"]["MXU_BUSY"] == 0.5 and r["util"]["DMA_BUSY"] == 0.1
    assert r["util"]["VPU_BUSY"] == 0.0
    assert r["util"]["DRAM"] == pytest.approx(75_000_000 / 133_330_000, rel=1e-12)
    assert r["dram_gbs"] == pytest.approx(4.8, rel=1e-12)          # 75e6 beats x 64 B in 1 s
    assert r["dram_rd_gbs"] == pytest.approx(3.2, rel=1e-12) and r["dram_wr_gbs"] == pytest.approx(1.6, rel=1e-12)
    assert r["ipc"] == pytest.approx(0.01, rel=1e-12)


def test_no_clock_no_bandwidth_and_no_time_no_rates():
    b = after(UPTIME=1000, DRAM_RD=10)
    r = rates(BEFORE, b, None)
    assert r["dram_gbs"] is None and r["seconds"] is None and r["util"]["DRAM"] == 0.01
    r = rates(BEFORE, BEFORE, 133330)
    assert r["util"] == {} and r["ipc"] is None and r["cycles"] == 0
