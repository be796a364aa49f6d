"""Lowering rules of `ol`: each layout change is one instruction, the VOP operand modes, the
fusion peepholes (bit-identical on and off, savings asserted), the register allocator's safety
rules (each test fails when its rule is removed), loops, and clear compile errors."""
import numpy as np
import pytest

from otpu_core import fp32 as F
from otpu_core import ol
from otpu_core.errors import UsageError
from otpu_core.ol import lower as lower_mod
from otpu_core.ol.runtime import Image

T = "sim-small"
rng = np.random.default_rng(11)


def ops(prog, name):
    return [i for i in prog.instrs if i.op.name == name]


def vfuncs(prog):
    return [i.func.name for i in ops(prog, "VOP")]


def build(kernel, peepholes=True, run_values=None, **arrays):
    """Place float arrays (or shapes for outputs) and run; returns (program, {name: result})."""
    img = Image(T)
    args = {k: (img.tensor(v) if isinstance(v, np.ndarray) else img.tensor(shape=v)) for k, v in arrays.items()}
    prog = ol.compile_kernel(kernel, T, peepholes=peepholes, **args)
    m = img.run(prog, **(run_values or {}))
    return prog, {k: img.read(t, m) for k, t in args.items()}


# -- layout changes: one instruction each ---------------------------------------------------------
def test_load_store_are_one_instruction_when_contiguous_and_per_row_when_strided():
    a = rng.standard_normal((4, 8)).astype(np.float32)

    def k(x, y, z):
        t = ol.load(x)                          # contiguous: one LD
        ol.store(y, t)                          # one ST
        part = ol.load(x[:, 2:6])               # strided source into a contiguous tile: one LD per row
        ol.store(z, part)
    prog, out = build(k, x=a, y=(4, 8), z=(4, 4))
    assert len(ops(prog, "LD")) == 1 + 4 and len(ops(prog, "ST")) == 2
    assert np.array_equal(out["y"], a) and np.array_equal(out["z"], a[:, 2:6])


def test_quantize_is_one_qact_per_act_rows_and_dot_one_mm_per_chunk():
    img = Image(T)
    a = rng.standard_normal((6, 64)).astype(np.float32)
    W = rng.standard_normal((5, 64)).astype(np.float32)
    x, w, y = img.tensor(a), img.weight(W), img.tensor(shape=(6, 5))

    def k(x, w, y):
        ol.store(y, ol.dot(ol.quantize(ol.load(x)), w))
    prog = ol.compile_kernel(k, T, x=x, w=w, y=y)
    q, mm = ops(prog, "QACT"), ops(prog, "MM")
    assert [i["rows"] for i in q] == [4, 2] and [i["m"] for i in mm] == [4, 2]        # MCOLS = 4
    assert q[0]["ab"] != q[1]["ab"] and all(i["kb"] == 2 for i in q)
    got = img.read(y, img.run(prog))
    from otpu_core.kernels import reference as R
    assert R.cosine(got, R.quantized_matmul(a, img.dequantized(w), 32)) > 0.9999999


@pytest.mark.parametrize("mode", ["scalar", "full", "row_scalar", "row", "col", "swapped", "outer"])
def test_vop_operand_modes(mode):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    r = rng.standard_normal(3).astype(np.float32)
    c = rng.standard_normal(5).astype(np.float32)
    s = rng.standard_normal(1).astype(np.float32)
    exprs = {
        "scalar": (lambda A, B, R_, C, S: A - 1.5, "SUB", "SCALAR", lambda: F.sub(a, np.float32(1.5))),
        "full": (lambda A, B, R_, C, S: A * B, "MUL", "FULL", lambda: F.mul(a, b)),
        "row_scalar": (lambda A, B, R_, C, S: A + S, "ADD", "ROW", lambda: F.add(a, s[0])),
        "row": (lambda A, B, R_, C, S: A - R_[:, None], "SUB", "ROW", lambda: F.sub(a, r[:, None])),
        "col": (lambda A, B, R_, C, S: A * C[None, :], "MUL", "COL", lambda: F.mul(a, c[None, :])),
        "swapped": (lambda A, B, R_, C, S: 2.0 - A, "RSUB", "SCALAR", lambda: F.sub(np.float32(2.0), a)),
        "outer": (lambda A, B, R_, C, S: R_[:, None] - C[None, :], "RSUB", "ROW", lambda: F.sub(r[:, None], c[None, :])),
    }
    fn, func, bmode, ref = exprs[mode]

    def k(a, b, r, c, s, y):
        ol.store(y, fn(ol.load(a), ol.load(b), ol.load(r), ol.load(c), ol.load(s)))
    prog, out = build(k, a=a, b=b, r=r, c=c, s=s, y=(3, 5))
    (v,) = ops(prog, "VOP")
    assert v.func.name == func and v.bmode.name == bmode
    assert np.array_equal(out["y"].view(np.uint32), np.asarray(ref(), np.uint32))


# -- peepholes: same bits on and off, savings asserted ---------------------------------------------
def _both(kernel, **arrays):
    on, out_on = build(kernel, True, **arrays)
    off, out_off = build(kernel, False, **arrays)
    for name in out_on:
        assert np.array_equal(out_on[name].view(np.uint32), out_off[name].view(np.uint32)), name
    return on, off


def test_peephole_exp2sub():
    a, m = rng.standard_normal((3, 40)).astype(np.float32), rng.standard_normal(3).astype(np.float32)

    def k(a, m, y):
        ol.store(y, ol.exp2(ol.load(a) - ol.load(m)[:, None]))
    on, off = _both(k, a=a, m=m, y=(3, 40))
    assert "EXP2SUB" in vfuncs(on) and "EXP2" not in vfuncs(on) and "EXP2" in vfuncs(off)
    assert len(on.instrs) == len(off.instrs) - 1 and on.stats.peepholes["exp2sub"] == {"instrs": 1, "words": 240}


def test_peephole_quantize_cscale_and_rscale():
    img_arrays = dict(x=rng.standard_normal((3, 64)).astype(np.float32), v=rng.standard_normal(64).astype(np.float32),
                      r=rng.standard_normal(3).astype(np.float32))
    W = rng.standard_normal((6, 64)).astype(np.float32)

    def run(peepholes, both_scales):
        img = Image(T)
        args = {k: img.tensor(v) for k, v in img_arrays.items()}
        w, y = img.weight(W), img.tensor(shape=(3, 6))

        def k(x, v, r, w, y):
            t, vv, rr = ol.load(x), ol.load(v), ol.load(r)
            q = ol.quantize((t * rr[:, None]) * vv[None, :]) if both_scales else ol.quantize(t * vv[None, :])
            ol.store(y, ol.dot(q, w))
        prog = ol.compile_kernel(k, T, peepholes=peepholes, w=w, y=y, **args)
        return prog, img.read(y, img.run(prog))
    for both in (False, True):
        (on, y_on), (off, y_off) = run(True, both), run(False, both)
        assert np.array_equal(y_on.view(np.uint32), y_off.view(np.uint32))
        (qa,) = ops(on, "QACT")
        assert qa["cscale"] and qa["rscale"] == both
        assert len(off.instrs) - len(on.instrs) == (2 if both else 1)
        assert on.stats.peephole_instrs == (2 if both else 1)


@pytest.mark.parametrize("form", ["rssq", "rdot", "rdot_col"])
def test_peephole_reduction_of_a_product(form):
    a, b, c = (rng.standard_normal((4, 70)).astype(np.float32) for _ in range(3))
    v = rng.standard_normal(70).astype(np.float32)

    def k(a, b, v, y):
        x, z, vv = ol.load(a), ol.load(b), ol.load(v)
        s = ol.sum(x * x) if form == "rssq" else ol.sum(x * z) if form == "rdot" else ol.sum(x * vv[None, :])
        ol.store(y, s)
    on, off = _both(k, a=a, b=b, v=v, y=(4,))
    want = {"rssq": "RSSQ", "rdot": "RDOT", "rdot_col": "RDOT"}[form]
    assert want in vfuncs(on) and "MUL" not in vfuncs(on) and "RSUM" in vfuncs(off)
    assert len(off.instrs) - len(on.instrs) == 1


def test_peephole_rowmax_on_the_mm():
    img_x = rng.standard_normal((3, 64)).astype(np.float32)
    W = rng.standard_normal((20, 64)).astype(np.float32)
    res = {}
    for peepholes in (True, False):
        img = Image(T)
        x, w, y = img.tensor(img_x), img.weight(W), img.tensor(shape=(3,))

        def k(x, w, y):
            ol.store(y, ol.max(ol.dot(ol.load(x), w), axis=1))
        prog = ol.compile_kernel(k, T, peepholes=peepholes, x=x, w=w, y=y)
        res[peepholes] = (prog, img.read(y, img.run(prog)))
    (on, y_on), (off, y_off) = res[True], res[False]
    assert np.array_equal(y_on.view(np.uint32), y_off.view(np.uint32))
    assert ops(on, "MM")[0]["rmax"] and "RMAX" not in vfuncs(on) and "RMAX" in vfuncs(off)


def test_peephole_set_retargets_and_named_temporaries_are_never_rewritten():
    a, b = rng.standard_normal((2, 16)).astype(np.float32), rng.standard_normal((2, 16)).astype(np.float32)

    def k(a, b, y, d_out):
        x, z = ol.load(a), ol.load(b)
        acc = ol.zeros((2, 16))
        acc.set(x * z + 1.0)                   # unnamed: the ADD writes acc directly, no COPY
        d = x - z                              # named: exp2(d) must not turn its SUB into EXP2SUB
        e = ol.exp2(d)
        ol.store(y, acc + e)
        ol.store(d_out, d)
    on, off = _both(k, a=a, b=b, y=(2, 16), d_out=(2, 16))
    assert "COPY" not in vfuncs(on) and "COPY" in vfuncs(off)
    assert "EXP2SUB" not in vfuncs(on) and "SUB" in vfuncs(on)


# -- register allocator safety rules -----------------------------------------------------------------
def _rule1_kernel(x, y, z):
    for l in ol.range(3):
        for j in ol.range(2):
            ol.store(z[j], ol.load(x[j]) + 1.0)       # key {j}: its own register inside each l iteration
        ol.store(y[l], ol.load(y[l]) * 2.0)           # key {l}: first used after the j loop has ended


def test_rule_live_loop_register_not_reused(monkeypatch):
    x, y0 = rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    prog, out = build(_rule1_kernel, x=x, y=y0, z=(2, 8))
    assert np.array_equal(out["y"], y0 * 2) and np.array_equal(out["z"], x + 1)
    # without the rule (interval from the first use) the two addresses share a register and it breaks
    monkeypatch.setattr(lower_mod, "key_interval_start", lambda key, pos: key.first_use)
    prog2, out2 = build(_rule1_kernel, x=x, y=y0, z=(2, 8))
    assert not np.array_equal(out2["y"], y0 * 2)



def _rule2(x, y, z):
    pos = ol.runvar("pos")
    for i in ol.range(2):                              # key {i, pos}: starts from a run-time value
        t = ol.load(_row_at(x, i, pos))
        ol.store(z[i], t)
    for j in ol.range(2):                              # key {j}: starts from zero, may reuse that register
        ol.store(y[j], ol.load(x[j]) * 3.0)


def _row_at(x, i, pos):
    return ol.Tensor(x.base + 32 * i + 32 * pos, (8,))


def test_rule_initial_value_register_cleared(monkeypatch):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    prog, out = build(_rule2, x=x, y=(2, 8), z=(2, 8), run_values={"pos": 3})
    assert np.array_equal(out["z"], x[3:5]) and np.array_equal(out["y"], x[:2] * 3)
    assert ops(prog, "LI"), "the zero-start address must clear a register a run-time address used"
    monkeypatch.setattr(lower_mod, "clear_after", lambda key: True)
    prog2, out2 = build(_rule2, x=x, y=(2, 8), z=(2, 8), run_values={"pos": 3})
    assert not np.array_equal(out2["y"], x[:2] * 3)


def test_device_loop_count_cannot_step_registers():
    def k(x, y):
        n = ol.rld(ol.load(x[0:1]))
        for i in ol.range(n):
            ol.store(y[i], ol.load(x))
    img = Image(T)
    with pytest.raises(ol.CompileError, match="device-computed count"):
        ol.compile_kernel(k, T, x=img.tensor(np.ones(4, np.float32)), y=img.tensor(shape=(4, 4)))


def test_a_loop_stepped_address_with_a_device_value_from_inside_the_loop_is_refused():
    """The register is set from the device value before the loop's first iteration, so an rld inside
    the loop would be read before it runs (the data at the loop term alone: a silent wrong read)."""
    def inside(x, p, y):
        for i in ol.range(2):
            off = ol.rld(ol.load(p), scale=4 * 8)
            ol.store(y[i], ol.load(ol.Tensor(x.base + i * (2 * 4 * 8) + off, (8,))))

    def before(x, p, y):
        off = ol.rld(ol.load(p), scale=4 * 8)
        for i in ol.range(2):
            ol.store(y[i], ol.load(ol.Tensor(x.base + i * (2 * 4 * 8) + off, (8,))))
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    p = np.array([1.0], np.float32)
    img = Image(T)
    with pytest.raises(ol.CompileError, match="rld computes inside that loop"):
        ol.compile_kernel(inside, T, x=img.tensor(x), p=img.tensor(p), y=img.tensor(shape=(2, 8)))
    _, out = build(before, x=x, p=p, y=(2, 8))
    assert np.array_equal(out["y"], x[[1, 3]])


def _inherit(x, p, y, z):
    offs = [ol.rld(ol.load(p[g:g + 1]), scale=4 * 8) for g in range(8)]      # row p[g] of x
    for i in ol.range(2):                  # 8 addresses {i, dev g}, each started from its device value
        for g in ol.static_range(8):
            ol.store(y[2 * g + i], ol.load(ol.Tensor(x.base + i * (8 * 4 * 8) + offs[g], (8,))))
    ol.store(z, ol.load(ol.Tensor(x.base + offs[0], (8,))))                    # device value 0 read again


def test_a_loop_address_inherits_its_device_values_register_only_at_its_last_use(monkeypatch):
    """Rule 3 (lower.py): an address stepped by a loop and started from a device value takes over that
    value's register when the start is its last use: 8 such addresses fit beside their 8 device values
    (17 registers without the rule), and the value read again after the loop keeps its own register."""
    x = rng.standard_normal((16, 8)).astype(np.float32)
    p = rng.permutation(8).astype(np.float32)
    prog, out = build(_inherit, x=x, p=p, y=(16, 8), z=(8,))
    rows = p.astype(int)
    want = np.stack([x[rows[g] + 8 * i] for g in range(8) for i in range(2)])
    assert np.array_equal(out["y"], want) and np.array_equal(out["z"], x[rows[0]])
    assert len(ops(prog, "ADDI")) < 8 + 8, "the inheriting addresses need no copy of their device value"
    monkeypatch.setattr(lower_mod, "_inherited", lambda *a: None)
    with pytest.raises(ol.CompileError, match="out of registers"):
        build(_inherit, x=x, p=p, y=(16, 8), z=(8,))


def test_device_loop_count_runs_rld_times():
    def k(x, y):
        n = ol.rld(ol.load(x[0:1]))
        acc = ol.zeros((4,))
        for _ in ol.range(n):
            acc += 1.0
        ol.store(y, acc)
    prog, out = build(k, x=np.array([5.0, 0, 0, 0], np.float32), y=(4,))
    assert np.array_equal(out["y"], np.full(4, 5.0, np.float32))


def test_nested_loops_ending_together_get_a_nop():
    def k(x, y):
        acc = ol.zeros((4,))
        for _ in ol.range(3):
            for _ in ol.range(2):
                acc += ol.load(x)
        ol.store(y, acc)
    x = rng.standard_normal(4).astype(np.float32)
    prog, out = build(k, x=x, y=(4,))
    assert len(ops(prog, "NOP")) == 1 and np.allclose(out["y"], 6 * x, rtol=1e-6)



def test_a_zero_started_register_is_zero_again_for_the_next_loop():
    """Docs (lower.py): a register that started from zero is reset by ADDI after its loop, so the
    next loop may take it without an LI; the reset undoes every one of the loop's steps."""
    x = rng.standard_normal((3, 4)).astype(np.float32)

    def k(x, y, z):
        for i in ol.range(3):
            ol.store(y[i], ol.load(x[i]) * 2.0)
        for j in ol.range(3):
            ol.store(z[j], ol.load(x[j]) + 1.0)
    prog, out = build(k, x=x, y=(3, 4), z=(3, 4))
    resets = [i["imm"] for i in ops(prog, "ADDI") if i["imm"] & 0x80000000]
    assert resets and all((-(r - (1 << 32))) % 3 == 0 for r in resets)     # minus three steps each
    assert np.array_equal(out["y"].view(np.uint32), F.mul(x, np.float32(2.0)))
    assert np.array_equal(out["z"].view(np.uint32), F.add(x, np.float32(1.0)))

# -- compile errors ---------------------------------------------------------------------------------
def test_shape_mismatch_names_both_shapes_and_the_line():
    def k(a, b):
        x, z = ol.load(a), ol.load(b)
        ol.store(a, x + z)   # the offending line
    img = Image(T)
    with pytest.raises(ol.CompileError) as e:
        ol.compile_kernel(k, T, a=img.tensor(shape=(3, 4)), b=img.tensor(shape=(4, 3)))
    msg = str(e.value)
    assert "(3, 4)" in msg and "(4, 3)" in msg and "ol.store(a, x + z)   # the offending line" in msg
    assert "test_ol_lowering.py" in msg and isinstance(e.value, UsageError) and e.value.exit_code == 2


def test_dot_shape_mismatch_names_both_shapes():
    img = Image(T)
    w = img.weight(np.ones((4, 64), np.float32))

    def k(x, w):
        ol.dot(ol.load(x), w)
    with pytest.raises(ol.CompileError, match=r"\(2, 96\).*\(4, 64\)"):
        ol.compile_kernel(k, T, x=img.tensor(shape=(2, 96)), w=w)


def test_tmem_exhaustion_names_sizes():
    def k():
        keep = [ol.empty((4000,)) for _ in range(4)]
        ol.empty((1000,))
    # 16384 words - 4 x 4000 - 3 one-word gaps (each 4000-word buffer ends in the bank it began
    # in, so the cursor skips a word to start the next one in another bank) = 381
    with pytest.raises(ol.CompileError, match=r"TMEM exhausted: needed 1000 words, largest free 381"):
        ol.compile_kernel(k, T)


def test_loop_variable_outside_its_loop_and_depth_limit():
    def k(x):
        for i in ol.range(2):
            pass
        ol.load(x[i])
    img = Image(T)
    with pytest.raises(ol.CompileError, match="outside its loop"):
        ol.compile_kernel(k, T, x=img.tensor(shape=(2, 4)))

    def deep():
        for _ in ol.range(2):
            for _ in ol.range(2):
                for _ in ol.range(2):
                    for _ in ol.range(2):
                        for _ in ol.range(2):
                            pass
    with pytest.raises(ol.CompileError, match="deeper than 4"):
        ol.compile_kernel(deep, T)


# -- MM PAIR (QACT DUP) and several ACT block ranges ---------------------------------------------------
@pytest.mark.parametrize("fmt", ["int4", "e2m1"])
def test_four_bit_rows_use_dup_and_pair(fmt):
    img = Image(T)
    a = rng.standard_normal((2, 128)).astype(np.float32)
    W = rng.standard_normal((12, 128)).astype(np.float32)
    x, w, y = img.tensor(a), img.weight(W, fmt), img.tensor(shape=(2, 12))

    def k(x, w, y):
        ol.store(y, ol.dot(ol.load(x), w))
    prog = ol.compile_kernel(k, T, x=x, w=w, y=y)
    (q,), (mm,) = ops(prog, "QACT"), ops(prog, "MM")
    assert q["dup"] and mm["pair"]
    got = img.read(y, img.run(prog))
    from otpu_core.kernels import reference as R
    same = R.quantized_matmul(a, img.dequantized(w), 32)
    assert R.max_abs(got, same) < 1e-5 * np.abs(same).max() * 4 and R.cosine(got, same) > 0.9999999


def test_fragmented_act_ram_gives_several_qranges_one_mm_each():
    img = Image(T)
    a = rng.standard_normal((2, 256)).astype(np.float32)             # 8 blocks
    W = rng.standard_normal((6, 256)).astype(np.float32)
    x, w, y = img.tensor(a), img.weight(W), img.tensor(shape=(2,))

    def k(x, w, y):
        t = ol.load(x)
        small = ol.quantize(t[:, :96])                               # 3 blocks
        keep = [ol.quantize(t[:, :128]) for _ in range(2)]           # 8 more: 11 of 16 in use
        del small                                                    # frees blocks 0..2: runs of 3 and 5
        s = ol.dot(ol.quantize(t), w, rowmax=True)                   # needs 8: two ranges
        ol.store(y, s.rowmax)
    prog = ol.compile_kernel(k, T, x=x, w=w, y=y)
    mms = ops(prog, "MM")
    assert len(mms) == 2 and [m["kb"] for m in mms] == [5, 3]
    assert not mms[0]["acc"] and mms[1]["acc"] and mms[1]["rmax"] and not mms[0]["rmax"]
    got = img.read(y, img.run(prog))
    from otpu_core.kernels import reference as R
    ref = R.quantized_matmul(a, img.dequantized(w), 32).max(axis=1)
    assert R.max_abs(got, ref) < 1e-4 and R.cosine(got, ref) > 0.9999999


def test_lanes16_with_stream_engine_is_refused():
    from otpu_core.target import load
    cfg = load("bcu1525").config().replace(STREAM=True)
    with pytest.raises(ol.CompileError, match="LANES=16"):
        ol.compile_kernel(lambda: None, cfg)


# -- random loop nests: affine addresses, parent registers, run-time starts ---------------------------
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(counts=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       strides=st.lists(st.integers(0, 3), min_size=3, max_size=3),
       pos=st.integers(0, 5), use_pos=st.booleans(), seed=st.integers(0, 999))
def test_random_loop_nests_gather_rows(counts, strides, pos, use_pos, seed):
    """y[flat(i, j, k)] = x[sum(i*s_i) + pos] * 2 + k-th loop's own row, for nested hardware loops."""
    rng_ = np.random.default_rng(seed)
    depth = len(counts)
    n_out = int(np.prod(counts))
    src_rows = sum((c - 1) * s for c, s in zip(counts, strides)) + 6 + 1
    x = rng_.standard_normal((src_rows, 4)).astype(np.float32)
    z = rng_.standard_normal((max(counts), 4)).astype(np.float32)
    out_strides = [int(np.prod(counts[d + 1:])) for d in range(depth)]

    def k(x, z, y):
        p = ol.runvar("pos") if use_pos else 0

        def nest(level, idx):
            if level == depth:
                src = sum((v * s for v, s in zip(idx, strides)), p)
                dst = sum(v * s for v, s in zip(idx, out_strides))
                ol.store(y[dst], ol.load(x[src]) * 2.0 + ol.load(z[idx[-1]]))
                return
            for v in ol.range(counts[level]):
                nest(level + 1, idx + [v])
        nest(0, [])
    prog, out = build(k, run_values={"pos": pos} if use_pos else None, x=x, z=z, y=(n_out, 4))
    want = np.empty((n_out, 4), np.float32)
    for flat, idx in enumerate(np.ndindex(*counts)):
        src = sum(v * s for v, s in zip(idx, strides)) + (pos if use_pos else 0)
        want[flat] = F.to_float(F.add(F.mul(x[src], np.float32(2.0)), z[idx[-1]]))
    assert np.array_equal(out["y"].view(np.uint32), want.view(np.uint32))


def test_out_of_registers_is_a_clear_error():
    def k(x, y):
        for i in ol.range(2):
            for j in ol.range(2):
                for c in ol.static_range(16):
                    ol.store(y[i * 2 + j], ol.load(x[(c + 1) * i + j]))     # 16 different address patterns
    img = Image(T)
    with pytest.raises(ol.CompileError, match="out of registers"):
        ol.compile_kernel(k, T, x=img.tensor(shape=(64, 4)), y=img.tensor(shape=(4, 4)))


def test_mm_output_rows_must_not_share_banks():
    img = Image(T)
    w = img.weight(np.ones((8, 32), np.float32))

    def k(x, w):
        out = ol.empty((2, 8), banked=False)                  # row stride 8: every row in the same banks
        ol.dot(ol.load(x), w, out=out)
    with pytest.raises(ol.CompileError, match="bank conflict"):
        ol.compile_kernel(k, T, x=img.tensor(shape=(2, 32)), w=w)
