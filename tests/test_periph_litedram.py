"""LiteDRAM model: self-calibration is a real search that lands inside the generated windows,
no_calib leaves cal_ready low, BIST sees miscalibrated lanes and memory faults, DFII obeys JEDEC."""
import numpy as np
import pytest

from otpu_core import target
from otpu_core.card import faults as F
from otpu_core.card import litedram as L
from otpu_core.card import litedram_map as M
from otpu_memcal.selfcal import decode

YPCB = target.load("ypcb-00338")


def card(serial, spec="", run_cpu=True):
    st = {}
    ld = L.LiteDram(YPCB, serial, st, F.parse(spec))
    if not run_cpu:
        ld.reset(run_cpu=False)
    return ld, st


def bist(ld, ch, mode, base, beats, seed=0x0123456789ABCDEF):
    o = L.B_BIST + ch * L.BLOCK
    for rel, v in ((L.BIST_MODE, mode), (L.BIST_BASE, base), (L.BIST_LENGTH, beats),
                   (L.BIST_SEED, seed >> 32), (L.BIST_SEED + 4, seed & 0xFFFFFFFF), (L.BIST_START, 1)):
        ld.write(o + rel, v)
    lane_bits = L.words_to_int([ld.read(o + L.BIST_LANE_BITS + 4 * i) for i in range(3)])
    return {"done": ld.read(o + L.BIST_DONE), "errors": ld.read(o + L.BIST_ERRORS), "beats": ld.read(o + L.BIST_BEATS),
            "lanes": [ld.read(o + L.BIST_LANE_ERRORS + 4 * l) for l in range(L.LANES)], "bits": lane_bits}


def mailbox(ld):
    words = []
    for i in range(L.MBOX_WORDS):
        ld.write(L.B_SELFCAL + L.SC_MBOX_ADR, i)
        words.append(ld.read(L.B_SELFCAL + L.SC_MBOX_DAT))
    return decode(words)


@pytest.mark.parametrize("serial", [1, 7, 1234, 99991])
def test_selfcal_lands_inside_every_generated_window(serial):
    ld, st = card(serial)
    state = ld.read(L.B_SELFCAL + L.SC_STATE)
    assert state & L.SC_DONE and state & 0xF == (L.SC_OK | L.SC_OK << 2)
    report = mailbox(ld)
    assert report["firmware_id"] == L.BUILTIN_FW_ID
    for ch in range(2):
        assert ld.read(L.B_CAL + ch * L.BLOCK + L.CAL_READY) == 1
        r = report["channels"][ch]
        c = st["ch"][ch]
        assert r["state"] == "ok" and r["error"] == 0
        phase = c["phase_steps"] % L.PERIOD_STEPS
        assert r["dqs_steps"] == c["phase_steps"]
        for lane, w in enumerate(ld.windows[ch]):
            # write side: the chosen CK phase is inside the lane's window, with a margin
            into = (phase - w.write_lo) % L.PERIOD_STEPS
            assert 5 <= into < w.write_len - 5, (ch, lane, into, w.write_len)
            assert c["wbs"][lane] == w.write_bitslip == r["write_latency"][lane]
            # read side: the sampling position is inside the eye of all eight bits
            pos = c["rbs"][lane] * L.TAPS_PER_UI + c["rdly"][lane]
            eye = w.read_positions()
            assert pos in eye and min(pos - eye.start, eye.stop - 1 - pos) >= 2, (ch, lane, pos, eye)
            assert r["read"][lane]["tap"] == c["rdly"][lane] and r["read"][lane]["bitslip"] == c["rbs"][lane]
        # the reported common window is the true intersection of the lane windows (to one step)
        true_common = sum(all(w.write_ok(p, w.write_bitslip) for w in ld.windows[ch]) for p in range(L.PERIOD_STEPS))
        assert abs(r["window_steps"] - true_common) <= 1
        assert len(r["pass_maps"]) == L.LANES and all(len(m) == L.PERIOD_STEPS for m in r["pass_maps"])
        assert ld.write_lanes_ok(ch) == [True] * L.LANES and ld.read_lanes_ok(ch) == [True] * L.LANES


def test_two_cards_differ():
    a, _ = card(1, run_cpu=False)
    b, _ = card(2, run_cpu=False)
    assert a.windows != b.windows
    assert a.windows == card(1, run_cpu=False)[0].windows


def test_no_calib_leaves_the_channel_uncalibrated_and_says_why():
    ld, st = card(5, "no_calib:ch=1")
    state = ld.read(L.B_SELFCAL + L.SC_STATE)
    assert state & 3 == L.SC_OK and (state >> 2) & 3 == L.SC_FAILED
    assert (state >> 16) & 0xFF == L.ERR_NO_COMMON_PHASE
    assert ld.calibrated(0) and not ld.calibrated(1)
    assert ld.read(L.B_CAL + L.BLOCK + L.CAL_READY) == 0
    assert mailbox(ld)["channels"][1]["error_text"] == "no CK phase common to every lane"
    assert all(w.write_len == 0 and not w.read_positions() for w in ld.windows[1])
    # the host's data through an uncalibrated channel comes back garbled on every lane
    data = np.arange(256, dtype=np.uint8)
    assert not np.array_equal(ld.corrupt_read(1, 0, data.copy()), data)
    assert np.array_equal(ld.corrupt_read(0, 0, data.copy()), data)


def _detune_read(ld, ch, lane):
    """Move one lane's IDELAY to a tap outside its eye (through the CSRs)."""
    w = ld.windows[ch][lane]
    c = ld.state["ch"][ch]
    eye = w.read_positions()
    for tap in range(L.DELAYS):
        if c["rbs"][lane] * L.TAPS_PER_UI + tap not in eye and abs(c["rbs"][lane] * L.TAPS_PER_UI + tap - w.read_centre) > 8:
            break
    phy = L.B_DDRPHY + ch * L.BLOCK
    ld.write(phy + L.PHY_DLY_SEL, 1 << lane)
    ld.write(phy + L.PHY_RDLY_DQ_RST, 1)
    for _ in range(tap):
        ld.write(phy + L.PHY_RDLY_DQ_INC, 1)
    ld.write(phy + L.PHY_DLY_SEL, (1 << L.LANES) - 1)


def test_bist_finds_a_miscalibrated_lane_and_nothing_after_recalibration():
    ld, st = card(11)
    beats = 4096
    assert bist(ld, 0, 0, 0, beats)["done"] == 1
    clean = bist(ld, 0, L.BIST_READ, 0, beats)
    assert clean["errors"] == 0 and clean["lanes"] == [0] * L.LANES and clean["bits"] == 0
    _detune_read(ld, 0, 3)
    bad = bist(ld, 0, L.BIST_READ, 0, beats)
    assert bad["errors"] == beats and bad["lanes"] == [0, 0, 0, beats, 0, 0, 0, 0, 0]
    assert bad["bits"] == 0xFF << 24
    data = np.zeros(4096, np.uint8)
    garbled = ld.corrupt_read(0, 0, data.copy())
    assert set(np.flatnonzero(garbled != data) % 8) == {3}
    # hold the CPU, then release it: it recalibrates from the top
    ld.write(L.B_SELFCAL + L.SC_HOLD, 1)
    assert ld.read(L.B_SELFCAL + L.SC_STATUS) == (L.SELFCAL_MAGIC << 16) | (L.FW_LOG2_WORDS << 1) | 1
    ld.write(L.B_SELFCAL + L.SC_STATE, 0)
    ld.write(L.B_SELFCAL + L.SC_HOLD, 0)
    assert ld.read(L.B_SELFCAL + L.SC_STATE) & L.SC_DONE
    bist(ld, 0, 0, 0, beats)
    again = bist(ld, 0, L.BIST_READ, 0, beats)
    assert again["errors"] == 0 and again["bits"] == 0


def test_host_calibration_through_bar0_style_accessors():
    """SelfCal needs only read/write: run it as a host would, with offsets relative to BAR0."""
    ld, st = card(21, run_cpu=False)
    assert not ld.calibrated(0)
    base = 0x10000
    ops = {"n": 0}

    def rd(off):
        ops["n"] += 1
        return ld.read(off - base)

    def wr(off, v):
        ops["n"] += 1
        ld.write(off - base, v)

    result = L.SelfCal(rd, wr, 0, stride=4, base=base).calibrate_channel()
    assert ld.calibrated(0) and not ld.calibrated(1)
    assert result["scan_points"] == L.PERIOD_STEPS // 4
    assert ops["n"] > 10_000          # a search, not a flag
    phase = st["ch"][0]["phase_steps"] % L.PERIOD_STEPS
    assert all(w.write_ok(phase, w.write_bitslip) for w in ld.windows[0])
    bist(ld, 0, 0, 0, 1024)
    assert bist(ld, 0, L.BIST_READ, 0, 1024)["errors"] == 0


def test_bist_reports_a_stuck_dq_bit_with_random_data_only():
    ld, _ = card(3, "stuck_dq:ch=0,bit=44,val=0")
    beats = 1 << 14
    bist(ld, 0, 0, 0, beats)
    r = bist(ld, 0, L.BIST_READ, 0, beats)
    # independent count: a beat is wrong when any of its 8 words has bit 44 set in the pattern
    addrs = np.arange(beats, dtype=np.uint64)[:, None] * np.uint64(64) + np.arange(0, 64, 8, dtype=np.uint64)
    words = L.mix64(addrs ^ np.uint64(0x0123456789ABCDEF))
    want = int(((words >> np.uint64(44)) & np.uint64(1)).any(axis=1).sum())
    assert r["errors"] == want and r["lanes"][5] == want and sum(r["lanes"]) == want
    assert r["bits"] == 1 << 44
    # address-as-data never sets bit 44 below 16 TiB: the stuck-at-0 bit is invisible there
    bist(ld, 0, L.BIST_ADDR_DATA, 0, beats)
    assert bist(ld, 0, L.BIST_ADDR_DATA | L.BIST_READ, 0, beats)["errors"] == 0
    assert bist(ld, 1, 0, 0, 256)["errors"] == 0 and bist(ld, 1, L.BIST_READ, 0, 256)["errors"] == 0


def test_bist_reports_an_aliased_address_line_in_its_lane():
    ld, _ = card(3, "addr_alias:ch=1,bit=12")
    beats = 256                        # 16 KiB: bit 12 splits it into four 4 KiB quarters
    bist(ld, 1, L.BIST_ADDR_DATA, 0, beats)
    r = bist(ld, 1, L.BIST_ADDR_DATA | L.BIST_READ, 0, beats)
    # beats in quarters 0 and 2 read what quarters 1 and 3 wrote over them: the words differ in bit 12
    assert r["errors"] == beats // 2
    assert r["lanes"][1] == beats // 2 and r["bits"] & ((1 << 64) - 1) == 1 << 12
    assert r["lanes"][8] == beats // 2          # the ECC byte follows the data
    assert r["lanes"][0] == 0 and r["lanes"][2:8] == [0] * 6


def test_dfii_needs_the_jedec_init_and_the_right_phase():
    ld, st = card(8, run_cpu=False)
    drv = L.SelfCal(ld.read, ld.write, 0)
    # software mode without the init sequence: the DRAM does not answer
    ld.write(L.B_SDRAM + L.DFII_CONTROL, L.CTL_CKE | L.CTL_ODT | L.CTL_RESET_N)
    drv.write_burst(0)
    assert drv.read_errors(0) != 0
    drv.init()
    assert st["ch"][0]["mr"] == [M.MR0, M.MR1, M.MR2, M.MR3] and st["ch"][0]["zq"]
    # put every lane at its calibrated settings, straight from the windows
    for lane, w in enumerate(ld.windows[0]):
        pos = w.read_positions()
        mid = (pos.start + pos.stop - 1) // 2
        b = max(0, (mid - (L.DELAYS - 1) + L.TAPS_PER_UI - 1) // L.TAPS_PER_UI)
        drv.set_lane(lane, w.write_bitslip, b, mid - b * L.TAPS_PER_UI)
    drv.move_phase(ld.windows[0][0].write_centre)
    drv.select((1 << L.LANES) - 1)
    ok = [all(w.write_ok(ld.windows[0][0].write_centre, w.write_bitslip) for w in ld.windows[0])]
    drv.write_burst(0)
    wrong = drv.read_errors(0)
    for lane, w in enumerate(ld.windows[0]):
        lane_ok = w.write_ok(st["ch"][0]["phase_steps"] % L.PERIOD_STEPS, w.write_bitslip)
        assert ((wrong >> (8 * lane)) & 0xFF == 0) == lane_ok
    assert ok[0] == (wrong == 0)
    # a read issued on the wrong DFI phase returns noise
    ld.write(L.B_SDRAM + L.DFII_PHASE0 + L.DFII_PHASE_STRIDE * 1 + L.PI_COMMAND, L.READ | L.CMD_RDDATA)
    ld.write(L.B_SDRAM + L.DFII_PHASE0 + L.DFII_PHASE_STRIDE * 1 + L.PI_ISSUE, 1)
    got = L.words_to_int([ld.read(L.B_SDRAM + L.DFII_PHASE0 + L.PI_RDDATA + 4 * i) for i in range(5)])
    assert got != drv.patterns[0][0]
    # a refresh only counts with every bank precharged
    before = st["ch"][0]["refreshes"]
    drv.command(0, L.PRE, 1 << 10)
    drv.command(0, L.REF)
    assert st["ch"][0]["refreshes"] == before + 1


def test_write_leveling_feedback_follows_the_phase():
    ld, st = card(4, run_cpu=False)
    drv = L.SelfCal(ld.read, ld.write, 1)
    drv.init()
    drv.command(0, L.MRS, M.MR1 | L.MR1_WLEVEL, 1)
    phy = L.B_DDRPHY + L.BLOCK
    ld.write(phy + L.PHY_WLEVEL_EN, 1)
    w0 = ld.windows[1][0]
    seen = []
    for step in range(L.PERIOD_STEPS):
        ld.write(phy + L.PHY_WLEVEL_STROBE, 1)
        v = L.words_to_int([ld.read(L.B_SDRAM + L.BLOCK + L.DFII_PHASE0 + L.PI_RDDATA + 4 * i) for i in range(5)])
        seen.append(v & 1)
        ld.write(L.B_PHASE + L.BLOCK + L.PHASE_DQS_SHIFT, 1)
    edge = [i for i in range(L.PERIOD_STEPS) if seen[i] and not seen[i - 1]]
    assert edge == [w0.wlevel_edge]


def test_plain_csrs_identifier_scratch_phase_and_drp():
    ld, st = card(6, run_cpu=False)
    ident = "".join(chr(ld.read(L.B_IDENT + 4 * i)) for i in range(len(L.IDENTIFIER)))
    assert ident == "openTPU LiteDRAM" and ld.read(L.B_IDENT + 4 * len(L.IDENTIFIER)) == 0
    assert ld.read(L.B_CTRL + L.CTRL_SCRATCH) == 0x12345678
    ld.write(L.B_CTRL + L.CTRL_SCRATCH, 0xCAFEF00D)
    assert ld.read(L.B_CTRL + L.CTRL_SCRATCH) == 0xCAFEF00D
    for _ in range(3):
        ld.write(L.B_PHASE + L.PHASE_DQS_SHIFT, 0)
    assert ld.read(L.B_PHASE + L.PHASE_DQS_STEPS) == 0xFFFFFFFD
    assert ld.read(L.B_PHASE + L.BLOCK + L.PHASE_DQS_STEPS) == 0
    w = L.B_WCLK + L.BLOCK
    ld.write(w + L.WCLK_DRP_ADR, 0x10)
    ld.write(w + L.WCLK_DRP_READ, 1)
    assert ld.read(w + L.WCLK_DRP_DRDY) == 1 and ld.read(w + L.WCLK_DRP_DAT_R) >> 13 == 4   # CLKOUT4 at +4/8
    # changing a clock phase breaks the calibration's assumption: error 4, channel left uncalibrated
    ld.write(w + L.WCLK_DRP_DAT_W, 0x0041)
    ld.write(w + L.WCLK_DRP_WRITE, 1)
    with pytest.raises(L.CalFailed) as e:
        L.SelfCal(ld.read, ld.write, 1).calibrate_channel()
    assert e.value.code == L.ERR_MMCM_PHASES and "CLKOUT4 at 0/8, expected 4/8" in str(e.value)
    ld.write(w + L.WCLK_MMCM_RESET, 1)
    assert ld.read(w + L.WCLK_MMCM_LOCKED) == 0


def test_firmware_memory_writes_only_while_held_and_changes_the_id():
    ld, st = card(9)
    sc = L.B_SELFCAL
    ld.write(sc + L.SC_MEM_ADR, 5)
    ld.write(sc + L.SC_MEM_DAT, 0x1234)
    assert ld.read(sc + L.SC_MEM_RDAT) == 0
    ld.write(sc + L.SC_HOLD, 1)
    ld.write(sc + L.SC_MEM_DAT, 0x1234)
    assert ld.read(sc + L.SC_MEM_RDAT) == 0x1234
    ld.write(sc + L.SC_STATE, 0)
    ld.write(sc + L.SC_HOLD, 0)
    assert mailbox(ld)["firmware_id"] not in (0, L.BUILTIN_FW_ID)


def test_longest_run_linear_and_circular():
    assert L.longest_run([False, True, True, False, True]) == (1, 2)
    assert L.longest_run([True, True, False, False, True, True, True], circular=True) == (4, 5)
    assert L.longest_run([False] * 4) == (0, 0) and L.longest_run([True] * 4, circular=True) == (0, 4)


def test_has_litedram():
    assert L.has_litedram(YPCB) and not L.has_litedram(target.load("bcu1525"))


def test_state_survives_a_json_round_trip_between_processes():
    import json
    ld, st = card(13)
    bist(ld, 1, 0, 0, 512)
    other = L.LiteDram(YPCB, 13, json.loads(json.dumps(st)), F.NO_FAULTS)
    assert other.calibrated(0) and other.calibrated(1)
    assert bist(other, 1, L.BIST_READ, 0, 512)["errors"] == 0
    assert other.read(L.B_PHASE + L.BLOCK + L.PHASE_DQS_STEPS) == ld.read(L.B_PHASE + L.BLOCK + L.PHASE_DQS_STEPS)
