"""Every opcode's word layout against words computed by hand from shared/reference/isa.md section 2.

The expected words below are written out from the reference tables (opcode in w0[7:0], ra [11:8],
rb [15:12], rc [19:16], rd [23:20], flags [31:24]; packed immediates as tabled), never produced
by the encoder under test.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from otpu_core import isa
from otpu_core.errors import UsageError

# (instruction built with the helpers, words from the reference tables, named fields to read back)
CASES = [
    (isa.nop(), [0x00, 0, 0, 0, 0, 0, 0, 0], {}),
    (isa.halt(chain=1, ra=1, rb=2), [0x01 | 1 << 8 | 2 << 12 | 0x01 << 24, 0, 0, 0, 0, 0, 0, 0], {"chain": 1}),
    (isa.li(rd=5, imm=-1), [0x02 | 5 << 20, 0xFFFFFFFF, 0, 0, 0, 0, 0, 0], {"rd": 5, "imm": 0xFFFFFFFF}),
    (isa.addi(rd=1, ra=1, imm=16), [0x03 | 1 << 8 | 1 << 20, 16, 0, 0, 0, 0, 0, 0], {"ra": 1, "imm": 16}),
    (isa.loop(body=5, count=3, ra=2), [0x04 | 2 << 8, 5, 3, 0, 0, 0, 0, 0], {"body": 5, "count": 3}),
    (isa.bar(), [0x05, 0, 0, 0, 0, 0, 0, 0], {}),
    (isa.rld(rd=3, addr=0x10, ra=4, factor=9344, rb=5, raw=1, mul=1),
     [0x06 | 4 << 8 | 5 << 12 | 3 << 20 | (0x01 | 0x02) << 24, 0x10, 9344, 0, 0, 0, 0, 0], {"raw": 1, "mul": 1}),
    (isa.waitw(addr=0x40, ra=1, dst=5, rb=2, ref=7, rc=3, mask=0xFF, interval=100, timeout=1000, cmp="ge"),
     [0x07 | 1 << 8 | 2 << 12 | 3 << 16 | 2 << 24, 0x40, 5, 7, 0xFF, 100, 1000, 0], {"cmp": isa.C_GE}),
    (isa.ld(dram=0x1000, ra=1, tmem=0x20, rb=2, n=64), [0x10 | 1 << 8 | 2 << 12, 0x1000, 0x20, 64, 0, 0, 0, 0], {"n": 64}),
    (isa.st(dram=0x1000, ra=1, tmem=0x20, rb=2, n=64), [0x11 | 1 << 8 | 2 << 12, 0x1000, 0x20, 64, 0, 0, 0, 0], {"n": 64}),
    (isa.dstep(state=0x4000, ra=1, qk=0x100, rb=2, v=0x200, rc=3, rows=128, cols=128, g=0x300, o=0x400, gs=1, dzero=1),
     [0x12 | 1 << 8 | 2 << 12 | 3 << 16 | 0x01 << 24, 0x4000, 0x100, 0x200, 128 | 128 << 16, 0x300, 0x400, 1],
     {"rows": 128, "cols": 128, "dzero": 1}),
    (isa.stream(desc=0xFFC0, ks=1, src=0x8000, dst=0x8000, ra=1, vec=0x100, rb=2, x=0x200, rc=3, k=0x300, rd=4,
                out=0x400, src_t=1, nodst=1),
     [0x13 | 1 << 8 | 2 << 12 | 3 << 16 | 4 << 20 | (0x02 | 0x08) << 24, 0xFFC0 | 1 << 16, 0x8000, 0x8000,
      0x100, 0x200, 0x300, 0x400], {"desc": 0xFFC0, "ks": 1, "src_t": 1, "dst_t": 0, "nodst": 1, "szero": 0}),
    (isa.mm(sa=0x1000, ra=1, ssa=0x2000, rb=2, out=0x40, rc=3, n=16, kb=2, rs=128, ors=17, m=1, ab=3, srs=8,
            wf="int4", unit=1, acc=1, pair=1),
     [0x20 | 1 << 8 | 2 << 12 | 3 << 16 | (0x01 | 0x02 | 0x40 | 1 << 4) << 24, 0x1000, 0x2000, 0x40,
      16 | 2 << 16, 128, 17 | 1 << 16 | 3 << 24, 8], {"n": 16, "kb": 2, "m": 1, "ab": 3, "ors": 17, "wf": isa.WF_INT4}),
    (isa.mm(n=1, kb=1, m=1, rmax=1, ascale=1, wf="e2m1"), [0x20 | (0x04 | 0x08 | 2 << 4) << 24, 0, 0, 0, 1 | 1 << 16, 0, 1 << 16, 0],
     {"rmax": 1, "ascale": 1, "wf": isa.WF_E2M1}),
    # project extension: WF[1:0] in flags[5:4], WF[2] in flag bit 7
    (isa.mm(n=1, kb=1, m=1, wf="int8x"), [0x20 | (3 << 4) << 24, 0, 0, 0, 1 | 1 << 16, 0, 1 << 16, 0], {"wf": isa.WF_INT8X}),
    (isa.mm(n=1, kb=1, m=1, wf="fp4x6"), [0x20 | 0x80 << 24, 0, 0, 0, 1 | 1 << 16, 0, 1 << 16, 0], {"wf": isa.WF_FP4X6}),
    (isa.qact(src=0x100, ra=5, rows=4, ab=2, kb=8, srs=1024, cscale_addr=0x200, rscale_addr=0x300, cscale=1, rscale=1, dup=1),
     [0x21 | 5 << 8 | (0x02 | 0x04 | 0x08) << 24, 0x100, 4 | 2 << 8 | 8 << 16, 1024, 0x200, 0x300, 0, 0],
     {"rows": 4, "ab": 2, "kb": 8, "row": 0, "dup": 1}),
    (isa.qst(src=0x10, ra=1, dst=0x1000, rb=2, sdst=0x2000, rc=3, rows=1, kb=4, srs=512, drs=256, es=1, row=1, half=1),
     [0x22 | 1 << 8 | 2 << 12 | 3 << 16 | (0x01 | 0x02) << 24, 0x10, 0x1000, 0x2000, 1 | 4 << 16, 512, 256, 1],
     {"rows": 1, "kb": 4, "half": 1}),
    (isa.vop("exp2sub", dst=0x10, ra=1, a=0x20, rb=2, b=0x30, rc=3, rows=4, cols=64, drs=64, ars=64, brs=1, bmode="row", rd=4),
     [0x30 | 1 << 8 | 2 << 12 | 3 << 16 | 4 << 20, 0x10, 0x20, 0x30, 4 | 64 << 16, 64 | 64 << 16, 1 | 14 << 16 | 1 << 24, 0],
     {"func": 14, "bmode": 1}),
    (isa.vop(isa.VFunc.MUL, dst=8, a=0, rows=1, cols=8, bmode="scalar", imm=1.5),
     [0x30, 8, 0, 0, 1 | 8 << 16, 0, 3 << 16 | 3 << 24, 0x3FC00000], {"func": 3, "bmode": 3, "imm": 0x3FC00000}),
    (isa.vop("outer", dst=0, a=0x100, b=0x200, rows=2, cols=256, drs=256, brs=1, bmode="row", imm=0x300, dscalar=1, done=1),
     [0x30 | (0x01 | 0x02) << 24, 0, 0x100, 0x200, 2 | 256 << 16, 256, 1 | 6 << 16 | 1 << 24, 0x300],
     {"dscalar": 1, "done": 1}),
    (isa.vop("argmax", dst=0, a=0x100, rows=1, cols=128, drs=2, imm=-5),
     [0x30, 0, 0x100, 0, 1 | 128 << 16, 2, 20 << 16, 0xFFFFFFFB], {"func": 20}),
    (isa.gather(src=0x10, ra=1, dst=0x20, rb=2, rows=2, cols=8, srs=8, drs=8, seg=16),
     [0x40 | 1 << 8 | 2 << 12, 0x10, 0x20, 2 | 8 << 16, 8, 8, 16, 0], {"rows": 2, "cols": 8, "seg": 16}),
]


def test_every_opcode_is_covered():
    assert {i.op for i, _, _ in CASES} == set(isa.Op)


@pytest.mark.parametrize("instr,words,fields", CASES, ids=[f"{i.op.name}-{n}" for n, (i, _, _) in enumerate(CASES)])
def test_layout_matches_the_reference(instr, words, fields):
    assert instr.encode().dtype == np.uint32
    assert [hex(w) for w in instr.encode().tolist()] == [hex(w) for w in words]
    back = isa.Instr.decode(np.array(words, dtype=np.uint32))
    assert back == instr
    for name, value in fields.items():
        assert back[name] == value


def test_program_image_is_little_endian_words():
    prog = [isa.li(rd=1, imm=0x11223344), isa.halt()]
    image = isa.encode_program(prog)
    assert image[:8] == bytes([0x02, 0x00, 0x10, 0x00, 0x44, 0x33, 0x22, 0x11])
    assert len(image) == 64 and image[32] == 0x01
    assert isa.decode_program(image) == prog


def test_register_relative_resolution_follows_the_table():
    regs = [0] * 16
    regs[1], regs[2], regs[3], regs[4] = 100, 0xFFFFFFFF, 7, 1000
    s = isa.stream(src=1, dst=2, ra=1, vec=3, rb=2, x=4, rc=3, k=5, rd=4, out=6, desc=9)
    # STREAM adds R[ra] to both w2 and w3; desc (w1) and out (w7) stay absolute
    assert s.resolve(regs)[1:] == [9, 101, 102, 2, 11, 1005, 6]
    q = isa.qact(src=0x10, ra=3, cscale_addr=0x20, rscale_addr=0x30)
    assert q.resolve(regs)[1] == 0x17 and q.resolve(regs)[4:6] == [0x20, 0x30]
    d = isa.dstep(state=1, ra=1, qk=2, rb=2, v=3, rc=3, rows=1, cols=64, g=5, o=6, gs=7)
    assert d.resolve(regs)[1:] == [101, 1, 10, 1 | 64 << 16, 5, 6, 7]
    v = isa.vop("add", dst=1, ra=4, imm=5, rd=1, bmode="scalar")
    assert v.resolve(regs)[7] == 105 and v.regs_read == {4, 1}
    assert isa.addi(rd=2, ra=3, imm=1).regs_read == {3} and isa.addi(rd=2, ra=3, imm=1).reg_written == 2
    assert isa.halt(ra=1, rb=2).regs_read == set() and isa.halt(chain=1, ra=1, rb=2).regs_read == {1, 2}
    assert isa.rld(rd=0, addr=1).reg_written is None


@pytest.mark.parametrize("words,needle", [
    ([0x99, 0, 0, 0, 0, 0, 0, 0], "word 0: unknown opcode 0x99"),
    ([0x10 | 3 << 16, 0, 0, 0, 0, 0, 0, 0], "word 0: reserved bits 0x00030000 set in LD"),
    ([0x10, 0, 0, 0, 1, 0, 0, 0], "word 4: reserved bits 0x00000001 set in LD"),
    ([0x00, 0, 0, 0, 0, 0, 0, 0x80000000], "word 7: reserved bits 0x80000000 set in NOP"),
    ([0x30, 0, 0, 0, 0, 0, 1 << 26, 0], "word 6: reserved bits 0x04000000 set in VOP"),
    ([0x30, 0, 0, 0, 0, 0, 7 << 16, 0], "word 6: illegal VOP func value 7"),
    ([0x30, 0, 0, 0, 0, 0, 21 << 16, 0], "word 6: illegal VOP func value 21"),
    ([0x20 | (0x80 | 0x10) << 24, 0, 0, 0, 0, 0, 0, 0], "illegal MM wf value 5"),
    ([0x07 | 3 << 24, 0, 0, 0, 0, 0, 0, 0], "illegal WAITW cmp value 3"),
    ([0x21, 0, 0, 0, 0, 0, 0, 5], "word 7: reserved bits"),
    ([0x20 | 0x80 << 24 | 0x20 << 24, 0, 0, 0, 0, 0, 0, 0], "illegal MM wf value 6"),
])
def test_garbage_names_the_word(words, needle):
    with pytest.raises(isa.IsaError) as e:
        isa.Instr.decode(words, index=12)
    assert isinstance(e.value, UsageError)
    assert "instruction 12" in str(e.value) and needle in str(e.value)


def test_image_errors():
    with pytest.raises(isa.IsaError, match="multiple of 32 bytes"):
        isa.decode_program(b"\0" * 40)
    bad = isa.encode_program([isa.nop(), isa.nop()])[:32] + bytes([0x77]) + b"\0" * 31
    with pytest.raises(isa.IsaError, match="instruction 1, word 0: unknown opcode 0x77"):
        isa.decode_program(bad)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 0xFFFFFFFF), min_size=8, max_size=8), st.sampled_from(sorted(isa.Op)))
def test_any_words_decode_exactly_or_name_a_word(words, op):
    words[0] = (words[0] & ~0xFF) | op
    try:
        instr = isa.Instr.decode(words)
    except isa.IsaError as e:
        assert "word " in str(e)
    else:
        assert list(instr.words) == words


def test_encoder_refuses_what_does_not_fit():
    with pytest.raises(isa.IsaError, match="n=65536 does not fit its 16-bit field"):
        isa.mm(n=65536)
    with pytest.raises(isa.IsaError, match="cmp=3 is illegal"):
        isa.waitw(cmp=3)
    with pytest.raises(isa.IsaError, match="has no field"):
        isa.ld(rows=1)
    with pytest.raises(isa.IsaError, match="no register slot rc"):
        isa.ld(rc=1)
    assert isa.waitw()["mask"] == 0xFFFFFFFF     # the encoder default compares every bit


def test_constants_of_the_reference():
    assert (isa.OUTER_MAX_COLS, isa.DSTEP_MAX_ROWS, isa.DSTEP_LANES) == (256, 256, 8)
    assert (isa.STREAM_SLOTS, isa.STREAM_MAX_OPS, isa.STREAM_DESC_FIXED, isa.STREAM_DESC_AREA) == (4, 15, 5, 64)
    assert (isa.LOOP_DEPTH, isa.ARG0, isa.MXU_FIFO_CHUNKS, isa.BOARD_IMEM_INSTRS) == (4, 8, 1024, 4096)
    assert (isa.WF_INT8, isa.WF_INT4, isa.WF_E2M1, isa.WF_INT8X, isa.WF_FP4X6) == (0, 1, 2, 3, 4)
    assert isa.BINARY == {isa.VFunc[n] for n in ("ADD", "SUB", "RSUB", "MUL", "MAX", "MIN", "FILL", "EXP2SUB")}
    assert isa.REDUCE == {isa.VFunc[n] for n in ("RSUM", "RMAX", "RSSQ", "RDOT", "ARGMAX")}
    assert isa.READS_B == isa.BINARY | {isa.VFunc.RDOT}


@pytest.mark.parametrize("bits,want", [
    (0x3FC00000, 1), (0xC0300000, 0xFFFFFFFE), (0x3F7D70A4, 0), (0x80000000, 0), (0x00000001, 0),
    (0x4F000000, 0x80000000), (0x7FC00000, 0x80000000), (0xFF800000, 0x80000000),
    (0x4B800001, 16777218), (0xCEFFFFFF, (-2147483520) & 0xFFFFFFFF),
])
def test_f2i_truncates_toward_zero(bits, want):
    assert isa.f2i(bits) == want


def test_waitw_compare_examples():
    assert isa.waitw_holds(1, 0xFFFFFFFF, isa.C_GE, 0xFFFFFFFF)            # difference 2
    assert not isa.waitw_holds(0x7FFFFFFF, 0x80000001, isa.C_GE, 0xFFFFFFFF)  # difference -2
    assert isa.waitw_holds(0x1234_5678, 0x78, isa.C_EQ, 0xFF)
    assert isa.waitw_holds(0x1234_5678, 0x79, isa.C_NE, 0xFF)
    assert not isa.waitw_holds(0x1234_5678, 0x78, isa.C_NE, 0xFF)


def test_wait_entry_layout():
    w = isa.WaitEntry((1, 2, 3, 4, 5, 6, 7), 0x7FFFFFFF, True)
    # counts in [27:0] (queue q at [4q+3:4q]), mask in [58:28], SYNC at bit 59, [63:60] reserved
    assert w.pack() == 0x0FFF_FFFF_F765_4321
    assert isa.WaitEntry.unpack(0x0FFF_FFFF_F765_4321) == w
    assert isa.WaitEntry((15,) * 7).pack() == 0x0FFF_FFFF and not isa.NO_WAIT.waits
    assert isa.WaitEntry((15, 15, 15, 0, 15, 15, 15)).pack() == 0x0FFF_0FFF
    assert isa.WaitEntry(mask=1).pack() == 1 << 28 | 0x0FFF_FFFF
    with pytest.raises(isa.IsaError, match="wait entry 3: reserved bits 0x1000000000000000"):
        isa.WaitEntry.unpack(1 << 60, index=3)
    with pytest.raises(isa.IsaError, match="7 counts of 0..15"):
        isa.WaitEntry((16,) * 7)
    with pytest.raises(isa.IsaError, match="31 bits"):
        isa.WaitEntry(mask=1 << 31)


def test_wait_table_follows_the_program():
    prog = [isa.ld(n=4), isa.vop("add", rows=1, cols=4), isa.halt()]
    waits = [isa.NO_WAIT, isa.WaitEntry((0, 15, 15, 15, 15, 15, 15)), isa.WaitEntry(sync=True)]
    image = isa.encode_program(prog, waits)
    assert len(image) == 3 * 32 + 3 * 8
    assert image[96 + 8:96 + 16] == (0x0FFFFFF0).to_bytes(8, "little")
    # a public card (no SEQ_WC) reads only the 32n bytes of the program
    assert isa.split_image(image, 3, seq_wc=False) == (prog, None)
    assert isa.split_image(image, 3, seq_wc=True) == (prog, waits)
    assert [isa.queue_of(i.op) for i in prog] == [isa.Queue.LD, isa.Queue.VPU, None]
    with pytest.raises(isa.IsaError, match="2 entries for 3 instructions"):
        isa.encode_program(prog, waits[:2])


def _fs(payload):
    """Float-safe word by hand: exponent 0x80, payload bit 23 -> sign, bits 22..0 -> mantissa."""
    return (payload >> 23) << 31 | 0x80 << 23 | (payload & 0x7FFFFF)


def test_stream_descriptor_words():
    d = isa.gdn_desc(128, 128)
    d1 = 1 | 0 << 1 | 1 << 3 | 1 << 5 | 2 << 7 | 0 << 9 | 0 << 12 | 1 << 14 | 2 << 17 | 1 << 20
    ops = [2 | 0 << 4 | 8 << 7 | 10 << 11, 1 | 1 << 4 | 9 << 7 | 0 << 11, 2 | 2 << 4 | 1 << 7 | 11 << 11]
    want = [_fs(128 | 128 << 12), _fs(d1), _fs(3), _fs(0), _fs(0)] + [_fs(o) for o in ops]
    assert d.encode().tolist() == want
    assert want[0] == 0x40080080 and want[1] == 0x40144129
    assert isa.StreamDesc.decode(want) == d
    # every word is a normal fp32 in [2, 4) or (-4, -2]
    assert np.all(np.abs(d.encode().view(np.float32)) >= 2) and np.all(np.abs(d.encode().view(np.float32)) < 4)
    assert isa.StreamDesc(1, 64, out_p2=1).encode()[1] == 0xC0000000
    assert isa.stream_hw_cfg(d, 0) == {"ns": 16, "rows": 128, "a_en": 1, "a_sel": 1, "dmode": isa.D_DELTA,
                                       "g_src": "const", "q_en": 1}
    assert isa.stream_hw_cfg(d, isa.F_NODST) is None
    assert isa.stream_hw_cfg(isa.StreamDesc(128, 128, ops=d.ops), 0) is None


def test_stream_descriptor_errors():
    words = isa.gdn_desc(4, 64).encode().tolist()
    with pytest.raises(isa.IsaError, match="word 2 .* not float-safe"):
        isa.StreamDesc.decode(words[:2] + [0x3F800000] + words[3:])
    with pytest.raises(isa.IsaError, match="names 3 ops but only 1 follow"):
        isa.StreamDesc.decode(words[:6])
    with pytest.raises(isa.IsaError, match="at most 15 ops"):
        isa.StreamDesc(1, 64, ops=((0, 0, 0, 0),) * 16)
    with pytest.raises(isa.IsaError, match="rows=4096 does not fit"):
        isa.StreamDesc(4096, 64)
