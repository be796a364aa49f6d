"""Host calibration proved on the simulated card: for several card serials every chosen setting lies
inside the true windows of the simulated PHY, BIST and a DMA pattern test pass afterwards; a
channel that cannot calibrate fails with the reference's error and hint; a stuck DQ bit gets the
per-lane diagnosis; a bit framed two bitslips off is calibrated with a per-bit offset the core
CPU lacks; a forced recalibration that fails puts the channel back as it was."""
from __future__ import annotations

import numpy as np
import pytest

from otpu_core.board import Board
from otpu_core.card import litedram_map as M
from otpu_core.card.litedram import TAPS_PER_UI
from otpu_memcal import hostcal
from otpu_memcal.csr import Csr
from otpu_memcal.ensure import Options, ensure


def truth(board, ch):
    """The simulated PHY's windows and its current settings (the hardware's own state)."""
    card = board.t.card
    return card.periphs["litedram"].windows[ch], card.periph_state["litedram"]["ch"][ch]


def assert_inside_true_windows(board, ch, result, stride):
    windows, st = truth(board, ch)
    phase = st["phase_steps"] % M.PERIOD_STEPS
    assert result["dqs_steps"] == st["phase_steps"]
    for lane, w in enumerate(windows):
        into = (phase - w.write_lo) % M.PERIOD_STEPS
        assert 3 <= into < w.write_len - 3, (ch, lane, into, w.write_len)            # the common phase, with margin
        assert st["wbs"][lane] == w.write_bitslip == result["write_latency"][lane]
        pos = st["rbs"][lane] * TAPS_PER_UI + st["rdly"][lane]
        eye = w.read_positions()
        assert pos in eye and min(pos - eye.start, eye.stop - 1 - pos) >= 2, (ch, lane, pos, eye)
        assert result["read"][lane]["tap"] == st["rdly"][lane] and result["read"][lane]["bitslip"] == st["rbs"][lane]
    true_common = sum(all(w.write_ok(p, w.write_bitslip) for w in windows) for p in range(M.PERIOD_STEPS))
    assert abs(result["window_steps"] - true_common) <= stride
    assert st["control"] & M.CTL_SEL and st["cal_ready"] == 1


def pattern_roundtrip(board, seed):
    data = np.random.default_rng(seed).integers(0, 256, 1 << 20, dtype=np.uint8)
    board.write(0x100000, data)
    assert np.array_equal(board.read(0x100000, data.size), data)


@pytest.mark.parametrize("name", ["cal-a", "cal-b", "cal-c"])
def test_host_calibration_lands_inside_every_true_window(name):
    with Board.open(f"sim:{name}", "sim-small") as b:
        out = ensure(b, (0, 1), force=True, opts=Options(stride=2, bist_mib=4, sweep_bist_mib=0.25))
        assert not out.failures and out.by == "host" and sorted(out.channels) == [0, 1]
        for ch, r in out.channels.items():
            assert_inside_true_windows(b, ch, r, 2)
            assert r["bist"]["read"]["errors"] == 0 and r["bist"]["read"]["beats"] == 4 << 14
            assert r["traffic_checked"] and len(r["pass_maps"]) == M.LANES
        assert b.identify().calibrated == (True, True) and b.status() & 0x60 == 0x60
        pattern_roundtrip(b, 1)


def test_no_calib_channel_fails_with_the_reference_error_and_keeps_the_other():
    with Board.open("sim:m", "sim-small", faults="no_calib:ch=1") as b:
        out = ensure(b, (0, 1), opts=Options(stride=4, bist_mib=1, sweep_bist_mib=0))
        assert out.by == "selfcal+host" and list(out.failures) == [1]
        e = out.failures[1]
        assert e.code == M.ERR_NO_COMMON_PHASE and e.exit_code == 1
        assert "no DQS phase works for every lane" in e.message and "lanes 0, 1, 2, 3, 4, 5, 6, 7, 8" in e.message
        assert "CK / address / command" in e.hint
        st = truth(b, 1)[1]
        assert st["cal_ready"] == 0 and st["control"] & M.CTL_SEL      # back in hardware mode, not calibrated
        assert b.status() & 0x60 == 0x20


def test_stuck_dq_bit_reaches_the_per_lane_diagnosis():
    with Board.open("sim:stuck", "sim-small", faults="stuck_dq:ch=1,bit=44,val=0") as b:
        out = ensure(b, (1,), force=True, opts=Options(stride=8, bist_mib=1, sweep_bist_mib=0.25))
        e = out.failures[1]
        assert "lane 5 never passes" in e.message and "BIST finds wrong beats" in e.message
        assert e.hint == ("channel 1 byte lane 5 errors -> DQ[47:40] pinout / calibration of that lane; "
                          "only DQ44 (stuck or shorted bit)")
        # it was calibrated (by the core's CPU, which checks no traffic): its settings were put back
        assert "were put back" in e.message and b.status() & 0x40
        assert e.partial["bist_failed_steps"][5] > 0 and sum(e.partial["bist_failed_steps"]) == e.partial["bist_failed_steps"][5]


def test_a_bit_framed_off_needs_the_host_and_gets_a_per_bit_offset():
    with Board.open("sim:slip", "sim-small", faults="dq_slip:ch=0,bit=13,off=2") as b:
        assert b.info.calibrated == (False, True)                      # the core's CPU has no per-bit bitslips
        out = ensure(b, (0, 1), opts=Options(stride=4, bist_mib=2, sweep_bist_mib=0.25))
        assert out.by == "selfcal+host" and not out.failures and list(out.channels) == [0]
        r = out.channels[0]
        assert r["read"][1]["offsets"] == [0, 0, 0, 0, 0, 2, 0, 0] and r["per_bit"]
        st = truth(b, 0)[1]
        assert st["rbs_off"][1][5] == 2 and b.identify().calibrated == (True, True)
        assert b.t.card.periphs["litedram"].read_lanes_ok(0) == [True] * M.LANES
        pattern_roundtrip(b, 2)
        cpu = b.t.reg_read(0x10000 + M.B_SELFCAL + M.SC_STATUS)
        assert cpu & 1                                                  # the CPU is held: it cannot undo that


def test_calibrate_channel_counts_its_accesses_and_checks_the_write_clock():
    with Board.open("sim:m", "sim-small") as b:
        csr = Csr(b.t)
        wclk = M.channel_offset(M.B_WCLK, 1, 0)
        csr.batch([(wclk + M.WCLK_DRP_ADR, 0x10), (wclk + M.WCLK_DRP_DAT_W, 0x0041), (wclk + M.WCLK_DRP_WRITE, 1)])
        with pytest.raises(hostcal.CalError) as e:
            hostcal.calibrate_channel(csr, 1, stride=8, bist_mib=1, sweep_bist_mib=0)
        assert e.value.code == M.ERR_MMCM_PHASES and "CLKOUT4 at 0/8 of a VCO period, expected 4/8" in e.value.message
        assert csr.accesses > 0 and "rebuild" in e.value.hint


@pytest.mark.slow
@pytest.mark.parametrize("name,target,stride", [(f"cal-m{k}", "ypcb-00338" if k % 2 else "sim-small", (1, 1, 3, 5)[k % 4])
                                                for k in range(8)])
def test_calibration_matrix_of_serials_targets_and_strides(name, target, stride):
    with Board.open(f"sim:{name}", target) as b:
        out = ensure(b, (0, 1), force=True, opts=Options(stride=stride, bist_mib=8, sweep_bist_mib=1))
        assert not out.failures
        for ch, r in out.channels.items():
            assert_inside_true_windows(b, ch, r, stride)
            assert r["bist"]["read"]["errors"] == 0
        pattern_roundtrip(b, stride)
