"""The QACT SUB quantiser (formats.quantize_suboffsets) under hypothesis: random rows over a wide
exponent range, zero sub-blocks and flushed denormals, against the float64 model of
docs/formats.md 4.1 (codes, scales and offsets equal), plus the side-word packing by hand."""
import numpy as np
from hypothesis import given, settings, strategies as st

from otpu_core import formats, fp32 as F, isa

from test_subexp_sim import qact_sub_model

D = 32


@st.composite
def rows(draw):
    n, kb = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-20, 20, (n, kb * 4, 1)) + rng.uniform(-3, 3, (n, kb * 4, D // 4)))
    x = (rng.choice([-1.0, 1.0], mag.shape) * mag * draw(st.sampled_from([1.0, 1e-30, 1e30])))
    x[rng.random((n, kb * 4)) < 0.2] = 0                                   # whole sub-blocks of zeros
    x = x.reshape(n, kb * D).astype(np.float32)
    if draw(st.booleans()):
        x.flat[rng.integers(0, x.size)] = np.float32(1e-40)                  # a denormal: flushed
    return x


@settings(max_examples=60, deadline=None)
@given(rows())
def test_quantiser_equals_the_float64_model(x):
    q, s, e = formats.quantize_suboffsets(x.view(np.uint32), D)
    flushed = np.where(np.abs(x) < np.float32(2.0 ** -126), np.float32(0), x)
    mq, ms, me = qact_sub_model(flushed)
    assert np.array_equal(q.astype(np.int64), mq)
    assert np.array_equal(F.to_float(s).astype(np.float64), ms)
    assert np.array_equal(e.astype(np.int64), me)
    assert e.max(initial=0) <= isa.SUB_EXP_MAX
    # every offset is the largest that fits: one more would saturate a code of that sub-block
    t = np.abs(flushed.astype(np.float64)).reshape(x.shape[0], -1, D // 4).max(axis=2)
    amax = np.abs(flushed.astype(np.float64)).max(axis=1, keepdims=True)
    fine = (e < isa.SUB_EXP_MAX) & (t > 0) & (amax > 0)
    ratio = np.where(fine, t * 127 / np.where(amax > 0, amax, 1) * np.exp2(e.astype(np.float64) + 1), 0)
    assert (ratio[fine] > 127 * (1 - 1e-6)).all()


def test_side_words_by_hand():
    e = np.array([[0, 6, 0, 7, 1, 2, 3, 4]], np.uint8)
    words = formats.pack_suboffsets(e)
    assert words.tolist() == [[0x8000 | 6 << 3 | 7 << 9, 0x8000 | 1 | 2 << 3 | 3 << 6 | 4 << 9]]
    assert words[0, 0] == 0x8E30
    assert np.array_equal(formats.unpack_suboffsets(words).reshape(1, -1), e)
    assert formats.unpack_suboffsets(np.uint16(0)).tolist() == [0, 0, 0, 0]


def test_worked_example_of_the_docs():
    x = np.array([[100, -50, 1, 0.5, 0, 0, 0.03, -0.01]], np.float32)
    q, s, e = formats.quantize_suboffsets(x.view(np.uint32), 8)
    assert q.tolist() == [[127, -64, 81, 41, 0, 0, 5, -2]]
    assert int(s[0]) == 0x3F499326 and e.tolist() == [[0, 6, 0, 7]]
    assert formats.pack_suboffsets(e)[0, 0] == 0x8E30
