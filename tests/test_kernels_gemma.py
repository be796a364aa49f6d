"""Gemma's GeGLU MLP (gelu, tanh approximation) and final logit soft cap on the golden simulator:
against float64 (max-abs, cosine) on random and edge inputs, and bit for bit against the fp32
sequence the kernels state (otpu_core.fp32 functions in the same order)."""
import numpy as np
import pytest

from otpu_core import fp32 as F
from otpu_core import ol
from otpu_core.kernels import geglu_mlp, gelu_tanh, softcap, softcap_rows
from otpu_core.kernels import reference as R
from otpu_core.kernels.activations import GELU_A, GELU_C
from otpu_core.ol.runtime import Image

T = "sim-small"
EDGES = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 0.5, -0.5, 3.0, -3.0, 9.0, -9.0, 30.0, -30.0, 1e4, -1e4,
                  1e13, -1e13, 3e38, -3e38, np.inf, -np.inf], np.float32)


def _c(v) -> np.uint32:
    return np.float32(v).view(np.uint32)


def gelu_fp32(x):
    b = np.asarray(x, np.float32).view(np.uint32)
    u = F.mul(b, F.add(F.mul(F.mul(b, b), _c(GELU_A)), _c(1.0)))
    e = F.exp2(F.mul(u, _c(-2.0 * GELU_C * ol.LOG2E)))
    return F.mul(b, F.recip(F.add(e, _c(1.0)))).view(np.float32)


def softcap_fp32(x, cap):
    b = np.asarray(x, np.float32).view(np.uint32)
    r = F.recip(F.add(F.exp2(F.mul(b, _c(2.0 * ol.LOG2E / cap))), _c(1.0)))
    return F.add(F.mul(r, _c(-2.0 * cap)), _c(cap)).view(np.float32)


def _f64_gelu_at(x):
    with np.errstate(invalid="ignore"):
        return R.gelu_tanh(x)


def _elementwise(fn, x):
    img = Image(T)
    xt, out = img.tensor(x), img.tensor(shape=x.shape)

    def k(x, out):
        ol.store(out, fn(ol.load(x)))
    return img.read(out, img.run(ol.compile_kernel(k, T, x=xt, out=out)))


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(200) * 3, rng.uniform(-40, 40, 100), EDGES]).astype(np.float32)
    return x


def test_gelu_tanh_against_float64_and_its_fp32_sequence():
    x = _inputs(1)
    got = _elementwise(gelu_tanh, x)
    assert np.array_equal(got.view(np.uint32), gelu_fp32(x).view(np.uint32))
    finite = np.isfinite(x) & (np.abs(x) < 1e4)
    ref = R.gelu_tanh(x[finite])
    e, c = R.max_abs(got[finite], ref), R.cosine(got[finite], ref)
    print(f"gelu_tanh max-abs {e:.2e} cos {c:.9f}")
    assert e < 4e-6 and c > 0.99999999, (e, c)
    big = np.isfinite(x) & (np.abs(x) >= 1e4)
    assert np.array_equal(got[big], np.where(x[big] > 0, x[big], 0.0))     # saturates to x and to -0
    assert got[x == np.inf][0] == np.inf and np.isnan(_f64_gelu_at(-np.inf))    # -inf * 0, as the formula
    assert not np.isnan(got[np.isfinite(x)]).any()


@pytest.mark.parametrize("cap", [30.0, 15.0, 1.0])
def test_softcap_against_float64_and_its_fp32_sequence(cap):
    x = _inputs(2)
    got = _elementwise(lambda t: softcap(t, cap), x)
    assert np.array_equal(got.view(np.uint32), softcap_fp32(x, cap).view(np.uint32))
    ref = R.softcap(x.astype(np.float64), cap)
    e, c = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"softcap {cap} max-abs {e:.2e} cos {c:.9f}")
    assert e < 4e-7 * cap and c > 0.99999999, (e, c)
    assert np.all(np.abs(got) <= cap) and not np.isnan(got).any()


def test_softcap_rows_caps_a_vocabulary_of_logits_in_dram():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(1000) * 20).astype(np.float32)
    img = Image(T)
    src, dst = img.tensor(logits), img.tensor(shape=(1000,))

    def k(src, dst):
        softcap_rows(src, dst, 30.0, 256)
    prog = ol.compile_kernel(k, T, src=src, dst=dst)
    assert sum(i.op.name == "LOOP" for i in prog.instrs) == 1
    got = img.read(dst, img.run(prog))
    assert np.array_equal(got.view(np.uint32), softcap_fp32(logits, 30.0).view(np.uint32))
    e, c = R.max_abs(got, R.softcap(logits, 30.0)), R.cosine(got, R.softcap(logits, 30.0))
    assert e < 1.2e-5 and c > 0.99999999, (e, c)


@pytest.mark.parametrize("m,fchunks,fmt", [(1, 2, "int8"), (3, 6, "int8"), (2, 3, "fp4x6")])
def test_geglu_mlp_against_float64(m, fchunks, fmt):
    rng = np.random.default_rng(m * 10 + fchunks)
    d, fc = 64, 32
    f = fc * fchunks
    x = rng.standard_normal((m, d)).astype(np.float32)
    wg, wu = ((rng.standard_normal((f, d)) * 0.3).astype(np.float32) for _ in range(2))
    wd = (rng.standard_normal((d, f)) * 0.2).astype(np.float32)
    img = Image(T)
    xt, gq, uq, dq, out = img.tensor(x), img.weight(wg, fmt), img.weight(wu, fmt), img.weight_parts(wd, fc, fmt), \
        img.tensor(shape=(m, d))

    def kernel(x, wg, wu, wd, out):
        ol.store(out, geglu_mlp(ol.load(x), wg, wu, wd, fc))
    got = img.read(out, img.run(ol.compile_kernel(kernel, T, x=xt, wg=gq, wu=uq, wd=dq, out=out)))
    ref = R.geglu_mlp(x, img.dequantized(gq), img.dequantized(uq), img.dequantized(dq))
    e, c = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"geglu {m}x{f} {fmt}: max-abs {e:.2e} cos {c:.6f}")
    assert c > 0.999 and e < 0.05 * np.abs(ref).max(), (e, c)
