"""`ol` with activations that carry sub-block offsets: quantize(suboffsets=True) is one QACT
ROW+SUB per chunk and the Stationary records it, quantize_for picks it for the seed formats,
dot refuses it for public formats, and the matmul kernel with int8x / fp4x6 weights on the golden
simulator against float64 (max-abs and cosine reported)."""
import numpy as np
import pytest

from otpu_core import formats, isa, ol
from otpu_core.kernels import matmul, reference as R
from otpu_core.ol import CompileError
from otpu_core.ol.runtime import Image

T, D = "sim-small", 32
rng = np.random.default_rng(23)


def qacts(prog):
    return [i for i in prog.instrs if i.op == isa.Op.QACT]


def outlier_rows(rows, k, factor=80.0):
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x[:, rng.choice(k, max(1, k // 40), replace=False)] *= factor
    return x


def test_quantize_suboffsets_is_qact_row_sub_and_the_stationary_records_it():
    img = Image(T)
    a = rng.standard_normal((6, 64)).astype(np.float32)
    seen = {}

    def k(x, w, y):
        st = ol.quantize(ol.load(x), suboffsets=True)
        seen["st"], seen["view"] = st, st.blocks(1, 1)
        ol.store(y, ol.dot(st, w))
    x, w, y = img.tensor(a), img.weight(rng.standard_normal((5, 64)), "int8x"), img.tensor(shape=(6, 5))
    prog = ol.compile_kernel(k, T, x=x, w=w, y=y)
    q = qacts(prog)
    assert len(q) == 2                                          # 6 rows in chunks of act_rows = 4
    assert all(i.has(isa.F_SUB) and i.has(isa.F_ROW) for i in q)
    st = seen["st"]
    assert st.suboffsets and st.row and seen["view"].suboffsets
    got = img.read(y, img.run(prog))
    assert got.shape == (6, 5) and np.isfinite(got).all()


@pytest.mark.parametrize("fmt,sub", [("int8x", True), ("fp4x6", True), ("int8", False), ("e2m1", False)])
def test_quantize_for_prefers_offsets_for_the_seed_formats(fmt, sub):
    img = Image(T)
    seen = {}

    def k(x, w, y):
        st = ol.quantize_for(ol.load(x), w)
        seen["st"] = st
        ol.store(y, ol.dot(st, w))
    x, w, y = img.tensor(np.ones((1, 64), np.float32)), img.weight(np.ones((3, 64)), fmt), img.tensor(shape=(1, 3))
    prog = ol.compile_kernel(k, T, x=x, w=w, y=y)
    assert seen["st"].suboffsets == sub and all(i.has(isa.F_SUB) == sub for i in qacts(prog))


def test_dot_refuses_offsets_with_public_weights():
    img = Image(T)

    def k(x, w, y):
        ol.store(y, ol.dot(ol.quantize(ol.load(x), suboffsets=True), w))
    with pytest.raises(CompileError, match="sub-block offsets .* only the seed weight formats"):
        ol.compile_kernel(k, T, x=img.tensor(np.ones((1, 32), np.float32)), w=img.weight(np.ones((2, 32)), "int8"),
                          y=img.tensor(shape=(1, 2)))


def seed_reference(a, Wd):
    """float64 of the activations exactly as QACT SUB leaves them, times the dequantised weights."""
    kp = -(-a.shape[1] // D) * D
    xp = np.zeros((a.shape[0], kp), np.float32)
    xp[:, :a.shape[1]] = a
    q, s, e = formats.quantize_suboffsets(xp.view(np.uint32), D)
    return formats.act_values(q, s, e, D)[:, :a.shape[1]] @ Wd.T


@pytest.mark.parametrize("fmt", ["int8x", "fp4x6"])
@pytest.mark.parametrize("m,k,n", [(1, 64, 9), (5, 100, 17), (9, 128, 40), (2, 512, 6)])
def test_matmul_kernel_with_seed_weights_against_float64(fmt, m, k, n):
    a = outlier_rows(m, k)
    W = rng.standard_normal((n, k))
    img = Image(T)
    x, w, y = img.tensor(a), img.weight(W, fmt), img.tensor(shape=(m, n))
    prog = ol.compile_kernel(matmul, T, x=x, w=w, y=y)
    assert qacts(prog) and all(i.has(isa.F_SUB) for i in qacts(prog))
    if fmt == "fp4x6" and 2 * m <= 4:          # sim-small has PAIR: DUP + SUB rows feed MM PAIR
        assert all(i.has(isa.F_DUP) for i in qacts(prog)) and any(i.has(isa.F_PAIR) for i in prog.instrs)
    got = img.read(y, img.run(prog))
    Wd = img.dequantized(w)[:, :k]
    same = seed_reference(a, Wd)                 # same math, only fp32 rounding of the epilogue differs
    err, cos = R.max_abs(got, same), R.cosine(got, same)
    plain = R.matmul(a, Wd)                      # activation quantisation error included
    err_p, cos_p = R.max_abs(got, plain), R.cosine(got, plain)
    row_only = R.quantized_matmul(a, Wd, D, row=True)
    err_r, cos_r = R.max_abs(row_only, plain), R.cosine(row_only, plain)
    print(f"{fmt} M={m} K={k} N={n}: vs same math max-abs {err:.3g} cos {cos:.9f}; vs float64 max-abs "
          f"{err_p:.3g} cos {cos_p:.7f} (one scale per row, no offsets: {err_r:.3g}, {cos_r:.7f})")
    assert err <= 4e-7 * np.abs(same).max() * np.sqrt(k) and cos > 0.99999999
    assert cos_p > 0.9999 and err_p < err_r
