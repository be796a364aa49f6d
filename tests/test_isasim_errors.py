"""Bad programs: every SimError kind is reached; the message names slice, pc, disassembly and reason."""
import numpy as np
import pytest

from otpu_core import isa
from otpu_core.asm import assemble, disasm_one
from otpu_core.errors import UsageError
from otpu_core.isasim import Machine, SimError
from otpu_core.sim.fault import KINDS


def fails(program, kind, reason, pc, target="sim-small", args=None, setup=None, **kw):
    m = Machine(target, **kw)
    prog = assemble(program) if isinstance(program, str) else program
    if setup:
        setup(m)
    m.load(prog, args)
    with pytest.raises(SimError) as ei:
        m.run()
    e = ei.value
    assert isinstance(e, UsageError) and e.exit_code == 2
    assert e.kind == kind, e.message
    assert reason in e.reason, e.reason
    assert e.slice_id == 0 and e.pc == pc
    text = disasm_one(m.slice.prog[pc]) if pc < len(m.slice.prog) else None
    assert e.message.startswith(f"slice 0, pc {pc}")
    if text:
        assert f"({text})" in e.message
    assert e.message.endswith(e.reason)
    return e


def test_every_kind_has_a_test():
    tested = {"illegal-opcode", "out-of-range", "misaligned", "loop-depth", "loop-end", "waitw-timeout",
              "hazard", "shape", "collective", "program-end", "step-limit", "chain"}
    assert tested == set(KINDS)


def test_illegal_opcode_in_a_chained_program():
    def setup(m):
        m.write_dram(0x1000, np.array([0x000000EE] + [0] * 7, np.uint32))   # opcode 0xEE does not exist
    e = fails("li rd=r1 imm=0x1000\nli rd=r2 imm=1\nhalt chain ra=r1 rb=r2", "illegal-opcode",
              "unknown opcode 0xee", pc=2, setup=setup)
    assert "HALT CHAIN program at 0x1000" in e.reason


def test_illegal_opcode_for_a_feature_the_target_lacks():
    # ypcb-00338 has no DSTEP (arch DSTEP = false)
    fails([isa.dstep(state=0, qk=0, v=0, rows=1, cols=64), isa.halt()], "illegal-opcode", "DSTEP is not built",
          pc=0, target="ypcb-00338")


def test_tmem_out_of_range():
    fails("li rd=r1 imm=16380\nld dram=0 tmem=r1 n=8\nhalt", "out-of-range", "TMEM words [16380, 16388)", pc=1)


def test_dram_out_of_range_register_relative():
    fails("li rd=r1 imm=0xFFFFFF0\nst dram=r1+0x10 tmem=0 n=4\nhalt", "out-of-range", "DRAM bytes [0x10000000", pc=1)


def test_misaligned_dram_word():
    fails("ld dram=2 tmem=0 n=1\nhalt", "misaligned", "DRAM address 0x2 is not a multiple of 4", pc=0)


def test_misaligned_mm_rows():
    fails([isa.mm(sa=16, n=1, kb=1, m=1, unit=1), isa.halt()], "misaligned", "multiples of D=32", pc=0)


def test_loop_too_deep():
    text = "\n".join(f"loop body=@e{i} count=2" for i in range(5)) + "\nnop\n" + \
        "\n".join(f"e{4 - i}: nop" for i in range(5)) + "\nhalt"
    fails(text, "loop-depth", "nest at most 4 deep", pc=4)


def test_nested_bodies_ending_together_are_refused_even_with_count_zero():
    fails("loop body=@end count=2\nloop body=@end count=0\nnop\nend: halt", "loop-end",
          "end on the same instruction", pc=1)


def test_waitw_timeout_without_host():
    fails("waitw addr=0x100 dst=0 ref=1\nhalt", "waitw-timeout", "never satisfied", pc=0)


def test_waitw_cycle_timeout_field():
    calls = []

    def setup(m):
        m.host = lambda m: calls.append(1)
        m.host_patience = 100
    fails("waitw addr=0x100 dst=0 ref=1 interval=10 timeout=30\nhalt", "waitw-timeout", "timed out after 3 polls",
          pc=0, setup=setup)
    assert len(calls) == 2          # polls 1 and 2 hand over to the host; poll 3 reaches 30 cycles


def test_vop_read_after_write_hazard():
    # row r writes dst + r, which row r+1 reads as A: an earlier element wrote it
    fails("vop.add dst=1 a=0 rows=4 cols=1 drs=1 ars=1 bmode=scalar imm=1.0\nhalt", "hazard",
          "TMEM word 1 is read after an earlier element", pc=0)


def test_mm_needs_n_and_kb():
    words = list(isa.mm(n=1, kb=1, m=1, unit=1).words)
    words[4] = 1 << 16          # N = 0, KB = 1
    fails([isa.Instr(tuple(words)), isa.halt()], "shape", "N and KB must be at least 1", pc=0)


def test_argmax_rows_need_pair_stride():
    fails("vop.argmax dst=100 a=0 rows=2 cols=4 drs=1 ars=4\nhalt", "shape", "drs >= 2", pc=0)


def test_collective_with_a_halted_slice():
    m = Machine("sim-small", cfg=Machine("sim-small").cfg.replace(S=2))
    m.load([assemble("bar\nhalt"), assemble("halt")])
    with pytest.raises(SimError) as ei:
        m.run()
    assert ei.value.kind == "collective" and "halted slice" in ei.value.reason and ei.value.pc == 0


def test_running_past_the_end():
    e = fails("nop\nnop", "program-end", "ran past the end of the program (2 instructions)", pc=1)
    assert "without HALT" in e.message


def test_step_limit():
    fails("loop body=@e count=0xFFFFFFFF\nnop\ne: halt", "step-limit", "more than 500 instructions", pc=1,
          max_steps=500)


def test_chain_with_a_bad_length():
    fails("li rd=r1 imm=0x1000\nhalt chain ra=r1 rb=r0", "chain", "program length 0", pc=1)


def test_an_image_with_an_illegal_opcode_is_refused_at_load():
    image = isa.encode_program(assemble("nop\nnop")) + np.array([0xEE] + [0] * 7, np.uint32).tobytes()
    with pytest.raises(SimError) as ei:
        Machine("sim-small").load(image)
    assert ei.value.kind == "illegal-opcode" and "instruction 2, word 0: unknown opcode 0xee" in ei.value.message
