"""Assembler and disassembler: exact round trips under hypothesis, labels, floats, error messages."""
import re

import pytest
from hypothesis import given, settings, strategies as st

from otpu_core import asm, isa
from otpu_core.errors import UsageError


@st.composite
def instrs(draw):
    """A random legal instruction: every field drawn over its whole width (enums over legal values)."""
    lay = isa.LAYOUTS[draw(st.sampled_from(sorted(isa.Op)))]
    kw = {}
    for f in lay.fields:
        if f.kind == "body":    # short bodies land inside the program, so labels are exercised
            kw[f.name] = draw(st.one_of(st.integers(0, 12), st.integers(0, 0xFFFFFFFF)))
        elif f.names is not None:
            kw[f.name] = draw(st.sampled_from(sorted(f.names.values())))
        else:
            kw[f.name] = draw(st.one_of(st.integers(0, (1 << f.width) - 1), st.sampled_from([0, (1 << f.width) - 1])))
    for slot in lay.slots:
        if slot not in lay.by_name:
            kw[slot] = draw(st.integers(0, 15))
    return isa.Instr.make(lay.op, **kw)


waits = st.builds(isa.WaitEntry, st.tuples(*[st.integers(0, 15)] * 7), st.integers(0, (1 << 31) - 1), st.booleans())


@settings(max_examples=400, deadline=None)
@given(st.lists(instrs(), min_size=1, max_size=12))
def test_round_trip_words_identical(prog):
    text = asm.disassemble(prog, pcs=len(prog) % 2 == 1)
    back = asm.assemble(text)
    assert [i.words for i in back] == [i.words for i in prog]
    assert isa.encode_program(back) == isa.encode_program(prog)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(instrs(), waits), min_size=1, max_size=6))
def test_round_trip_with_wait_entries(pairs):
    prog, table = [p for p, _ in pairs], [w for _, w in pairs]
    p = asm.parse(asm.disassemble(prog, table))
    assert p.instrs == prog and p.waits == table


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 0xFFFFFFFF))
def test_scalar_immediates_round_trip_every_bit_pattern(bits):
    v = isa.vop("mul", rows=1, cols=8, bmode="scalar", imm=bits)
    line = asm.disasm_one(v)
    assert asm.assemble(line)[0].words == v.words


def test_float_immediates():
    one = asm.assemble("vop.mul dst=0 a=0 rows=1 cols=8 bmode=scalar imm=1.5")[0]
    assert one["imm"] == 0x3FC00000 and "imm=1.5" in asm.disasm_one(one)
    assert asm.assemble("vop.fill rows=1 cols=1 bmode=scalar imm=-0.0")[0]["imm"] == 0x80000000
    assert asm.assemble("vop.fill rows=1 cols=1 bmode=scalar imm=-inf")[0]["imm"] == 0xFF800000
    assert asm.assemble("vop.fill rows=1 cols=1 bmode=scalar imm=1e-45")[0]["imm"] == 0x00000001
    assert asm.assemble("vop.fill rows=1 cols=1 bmode=scalar imm=0.1")[0]["imm"] == 0x3DCCCCCD
    # a NaN payload is written as its exact bits
    nan = isa.vop("fill", rows=1, cols=1, bmode="scalar", imm=0x7FC00001)
    assert "imm=0x7fc00001" in asm.disasm_one(nan)
    # outside a scalar broadcast the word is an integer (OUTER address, ARGMAX signed base)
    assert "imm=-5" in asm.disasm_one(isa.vop("argmax", rows=1, cols=8, imm=-5))
    assert "imm=768" in asm.disasm_one(isa.vop("outer", rows=1, cols=8, bmode="row", imm=0x300))


def test_loop_labels_mark_the_instruction_after_the_body():
    text = """
        li rd=r1 imm=3          # trip count
        loop count=r1 body=@done
        vop.exp2 dst=16 a=0 rows=1 cols=8
        addi rd=r2 ra=r2 imm=-8
    done:
        halt
    """
    prog = asm.assemble(text)
    assert prog[1]["body"] == 2 and prog[1].rel_regs == ((2, 1),)
    assert prog[3]["imm"] == 0xFFFFFFF8
    out = asm.disassemble(prog)
    assert "loop body=@L4 count=r1" in out and "\nL4:\nhalt" in out
    # a body running to the end of the program labels the end; beyond it stays numeric
    tail = [isa.loop(body=1, count=2), isa.nop(), isa.loop(body=9)]
    listing = asm.disassemble(tail)
    assert listing.endswith("L2:\nloop body=9\n") and asm.assemble(listing) == tail


def test_pc_comments():
    listing = asm.disassemble([isa.nop(), isa.halt()], pcs=True)
    assert listing.splitlines()[1].startswith("halt ") and listing.splitlines()[1].endswith("# pc 1")


def test_shared_register_slot_must_agree():
    ok = asm.assemble("stream src=r1+16 dst=r1+32 out=5")[0]
    assert ok.ra == 1 and ok.resolve([0, 100] + [0] * 14)[2:4] == [116, 132]
    with pytest.raises(asm.AsmError, match="'src' and 'dst' both add register slot ra"):
        asm.assemble("stream src=r1+16 dst=r2+32")


@pytest.mark.parametrize("line,reason", [
    ("frob x=1", "unknown mnemonic 'frob'"),
    ("vop.frob", "unknown VOP function 'frob'"),
    ("vop rows=1", "write the VOP function in the mnemonic"),
    ("mm foo=1", "MM has no field or flag 'foo'"),
    ("mm n", "field 'n' needs a value"),
    ("mm n=1 n=2", "field 'n' given twice"),
    ("mm n=65536", "n=65536 does not fit its 16-bit field"),
    ("mm wf=int9", "'int9' is not one of int8, int4, e2m1, int8x, fp4x6"),
    ("waitw cmp=3", "cmp=3 is illegal"),
    ("ld dram=r16+4", "registers are r0..r15"),
    ("ld dram=zz", "'zz' is not an integer"),
    ("li rd=x1 imm=1", "'x1' is not a register"),
    ("ld n=1.5", "'1.5' is not an integer"),
    ("loop body=@nowhere", "undefined label 'nowhere'"),
    ("3bad: nop", "'3bad' is not a label name"),
    ("x: nop\nx: nop", "label 'x' is already defined"),
    ("nop ! vpu=16", "7 counts of 0..15"),
    ("nop ! frob", "bad wait entry item 'frob'"),
    ("! vpu=1", "needs an instruction before it"),
])
def test_errors_name_line_number_line_and_reason(line, reason):
    text = "nop\n# a comment\n" + line
    with pytest.raises(asm.AsmError) as e:
        asm.assemble(text)
    msg = str(e.value)
    assert isinstance(e.value, UsageError)
    assert re.match(r"line (3|4): '", msg), msg
    assert line.splitlines()[-1].strip() in msg or line.splitlines()[0].strip() in msg
    assert reason in msg, msg


def test_label_before_the_loop_is_an_error():
    with pytest.raises(asm.AsmError, match=r"line 2: 'loop body=@top': label 'top' is before the loop body"):
        asm.assemble("top: nop\nloop body=@top")


def test_disasm_one_is_the_listing_line():
    i = isa.mm(sa=0x1000, ra=1, n=16, kb=2, m=1, wf="fp4x6", acc=1)
    assert asm.disasm_one(i) == "mm sa=r1+4096 n=16 kb=2 m=1 wf=fp4x6 acc"
    assert repr(i) == "Instr('mm sa=r1+4096 n=16 kb=2 m=1 wf=fp4x6 acc')"
    assert asm.disasm_one(isa.waitw(addr=8, ref=-1, rc=3)) == "waitw addr=8 ref=r3-1"


def test_the_example_in_docs_assembles_and_round_trips():
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "isa.md").read_text()
    example = doc.split("## 6. Assembly text", 1)[1].split("```", 2)[1]
    p = asm.parse(example)
    assert [i.op for i in p.instrs] == [isa.Op.LI, isa.Op.LOOP, isa.Op.MM, isa.Op.VOP, isa.Op.HALT]
    assert p.instrs[1]["body"] == 2 and p.waits[4].sync and p.waits[3].mask == 1
    back = asm.parse(asm.disassemble(p.instrs, p.waits))
    assert back.instrs == p.instrs and back.waits == p.waits
