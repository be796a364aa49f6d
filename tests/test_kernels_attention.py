"""Paged attention with a sliding window against float64 attention over the last W positions of
the dequantised cache (max-abs, cosine), at compile-time and run-time positions; a window that
covers whole pages is bit-identical to full attention over those pages, and no window is full
attention."""
import numpy as np
import pytest

from otpu_core import ol
from otpu_core.kernels import reference as R
from otpu_core.kernels.attention import mask_table, paged_attention
from otpu_core.ol.runtime import Image

T = "sim-small"
P, DH, G = 32, 32, 2          # page tokens, head dim, query heads in the group


def _setup(n_pages, seed):
    rng = np.random.default_rng(seed)
    n = n_pages * P
    q = rng.standard_normal((G, DH)).astype(np.float32)
    k = rng.standard_normal((n, DH)).astype(np.float32)
    v = rng.standard_normal((n, DH)).astype(np.float32)
    img = Image(T)
    pages = [img.kv_cache(P, DH) for _ in range(n_pages)]
    return img, pages, q, k, v


def _kernel(n_pages, n_tokens, **attn):
    def kern(q, kk, vv, pages, out, mask=None):
        for i in ol.static_range(n_pages):
            for t in ol.range(min(P, n_tokens - i * P)):
                ol.kv_append(pages[i], t, ol.load(kk[i * P + t]), ol.load(vv[i * P + t]))
        extra = {"last_mask": mask[ol.runvar("t")]} if mask is not None else {}
        ol.store(out, paged_attention(ol.load(q), pages, **attn, **extra))
    return kern


def _reference(q, k, v, lo, hi):
    """float64 attention of q over positions [lo, hi) of the cache as the card stores it."""
    kq = R.quantize_rows(k, 32)[:, :DH]
    vq = R.quantize_rows(v, DH, row=True)[:, :DH]
    return R.attention(q, kq[lo:hi], vq[lo:hi])


def _run(n_pages, n_tokens, window, runtime=False, seed=0):
    img, pages, q, k, v = _setup(n_pages, seed)
    qt, kt, vt, out = img.tensor(q), img.tensor(k), img.tensor(v), img.tensor(shape=(G, DH))
    last = n_tokens - (n_pages - 1) * P
    args = dict(q=qt, kk=kt, vv=vt, pages=pages, out=out)
    if runtime:
        args["mask"] = img.tensor(mask_table(P))
        attn = {"window": window}
    else:
        attn = {"last_n": last, "window": window}
    prog = ol.compile_kernel(_kernel(n_pages, n_tokens, **attn), T, **args)
    got = img.read(out, img.run(prog, **({"t": last - 1} if runtime else {})))
    return got, q, k, v, prog


@pytest.mark.parametrize("n_pages,n_tokens,window", [(4, 120, 50), (3, 80, 20), (2, 40, 200), (4, 100, 33)])
def test_sliding_window_attends_only_the_last_w_positions(n_pages, n_tokens, window):
    got, q, k, v, _ = _run(n_pages, n_tokens, window, seed=n_tokens + window)
    lo = max(0, n_tokens - window)
    ref = _reference(q, k, v, lo, n_tokens)
    full = _reference(q, k, v, 0, n_tokens)
    e, c = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"window {window} of {n_tokens}: max-abs {e:.2e} cos {c:.7f}")
    assert e < 2e-2 and c > 0.9999, (e, c)
    if lo:
        assert R.max_abs(got, full) > 10 * e          # the keys before the window were not attended


@pytest.mark.parametrize("t", [0, 13, P - 1])
def test_sliding_window_at_a_run_time_position(t):
    n_pages = 4
    n_tokens = 3 * P + t + 1
    got, q, k, v, prog = _run(n_pages, n_tokens, 2 * P, runtime=True, seed=t)
    ref = _reference(q, k, v, n_tokens - 2 * P, n_tokens)
    e, c = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"run-time window at t={t}: max-abs {e:.2e} cos {c:.7f}")
    assert e < 2e-2 and c > 0.9999, (e, c)


def test_a_window_of_whole_pages_equals_full_attention_over_them_bit_for_bit():
    n_pages = 4
    got, q, k, v, prog = _run(n_pages, n_pages * P, 2 * P, seed=5)
    img, pages, *_ = _setup(n_pages, 5)
    qt, kt, vt, out = img.tensor(q), img.tensor(k), img.tensor(v), img.tensor(shape=(G, DH))

    def kern(q, kk, vv, pages, out):
        for i in ol.static_range(n_pages):
            for t in ol.range(P):
                ol.kv_append(pages[i], t, ol.load(kk[i * P + t]), ol.load(vv[i * P + t]))
        ol.store(out, paged_attention(ol.load(q), pages[2:], last_n=P))
    full = img.read(out, img.run(ol.compile_kernel(kern, T, q=qt, kk=kt, vv=vt, pages=pages, out=out)))
    assert np.array_equal(got.view(np.uint32), full.view(np.uint32))


def test_no_window_is_the_full_attention_program():
    a = _run(3, 70, None)[4]
    b = _run(3, 70, 10_000)[4]
    assert [i.words for i in a.instrs] == [i.words for i in b.instrs]


def test_a_run_time_window_must_be_whole_pages():
    with pytest.raises(ol.CompileError, match="whole pages of 32"):
        _run(3, 70, 40, runtime=True)


@pytest.mark.parametrize("t", [0, 17, 31, 32, 50, 63])
def test_a_last_page_s_first_half_alone_gives_the_whole_page_s_bits(t):
    """A run-time position in the first half of its page attends over that half alone (halves=: the
    run-time 0/1 counts of the whole page and of its first half), and the output is the whole page's
    bit for bit; past the half the whole page runs. Leaving the half out past it would change them."""
    P2, n_pages = 2 * P, 2          # pages of two D-blocks pairs' worth (D = 32 on sim-small)
    rng = np.random.default_rng(t)
    n = (n_pages - 1) * P2 + t + 1
    q = rng.standard_normal((G, DH)).astype(np.float32)
    k, v = (rng.standard_normal((n_pages * P2, DH)).astype(np.float32) for _ in range(2))

    def kern(q, kk, vv, pages, mask, out, counts):
        for i in ol.static_range(n_pages):
            for s in ol.range(P2):
                ol.kv_append(pages[i], s, ol.load(kk[i * P2 + s]), ol.load(vv[i * P2 + s]))
        c = ol.load(counts) if counts is not None else None
        halves = (ol.rld(c[0:1]), ol.rld(c[1:2])) if c is not None else None
        ol.store(out, paged_attention(ol.load(q), pages, last_mask=mask[ol.runvar("t")], halves=halves))

    def run(halves, full):
        img = Image(T)
        pages = [img.kv_cache(P2, DH) for _ in range(n_pages)]
        args = dict(q=img.tensor(q), kk=img.tensor(k), vv=img.tensor(v), pages=pages,
                    mask=img.tensor(mask_table(P2)), out=img.tensor(shape=(G, DH)),
                    counts=img.tensor(np.array([full, not full], np.float32)) if halves else None)
        prog = ol.compile_kernel(kern, T, **args)
        return img.read(args["out"], img.run(prog, t=t))
    whole = run(False, True)
    ref = _reference(q, k, v, 0, n)
    assert R.max_abs(whole, ref) < 2e-2 and R.cosine(whole, ref) > 0.9999
    assert np.array_equal(run(True, t >= P2 // 2).view(np.uint32), whole.view(np.uint32))
    if t >= P2 // 2:
        assert not np.array_equal(run(True, False), whole)
