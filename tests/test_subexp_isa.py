"""QACT SUB (sub-block offsets, a project extension): its encoding in the flag bit the public
card leaves reserved, against hand-computed words, the assembly round trip, and decoding that
still rejects the other reserved QACT flag bits."""
import pytest

from otpu_core import asm, isa


def test_sub_is_flag_bit_4_of_qact():
    ins = isa.qact(src=0x40, ra=2, rows=2, ab=1, kb=3, srs=96, row=1, sub=1)
    # w0: opcode 0x21, ra=2 in [11:8], flags ROW 0x01 | SUB 0x10 in [31:24]
    assert ins.words == (0x21 | 2 << 8 | 0x11 << 24, 0x40, 2 | 1 << 8 | 3 << 16, 96, 0, 0, 0, 0)
    assert ins.words[0] == 0x11000221
    assert isa.F_SUB == 0x10 and ins.has(isa.F_SUB) and ins.has(isa.F_ROW)
    assert ins.fields["sub"] == 1 and ins.fields["row"] == 1 and ins.fields["dup"] == 0


def test_public_qact_words_are_unchanged():
    # every public flag combination encodes without the SUB bit
    ins = isa.qact(src=0x100, ra=5, rows=4, ab=2, kb=8, srs=1024, cscale_addr=0x200, rscale_addr=0x300,
                   row=1, cscale=1, rscale=1, dup=1)
    assert ins.words[0] == 0x21 | 5 << 8 | 0x0F << 24
    assert not ins.has(isa.F_SUB)


def test_decode_and_disassembly_round_trip():
    words = [0x11000021, 0x10, 4 | 0 << 8 | 2 << 16, 64, 0, 0, 0, 0]
    ins = isa.Instr.decode(words)
    assert ins.op == isa.Op.QACT and ins.has(isa.F_SUB)
    text = asm.disasm_one(ins)
    assert " sub" in text and " row" in text
    assert asm.assemble(text)[0].words == tuple(words)
    prog = asm.assemble("qact src=r3+16 rows=4 ab=0 kb=2 srs=64 row sub dup\nhalt")
    assert prog[0].words[0] == 0x21 | 3 << 8 | (0x01 | 0x08 | 0x10) << 24
    assert asm.assemble(asm.disassemble(prog)) == prog


@pytest.mark.parametrize("bit", [0x20, 0x40, 0x80])
def test_other_qact_flag_bits_stay_reserved(bit):
    with pytest.raises(isa.IsaError, match=f"word 0: reserved bits 0x{bit << 24:08x} set in QACT"):
        isa.Instr.decode([0x21 | (0x11 | bit) << 24, 0, 1 | 1 << 16, 0, 0, 0, 0, 0], index=3)


def test_sub_is_only_a_qact_flag():
    with pytest.raises(isa.IsaError, match="QST has no field"):
        isa.qst(rows=1, kb=1, sub=1)
    with pytest.raises(asm.AsmError, match="no field or flag 'sub'"):
        asm.assemble("mm n=1 kb=1 m=1 sub")
