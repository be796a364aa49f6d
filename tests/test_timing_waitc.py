"""WAITC on a SEQ_WC target: wait entries replace the scoreboard in the timing model, results
stay the in-order ones, and an entry too weak for a real dependency is refused."""
import numpy as np
import pytest

from otpu_core import isa
from otpu_core.asm import parse
from otpu_core.isasim import Machine, SimError

TARGET = "nangate45-small"          # SEQ_WC = true
PROG = """
ld dram=0 tmem=0 n=64                                                   {w0}
vop.mul dst=100 a=0 rows=1 cols=64 drs=64 ars=64 bmode=scalar imm=2.0   {w1}
ld dram=0x400 tmem=0 n=64                                               {w2}
halt
"""


def run(w0="", w1="", w2="", log=True):
    m = Machine(TARGET)
    m.timing.keep_log = log
    m.write_dram(0, np.arange(64, dtype=np.float32))
    m.write_dram(0x400, np.full(64, 7, np.float32))
    m.load(PROG.format(w0=w0, w1=w1, w2=w2))
    m.run()
    return m


def test_correct_entries_schedule_like_the_dependencies_say():
    m = run(w1="! ld=0", w2="! mask=0x1")
    assert np.array_equal(m.read_tmem(100, 64).view(np.float32), 2 * np.arange(64, dtype=np.float32))
    assert np.array_equal(m.read_tmem(0, 64).view(np.float32), np.full(64, 7, np.float32))
    (_, _, _, _, _, ld_end), (_, _, _, _, mul_s, mul_e), (_, _, _, _, ld2_s, _) = m.timing.log
    assert mul_s >= ld_end                      # count ld=0: the LD has completed
    assert m.slice.waits is not None and m.slice.waits[1].counts[isa.Queue.LD] == 0


def test_a_missing_raw_wait_is_a_hazard():
    with pytest.raises(SimError) as ei:
        run(w2="! mask=0x1")
    e = ei.value
    assert e.kind == "hazard" and e.pc == 1 and "before the conflicting instruction at pc 0 completes" in e.reason


def test_a_missing_war_wait_is_a_hazard():
    with pytest.raises(SimError) as ei:
        run(w1="! ld=0")
    e = ei.value
    assert e.kind == "hazard" and e.pc == 2 and "before the instruction at pc 1 has read its operands" in e.reason


def test_sync_drains_everything():
    m = run(w1="! sync", w2="! sync")
    ends = [e for *_, e in m.timing.log]
    starts = [s for *_, s, _ in m.timing.log]
    assert starts[1] >= ends[0] and starts[2] >= ends[1]


def test_without_a_table_the_scoreboard_orders_and_a_chain_reads_the_table_after_the_program():
    m = run()                                           # no entries: scoreboard
    assert m.slice.waits is None and np.array_equal(m.read_tmem(100, 2).view(np.float32), [0.0, 2.0])
    chained = parse(PROG.format(w0="", w1="! ld=0", w2="! mask=1"))
    image = isa.encode_program(chained.instrs, [w or isa.NO_WAIT for w in chained.waits])
    m = Machine(TARGET)
    m.write_dram(0x1000, image)
    m.load("li rd=r1 imm=0x1000\nli rd=r2 imm=4\nhalt chain ra=r1 rb=r2")
    m.run()
    assert m.slice.chains == 1 and m.slice.waits[1].counts[isa.Queue.LD] == 0
