"""The RTL's fp32 units (rtl/fp) against otpu_core/fp32.py, bit for bit, on more than a million
random and edge operands per operation, driven in bulk through one testbench process; and a
planted bug (a rounding mode flipped, a carry dropped) turns the comparison red."""
import numpy as np
import pytest

from otpu_core import fp32 as F, rtlsim
from rtl_support import require_verilator

pytestmark = pytest.mark.slow

R = rtlsim.RTL_DIR
SOURCES = [R / "fp/otpu_fp_funcs.svh", R / "fp/otpu_fp_add.sv", R / "fp/otpu_fp_mul.sv", R / "fp/otpu_fp_i2f.sv",
           R / "fp/otpu_fp_composite.sv", R / "tb/otpu_fp_tb.sv"]
N = 1 << 20                   # operands per operation
OPS = {"add": (0, lambda a, b: F.add(a, b)), "sub": (1, lambda a, b: F.sub(a, b)), "mul": (2, lambda a, b: F.mul(a, b)),
       "exp2": (3, lambda a, b: F.exp2(a)), "recip": (4, lambda a, b: F.recip(a)), "rsqrt": (5, lambda a, b: F.rsqrt(a)),
       "log2": (6, lambda a, b: F.log2(a)), "max": (7, lambda a, b: F.fmax(a, b)), "min": (8, lambda a, b: F.fmin(a, b)),
       "abs": (9, lambda a, b: F.fabs(a)), "f2i": (10, lambda a, b: F.f2i(a))}

EDGES = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x00000001, 0x807FFFFF,
                  0x00800000, 0x80800000, 0x00FFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F000000,
                  0x3F7FFFFF, 0x3F800001, 0x40000000, 0x3FB504F3, 0x3F3504F3, 0x42FE0000, 0x43000000, 0x42FFFFFF,
                  0xC2FC0000, 0xC2FBFFFF, 0xC2FC0001, 0x4B000000, 0x4B7FFFFF, 0x4F000000, 0xCF000000, 0x4EFFFFFF,
                  0x7E800000, 0x7E7FFFFF, 0x01000000, 0x01800000, 0x7D000000, 0x7F000000, 0x34000000, 0x33800000],
                 dtype=np.uint32)


def operands(rng, n):
    """Random bit patterns, wide-range normal values, values close to each other (cancellation),
    values near the composite functions' range splits, and every pair of edge values."""
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    with np.errstate(over="ignore"):        # beyond fp32's range: infinities, also wanted
        wide = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 128, n))).astype(np.float32).view(np.uint32)
    near = (wide.astype(np.int64) + rng.integers(-3, 4, n)).astype(np.uint32)
    small = rng.uniform(-150, 150, n).astype(np.float32).view(np.uint32)
    pick = rng.integers(0, 4, n)
    a = np.choose(pick, [bits, wide, near, small]).astype(np.uint32)
    b = np.choose(rng.integers(0, 4, n), [bits, wide, near, small]).astype(np.uint32)
    b = np.where(pick == 2, wide, b)                    # a within a few ulp of b: cancellations
    ea, eb = np.meshgrid(EDGES, EDGES)
    k = ea.size
    a[:k], b[:k] = ea.ravel(), eb.ravel()
    return a, b


def run_records(exe, tmp_path, ops, a, b):
    recs = np.stack([ops, a, b], 1).astype(">u4")
    (tmp_path / "in.bin").write_bytes(recs.tobytes())
    rtlsim.run(exe, {"in": tmp_path / "in.bin", "out": tmp_path / "out.bin"}, timeout=900)
    return np.fromfile(tmp_path / "out.bin", "<u4")


@pytest.fixture(scope="module")
def fp_tb():
    require_verilator()
    return rtlsim.build("otpu_fp_tb", SOURCES).exe


def test_fp_units_bit_exact_on_a_million_operands_each(fp_tb, tmp_path):
    rng = np.random.default_rng(2026)
    ops, aa, bb, want = [], [], [], []
    for name, (code, fn) in OPS.items():
        a, b = operands(rng, N)
        ops.append(np.full(N, code, np.uint32))
        aa.append(a)
        bb.append(b)
        want.append(fn(a, b))
    v = rng.integers(-(1 << 47), 1 << 47, N)                 # i2f of the MXU's 48-bit accumulator
    v[:6] = [0, -1, 1 << 46, -(1 << 47), (1 << 24) + 1, (1 << 25) + 3]
    ops.append(np.full(N, 11, np.uint32))
    aa.append((v & 0xFFFFFFFF).astype(np.uint32))
    bb.append(((v >> 32) & 0xFFFF).astype(np.uint32))
    want.append(F.i2f(v))
    got = run_records(fp_tb, tmp_path, np.concatenate(ops), np.concatenate(aa), np.concatenate(bb))
    want = np.concatenate(want)
    assert got.size == want.size
    names = [*OPS, "i2f48"]
    bad = {name: int((got[i * N:(i + 1) * N] != want[i * N:(i + 1) * N]).sum()) for i, name in enumerate(names)}
    assert not any(bad.values()), f"words differing from fp32.py per operation ({N} each): {bad}"


def test_a_planted_bug_turns_the_comparison_red(tmp_path):
    """One build with both planted bugs: the adder truncates instead of rounding to nearest even,
    the multiplier drops the carry out of its rounding (products that round up to a power of two)."""
    require_verilator()
    exe = rtlsim.build("otpu_fp_tb", SOURCES, defines={"OTPU_MUTANT_ADD_ROUND": None, "OTPU_MUTANT_MUL_CARRY": None}).exe
    rng = np.random.default_rng(7)
    n = 1 << 14
    a, b = operands(rng, n)
    # x times fp32(1/x): about half of these products round up into exactly 1.0 (a rounding carry)
    na = rng.uniform(1.0, 2.0, n).astype(np.float32)
    nb = (1.0 / na.astype(np.float64)).astype(np.float32)
    na, nb = na.view(np.uint32), nb.view(np.uint32)
    ops = np.concatenate([np.full(n, OPS["add"][0]), np.full(n, OPS["mul"][0]), np.full(n, OPS["recip"][0])])
    got = run_records(exe, tmp_path, ops.astype(np.uint32), np.concatenate([a, na, a]), np.concatenate([b, nb, b]))
    wrong_add = int((got[:n] != F.add(a, b)).sum())
    wrong_mul = int((got[n:2 * n] != F.mul(na, nb)).sum())
    wrong_recip = int((got[2 * n:] != F.recip(a)).sum())
    assert wrong_add > 1000 and wrong_mul > 100, (wrong_add, wrong_mul)
    assert wrong_recip > 100, "the composite functions are built from the same units: they break too"
    # the correct build gets the same operands right (the check above compares against fp32.py)
