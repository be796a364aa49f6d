"""Gated DeltaNet on the golden simulator: every head on DSTEP with its state in DRAM, against the
float64 gated delta rule (max-abs, cosine), over several tokens in one program and across
programs (the state carries in DRAM); the VOP form bit-identical to the DSTEP one."""
import numpy as np
import pytest

from otpu_core import isa, ol
from otpu_core.kernels import GdnWeights, gated_deltanet_step
from otpu_core.kernels import reference as R
from otpu_core.ol.runtime import Image

T = "sim-small"


def _inputs(rng, steps, hk, hv, dk, dv, scale=1.0):
    q = rng.standard_normal((steps, hk, dk)) * scale
    k = rng.standard_normal((steps, hk, dk)) * scale
    v = rng.standard_normal((steps, hv, dv))
    z = rng.standard_normal((steps, hv, dv))
    a = rng.standard_normal((steps, hv)) * 2.0
    b = rng.standard_normal((steps, hv)) * 2.0
    w = dict(a_log=np.log(rng.uniform(1, 16, hv)), dt_bias=rng.standard_normal(hv) * 0.5,
             norm_w=1.0 + 0.1 * rng.standard_normal(dv))
    return [x.astype(np.float32) for x in (q, k, v, z, a, b)], {n: x.astype(np.float32) for n, x in w.items()}


def _program(img, t, steps, hk, hv, dk, dv, w, engine=None, state=None):
    """A program running `steps` tokens (inputs t[i][s]) through the layer; outputs y (steps, hv*dv)."""
    args = dict(q=img.tensor(t[0].reshape(steps, -1)), k=img.tensor(t[1].reshape(steps, -1)),
                v=img.tensor(t[2].reshape(steps, -1)), z=img.tensor(t[3].reshape(steps, -1)),
                a=img.tensor(t[4]), b=img.tensor(t[5]))
    weights = GdnWeights(img.tensor(w["a_log"]), img.tensor(w["dt_bias"]), img.tensor(w["norm_w"]))
    state = img.tensor(shape=(hv * dv, dk)) if state is None else state
    y = img.tensor(shape=(steps, hv * dv))

    def kern(q, k, v, z, a, b, w, state, y):
        for s in ol.static_range(steps):
            out = gated_deltanet_step(ol.load(q[s]).reshape(hk, dk), ol.load(k[s]).reshape(hk, dk),
                                      ol.load(v[s]).reshape(hv, dv), ol.load(z[s]).reshape(hv, dv),
                                      ol.load(a[s]), ol.load(b[s]), w, state, engine=engine)
            ol.store(y[s], out.reshape(hv * dv))
    prog = ol.compile_kernel(kern, T, w=weights, state=state, y=y, **args)
    return prog, state, y


@pytest.mark.parametrize("hk,hv,dk,dv", [(2, 2, 64, 32), (1, 2, 64, 16), (2, 4, 128, 8)])
def test_gated_deltanet_steps_against_the_float64_rule(hk, hv, dk, dv):
    rng = np.random.default_rng(hk * 100 + hv * 10 + dv)
    steps = 3
    t, w = _inputs(rng, steps, hk, hv, dk, dv)
    img = Image(T)
    prog, state, y = _program(img, t, steps, hk, hv, dk, dv, w)
    ops = [i.op for i in prog.instrs]
    assert ops.count(isa.Op.DSTEP) == steps * hv
    # the state never enters TMEM: no LD or ST touches it
    lo, hi = state.base.const, state.base.const + 4 * hv * dv * dk
    for ins in prog.instrs:
        if ins.op in (isa.Op.LD, isa.Op.ST):
            assert not lo <= ins.fields["dram"] < hi
    m = img.run(prog)
    ref_y, ref_S = R.gated_deltanet(*t, w["a_log"], w["dt_bias"], w["norm_w"])
    got_y = img.read(y, m).reshape(steps, hv, dv)
    got_S = img.read(state, m).reshape(hv, dv, dk).transpose(0, 2, 1)
    ey, cy = R.max_abs(got_y, ref_y), R.cosine(got_y, ref_y)
    es, cs = R.max_abs(got_S, ref_S), R.cosine(got_S, ref_S)
    print(f"GDN y max-abs {ey:.2e} 1-cos {1 - cy:.1e}; state max-abs {es:.2e} 1-cos {1 - cs:.1e}")
    assert ey < 2e-5 * max(1.0, np.abs(ref_y).max()) and cy > 0.9999999, (ey, cy)
    assert es < 1e-5 * max(1.0, np.abs(ref_S).max()) and cs > 0.9999999, (es, cs)


def test_edge_gates_saturate_without_nan():
    """a + dt_bias far positive (decay 0: the state restarts), far negative (decay 1), b at +-30
    (beta 1 and 0), zero q and k (the eps of the L2 norm)."""
    hk = hv = 4
    dk, dv = 64, 8
    rng = np.random.default_rng(9)
    t, w = _inputs(rng, 2, hk, hv, dk, dv)
    t[4][:] = np.array([60.0, -60.0, 0.0, 25.0], np.float32)
    t[5][:] = np.array([30.0, -30.0, 0.0, 5.0], np.float32)
    t[0][:, 2] = 0.0
    t[1][:, 2] = 0.0
    img = Image(T)
    prog, state, y = _program(img, t, 2, hk, hv, dk, dv, w)
    m = img.run(prog)
    ref_y, ref_S = R.gated_deltanet(*t, w["a_log"], w["dt_bias"], w["norm_w"])
    got_y = img.read(y, m).reshape(2, hv, dv)
    got_S = img.read(state, m).reshape(hv, dv, dk).transpose(0, 2, 1)
    assert np.all(np.isfinite(got_y)) and np.all(np.isfinite(got_S))
    e, c = R.max_abs(got_y, ref_y), R.cosine(got_y, ref_y)
    print(f"GDN edge y max-abs {e:.2e} 1-cos {1 - c:.1e}")
    assert e < 2e-5 * max(1.0, np.abs(ref_y).max()) and c > 0.9999999, (e, c)
    assert R.max_abs(got_S, ref_S) < 1e-5 * max(1.0, np.abs(ref_S).max())


def test_the_state_carries_across_programs_in_dram():
    """Token 1 and token 2 as two programs on one machine: the second reads the state the first left."""
    hk = hv = 2
    dk, dv = 64, 16
    rng = np.random.default_rng(4)
    t, w = _inputs(rng, 2, hk, hv, dk, dv)
    img = Image(T)
    p1, state, _ = _program(img, [x[:1] for x in t], 1, hk, hv, dk, dv, w)
    p2, _, y2 = _program(img, [x[1:] for x in t], 1, hk, hv, dk, dv, w, state=state)
    m = img.machine(p1)
    m.run()
    m.load(p2.instrs, p2.arg_words())
    m.run()
    ref_y, ref_S = R.gated_deltanet(*t, w["a_log"], w["dt_bias"], w["norm_w"])
    got = img.read(y2, m).reshape(hv, dv)
    e, c = R.max_abs(got, ref_y[1]), R.cosine(got, ref_y[1])
    assert e < 2e-5 * max(1.0, np.abs(ref_y).max()) and c > 0.9999999, (e, c)
    got_S = img.read(state, m).reshape(hv, dv, dk).transpose(0, 2, 1)
    assert R.max_abs(got_S, ref_S) < 1e-5 * max(1.0, np.abs(ref_S).max())


def test_the_vop_form_is_bit_identical_to_dstep():
    hk, hv, dk, dv = 1, 2, 64, 40          # 40 rows: the VOP form runs them in chunks of 16
    rng = np.random.default_rng(8)
    t, w = _inputs(rng, 2, hk, hv, dk, dv)
    outs = []
    for engine in ("dstep", "vops"):
        img = Image(T)
        prog, state, y = _program(img, t, 2, hk, hv, dk, dv, w, engine=engine)
        assert (isa.Op.DSTEP in [i.op for i in prog.instrs]) == (engine == "dstep")
        m = img.run(prog)
        outs.append((img.read(y, m).view(np.uint32), img.read(state, m).view(np.uint32)))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])


def test_bad_shapes_are_compile_errors():
    img = Image(T)
    t, w = _inputs(np.random.default_rng(1), 1, 3, 4, 64, 8)
    with pytest.raises(ol.CompileError, match="do not share 3 key heads"):
        _program(img, t, 1, 3, 4, 64, 8, w)
