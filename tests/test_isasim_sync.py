"""WAITW with the host callback, BAR and GATHER across slices."""
import numpy as np
import pytest

from otpu_core import isa
from otpu_core.asm import assemble
from otpu_core.isasim import HALTED, POLLING, Machine, SimError


def two_slices(**kw):
    return Machine("sim-small", cfg=Machine("sim-small").cfg.replace(S=2), **kw)


def test_waitw_that_holds_at_once_never_calls_the_host():
    calls = []
    m = Machine("sim-small", host=lambda m: calls.append(1))
    m.write_dram(0x100, np.array([5], np.uint32))
    m.load(assemble("waitw addr=0x100 dst=3 ref=5\nhalt"))
    m.run()
    assert calls == [] and m.read_tmem(3, 1)[0] == 5 and m.slice.stalls == 0


def test_waitw_waits_calls_the_host_once_and_rld_raw_copies_the_word():
    calls = []

    def host(m):
        calls.append(m.slice.pc)
        m.write_dram(0x100, np.array([0x40490FDB], np.uint32))
    m = Machine("sim-small", host=host)
    m.load(assemble("waitw addr=0x100 dst=3 ref=0 cmp=ne\nrld rd=r1 addr=3 raw\nhalt"))
    m.run()
    assert calls == [0] and m.slice.stalls == 1
    assert m.read_tmem(3, 1)[0] == 0x40490FDB and m.slice.regs[1] == 0x40490FDB


@pytest.mark.parametrize("word,ref,cmp,mask,holds", [
    (1, 0xFFFFFFFF, "ge", 0xFFFFFFFF, True),            # difference 2
    (0x7FFFFFFF, 0x80000001, "ge", 0xFFFFFFFF, False),   # difference -2: signed
    (0x1234FF00, 0xFF00, "eq", 0xFFFF, True),            # the mask applies before the compare
    (0x1234FF00, 0x1234FF00, "eq", 0xFFFF, False),
    (7, 7, "ne", 0xFFFFFFFF, False),
])
def test_waitw_compares(word, ref, cmp, mask, holds):
    m = Machine("sim-small")
    m.write_dram(0x40, np.array([word], np.uint32))
    m.load([isa.waitw(addr=0x40, dst=0, ref=ref, cmp=cmp, mask=mask), isa.halt()])
    if holds:
        m.run()
        assert m.read_tmem(0, 1)[0] == word
    else:
        with pytest.raises(SimError, match="WAITW timed out"):
            m.run()


def test_host_acts_only_when_no_slice_can_run():
    seen = []

    def host(m):
        seen.append([s.state for s in m.slices])
        m.write_dram(0x80, np.array([1], np.uint32), sid=0)
    m = two_slices(host=host)
    m.load([assemble("waitw addr=0x80 dst=0 ref=1\nhalt"),
            assemble("loop body=@e count=200\naddi rd=r1 ra=r1 imm=1\ne: halt")])
    m.run()
    assert seen == [["polling", "halted"]] and m.slices[1].regs[1] == 200


def test_waiting_for_a_host_in_another_process_returns_polling():
    m = Machine("sim-small")
    m.wait_for_host = True
    m.load(assemble("waitw addr=0x80 dst=0 ref=9\nhalt"))
    assert m.run_for(100) == POLLING and m.run_for(100) == POLLING
    m.write_dram(0x80, np.array([9], np.uint32))        # the other process writes the flag
    assert m.run_for(100) == HALTED and m.read_tmem(0, 1)[0] == 9


def test_bar_waits_for_every_slice():
    m = two_slices()
    m.load([assemble("li rd=r1 imm=1\nbar\nli rd=r2 imm=2\nhalt"),
            assemble("loop body=@e count=50\nnop\ne: bar\nhalt")])
    order = []
    m.on_step = lambda sl, pc, ins: order.append((sl.sid, ins.op))
    m.run()
    bars = [i for i, (_, op) in enumerate(order) if op == isa.Op.BAR]
    after = [i for i, (s, op) in enumerate(order) if s == 0 and op == isa.Op.LI and i > bars[0]]
    loop_nops = [i for i, (s, op) in enumerate(order) if s == 1 and op == isa.Op.NOP]
    assert len(bars) == 2 and max(loop_nops) < min(bars) and after and after[0] > max(bars)
    assert m.slices[0].regs[2] == 2


def test_gather_concatenates_every_slice_tile_into_every_slice():
    m = two_slices()
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    m.write_tmem(0, a, sid=0)
    m.write_tmem(0, a + 100, sid=1)
    prog = [isa.gather(src=0, dst=1000, rows=3, cols=4, srs=4, drs=8, seg=4), isa.halt()]
    m.load(prog)
    m.run()
    want = np.concatenate([a, a + 100], axis=1)             # [3, 8] with seg = cols
    for s in (0, 1):
        got = m.read_tmem(1000, 24, sid=s).view(np.float32).reshape(3, 8)
        assert np.array_equal(got, want)


def test_gather_slices_must_agree_on_the_resolved_destination():
    m = two_slices()
    m.load([assemble("li rd=r2 imm=1000\ngather src=0 dst=r2 rows=1 cols=4 srs=4 drs=8 seg=4\nhalt"),
            assemble("gather src=0 dst=1000 rows=1 cols=4 srs=4 drs=8 seg=4\nhalt")])
    m.run()     # equal resolved addresses agree, whichever register made them
    m.load([assemble("li rd=r2 imm=1000\ngather src=0 dst=r2 rows=1 cols=4 srs=4 drs=8 seg=4\nhalt"),
            assemble("gather src=0 dst=1008 rows=1 cols=4 srs=4 drs=8 seg=4\nhalt")])
    with pytest.raises(SimError, match="disagree"):
        m.run()


def test_slices_disagreeing_on_the_collective_opcode():
    m = two_slices()
    m.load([assemble("bar\nhalt"), assemble("gather src=0 dst=100 rows=1 cols=1 srs=1 drs=1 seg=1\nhalt")])
    with pytest.raises(SimError, match="disagree on the collective"):
        m.run()


def test_gather_source_and_destination_must_not_overlap():
    m = two_slices()
    m.load([isa.gather(src=0, dst=2, rows=1, cols=4, srs=4, drs=8, seg=4), isa.halt()])
    with pytest.raises(SimError, match="overlap"):
        m.run()
