"""Indexing rows of banked tiles and strided tensors in `ol`, unit by unit.

`ol.empty((rows, cols))` with even cols gives the tile an odd row stride of cols + 1 words so its
rows start in different TMEM banks (docs/ol.md); a row index or a row slice must step by that
stride, not by the column count. Each test checks the instruction fields against addresses worked
out here from the documented stride and the values against numpy, so a row-stride slip fails
here and not only in an end-to-end decoder test.
"""
import numpy as np

from otpu_core import fp32 as F
from otpu_core import ol
from otpu_core.ol.runtime import Image

T = "sim-small"                       # LANES 8
rng = np.random.default_rng(19)


def build(kernel, **arrays):
    img = Image(T)
    args = {k: (img.tensor(v) if isinstance(v, np.ndarray) else img.tensor(shape=v)) for k, v in arrays.items()}
    prog = ol.compile_kernel(kernel, T, **args)
    m = img.run(prog)
    return prog, {k: img.read(t, m) for k, t in args.items()}


def fields(prog, op, name):
    return [i[name] for i in prog.instrs if i.op.name == op]


def test_a_banked_tile_has_an_odd_stride_and_rows_in_distinct_banks():
    seen = {}

    def k(y):
        t = ol.empty((4, 8))
        seen["rs"], seen["rows"] = t.rs, [int(t[r].base.const) - int(t.base.const) for r in range(4)]
        ol.store(y, ol.full((4, 8), 1.0))
    build(k, y=(4, 8))
    assert seen["rs"] == 9 and seen["rows"] == [0, 9, 18, 27]
    assert len({r % 8 for r in seen["rows"]}) == 4


def test_integer_row_index_of_a_banked_tile_steps_by_its_stride():
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def k(x, y):
        t = ol.empty((4, 8))
        for r in range(4):
            ol.load(x[3 - r], out=t[r])          # one LD per row, rows reversed
        ol.store(y, t)                           # a strided tile: one ST per row
    prog, out = build(k, x=x, y=(4, 8))
    ld, st = fields(prog, "LD", "tmem"), fields(prog, "ST", "tmem")
    assert [a - ld[0] for a in ld] == [0, 9, 18, 27] and [a - st[0] for a in st] == [0, 9, 18, 27]
    assert st[0] == ld[0]
    np.testing.assert_array_equal(out["y"], x[::-1])


def test_a_row_slice_of_a_banked_tile_starts_at_its_first_row():
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def k(x, y):
        t = ol.empty((4, 8))
        for r in range(4):
            ol.load(x[r], out=t[r])
        ol.store(y, t[1:3] * 2.0)                # rows 1 and 2 only, as one VOP on the slice
    prog, out = build(k, x=x, y=(2, 8))
    base = fields(prog, "LD", "tmem")[0]
    vop = [i for i in prog.instrs if i.op.name == "VOP"][-1]
    assert vop["a"] == base + 9 and vop["ars"] == 9
    np.testing.assert_array_equal(out["y"].view(np.uint32), F.mul(x[1:3], np.float32(2.0)))


def test_a_loop_variable_row_index_uses_the_stride_in_its_address_register():
    x = rng.standard_normal((6, 8)).astype(np.float32)

    def k(x, y):
        t = ol.empty((6, 8))
        for i in ol.range(6):
            ol.load(x[i], out=t[i])              # tmem address = base + 9 i, stepped by ADDI 9
        ol.store(y, t + 1.0)
    prog, out = build(k, x=x, y=(6, 8))
    assert 9 in [i["imm"] for i in prog.instrs if i.op.name == "ADDI"]
    np.testing.assert_array_equal(out["y"].view(np.uint32), F.add(x, np.float32(1.0)))


def test_row_slices_of_a_column_view_keep_the_tensor_row_stride():
    a = rng.standard_normal((6, 8)).astype(np.float32)

    def k(x, y):
        ol.store(y, ol.load(x[:, 2:6][1:4]))    # rows 1..3 of columns 2..5: row stride stays 8 words
    prog, out = build(k, x=a, y=(3, 4))
    dram = fields(prog, "LD", "dram")
    assert [d - dram[0] for d in dram] == [0, 32, 64]          # 8 words = 32 bytes apart
    np.testing.assert_array_equal(out["y"], a[1:4, 2:6])
