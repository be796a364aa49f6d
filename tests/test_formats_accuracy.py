"""Quantise -> dequantise against the float64 original: max-abs error (against a per-format bound
derived from the element grid) and cosine, for every format; the seed claim that fp4x6 is at
least as accurate as the public 4-bit format."""
import numpy as np
import pytest

from otpu_core import formats as Fm
from otpu_core.isa import WF_E2M1, WF_FP4X6, WF_INT4, WF_INT8, WF_INT8X

D = 128


def weights(seed=11, n=96, k=1000):
    rng = np.random.default_rng(seed)
    # rows of different magnitude and a few outliers, like real projection matrices
    w = rng.normal(size=(n, k)) * np.exp(rng.normal(size=(n, 1)))
    w[rng.random((n, k)) < 0.002] *= 8
    return w.astype(np.float32)


def cosine(a, b):
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


def blocks(w):
    n, k = w.shape
    x = np.zeros((n, -(-k // D) * D))
    x[:, :k] = w
    return x.reshape(n, -1, D)


def test_int8_error_within_half_a_step():
    w = weights()
    deq = Fm.quantize(w, WF_INT8, D).dequantize()
    step = np.abs(blocks(w)).max(axis=-1, keepdims=True) / 127          # scale per (row, block)
    err = np.abs(blocks(deq) - blocks(w))
    assert (err <= 0.5 * step * (1 + 1e-5) + 1e-30).all()
    print("int8 max-abs", err.max(), "cos", cosine(deq, w))
    assert cosine(deq, w) > 0.9999


def test_int8x_error_within_half_of_its_power_of_two_step():
    w = weights()
    p = Fm.quantize(w, WF_INT8X, D)
    dec = p.decode()
    step = (2.0 ** dec.shift * dec.row_scale.view(np.float32)[:, None])[..., None]
    ideal = np.abs(blocks(w)).max(axis=-1, keepdims=True) / 127
    assert (step <= 2 * ideal * (1 + 1e-6) + (ideal == 0)).all()                # within 2x of ideal
    err = np.abs(blocks(p.dequantize()) - blocks(w))
    assert (err <= 0.5 * step * (1 + 1e-6)).all()
    deq = p.dequantize()
    print("int8x max-abs", err.max(), "cos", cosine(deq, w))
    assert cosine(deq, w) > 0.9998


@pytest.mark.parametrize("wf", [WF_INT4, WF_E2M1, WF_FP4X6])
def test_4bit_error_bounds_and_cosine(wf):
    w = weights()
    p = Fm.quantize(w, wf, D)
    deq = p.dequantize()
    dec = p.decode()
    kb = dec.w.shape[0]
    # per sub-block element unit u = value of one multiplier step times the grid unit
    if wf == WF_FP4X6:
        words = p.scales.view("<u4")
        unit = 2.0 ** ((words & 0xFF).astype(np.float64) - 127)[..., None] * np.ones(4)
        mult = ((words[..., None] >> (8 + 6 * np.arange(4))) & 63).astype(np.float64)
    else:
        words = p.scales.view("<u4")
        unit = (words << 16).view(np.float32).astype(np.float64)[..., None] * np.ones(4)
        unit = unit * (2 if wf == WF_E2M1 else 1)                          # stored S/2 for E2M1
        mult = ((words[..., None] >> (16 + 4 * np.arange(4))) & 15).astype(np.float64)
    scale = (unit * mult)[..., None]                                       # [n, kb, 4, 1]
    x = blocks(w).reshape(w.shape[0], kb, 4, D // 4)
    err = np.abs(blocks(deq).reshape(x.shape) - x)
    top = 7.0 if wf == WF_INT4 else 6.0
    inside = np.abs(x) <= top * scale
    # inside the grid the error is at most half the widest gap (int4: 0.5, E2M1: 1 between 4 and 6)
    half_gap = 0.5 if wf == WF_INT4 else 1.0
    assert (err[inside] <= half_gap * np.broadcast_to(scale, x.shape)[inside] * (1 + 1e-6)).all()
    c = cosine(deq, w)
    print(wf, "max-abs", err.max(), "cos", c)
    assert c > 0.99


def test_fp4x6_at_least_as_accurate_as_public_e2m1():
    w = weights(seed=3, n=128, k=1024)
    rel = {}
    for wf in (WF_E2M1, WF_FP4X6):
        deq = Fm.quantize(w, wf, D).dequantize()
        rel[wf] = np.sqrt(((deq - w) ** 2).sum() / (w.astype(np.float64) ** 2).sum())
    assert rel[WF_FP4X6] <= rel[WF_E2M1]


def test_search_never_worse_than_nearest_multiplier():
    w = weights(seed=5, n=32, k=512)
    for wf in (WF_INT4, WF_E2M1, WF_FP4X6):
        e_search = ((Fm.quantize(w, wf, D).dequantize() - w) ** 2).sum()
        e_near = ((Fm.quantize(w, wf, D, search=False).dequantize() - w) ** 2).sum()
        assert e_search <= e_near


def test_nvfp4_error_and_cosine():
    w = weights(seed=9, n=64, k=512).astype(np.float64)
    nv = Fm.quantize_nvfp4(w, D)
    deq = nv.dequantize()
    amax_group = np.abs(w.reshape(64, -1, 16)).max(axis=-1, keepdims=True)
    err = np.abs(deq.reshape(64, -1, 16) - w.reshape(64, -1, 16))
    # E4M3 rounds the group scale by at most 1/16 relative, the E2M1 grid gap is at most 2 units
    assert (err <= amax_group / 6 * (1 + 1 / 16) * 1.0 + 1e-12).all()
    assert cosine(deq, w) > 0.99


def test_zero_and_tiny_matrices_stay_finite():
    for wf in (WF_INT8, WF_INT4, WF_E2M1, WF_INT8X, WF_FP4X6):
        for w in (np.zeros((2, 256), np.float32), np.full((2, 256), 1e-30, np.float32)):
            deq = Fm.quantize(w, wf, D).dequantize()
            assert np.isfinite(deq).all() and np.abs(deq - w).max() <= 1e-30
