"""otpu-memcal's pieces on hand-made data: each lane's best read window (per-bit bitslip offsets),
the longest (circular) run, the core CPU's mailbox decoded from words laid out by hand."""
from __future__ import annotations

from otpu_core.card import litedram_map as M
from otpu_memcal.leveling import LaneRead, lane_best, longest_run
from otpu_memcal.selfcal import decode
from otpu_memcal.sweep import circular_run


def scan_of(good):
    """A scan (8 bitslips x 32 taps of 72-bit wrong masks) where bit q reads right at (b, t) iff good(q, b, t)."""
    return [[sum(1 << q for q in range(M.DATABITS) if not good(q, b, t)) for t in range(M.DELAYS)]
            for b in range(M.BITSLIPS)]


def test_lane_best_picks_the_widest_window_and_its_centre():
    # lane 2: a 6-tap window at bitslip 1 (taps 10..15), a 9-tap one at bitslip 4 (taps 3..11)
    def good(q, b, t):
        return q // 8 != 2 or (b == 1 and 10 <= t <= 15) or (b == 4 and 3 <= t <= 11)
    r = lane_best(scan_of(good), 2, per_bit=True)
    assert (r.taps, r.bitslip, r.start, r.tap, r.offsets) == (9, 4, 3, 7, [0] * 8)
    assert r.line == "000" + "1" * 9 + "0" * 20
    assert lane_best(scan_of(good), 3, per_bit=False).taps == 32        # lane 3 is right everywhere


def test_a_bit_framed_two_bitslips_off_gets_its_own_offset():
    # lane 5 reads at bitslip 2, taps 8..17, except its bit 3, which reads the same eye at bitslip 4
    def good(q, b, t):
        if q // 8 != 5:
            return True
        return 8 <= t <= 17 and b == (4 if q % 8 == 3 else 2)
    s = scan_of(good)
    with_bits = lane_best(s, 5, per_bit=True)
    assert (with_bits.taps, with_bits.bitslip, with_bits.start) == (10, 2, 8)
    assert with_bits.offsets == [0, 0, 0, 2, 0, 0, 0, 0]
    assert lane_best(s, 5, per_bit=False).taps == 0                      # without per-bit bitslips: no window


def test_equal_windows_prefer_fewer_bits_off_their_lane():
    # every bit reads at bitslip 3 (taps 0..7) and, except bit 0, also at bitslip 1 taps 0..7
    def good(q, b, t):
        return q // 8 != 0 or (t < 8 and (b == 3 or (b == 1 and q % 8 != 0)))
    r = lane_best(scan_of(good), 0, per_bit=True)
    assert (r.taps, r.bitslip, r.offsets) == (8, 3, [0] * 8)


def test_no_window_is_all_zeros():
    r = lane_best(scan_of(lambda q, b, t: q // 8 != 1), 1, per_bit=True)
    assert r == LaneRead(0, 0, 0, [0] * 8, "0" * 32) and r.tap == 0


def test_runs_linear_and_circular():
    assert longest_run([False, True, True, False, True]) == (1, 2)
    assert longest_run([]) == (0, 0)
    assert circular_run([True, True, False, False, True, True, True], circular=True) == (4, 5)
    assert circular_run([True, True, False, False, True, True, True], circular=False) == (4, 3)
    assert circular_run([False] * 4, True) == (0, 0) and circular_run([True] * 4, True) == (0, 4)


def test_mailbox_decodes_a_report_laid_out_by_hand():
    words = [0] * M.MBOX_WORDS
    words[0], words[1] = M.MBOX_MAGIC, 0x00010004
    blk = 80                                       # channel 1's block
    words[blk + 0] = M.SC_OK | (0 << 8) | (1 << 17) | (2 << 24)         # ok, traffic checked, stride 2
    words[blk + 1] = (-48) & 0xFFFFFFFF                                  # CK step -48
    words[blk + 2] = 44 | (56 << 16)                                     # window 44 steps, 56 points
    words[blk + 3] = 3 | ((-20 & 0xFFFF) << 16)                          # pick +3, run from -20
    words[blk + 4] = 25
    words[blk + 5] = 0x66666660                                          # lane 0 latency 0, lanes 1..7 latency 6
    words[blk + 6] = 0xF                                                 # lane 8: failed
    words[blk + 7] = 10 | (5 << 8) | (16 << 24)                          # lane 0: 10 taps, bitslip 5, tap 16
    words[blk + 16] = 0b11 << (2 * 3)                                    # lane 0 bit 3: offset -2
    words[blk + 22] = 6 * M.SYS_HZ
    words[blk + 23] = 7
    words[blk + 24] = 0b1011                                             # lane 0 passes at points 0, 1, 3
    r = decode(words)
    assert r["firmware_id"] == 0x00010004 and list(r["channels"]) == [1]
    c = r["channels"][1]
    assert (c["state"], c["error"], c["traffic_checked"], c["stride"]) == ("ok", 0, True, 2)
    assert (c["dqs_steps"], c["window_steps"], c["scan_points"], c["run_first"], c["run_last"]) == (-48, 44, 56, -20, 25)
    assert c["window_ps"] == round(44 * 1e12 / (56 * M.VCO_HZ))
    assert c["write_latency"] == [0, 6, 6, 6, 6, 6, 6, 6, -1]
    assert c["read"][0] == {"taps": 10, "bitslip": 5, "tap": 16, "offsets": [0, 0, 0, -2, 0, 0, 0, 0]}
    assert c["seconds"] == 6.0 and c["scan_start"] == 7
    assert c["pass_maps"][0] == "##.#" + "." * 52 and len(c["pass_maps"]) == M.LANES
    assert decode([0] * M.MBOX_WORDS) is None
