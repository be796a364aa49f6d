"""VOP on the simulator against float64 numpy models: every function and broadcast, reductions,
ARGMAX and OUTER. Correctly rounded ops (add, sub, mul) must equal float64 rounded once to fp32
bit for bit; composites and reductions are held to error bounds (max-abs and cosine)."""
import numpy as np
import pytest

from otpu_core import isa
from otpu_core.isa import VFunc
from otpu_core.isasim import Machine

ROWS, COLS = 5, 24
A0, B0, D0 = 0, 1000, 2000
RNG = np.random.default_rng(7)


def vop_run(func, a, b=None, bmode="full", imm=0, rows=ROWS, cols=COLS, drs=None, ars=None, brs=None, **flags):
    m = Machine("sim-small", timing=False)
    m.write_tmem(A0, a)
    if b is not None:
        m.write_tmem(B0, b)
    ars = cols if ars is None else ars
    drs = (cols if func not in isa.REDUCE else (2 if func == VFunc.ARGMAX else 1)) if drs is None else drs
    if brs is None:
        brs = {"full": cols, "row": 1, "col": 0, "scalar": 0}[bmode]
    m.load([isa.vop(func, dst=D0, a=A0, b=B0, rows=rows, cols=cols, drs=drs, ars=ars, brs=brs, bmode=bmode,
                    imm=imm, **flags), isa.halt()])
    m.run()
    return m


def out_tile(m, rows=ROWS, cols=COLS, drs=COLS):
    return m.read_tmem(D0, (rows - 1) * drs + cols).view(np.float32)[np.arange(rows)[:, None] * drs + np.arange(cols)]


def b_full(bmode, b, rows=ROWS, cols=COLS):
    """The B operand as float64 [rows, cols] under each broadcast mode."""
    if bmode == "full":
        return b.reshape(rows, cols).astype(np.float64)
    if bmode == "row":
        return np.repeat(b[:rows].astype(np.float64)[:, None], cols, axis=1)
    return np.repeat(b[:cols].astype(np.float64)[None, :], rows, axis=0)


def normal(shape, lo=0.5, hi=4.0):
    return (RNG.uniform(lo, hi, shape) * RNG.choice([-1, 1], shape)).astype(np.float32)


def report(got, ref):
    got, ref = got.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    err = float(np.max(np.abs(got - ref)))
    cos = float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))
    return err, cos


MODELS = {
    VFunc.ADD: lambda a, b: a + b, VFunc.SUB: lambda a, b: a - b, VFunc.RSUB: lambda a, b: b - a,
    VFunc.MUL: lambda a, b: a * b, VFunc.MAX: np.maximum, VFunc.MIN: np.minimum, VFunc.FILL: lambda a, b: b,
}


@pytest.mark.parametrize("bmode", ["full", "row", "col", "scalar"])
@pytest.mark.parametrize("func", list(MODELS))
def test_binary_functions_in_every_broadcast_equal_float64_rounded_once(func, bmode):
    a = normal((ROWS, COLS))
    b = normal(ROWS * COLS)
    imm = int(np.float32(-1.75).view(np.uint32))
    m = vop_run(func, a, b, bmode=bmode, imm=imm)
    bb = np.full((ROWS, COLS), -1.75) if bmode == "scalar" else b_full(bmode, b)
    ref = MODELS[func](a.astype(np.float64), bb).astype(np.float32)
    got = out_tile(m)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("func,model", [(VFunc.COPY, lambda a: a), (VFunc.ABS, np.abs)])
def test_copy_and_abs_are_exact(func, model):
    a = normal((ROWS, COLS))
    assert np.array_equal(out_tile(vop_run(func, a)), model(a))


# (function, float64 model, ulp bound from reference 4.2, input range)
COMPOSITES = [
    (VFunc.EXP2, np.exp2, 1.65, (-20, 20)),
    (VFunc.RECIP, lambda x: 1 / x, 1.2, (0.01, 100)),
    (VFunc.RSQRT, lambda x: 1 / np.sqrt(x), 1.05, (0.01, 100)),
    (VFunc.LOG2, np.log2, 2.5, (0.01, 100)),
]


def ulps(got, ref):
    spacing = np.abs(np.spacing(ref.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref) / spacing


@pytest.mark.parametrize("func,model,bound,rng", COMPOSITES, ids=lambda x: getattr(x, "name", ""))
def test_composites_within_their_ulp_bounds(func, model, bound, rng):
    a = RNG.uniform(*rng, (ROWS, COLS)).astype(np.float32)
    got = out_tile(vop_run(func, a))
    ref = model(a.astype(np.float64))
    err, cos = report(got, ref)
    assert ulps(got, ref).max() < bound, (err, cos)
    assert cos > 1 - 1e-12


def test_exp2sub_is_exp2_of_the_rounded_difference():
    a, b = RNG.uniform(-8, 8, (ROWS, COLS)).astype(np.float32), RNG.uniform(-8, 8, ROWS).astype(np.float32)
    got = out_tile(vop_run(VFunc.EXP2SUB, a, b, bmode="row"))
    diff = (a.astype(np.float64) - b.astype(np.float64)[:, None]).astype(np.float32).astype(np.float64)
    assert ulps(got, np.exp2(diff)).max() < 1.65


def rows_of(m, rows, drs=1):
    return m.read_tmem(D0, (rows - 1) * drs + 1).view(np.float32)[np.arange(rows) * drs]


@pytest.mark.parametrize("func,model", [
    (VFunc.RSUM, lambda a, b: a.sum(1)), (VFunc.RSSQ, lambda a, b: (a * a).sum(1)),
    (VFunc.RDOT, lambda a, b: (a * b).sum(1))])
@pytest.mark.parametrize("cols", [24, 200])
def test_reductions_against_float64(func, model, cols):
    a, b = normal((ROWS, cols)), normal((ROWS, cols))
    m = vop_run(func, a, b.reshape(-1), cols=cols, drs=1)
    got = rows_of(m, ROWS).astype(np.float64)
    ref = model(a.astype(np.float64), b.astype(np.float64))
    err, cos = report(got, ref)
    assert err <= 1e-6 * np.abs(a).max() ** 2 * cols and cos > 1 - 1e-12


def test_rdot_reads_b_in_column_mode_and_rmax_is_the_exact_row_max():
    a, v = normal((ROWS, COLS)), normal(COLS)
    got = rows_of(vop_run(VFunc.RDOT, a, v, bmode="col", brs=0), ROWS).astype(np.float64)
    ref = a.astype(np.float64) @ v.astype(np.float64)
    assert report(got, ref)[0] < 1e-5 and report(got, ref)[1] > 1 - 1e-12
    assert np.array_equal(rows_of(vop_run(VFunc.RMAX, a), ROWS), a.max(axis=1))


def test_rsum_pads_with_plus_zero_terms():
    a = np.full((1, 3), -0.0, np.float32)
    got = vop_run(VFunc.RSUM, a, rows=1, cols=3).read_tmem(D0, 1)[0]
    assert got == 0x00000000        # -0 + -0 + -0 started from +0 (and padded with +0): +0


def test_argmax_writes_value_and_first_index_plus_signed_base():
    a = normal((ROWS, COLS))
    a[2, 5] = a[2, 17] = 9.0                          # a tie: the first column wins
    base = -100
    m = vop_run(VFunc.ARGMAX, a, imm=base & 0xFFFFFFFF, drs=2)
    pairs = m.read_tmem(D0, 2 * ROWS).view(np.float32).reshape(ROWS, 2)
    assert np.array_equal(pairs[:, 0], a.max(axis=1))
    assert np.array_equal(pairs[:, 1], (np.argmax(a, axis=1) + base).astype(np.float32))
    assert pairs[2, 1] == 5 + base


@pytest.mark.parametrize("mode", ["column", "dscalar", "done"])
def test_outer_in_place_against_float64(mode):
    rows, cols = 6, 32
    m = Machine("sim-small", timing=False)
    s = normal((rows, cols))
    dvec, bvec, cvec = normal(cols), normal(rows), normal(cols)
    m.write_tmem(D0, s)
    m.write_tmem(A0, dvec)
    m.write_tmem(B0, bvec)
    m.write_tmem(3000, cvec)
    flags = {"column": {}, "dscalar": {"dscalar": 1}, "done": {"done": 1}}[mode]
    m.load([isa.vop("outer", dst=D0, a=A0, b=B0, rows=rows, cols=cols, drs=cols, brs=1, bmode="row", imm=3000,
                    **flags), isa.halt()])
    m.run()
    d = {"column": dvec.astype(np.float64), "dscalar": np.full(cols, float(dvec[0])), "done": np.ones(cols)}[mode]
    ref = s.astype(np.float64) * d[None, :] + bvec.astype(np.float64)[:, None] * cvec.astype(np.float64)[None, :]
    got = out_tile(m, rows, cols, cols)
    err, cos = report(got, ref)
    assert err < 1e-5 * np.abs(ref).max() and cos > 1 - 1e-12


def test_outer_column_vector_address_is_register_relative():
    m = Machine("sim-small", timing=False)
    m.write_tmem(D0, np.zeros(4, np.float32))
    m.write_tmem(B0, np.ones(1, np.float32))
    m.write_tmem(3100, np.arange(4, dtype=np.float32))
    m.load([isa.li(rd=5, imm=3000), isa.vop("outer", dst=D0, a=A0, b=B0, rows=1, cols=4, drs=4, brs=1, bmode="row",
                                            rd=5, imm=100, done=1), isa.halt()])
    m.run()
    assert np.array_equal(m.read_tmem(D0, 4).view(np.float32), np.arange(4, dtype=np.float32))


def test_repeated_row_a_operand_builds_an_outer_product():
    # ars = 0 repeats one row: u[:, None] * v[None, :] as one MUL with B in ROW mode
    u, v = normal(ROWS), normal(COLS)
    m = vop_run(VFunc.MUL, v, u, bmode="row", ars=0)
    ref = (u.astype(np.float64)[:, None] * v.astype(np.float64)[None, :]).astype(np.float32)
    assert np.array_equal(out_tile(m), ref)


def test_in_place_elementwise_is_not_a_hazard():
    a = normal((ROWS, COLS))
    m = Machine("sim-small", timing=False)
    m.write_tmem(A0, a)
    m.load([isa.vop("mul", dst=A0, a=A0, rows=ROWS, cols=COLS, drs=COLS, ars=COLS, bmode="scalar",
                    imm=int(np.float32(2).view(np.uint32))), isa.halt()])
    m.run()
    assert np.array_equal(m.read_tmem(A0, ROWS * COLS).view(np.float32), (a * 2).ravel())



def test_an_element_reading_the_word_it_writes_is_not_a_hazard():
    """Reference 3.7: only a read of a word an *earlier* element wrote is a hazard. B == dst
    (x = a * x) and an A whose stride differs from dst's but meets it element for element are legal."""
    a, x = normal((ROWS, COLS)), normal((ROWS, COLS))
    m = Machine("sim-small", timing=False)
    m.write_tmem(A0, a)
    m.write_tmem(B0, x)
    m.load([isa.vop("mul", dst=B0, a=A0, b=B0, rows=ROWS, cols=COLS, drs=COLS, ars=COLS, brs=COLS, bmode="full"),
            isa.vop("add", dst=A0, a=A0, rows=1, cols=COLS, drs=0, ars=COLS, bmode="scalar",
                    imm=int(np.float32(1).view(np.uint32))), isa.halt()])
    m.run()
    want = (a.astype(np.float64) * x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(m.read_tmem(B0, ROWS * COLS).view(np.float32), want.ravel())
    assert np.array_equal(m.read_tmem(A0, COLS).view(np.float32), (a[0] + np.float32(1)).astype(np.float32))

@pytest.mark.parametrize("bmode,brs", [("row", 1), ("col", 0)])
def test_a_broadcast_b_written_by_an_earlier_element_is_a_hazard(bmode, brs):
    # dst row 0 covers B's words: later elements read a B word an earlier element wrote
    m = Machine("sim-small", timing=False)
    m.load([isa.vop("add", dst=B0, a=A0, b=B0 + 1, rows=2, cols=4, drs=4, ars=4, brs=brs, bmode=bmode), isa.halt()])
    with pytest.raises(Exception) as ei:
        m.run()
    assert getattr(ei.value, "kind", None) == "hazard"


def test_a_row_broadcast_read_after_its_own_row_wrote_it_is_a_hazard():
    # row 0 writes dst+0..3 and reads B(0) = dst+2 for every column: element 3 reads what element 2 wrote
    m = Machine("sim-small", timing=False)
    m.load([isa.vop("add", dst=B0, a=A0, b=B0 + 2, rows=1, cols=4, drs=4, ars=4, brs=1, bmode="row"), isa.halt()])
    with pytest.raises(Exception) as ei:
        m.run()
    assert getattr(ei.value, "kind", None) == "hazard"
