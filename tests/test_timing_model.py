"""The timing model: DRAM-bound MM cycles, unit overlap under the scoreboard, rates, counters
that only grow and stay consistent, and trace records in the card's format."""
import math

import numpy as np
import pytest

from otpu_core import isa, tracefmt
from otpu_core.asm import assemble
from otpu_core.isasim import HALTED, Machine
from otpu_core.target import load


def logged(target="sim-small", **kw):
    m = Machine(target, **kw)
    m.timing.keep_log = True
    return m


@pytest.mark.parametrize("unit", [True, False])
def test_mm_streaming_n_bytes_is_dram_bound_on_ypcb(unit):
    t = load("ypcb-00338")
    bpc = t.uarch.DRAM_BYTES_PER_CYCLE * t.uarch.DRAM_EFFICIENCY
    n, kb = 4096, 8                                   # 4096 x 1024 int8 weights
    m = Machine(t)
    prog = [isa.mm(sa=0, ssa=1 << 24, out=0, n=n, kb=kb, rs=kb * 128, srs=4 * kb, m=1, ors=n, unit=int(unit)),
            isa.halt()]
    m.load(prog)
    m.run()
    nbytes = n * kb * 128 + (0 if unit else 4 * n * kb)
    cycles = m.counters()["CYCLES"]
    expect = nbytes / bpc
    assert abs(cycles - expect) / expect < 0.05, (cycles, expect)
    c = m.counters()
    assert c["DRAM_RD"] == math.ceil(n * kb * 128 / 64) + (0 if unit else math.ceil(4 * n * kb / 64)) + 1  # + program
    assert c["MXU_MAC"] == n * kb and c["MXU_STARVE"] > 0.9 * (cycles - n * kb)


def test_mm_beyond_mcols_replays_each_chunk():
    m = logged("ypcb-00338", cfg=load("ypcb-00338").config().replace(ACT_ROWS=16))
    n, kb = 512, 8
    m.load([isa.mm(sa=0, out=0, n=n, kb=kb, rs=kb * 128, m=16, ors=n, unit=1), isa.halt()])
    m.run()
    _, _, _, d, start, end = m.timing.log[0]
    steps = n * kb * 4                                 # ceil(16 / MCOLS=4) cycles per chunk: compute-bound
    assert steps <= end - start <= steps + 50
    assert m.counters()["MXU_MAC"] == steps


def test_independent_units_overlap_and_dependent_ones_wait():
    m = logged()
    m.load(assemble("""
        ld dram=0 tmem=0 n=4096
        vop.exp2 dst=8000 a=6000 rows=16 cols=64 drs=64 ars=64
        vop.add dst=12000 a=0 rows=1 cols=64 drs=64 ars=64 bmode=scalar imm=1.0
        halt
    """))
    m.run()
    (_, _, _, _, ld_s, ld_e), (_, _, _, _, ex_s, ex_e), (_, _, _, _, add_s, add_e) = m.timing.log
    assert ex_s < ld_e                                # the VPU runs while the DMA loads
    assert add_s >= ld_e and add_s >= ex_e            # RAW on TMEM [0, 64) and the VPU in order
    assert m.counters()["CYCLES"] < (ld_e - ld_s) + (ex_e - ex_s) + (add_e - add_s)


def test_vpu_rates_elementwise_lanes_composites_long_lanes():
    m = logged()
    ua, cfg = m.target.uarch, m.cfg
    m.load(assemble("""
        vop.mul dst=4000 a=0 rows=32 cols=64 drs=64 ars=64 bmode=scalar imm=2.0
        vop.recip dst=8000 a=0 rows=32 cols=64 drs=64 ars=64
        halt
    """))
    m.run()
    (_, _, _, _, s1, e1), (_, _, _, _, s2, e2) = m.timing.log
    n = 32 * 64
    assert (e1 - s1) - n // cfg.LANES == (e2 - s2) - n // ua.COMPOSITE_COLS_PER_CYCLE   # same pipeline latency


def test_vt_append_costs_per_byte():
    m = logged()
    d = m.cfg.D
    m.load([isa.qst(src=0, dst=0x1000, sdst=0x100000, rows=1, kb=2, srs=2 * d, drs=1, es=256, row=1),
            isa.qst(src=0, dst=0x2000, sdst=0x100100, rows=1, kb=2, srs=2 * d, drs=2 * d, es=1), isa.halt()])
    m.run()
    (_, _, _, _, s1, e1), (_, _, _, _, s2, e2) = m.timing.log
    append = 2 * d * m.target.uarch.VT_APPEND_CYCLES       # 64 bytes, one read-modify-write each
    assert append <= e1 - s1 <= append + 20 and e2 - s2 < append / 8


def test_counters_only_grow_and_busy_never_exceeds_cycles():
    m = Machine("sim-small")
    m.load(assemble("""
        loop body=@e count=40
        ld dram=0 tmem=0 n=256
        vop.rsum dst=4000 a=0 rows=4 cols=64 drs=1 ars=64
        qact src=0 rows=4 ab=0 kb=2 srs=64
        mm sa=0 out=5000 n=64 kb=2 rs=64 m=4 ors=65 unit
        st dram=0x8000 tmem=4000 n=4
        e: halt
    """))
    last = None
    while True:
        state = m.run_for(7)
        c = m.counters()
        if last is not None:
            assert all(c[k] >= last[k] for k in c), [k for k in c if c[k] < last[k]]
        for k in ("DMA_BUSY", "MXU_BUSY", "VPU_BUSY", "QNT_BUSY", "COLL_BUSY", "MXU_STARVE"):
            assert c[k] <= c["CYCLES"], k
        assert c["RUNNING"] == c["CYCLES"] and c["ICOUNT"] == m.steps
        last = c
        if state == HALTED:
            break
    assert c["ICOUNT"] == 1 + 40 * 5 + 1
    assert c["B_RD"] == 40 * (256 * 4 // 64 + 64 * 64 // 64) and c["B_WR"] == 40


def test_a_new_run_restarts_run_counters_and_free_running_ones_continue():
    m = Machine("sim-small")
    m.load(assemble("ld dram=0 tmem=0 n=512\nhalt"))
    m.run()
    first = m.counters()
    m.load(assemble("nop\nhalt"))
    m.run()
    second = m.counters()
    assert second["CYCLES"] < first["CYCLES"] and second["ICOUNT"] == 2
    assert second["DMA_BUSY"] == first["DMA_BUSY"] and second["RUNNING"] == first["RUNNING"] + second["CYCLES"]


def test_trace_records_decode_to_the_schedule():
    m = logged(trace=True)
    m.load(assemble("""
        li rd=r1 imm=64
        ld dram=0 tmem=r1 n=64
        qact src=64 rows=1 ab=0 kb=2 srs=64
        mm sa=0 out=1000 n=32 kb=2 rs=64 m=1 ors=32 unit
        halt
    """))
    m.run()
    recs = m.trace_records()
    events = tracefmt.unpack(recs)
    d = [e for e in events if e["type"] == "D"]
    s = [e for e in events if e["type"] == "S"]
    units = [(e["unit"]) for e in s]
    assert [e["pc"] for e in d] == [1, 2, 3] and [e["op"] for e in d] == [0x10, 0x21, 0x20]
    assert d[0]["w1"] == 0 and d[0]["w2"] == 64 and d[0]["w3"] == 64          # resolved words
    assert sorted(units) == [0, 1, 2]
    log = {pc: (disp, st, en) for _, pc, _, disp, st, en in m.timing.log}
    for e in d:
        assert e["cycle"] == log[e["pc"]][0]
    assert [e["type"] for e in events].count("G") == 1
    h = [e for e in events if e["type"] == "H"]
    assert len(h) == 1 and h[0]["cycle"] + 1 == m.counters()["CYCLES"]
    cycles = [e["cycle"] for e in events]
    assert cycles == sorted(cycles)
    lines = tracefmt.to_lines(recs)
    assert lines[0].startswith("T0 D c=") and "op=0x10 w1=0x0 w2=0x40 w3=0x40" in lines[0]


def test_record_packing_round_trips_and_cut_groups_are_skipped():
    recs = (tracefmt.dispatch(5, 3, 17, 0x20, 0xDEADBEEF, 0x12345678, 0xFFFFFFFF)
            + tracefmt.start(70000, 3, 1, 10) + tracefmt.unit_counters(80000, 1, (1, 2, 3, 4))
            + tracefmt.halt(90000, (5, 6, 7, 8)))
    ev = tracefmt.unpack(recs)
    assert ev[0] == {"type": "D", "cycle": 5, "slot": 3, "pc": 17, "op": 0x20, "w1": 0xDEADBEEF,
                     "w2": 0x12345678, "w3": 0xFFFFFFFF}
    assert ev[1]["ready"] == 10 and ev[1]["unit"] == 1          # delay overflowed: an R record follows
    assert ev[2] == {"type": "U", "cycle": 80000, "unit": 1, "starve": 1, "bp": 2, "frz": 3, "deny": 4}
    assert ev[3]["bmxu"] == 5 and ev[3]["aq"] == 8
    assert [e["type"] for e in tracefmt.unpack(recs[1:])] == ["S", "U", "H"]   # D lost its head: O's skipped
    ring = np.array(recs, dtype=np.uint64)
    assert np.array_equal(tracefmt.ring_order(np.roll(ring, 3), len(recs) + 8, len(recs))[:2], ring[5:7])


def test_activity_windows_add_up_to_the_counters():
    m = Machine("ypcb-00338", trace=True)
    m.load([isa.ld(dram=1 << 20, tmem=0, n=2048),
            isa.mm(sa=0, out=4096, n=1024, kb=8, rs=1024, m=1, ors=1024, unit=1), isa.halt()])
    m.run()
    c = m.counters()
    ev = tracefmt.unpack(m.trace_records())
    p = [e for e in ev if e["type"] == "P"]
    q = [e for e in ev if e["type"] == "Q"]
    assert len(p) == len(q) == math.ceil(c["CYCLES"] / 1024)
    assert sum(e["n"] for e in p) == c["CYCLES"] and all(e["n"] == 1024 for e in p[:-1])
    assert p[-1]["cycle"] == c["CYCLES"] - 1 and ev[-1]["type"] == "Q"
    assert abs(sum(e["mx"] for e in p) - c["MXU_MAC"]) <= len(p)              # rounding per window
    assert abs(sum(e["ms"] for e in q) - c["MXU_STARVE"]) <= len(q)
    bytes_per_cycle = 128 * 0.88
    port_b = sum(e["bm"] + e["bd"] for e in p)
    assert abs(port_b - (1024 * 1024 + 4 * 2048) / bytes_per_cycle) <= len(p) + 2


def test_activity_integral_matches_a_cycle_by_cycle_count():
    from otpu_core.sim.activity import Activity
    rng = np.random.default_rng(1)
    act = Activity()
    spans = [(int(a), int(a + n), float(w)) for a, n, w in zip(rng.integers(0, 5000, 40), rng.integers(1, 900, 40),
                                                                 rng.uniform(0.1, 1, 40))]
    for lo, hi, w in spans:
        act.add("bm", lo, hi, w)
    ends, counts = act.windows(0, 6000, 1000)
    per_cycle = np.zeros(6000)
    for lo, hi, w in spans:
        per_cycle[lo:hi] += w
    assert np.array_equal(ends, [1000, 2000, 3000, 4000, 5000, 6000])
    assert np.array_equal(counts[:, 0], np.rint(per_cycle.reshape(6, 1000).sum(1)).astype(np.int64))


def test_bar_lines_slices_up_and_holds_back_younger_instructions():
    m = logged(cfg=load("sim-small").config().replace(S=2))
    m.load([assemble("bar\nvop.fill dst=0 rows=1 cols=8 bmode=scalar imm=1.0\nhalt"),
            assemble("ld dram=0 tmem=0 n=4096\nbar\nhalt")])
    m.run()
    log = {(sid, pc): (st, en) for sid, pc, _, _, st, en in m.timing.log}
    ld_end = log[(1, 0)][1]
    bar0, bar1 = log[(0, 0)], log[(1, 1)]
    assert bar0[0] == bar1[0] >= ld_end              # both slices start the BAR together, after the LD
    assert log[(0, 1)][0] >= bar0[1]                 # the fill waits for the BAR
