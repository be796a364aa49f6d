"""The vectorised exact MM over activations with sub-block offsets (mxu.mm with act_sub) at the
board's D=128, against an int64 model: both ways the model computes block sums (one matmul per
block where provably exact, per-sub-block dots elsewhere), PAIR, the 48-bit wrap; and the
accuracy the offsets buy on rows with an outlier sub-block (both errors reported)."""
import numpy as np
import pytest

from otpu_core import formats, fp32 as F, isa, mxu

D, SUB, E = 128, 32, isa.SUB_EXP_MAX


def int64_model(q, s, e, dec, pair=False):
    """uint32 [M, n]: exact int64 sum of (q << (Emax - e)) * (w << shift) per output row, then
    i2f (numpy int64 -> float32, one rounding), * 2^-Emax (exact), * Sw, * Sa (fp32 each)."""
    rows, k = q.shape
    m = rows // 2 if pair else rows
    kb = k // D
    if pair:     # output row j: even blocks from row j, odd blocks from row j + M
        odd = (np.arange(k) // D) % 2 == 1
        q = np.where(odd, q[m:], q[:m])
        e = np.where(((np.arange(kb * 4) // 4) % 2 == 1), e[m:], e[:m])
        s = s[:m]
    emax = e.max(axis=1).astype(np.int64)
    a = (q.astype(np.int64).reshape(m, -1, SUB) << (emax[:, None] - e.astype(np.int64))[..., None]).reshape(m, k)
    w = dec.w.astype(np.int64).transpose(1, 0, 2) << dec.shift[:, :, None]            # [n, kb, D]
    acc = a @ w.reshape(w.shape[0], k).T
    acc = ((acc + 2 ** 47) % 2 ** 48) - 2 ** 47
    y = acc.astype(np.float32).astype(np.float64) * 2.0 ** -emax[:, None]
    y = (y * F.to_float(dec.row_scale).astype(np.float64)[None, :]).astype(np.float32).astype(np.float64)
    return (y * F.to_float(s).astype(np.float64)[:, None]).astype(np.float32).view(np.uint32)


def weights(rng, wf, n, kb):
    w = rng.standard_normal((n, kb * D)) * np.exp2(rng.integers(-8, 1, (1, kb * D)))
    return formats.quantize(w, wf, D).decode()


def mm_sub(q, s, e, dec, pair=False):
    """mxu.mm over ACT rows as QACT SUB leaves them: codes, the row scale in every block, offsets."""
    kb = q.shape[1] // D
    return mxu.mm(q, np.repeat(np.asarray(s, np.uint32)[:, None], kb, axis=1), dec, pair=pair,
                  act_sub=formats.pack_suboffsets(e))


@pytest.mark.parametrize("wf", [isa.WF_INT8X, isa.WF_FP4X6])
def test_random_codes_and_offsets_take_the_sub_block_path_exactly(wf):
    rng = np.random.default_rng(wf)
    kb, rows = 5, 3
    dec = weights(rng, wf, 40, kb)
    q = rng.integers(-127, 128, (rows, kb * D), dtype=np.int8)
    e = rng.integers(0, E + 1, (rows, kb * 4), dtype=np.uint8)
    s = rng.uniform(1e-3, 1e-2, rows).astype(np.float32).view(np.uint32)
    shift = e.max(axis=1)[:, None, None] - e.reshape(rows, kb, 4).astype(np.int64)
    _, loose, _ = mxu.shifted_block_dots(q, shift, dec)
    assert loose.size == kb                       # every block too wide for one float32 matmul
    got = mm_sub(q, s, e, dec)
    assert np.array_equal(got, int64_model(q, s, e, dec))


@pytest.mark.parametrize("wf", [isa.WF_INT8X, isa.WF_FP4X6])
def test_quantised_rows_take_the_fast_path_exactly(wf):
    rng = np.random.default_rng(10 + wf)
    kb, rows = 8, 8
    dec = weights(rng, wf, 64, kb)
    x = rng.standard_normal((rows, kb * D)).astype(np.float32)
    x[:, rng.choice(kb * D, 16, replace=False)] *= 50
    q, s, e = formats.quantize_suboffsets(x.view(np.uint32), D)
    shift = e.max(axis=1)[:, None, None] - e.reshape(rows, kb, 4).astype(np.int64)
    _, loose, _ = mxu.shifted_block_dots(q, shift, dec)
    assert loose.size < kb
    assert np.array_equal(mm_sub(q, s, e, dec), int64_model(q, s, e, dec))


def test_pair_rows_with_offsets():
    rng = np.random.default_rng(3)
    kb, m = 6, 2
    dec = weights(rng, isa.WF_FP4X6, 16, kb)
    q = rng.integers(-127, 128, (2 * m, kb * D), dtype=np.int8)
    e = rng.integers(0, E + 1, (2 * m, kb * 4), dtype=np.uint8)
    s = np.tile(np.float32([0.01, 0.02]).view(np.uint32), 2)          # rows j and j+M share a scale
    got = mm_sub(q, s, e, dec, pair=True)
    assert np.array_equal(got, int64_model(q, s, e, dec, pair=True))


def test_accumulator_wraps_at_48_bits():
    """All-max codes over K = 4096 with the largest weight shift: Emax = 0 keeps the sum below
    2^47; one sub-block at offset 7 pushes it past, and the two's complement sum wraps."""
    kb = 32
    pw = formats.quantize(np.ones((2, kb * D)), isa.WF_INT8X, D)
    dec = pw.decode()
    assert dec.shift.min() == formats.SEED_MAX_SHIFT
    q = np.full((1, kb * D), 127, np.int8)
    s = np.float32([1 / 127]).view(np.uint32)
    e = np.zeros((1, kb * 4), np.uint8)
    y = mm_sub(q, s, e, dec)
    assert np.array_equal(y, int64_model(q, s, e, dec)) and F.to_float(y)[0, 0] == pytest.approx(kb * D, rel=1e-6)
    e[0, 0] = E
    y = mm_sub(q, s, e, dec)
    assert np.array_equal(y, int64_model(q, s, e, dec))
    assert F.to_float(y)[0, 0] < 0                                    # wrapped


def test_offsets_reduce_activation_error_on_outlier_rows():
    """Rows whose first sub-block of every block holds values 100x the rest: with one scale per
    row the small sub-blocks keep ~1 bit; offsets give them back up to 7."""
    rng = np.random.default_rng(7)
    rows, kb = 16, 8
    x = rng.standard_normal((rows, kb * D)).astype(np.float32)
    x.reshape(rows, kb, 4, SUB)[:, :, 0] *= 100
    bits = x.view(np.uint32)
    q_row, s_row = F.quantize(bits)
    plain = q_row.astype(np.float64) * F.to_float(s_row).astype(np.float64)[:, None]
    q, s, e = formats.quantize_suboffsets(bits, D)
    sub = formats.act_values(q, s, e, D)
    small = np.ones((rows, kb, 4, SUB), bool)
    small[:, :, 0] = False
    small = small.reshape(rows, -1)
    err_plain = np.abs(plain - x)[small].max()
    err_sub = np.abs(sub - x)[small].max()
    rel_plain = np.linalg.norm((plain - x)[small]) / np.linalg.norm(x[small])
    rel_sub = np.linalg.norm((sub - x)[small]) / np.linalg.norm(x[small])
    print(f"small sub-blocks: max-abs error {err_plain:.4f} (row scale) vs {err_sub:.4f} (offsets); "
          f"relative L2 {rel_plain:.4f} vs {rel_sub:.5f}; outlier sub-blocks identical: "
          f"{np.array_equal(plain[~small], sub[~small])}")
    assert err_sub < err_plain / 30 and rel_sub < rel_plain / 30
    assert np.array_equal(plain[~small], sub[~small])        # the outlier sub-blocks keep e = 0

    w = rng.standard_normal((32, kb * D))
    dec = formats.quantize(w, isa.WF_INT8X, D).decode()
    wd = dec.values()
    exact = x.astype(np.float64) @ wd.T
    y_plain = F.to_float(mxu.mm(q_row, np.repeat(s_row[:, None], kb, axis=1), dec)).astype(np.float64)
    y_sub = F.to_float(mm_sub(q, s, e, dec)).astype(np.float64)
    cos = [float(a.ravel() @ exact.ravel() / (np.linalg.norm(a) * np.linalg.norm(exact))) for a in (y_plain, y_sub)]
    errs = [float(np.abs(a - exact).max()) for a in (y_plain, y_sub)]
    print(f"matmul against float64 of unquantised x: max-abs {errs[0]:.4f} vs {errs[1]:.4f}, "
          f"cosine {cos[0]:.7f} vs {cos[1]:.7f}")
    assert errs[1] < errs[0] and cos[1] > cos[0]
