"""kernels/conv.py on the golden simulator: the short causal convolution with its ring in DRAM.

A sequence is fed in runs of random lengths (the ring carrying the history between runs, each
run a separate program on a fresh simulator over the same DRAM); the outputs must be bit for
bit the card's fp32 order of operations (`conv.fp32_steps`) and close to the float64 formula
(max-abs and cosine reported). The ring starts full of junk, which the gate of positions before
0 must hide; a sequence that starts at a large position checks the on-card position modulo.
"""
import numpy as np
import pytest

from otpu_core import ol
from otpu_core.kernels import conv
from otpu_core.kernels import reference as R
from otpu_core.ol.runtime import Image

T = "sim-small"


def _kernel(u, w, ring, out, posw, p0, n, taps, d, activation):
    rows = conv.RingRows(ol.load(posw), taps, 4 * d)
    ys = conv.short_conv([ol.load(u[p0 + j]) for j in range(n)], w, ring, rows, activation)
    for j, y in enumerate(ys):
        ol.store(out[p0 + j], y)


def run_sequence(u, w, runs, start=0, ring_fill=7.0, activation=None):
    """Feed u [T, d] at positions start.. in runs of the given lengths; the outputs [T, d]."""
    taps, d = w.shape
    img = Image(T)
    ut, wt = img.tensor(u), img.tensor(w)
    ring = img.tensor(np.full((conv.ring_rows(taps), d), ring_fill, np.float32))
    out, posw = img.tensor(shape=u.shape), img.tensor(shape=(1,))
    p = 0
    for n in runs:
        prog = ol.compile_kernel(_kernel, T, u=ut, w=wt, ring=ring, out=out, posw=posw, p0=p, n=n, taps=taps, d=d,
                                 activation=activation)
        img.write(posw.base.static(), np.array([start + p], np.float32))
        m = img.run(prog)
        img.dram[:img.cursor] = np.frombuffer(bytes(m.slice.dram.bytes[:img.cursor]), np.uint8)
        p += n
    return img.read(out, m)


@pytest.mark.parametrize("taps,d,seed", [(2, 32, 0), (3, 64, 1), (3, 40, 2), (4, 32, 3), (5, 16, 4)])
def test_short_conv_runs_equal_the_fp32_sequence_and_float64(taps, d, seed):
    rng = np.random.default_rng(seed)
    runs = [int(n) for n in rng.integers(1, 5, 6)]
    u = rng.standard_normal((sum(runs), d)).astype(np.float32)
    w = rng.standard_normal((taps, d)).astype(np.float32)
    got = run_sequence(u, w, runs)
    ref = conv.reference(u, w)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert np.array_equal(got.view(np.uint32), conv.fp32_steps(u, w).view(np.uint32)), (err, cos)
    assert err < 1e-5 and cos > 1 - 1e-12, (err, cos)


@pytest.mark.parametrize("start", [1, 2, 3, 998, 4097, 65538, 1000001])
def test_the_ring_row_follows_the_position_anywhere(start):
    """A zeroed ring at a late position is a sequence of zeros before it: same outputs as from 0."""
    rng = np.random.default_rng(start)
    taps, d = 3, 32
    u = rng.standard_normal((7, d)).astype(np.float32)
    w = rng.standard_normal((taps, d)).astype(np.float32)
    got = run_sequence(u, w, [1, 3, 1, 2], start=start, ring_fill=0.0)
    assert np.array_equal(got.view(np.uint32), conv.fp32_steps(u, w).view(np.uint32))


def test_silu_after_the_convolution():
    rng = np.random.default_rng(9)
    taps, d = 4, 32
    u = rng.standard_normal((6, d)).astype(np.float32)
    w = rng.standard_normal((taps, d)).astype(np.float32)
    got = run_sequence(u, w, [2, 1, 3], activation="silu")
    ref = conv.reference(u, w, activation="silu")
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err < 1e-5 and cos > 1 - 1e-10, (err, cos)
    assert not np.array_equal(got, conv.fp32_steps(u, w))


def test_a_short_conv_needs_two_taps():
    with pytest.raises(ol.CompileError, match="at least 2 taps"):
        ol.compile_kernel(_kernel, T, u=None, w=None, ring=None, out=None, posw=Image(T).tensor(shape=(1,)), p0=0,
                          n=1, taps=1, d=32, activation=None)
