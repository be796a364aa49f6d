"""rmsnorm, softmax and rope on the golden simulator against float64 references (max-abs, cosine)."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from otpu_core import ol
from otpu_core.kernels import reference as R
from otpu_core.kernels import rmsnorm, rmsnorm_quantized, rope, softmax
from otpu_core.ol.runtime import Image

T = "sim-small"
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(kernel, **arrays):
    img = Image(T)
    args = {k: img.tensor(v) for k, v in arrays.items()}
    out = img.tensor(shape=next(iter(arrays.values())).shape)
    prog = ol.compile_kernel(kernel, T, out=out, **args)
    return img.read(out, img.run(prog)), prog


@SETTINGS
@given(rows=st.integers(1, 6), cols=st.integers(1, 96), seed=st.integers(0, 2**16), scale=st.sampled_from([1e-3, 1.0, 300.0]))
def test_rmsnorm(rows, cols, seed, scale):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)

    def k(x, w, out):
        ol.store(out, rmsnorm(ol.load(x), ol.load(w)))
    img = Image(T)
    xt, wt, out = img.tensor(x), img.tensor(w), img.tensor(shape=x.shape)
    got = img.read(out, img.run(ol.compile_kernel(k, T, x=xt, w=wt, out=out)))
    ref = R.rmsnorm(x, w)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err <= 4e-6 * np.abs(ref).max() and cos > 0.99999999, (err, cos)


@SETTINGS
@given(rows=st.integers(1, 6), cols=st.integers(1, 200), seed=st.integers(0, 2**16), scale=st.sampled_from([0.1, 3.0, 30.0]))
def test_softmax(rows, cols, seed, scale):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def k(x, out):
        ol.store(out, softmax(ol.load(x)))
    got, prog = _run(k, x=x)
    ref = R.softmax(x)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err < 2e-6 and cos > 0.9999999, (err, cos)
    assert np.allclose(got.sum(-1), 1.0, atol=1e-5)
    assert prog.stats.peepholes["exp2sub"]["instrs"] == 1


@SETTINGS
@given(heads=st.integers(1, 5), half=st.integers(1, 24), seed=st.integers(0, 2**16), pos=st.integers(0, 9))
def test_rope_from_tables_at_runtime_position(heads, half, seed, pos):
    rng = np.random.default_rng(seed)
    hd = 2 * half
    x = rng.standard_normal((heads, hd)).astype(np.float32)
    theta = rng.uniform(-np.pi, np.pi, (10, half))
    img = Image(T)
    xt, ct, st_ = img.tensor(x), img.tensor(np.cos(theta)), img.tensor(np.sin(theta))
    out = img.tensor(shape=x.shape)

    def k(x, c, s, out):
        ol.store(out, rope(ol.load(x), c, s, ol.runvar("pos")))
    prog = ol.compile_kernel(k, T, x=xt, c=ct, s=st_, out=out)
    got = img.read(out, img.run(prog, pos=pos))
    ref = R.rope(x, np.cos(theta[pos]).astype(np.float32), np.sin(theta[pos]).astype(np.float32))
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err < 1e-6 * max(1.0, np.abs(ref).max()) * 4 and cos > 0.9999999, (err, cos)


def test_rmsnorm_quantized_is_one_rssq_and_one_fused_qact():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    W = rng.standard_normal((8, 64)).astype(np.float32)
    img = Image(T)
    xt, wt, wq, out = img.tensor(x), img.tensor(w), img.weight(W), img.tensor(shape=(3, 8))

    def k(x, w, wq, out):
        ol.store(out, ol.dot(rmsnorm_quantized(ol.load(x), ol.load(w)), wq))
    prog = ol.compile_kernel(k, T, x=xt, w=wt, wq=wq, out=out)
    funcs = [i.func.name for i in prog.instrs if i.op.name == "VOP"]
    qacts = [i for i in prog.instrs if i.op.name == "QACT"]
    assert funcs.count("RSSQ") == 1 and "MUL" in funcs and funcs.count("MUL") == 1   # only the 1/n scaling
    assert len(qacts) == 1 and qacts[0]["cscale"] and qacts[0]["rscale"]
    got = img.read(out, img.run(prog))
    ref = R.matmul(R.rmsnorm(x, w), img.dequantized(wq))
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err <= 0.02 * np.abs(ref).max() and cos > 0.999, (err, cos)   # int8 activations: ~1/127 per term
