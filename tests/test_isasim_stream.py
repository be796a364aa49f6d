"""DSTEP and STREAM: bit-identical to their VOP sequences, and against float64 models."""
import numpy as np
import pytest

from otpu_core import isa
from otpu_core.isasim import Machine, SimError

RNG = np.random.default_rng(5)
STATE, QK, V, G, O, S_T, D_T, K_T, TMP = 0x4000, 0, 600, 700, 800, 1000, 11000, 10000, 9000


def f32(bits):
    return np.asarray(bits, np.uint32).view(np.float32).astype(np.float64)


def setup(rows, cols, gs=3, seed=0):
    """A machine with a random state, q, k, v, decay 0.9 and beta 0.4 (the same for the same seed)."""
    rng = np.random.default_rng(seed)
    m = Machine("sim-small")
    s = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)
    q, k = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32) / np.sqrt(cols)
    v = rng.standard_normal(rows).astype(np.float32)
    m.write_dram(STATE, s)
    m.write_tmem(QK, np.concatenate([q, k]))
    m.write_tmem(V, v)
    m.write_tmem(G, np.array([0.9], np.float32))
    m.write_tmem(G + gs, np.array([0.4], np.float32))
    return m, s, q, k, v


def dstep_prog(rows, cols, gs=3, dzero=0):
    return [isa.dstep(state=STATE, qk=QK, v=V, rows=rows, cols=cols, g=G, o=O, gs=gs, dzero=dzero), isa.halt()]


def vop_sequence(rows, cols, gs=3):
    """LD, RDOT, MUL, SUB, MUL, OUTER(DSCALAR), RDOT, ST: the DSTEP of reference 3.4 as VOPs."""
    kv, tmp, d = TMP, TMP + 300, TMP + 600
    return [isa.ld(dram=STATE, tmem=S_T, n=rows * cols),
            isa.vop("rdot", dst=kv, a=S_T, b=QK + cols, rows=rows, cols=cols, drs=1, ars=cols, bmode="col"),
            isa.vop("mul", dst=tmp, a=kv, b=G, rows=rows, cols=1, drs=1, ars=1, brs=0, bmode="row"),
            isa.vop("rsub", dst=d, a=tmp, b=V, rows=rows, cols=1, drs=1, ars=1, brs=1, bmode="row"),
            isa.vop("mul", dst=d, a=d, b=G + gs, rows=rows, cols=1, drs=1, ars=1, brs=0, bmode="row"),
            isa.vop("outer", dst=S_T, a=G, b=d, rows=rows, cols=cols, drs=cols, brs=1, bmode="row", imm=QK + cols,
                    dscalar=1),
            isa.vop("rdot", dst=O, a=S_T, b=QK, rows=rows, cols=cols, drs=1, ars=cols, bmode="col"),
            isa.st(dram=STATE, tmem=S_T, n=rows * cols), isa.halt()]


def state_and_output(rows, cols, prog, gs=3, tmem=()):
    """Run prog on a fresh setup (extra TMEM words written first); the new state bytes and o."""
    m, *_ = setup(rows, cols, gs)
    for addr, words in tmem:
        m.write_tmem(addr, words)
    m.load(prog)
    m.run()
    return m.read_dram(STATE, 4 * rows * cols), m.read_tmem(O, rows)


@pytest.mark.parametrize("rows,cols", [(1, 64), (16, 128), (33, 192), (8, 256)])
def test_dstep_is_bit_identical_to_the_vop_sequence(rows, cols):
    (s1, o1), (s2, o2) = (state_and_output(rows, cols, p) for p in (dstep_prog(rows, cols), vop_sequence(rows, cols)))
    assert np.array_equal(s1, s2) and np.array_equal(o1, o2)


def test_dstep_against_float64():
    rows, cols = 16, 128
    m, s, q, k, v = setup(rows, cols)
    m.load(dstep_prog(rows, cols))
    m.run()
    S, e, beta = s.astype(np.float64), float(np.float32(0.9)), float(np.float32(0.4))
    d = (v - (S @ k) * e) * beta
    S2 = S * e + d[:, None] * k[None, :]
    o = S2 @ q
    got_s = m.read_dram(STATE, 4 * rows * cols).view(np.float32).reshape(rows, cols).astype(np.float64)
    got_o = f32(m.read_tmem(O, rows))
    for got, ref in ((got_s, S2), (got_o, o)):
        err = np.abs(got - ref).max()
        cos = (got.ravel() @ ref.ravel()) / np.linalg.norm(got) / np.linalg.norm(ref)
        assert err < 1e-5 * np.abs(ref).max() and cos > 1 - 1e-10


def test_dstep_zero_ignores_dram():
    rows, cols = 4, 64
    m, s, q, k, v = setup(rows, cols)
    m.load(dstep_prog(rows, cols, dzero=1))
    m.run()
    got = m.read_dram(STATE, 4 * rows * cols).view(np.float32).reshape(rows, cols).astype(np.float64)
    ref = (v.astype(np.float64) * float(np.float32(0.4)))[:, None] * k[None, :]
    assert np.abs(got - ref).max() < 1e-6


def test_dstep_shape_rules():
    m, *_ = setup(4, 64)
    m.load(dstep_prog(4, 96))
    with pytest.raises(SimError, match="cols must be one of"):
        m.run()


def test_stream_gdn_descriptor_equals_dstep_when_ks_is_gs():
    rows, cols, gs = 12, 128, 3
    s1, o1 = state_and_output(rows, cols, dstep_prog(rows, cols, gs), gs)
    stream = [isa.stream(desc=K_T, ks=gs, src=STATE, dst=STATE, vec=QK, x=V, k=G, out=O), isa.halt()]
    s2, o2 = state_and_output(rows, cols, stream, gs, tmem=[(K_T, isa.gdn_desc(rows, cols).encode())])
    assert np.array_equal(s1, s2) and np.array_equal(o1, o2)


def test_stream_loop_carried_scalar_program_runs_row_by_row():
    # r0 = r0 + X[r] carried across rows; O[r] = r0 (o_reg), rows copied TMEM -> TMEM unchanged
    rows, cols = 6, 8
    m = Machine("sim-small")
    x = RNG.standard_normal(rows).astype(np.float32)
    src = RNG.standard_normal((rows, cols)).astype(np.float32)
    m.write_tmem(S_T, src)
    m.write_tmem(V, x)
    desc = isa.StreamDesc(rows, cols, u_mode=isa.U_PASS, o_reg_en=1, o_reg=0,
                          ops=((isa.SOP_ADD, 0, 0, isa.OP_X),))
    m.write_tmem(K_T, desc.encode())
    m.load([isa.stream(desc=K_T, src=S_T, dst=D_T, x=V, k=G, out=O, src_t=1, dst_t=1), isa.halt()])
    m.run()
    prefix = np.cumsum(x.astype(np.float64))
    got = f32(m.read_tmem(O, rows))
    assert np.abs(got - prefix).max() < 1e-6
    assert np.array_equal(m.read_tmem(D_T, rows * cols).view(np.float32), src.ravel())


def test_stream_refuses_a_bad_descriptor():
    m = Machine("sim-small")
    m.write_tmem(K_T, np.zeros(8, np.uint32))       # not float-safe
    m.load([isa.stream(desc=K_T, src=STATE, dst=STATE), isa.halt()])
    with pytest.raises(SimError, match="not float-safe"):
        m.run()
