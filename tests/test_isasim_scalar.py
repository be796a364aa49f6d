"""Sequencer semantics: LI/ADDI, hardware loops, RLD, run arguments, HALT CHAIN, LD/ST."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from otpu_core import isa
from otpu_core.asm import assemble
from otpu_core.isasim import HALTED, Machine, SimError


def run(text, **kw):
    m = Machine("sim-small", **kw)
    m.load(assemble(text) if isinstance(text, str) else text, kw.pop("args", None))
    return m.run()


def test_nested_loops_count_and_step_registers():
    # reference 8.1 test 2: 3 outer x 4 inner iterations
    m = run("""
        loop body=@outer_end count=3
        loop body=@inner_end count=4
        vop.add dst=0 a=0 rows=1 cols=1 bmode=scalar imm=1.0
        addi rd=r1 ra=r1 imm=10
        inner_end: addi rd=r2 ra=r2 imm=10
        outer_end: halt
    """)
    assert m.read_tmem(0, 1).view(np.float32)[0] == 12.0
    assert m.slice.regs[1] == 120 and m.slice.regs[2] == 30
    assert m.counters()["ICOUNT"] == 1 + 3 * (1 + 4 * 2 + 1) + 1   # outer LOOP once, 3 x (LOOP, 4 x 2, ADDI), HALT


def test_zero_count_loop_skips_its_body_and_count_register_is_added():
    m = run("""
        li rd=r3 imm=5
        loop body=@end count=r3+0xFFFFFFFB
        addi rd=r1 ra=r1 imm=1
        end: loop body=@end2 count=r3+1
        addi rd=r2 ra=r2 imm=1
        end2: halt
    """)
    assert m.slice.regs[1] == 0     # count (5 - 5) = 0: skipped
    assert m.slice.regs[2] == 6     # count R3 + 1


def test_register_arithmetic_wraps_and_r0_stays_zero():
    m = run("""
        li rd=r0 imm=7
        li rd=r1 imm=0xFFFFFFFF
        addi rd=r2 ra=r1 imm=2
        addi rd=r0 ra=r1 imm=1
        halt
    """)
    assert m.slice.regs[0] == 0 and m.slice.regs[1] == 0xFFFFFFFF and m.slice.regs[2] == 1


def test_arguments_start_in_r8_to_r15_and_persist_across_runs():
    m = Machine("sim-small")
    m.load(assemble("addi rd=r1 ra=r8 imm=1\naddi rd=r2 ra=r15 imm=0\nhalt"), [10, 0, 0, 0, 0, 0, 0, 77])
    m.run()
    assert m.slice.regs[1] == 11 and m.slice.regs[2] == 77 and m.slice.regs[8] == 10
    m.load(assemble("addi rd=r3 ra=r15 imm=1\nhalt"))      # no args given: the previous ones stay
    m.run()
    assert m.slice.regs[3] == 78 and m.slice.regs[1] == 0


@pytest.mark.parametrize("value,expect", [(3.99, 3), (-3.99, (-3) & 0xFFFFFFFF), (0.5, 0), (2.0 ** 31, 0x80000000),
                                          (float("inf"), 0x80000000), (1e-40, 0), (123456.0, 123456)])
def test_rld_converts_fp32_by_truncation(value, expect):
    m = Machine("sim-small")
    m.write_tmem(40, np.array([value], np.float32))
    m.load(assemble("rld rd=r1 addr=40\nhalt"))
    m.run()
    assert m.slice.regs[1] == expect


def test_rld_raw_and_mul_scale_a_token_to_a_byte_offset():
    m = Machine("sim-small")
    m.write_tmem(41, np.array([0x12345678], np.uint32))
    m.write_tmem(42, np.array([151000.0], np.float32))
    m.load(assemble("""
        rld rd=r1 addr=41 raw
        li rd=r4 imm=9000
        rld rd=r2 addr=42 factor=r4+344 mul
        halt
    """))
    m.run()
    assert m.slice.regs[1] == 0x12345678
    assert m.slice.regs[2] == (151000 * 9344) % (1 << 32)     # beyond 24 bits, wrapped mod 2^32


def test_ld_st_copy_raw_bits_register_relative():
    m = Machine("sim-small")
    data = np.array([0x7F800001, 0x00000001, 0x80000000, 0xDEADBEEF], np.uint32)   # NaN payload, denormal: raw
    m.write_dram(0x400, data)
    m.load(assemble("li rd=r1 imm=0x300\nli rd=r2 imm=8\nld dram=r1+0x100 tmem=r2+2 n=4\n"
                    "st dram=r1+0x500 tmem=r2+2 n=4\nhalt"))
    m.run()
    assert np.array_equal(m.read_tmem(10, 4), data)
    assert np.array_equal(m.read_dram(0x800, 16).view(np.uint32), data)


def test_halt_chain_keeps_tmem_dram_and_arguments():
    m = Machine("sim-small")
    second = isa.encode_program(assemble("""
        ld dram=r8 tmem=100 n=1
        addi rd=r5 ra=r9 imm=0
        vop.add dst=101 a=0 rows=1 cols=1 bmode=scalar imm=1.0
        halt
    """))
    m.write_dram(0x2000, second)
    m.write_dram(0x40, np.array([0xCAFEF00D], np.uint32))
    m.load(assemble("""
        li rd=r1 imm=0x2000
        li rd=r2 imm=4
        vop.fill dst=0 rows=1 cols=1 bmode=scalar imm=41.0
        li rd=r9 imm=12345
        halt chain ra=r1 rb=r2
    """), [0x40, 7])
    m.run()
    sl = m.slice
    assert sl.chains == 1 and sl.state == HALTED
    assert m.read_tmem(100, 1)[0] == 0xCAFEF00D             # DRAM kept, ARG0 still 0x40
    assert sl.regs[5] == 7                                   # registers reset to the args (r9 = ARG1)
    assert m.read_tmem(101, 1).view(np.float32)[0] == 42.0   # TMEM kept


def test_step_and_run_for_yield_and_on_step_sees_every_instruction():
    m = Machine("sim-small")
    m.load(assemble("loop body=@e count=100\naddi rd=r1 ra=r1 imm=1\ne: halt"))
    seen = []
    m.on_step = lambda sl, pc, ins: seen.append(pc)
    assert m.step() == (0, 0, m.slice.prog[0])
    assert m.run_for(10) != HALTED and m.slice.regs[1] == 10
    assert m.run_for(1000) == HALTED and m.slice.regs[1] == 100
    assert len(seen) == 102 and seen[0] == 0 and seen[-1] == 2
    assert m.step() is None


def test_sparse_memmap_dram_of_4_gib_costs_only_what_is_touched(tmp_path):
    path = tmp_path / "dram.bin"
    with open(path, "wb") as f:
        f.truncate(1 << 32)
    mem = np.memmap(path, np.uint8, mode="r+", shape=(1 << 32,))
    m = Machine("ypcb-00338", drams=[mem])
    m.write_tmem(0, np.array([1.5], np.float32))
    m.load(assemble("li rd=r1 imm=0xFFFFFF00\nst dram=r1+0xFC tmem=0 n=1\nhalt"))
    m.run()
    del mem
    assert np.fromfile(path, np.uint32, count=1, offset=(1 << 32) - 4)[0] == 0x3FC00000
    assert path.stat().st_blocks * 512 < 1 << 20            # sparse: a page or so, not 4 GiB


def test_program_larger_than_imem_is_refused():
    m = Machine("sim-small")
    with pytest.raises(SimError, match="does not fit IMEM"):
        m.load([isa.nop()] * (m.cfg.imem_instrs + 1))


@pytest.mark.parametrize("name", ["ypcb-00338", "bcu1525", "nangate45-small", "nangate45-card", "sim-small"])
def test_every_target_builds_a_machine_with_sparse_dram(name):
    import resource
    m = Machine(name)
    top = min(m.cfg.DRAM_BYTES, 1 << 32) - 4          # addresses are 32-bit register sums
    m.load(assemble(f"li rd=r1 imm={top}\nvop.fill dst=0 rows=1 cols=1 bmode=scalar imm=2.5\n"
                    "st dram=r1 tmem=0 n=1\nhalt"))
    m.run()
    assert all(m.read_dram(top, 4, sid=s).view(np.float32)[0] == 2.5 for s in range(m.cfg.S))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 << 20       # KiB: far below the DRAM sizes


def _emit(tree):
    """Instructions of a tree; every loop body ends with its own NOP so no two bodies end together."""
    out = []
    for node in tree:
        if node[0] == "addi":
            out.append(isa.addi(rd=node[1], ra=node[1], imm=node[2]))
        else:
            body = _emit(node[2]) + [isa.nop()]
            out.append(isa.loop(body=len(body), count=node[1]))
            out += body
    return out


def _interpret(tree, regs, steps):
    for node in tree:
        if node[0] == "addi":
            regs[node[1]] = (regs[node[1]] + node[2]) & 0xFFFFFFFF
            steps[0] += 1
        else:
            steps[0] += 1                       # the LOOP itself
            for _ in range(node[1]):
                _interpret(node[2], regs, steps)
                steps[0] += 1                   # the body's NOP


# random loop nests as trees: ('addi', r, imm) leaves and ('loop', count, body) nodes
_leaf = st.tuples(st.just("addi"), st.integers(1, 7), st.integers(0, 0xFFFFFFFF))
_tree = st.recursive(st.lists(_leaf, min_size=1, max_size=3),
                     lambda inner: st.lists(st.one_of(_leaf, st.tuples(st.just("loop"), st.integers(0, 3), inner)),
                                            min_size=1, max_size=3), max_leaves=12)


def _depth(tree):
    return max([0] + [1 + _depth(n[2]) for n in tree if n[0] == "loop"])


@settings(max_examples=60, deadline=None)
@given(_tree)
def test_random_loop_nests_match_a_structured_interpreter(tree):
    if _depth(tree) > 4:
        return
    m = Machine("sim-small", timing=False)
    m.load(_emit(tree) + [isa.halt()])
    m.run()
    regs, steps = [0] * 16, [0]
    _interpret(tree, regs, steps)
    assert m.slice.regs[:8] == regs[:8] and m.slice.icount == steps[0] + 1
