"""matmul on the golden simulator against float64 references (sim-small: D=32, MCOLS=4).

Each case reports max-abs error and cosine against (a) the same math in float64 with the
activations quantised per block as QACT does (only fp32 rounding may differ) and (b) the plain
float64 product (activation quantisation error included)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from otpu_core import formats, ol
from otpu_core.kernels import matmul, reference as R
from otpu_core.ol.runtime import Image

T = "sim-small"
D = 32


def run_matmul(a, W, fmt, n_chunk=None):
    img = Image(T)
    x, w, y = img.tensor(a), img.weight(W, fmt), img.tensor(shape=a.shape[:1] + (W.shape[0],))
    prog = ol.compile_kernel(matmul, T, x=x, w=w, y=y, n_chunk=n_chunk)
    got = img.read(y, img.run(prog))
    return got, img.dequantized(w)[:, : a.shape[1]], prog


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 9), k=st.integers(1, 150), n=st.integers(1, 40), seed=st.integers(0, 2**16),
       chunk=st.sampled_from([None, 7, 16]))
def test_int8_random_shapes(m, k, n, seed, chunk):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    W = rng.standard_normal((n, k)).astype(np.float32)
    got, Wd, _ = run_matmul(a, W, "int8", chunk)
    same = R.quantized_matmul(a, Wd, D)
    err, cos = R.max_abs(got, same), R.cosine(got, same)
    scale = np.abs(same).max() + 1e-30
    assert err <= 1e-5 * scale * np.sqrt(k) and cos > 0.9999999, (err, cos)
    plain = R.matmul(a, Wd)
    err, cos = R.max_abs(got, plain), R.cosine(got, plain)
    assert err <= 0.05 * np.abs(plain).max() + 1e-6 and cos > 0.999, (err, cos)   # activation quantisation only


def seed_quantized_matmul(a, Wd):
    """The seed formats' activations as quantize_for writes them (one scale per row and a
    power-of-two offset per D/4 sub-block, formats.quantize_suboffsets), in float64."""
    kp = -(-a.shape[1] // D) * D
    x = np.zeros((a.shape[0], kp), np.float32)
    x[:, :a.shape[1]] = a
    q, s, e = formats.quantize_suboffsets(x.view(np.uint32), D)
    return formats.act_values(q, s, e, D)[:, :a.shape[1]] @ np.asarray(Wd, np.float64).T


@pytest.mark.parametrize("m,k,n", [(1, 32, 1), (1, 33, 5), (4, 64, 8), (5, 100, 9), (9, 96, 17)])
@pytest.mark.parametrize("fmt", ["int8", "int4", "e2m1", "int8x", "fp4x6"])
def test_formats_and_edges(m, k, n, fmt):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    W = rng.standard_normal((n, k)).astype(np.float32)
    got, Wd, prog = run_matmul(a, W, fmt)
    same = seed_quantized_matmul(a, Wd) if fmt in ("int8x", "fp4x6") else R.quantized_matmul(a, Wd, D)
    err, cos = R.max_abs(got, same), R.cosine(got, same)
    assert err <= 1e-5 * (np.abs(same).max() + 1e-30) * np.sqrt(k) and cos > 0.9999999, (fmt, err, cos)


def test_n_chunks_run_in_a_hardware_loop():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 64)).astype(np.float32)
    W = rng.standard_normal((50, 64)).astype(np.float32)
    got, Wd, prog = run_matmul(a, W, "int8", n_chunk=16)
    loops = [i for i in prog.instrs if i.op.name == "LOOP"]
    mms = [i for i in prog.instrs if i.op.name == "MM"]
    assert len(loops) == 1 and loops[0]["count"] == 3 and len(mms) == 2     # 3 x 16 in the loop + tail 2
    assert R.cosine(got, R.quantized_matmul(a, Wd, D)) > 0.9999999


def test_k_beyond_act_capacity_is_refused():
    img = Image(T)
    big = 16 * D + 1
    x, w, y = img.tensor(shape=(1, big)), None, img.tensor(shape=(1, 4))
    w = ol.QTensor(4096, 8192, (4, 17 * D), 17 * D, 68, 0, D)
    with pytest.raises(ol.CompileError, match="ACT RAM"):
        ol.compile_kernel(matmul, T, x=x, w=w, y=y)
