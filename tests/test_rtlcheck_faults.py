"""rtlcheck's fault verdict and RtlFault's message, without Verilator: every RTL error code stands
for golden fault kinds that exist; a comparison agrees only on the same pc and a kind the RTL's
code stands for; RtlFault names the pc and the instruction's disassembly as SimError does (not
when the program chains, whose pc may be in another program)."""
from otpu_core import asm, rtlbackend
from otpu_core.isasim import SimError
from otpu_core.rtlbackend import RtlFault
from otpu_core.rtlcheck import RTL_KINDS, Comparison
from otpu_core.sim.fault import KINDS

PROG = asm.parse("ld dram=0 tmem=0 n=8\nmm sa=0 ssa=0 out=64 n=1 kb=1 rs=32 m=3 ors=8 srs=4 wf=int8\nhalt").instrs


def _cmp(golden: SimError | None, rtl: RtlFault | None) -> Comparison:
    return Comparison(0, 0, None, None, 10, 0, golden, rtl)


def test_every_rtl_error_code_stands_for_golden_kinds():
    assert set(RTL_KINDS) == set(rtlbackend.ERRORS)
    assert all(kinds and kinds <= set(KINDS) for kinds in RTL_KINDS.values())


def test_the_same_fault_needs_the_same_pc_and_a_kind_the_code_stands_for():
    golden = SimError("shape", "m > MCOLS", 0, 1, asm.disasm_one(PROG[1]))
    same = _cmp(golden, RtlFault(4, 1, PROG))
    assert same.same_fault and same.ok and same.message().startswith("the same fault: ")
    assert "pc 1 (mm " in same.message() and same.message().count("(mm ") == 2
    for other in (RtlFault(4, 2, PROG), RtlFault(1, 1, PROG)):     # a later pc; illegal opcode for a shape
        r = _cmp(golden, other)
        assert not r.same_fault and not r.ok and r.message().startswith("the faults differ: ")
    assert not _cmp(golden, None).ok and "the RTL: no fault" in _cmp(golden, None).message()
    assert not _cmp(None, RtlFault(4, 1, PROG)).ok
    assert _cmp(None, None).ok


def test_rtl_fault_names_the_pc_and_the_instruction():
    f = RtlFault(4, 1, PROG)
    assert (f.pc, f.name) == (1, "shape") and f.disasm == asm.disasm_one(PROG[1])
    assert f.message == f"the RTL stopped with an error at pc 1 ({f.disasm}): shape"
    assert RtlFault(9, 7, PROG).disasm is None                    # outside the program
    chained = asm.parse("nop\nhalt chain ra=r1 rb=r2").instrs
    assert RtlFault(1, 0, chained).disasm is None and "at pc 0: illegal opcode" in RtlFault(1, 0, chained).message
