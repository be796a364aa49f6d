"""The simulator's native kernels (otpu_core/simnative.py, otpu_core/native/sim.c) give the bytes
of their numpy twins: every VOP elementwise function and reduction, the QACT quantiser and the
int8 MM, each on over a million random operands (random bit patterns and values in each
function's interesting range) plus the edge operands (NaN payloads of both signs, infinities,
signed zeros, denormals, the normal range's ends, each composite's range boundaries)."""
from __future__ import annotations

import numpy as np
import pytest

from otpu_core import formats, fp32, isa, mxu, simnative
from otpu_core.isa import VFunc
from otpu_core.sim import vector

pytestmark = pytest.mark.skipif(simnative.lib() is None,
                                reason="native kernels unavailable (no compiler or OTPU_NATIVE=0)")

N = 1 << 20


def _edges() -> np.ndarray:
    base = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF,
            0x7FFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000, 0x00800001,
            0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F7FFFFF, 0x3F800001, 0x40000000, 0x3F000000,
            0xC2FC0000, 0xC2FBFFFF, 0xC2FC0001, 0x43000000, 0x42FFFFFF, 0x43000001, 0xC3000000, 0x42FE0000,
            0x7E800000, 0x7E7FFFFF, 0x7E800001, 0xFE800000, 0x01000000, 0x01800000, 0x017FFFFF, 0x7D000000,
            0x7F000000, 0x7E000000, 0x3FB504F3, 0x3FB504F2, 0x3F3504F3, 0x3F3504F2, 0x00FFFFFF, 0x3C010204,
            0x4B000000, 0x4AFFFFFF, 0xCB000000, 0x42FE0001, 0x3EFFFFFF, 0xBEFFFFFF, 0x3FC00000, 0x5F3759DF]
    e = np.array(base, np.uint32)
    near = np.concatenate([e, e + np.uint32(1), e - np.uint32(1), e ^ np.uint32(0x80000000)])
    fields = np.arange(256, dtype=np.uint32) << np.uint32(23)            # every exponent field, both signs
    return np.unique(np.concatenate([near, fields, fields | np.uint32(0x80000000), fields | np.uint32(0x7FFFFF)]))


EDGES = _edges()


def _random(rng, n: int, lo: float, hi: float) -> np.ndarray:
    """Half random bit patterns, half float values in [lo, hi] (both signs when lo < 0)."""
    bits = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32)
    vals = fp32.from_float(rng.uniform(lo, hi, n - n // 2))
    return np.concatenate([bits, vals])


RANGES = {"EXP2": (-140, 140), "EXP2SUB": (-140, 140), "LOG2": (0, 1e6), "RSQRT": (0, 1e6), "RECIP": (-1e6, 1e6)}


def _same(got: np.ndarray, want: np.ndarray, what: str, *operands: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.flatnonzero(got.reshape(-1).view(np.uint32 if got.dtype.itemsize == 4 else got.dtype)
                         != want.reshape(-1).view(np.uint32 if want.dtype.itemsize == 4 else want.dtype))
    if bad.size:
        k = int(bad[0])
        ops = ", ".join(f"0x{int(np.broadcast_to(o, got.shape).reshape(-1)[k]):08x}" for o in operands)
        g, w = (int(x.reshape(-1)[k]) & 0xFFFFFFFF for x in (got, want))
        pytest.fail(f"{what}: {bad.size} of {got.size} differ; first at {k} ({ops}): native 0x{g:08x}, numpy 0x{w:08x}")


@pytest.mark.parametrize("name", sorted(simnative.ELEMENTWISE))
def test_elementwise_bits(name):
    rng = np.random.default_rng(simnative.ELEMENTWISE[name])
    func = VFunc[name]
    lo, hi = RANGES.get(name, (-1e4, 1e4))
    a = np.concatenate([_random(rng, N, lo, hi), np.repeat(EDGES, EDGES.size)])
    b = np.concatenate([_random(rng, N, lo, hi), np.tile(EDGES, EDGES.size)])   # every edge pair
    want = np.broadcast_to(vector._ELEMENTWISE[func](a[None, :], b[None, :]), (1, a.size))
    _same(simnative.elementwise(name, a[None, :], b[None, :], (1, a.size)), want, name, a, b)


@pytest.mark.parametrize("bshape", ["full", "row", "col", "scalar"])
def test_elementwise_strided_and_broadcast(bshape):
    """A strided A tile (ars > cols) and each VOP broadcast of B, as vop() passes them."""
    rng = np.random.default_rng(7)
    rows, cols = 37, 300
    tmem = _random(rng, rows * 320, -50, 50)
    A = np.lib.stride_tricks.as_strided(tmem, (rows, cols), (4 * 320, 4))
    B = {"full": _random(rng, rows * cols, -50, 50).reshape(rows, cols), "row": _random(rng, rows, -50, 50)[:, None],
         "col": _random(rng, cols, -50, 50)[None, :], "scalar": np.full((1, 1), 0x3FC00000, np.uint32)}[bshape]
    for name in ("SUB", "RSUB", "MUL", "EXP2SUB", "FILL", "MAX"):
        want = np.broadcast_to(vector._ELEMENTWISE[VFunc[name]](A, np.broadcast_to(B, (rows, cols))), (rows, cols))
        _same(simnative.elementwise(name, A, np.broadcast_to(B, (rows, cols)), (rows, cols)), want, name)


def _rows_with_edges(rng, rows: int, cols: int) -> np.ndarray:
    x = _random(rng, rows * cols, -3, 3).reshape(rows, cols)
    # sprinkle edges, and rows of tiny values whose running sums pass through denormals
    pick = rng.random(x.shape) < 0.01
    x[pick] = rng.choice(EDGES, int(pick.sum()))
    tiny = rng.random(rows) < 0.3
    x[tiny] = fp32.from_float(rng.uniform(-1, 1, (int(tiny.sum()), cols)) * 2.0 ** -125)
    return x


@pytest.mark.parametrize("name", sorted(simnative.REDUCE))
def test_reduce_bits(name):
    rng = np.random.default_rng(100 + simnative.REDUCE[name])
    total = 0
    for cols in (1, 2, 3, 63, 64, 65, 127, 128, 513, 1024, 3000):
        rows = max(8, N // 8 // cols)
        a, b = _rows_with_edges(rng, rows, cols), _rows_with_edges(rng, rows, cols)
        for bb in ((b, b[:1]) if name == "RDOT" else (None,)):
            want = vector._REDUCE[VFunc[name]](a, bb)
            _same(simnative.reduce(name, a, bb), want, f"{name} cols={cols}")
        total += a.size
    assert total >= N


def test_quantize_bits():
    rng = np.random.default_rng(3)
    total = 0
    for size in (1, 7, 128, 1024, 3072):
        groups = max(8, N // 4 // size)
        x = _rows_with_edges(rng, groups, size)
        x[::5] = fp32.from_float(rng.uniform(-1, 1, x[::5].shape) * 10.0 ** rng.integers(-38, 38, (x[::5].shape[0], 1)))
        x[1::17] = 0
        x[2::19] = 0x80000000
        x[3::23, 0] = 0x7FC00001
        x[4::29, -1] = 0xFF800000
        x[5::31] = 0x00000005                   # denormals only: amax flushes to 0
        q, s = simnative.quantize(x)
        wq, ws = fp32.quantize(x, axis=-1)
        _same(s, ws, f"quantize scales size={size}", x[:, 0])
        assert q.dtype == wq.dtype and np.array_equal(q, wq), f"quantize codes size={size} differ"
        total += x.size
    assert total >= N


def _scale_words(rng, shape) -> np.ndarray:
    w = fp32.from_float(rng.uniform(1e-3, 2e-3, shape) * 10.0 ** rng.integers(-30, 30, shape))
    pick = rng.random(shape) < 0.05
    w[pick] = rng.choice(EDGES, int(pick.sum()))
    return w


@pytest.mark.parametrize("vnni", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_mm_int8_bits(unit, vnni):
    """mxu.mm over decoded int8 weights and the native kernel over the raw rows: the same bits,
    across kb (the 4-partial tree with absent terms), several activation rows, row strides wider
    than the row, and scales that overflow, underflow, or are NaN/inf/denormal; the portable loop
    and (where the CPU has it) the AVX-512 VNNI one."""
    rng = np.random.default_rng(11 + unit)
    d = 128
    checked = 0
    for kb, rows, n in ((1, 1, 300), (2, 3, 200), (3, 1, 700), (4, 2, 256), (5, 4, 129), (8, 1, 1024), (9, 2, 333),
                        (24, 1, 512), (16, 8, 64), (8, 1, 20000), (64, 1, 1100)):    # the last two run on 2 threads
        rs, srs = kb * d + d, 4 * kb + 8
        dram_rows = rng.integers(0, 256, (n, rs), dtype=np.uint8)
        dram_rows[:, :kb * d][rng.random((n, kb * d)) < 0.02] = 0x80          # -128 codes too
        side = np.zeros((n, srs), np.uint8)
        side[:, :4 * kb] = _scale_words(rng, (n, kb)).view(np.uint8).reshape(n, 4 * kb)
        blocks = kb + 2                                                         # ACT RAM wider than the MM
        act_full = rng.integers(-128, 128, (rows, blocks * d), dtype=np.int8)
        act_full[0, : d] = 0
        scale_full = _scale_words(rng, (rows, blocks))
        act, ascale = act_full[:, d:(kb + 1) * d], scale_full[:, 1:kb + 1]
        scales = None if unit else side
        got = simnative.mm_int8(act, ascale, dram_rows, scales, kb, d, vnni=vnni)
        want = mxu.mm(act, ascale, formats.decode(isa.WF_INT8, d, kb, dram_rows, scales, unit))
        _same(got, want, f"MM int8 kb={kb} rows={rows} n={n} unit={unit}")
        checked += rows * n * kb
    assert checked > 10_000


def _machine_run(program_of, native: bool, monkeypatch, tmem: np.ndarray):
    from otpu_core.isasim import Machine, SimError
    with monkeypatch.context() as mp:
        if not native:
            mp.setattr(simnative, "lib", lambda: None)
        m = Machine("sim-small", timing=True)
        m.write_tmem(0, tmem)
        try:
            m.load(program_of() + [isa.halt()])
            m.run()
            return m.read_tmem(0, tmem.size), m.counters()["CYCLES"], None
        except SimError as e:
            return m.read_tmem(0, tmem.size), None, (e.kind, str(e))


def test_vop_on_tmem_matches_twin(monkeypatch):
    """VOPs run straight on TMEM by the native library leave TMEM, cycles and hazard refusals
    exactly as the numpy twin (gather, compute, write back): every function, each broadcast,
    in place, overlapping and strided rows, reductions with row strides, and read-after-write
    hazards that must be refused before any write."""
    rng = np.random.default_rng(5)
    words = 4096
    tmem = _random(rng, words, -20, 20)
    tmem[rng.random(words) < 0.03] = rng.choice(EDGES, int((rng.random(words) < 0.03).sum()) or 1)[0]
    funcs = [VFunc[n] for n in simnative.ELEMENTWISE] + [VFunc[n] for n in simnative.REDUCE]
    cases = refused = 0
    for func in funcs:
        for bmode in ("full", "row", "col", "scalar"):
            for _ in range(6):
                rows, cols = int(rng.integers(1, 9)), int(rng.integers(1, 70))
                reduce = func in isa.REDUCE
                a = int(rng.integers(0, 1500))
                ars = int(rng.choice([cols, cols + 3, max(cols - 2, 1)]))
                dst = int(rng.choice([a, a + 5, int(rng.integers(1500, 3000))]))
                drs = int(rng.choice([1, 2, cols, cols + 1] if reduce else [ars, cols, cols + 7, max(cols - 1, 1)]))
                b = int(rng.choice([int(rng.integers(0, 3000)), dst]))
                brs = {"full": int(rng.choice([cols, cols + 2])), "row": int(rng.choice([1, 3])),
                       "col": 0, "scalar": 0}[bmode]
                imm = int(rng.choice(EDGES))

                def prog():
                    return [isa.vop(func, dst=dst, a=a, b=b, rows=rows, cols=cols, drs=drs, ars=ars, brs=brs,
                                    bmode=bmode, imm=imm)]
                got = _machine_run(prog, True, monkeypatch, tmem)
                want = _machine_run(prog, False, monkeypatch, tmem)
                assert got[2] == want[2], f"{func.name} {bmode}: native {got[2]} vs numpy {want[2]}"
                assert got[1] == want[1]
                _same(got[0], want[0],
                      f"{func.name} {bmode} rows={rows} cols={cols} a={a} ars={ars} dst={dst} drs={drs} b={b}")
                cases += 1
                refused += got[2] is not None
    assert cases == len(funcs) * 4 * 6 and 0 < refused < cases / 2, (cases, refused)
