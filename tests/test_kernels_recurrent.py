"""Mamba2, GLA and RetNet recurrent steps on STREAM (one descriptor-programmed stream per head,
state in DRAM) against their float64 recurrences (max-abs, cosine) over several tokens, the
state carrying across programs, the VOP form bit-identical, and the descriptors in the board's
hardware subset."""
import numpy as np
import pytest

from otpu_core import isa, ol
from otpu_core.kernels import Mamba2Weights, gla_step, mamba2_step, retnet_step
from otpu_core.kernels import reference as R
from otpu_core.ol.runtime import Image

T = "sim-small"


def _check(got, ref, what, tol):
    e, c = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"{what}: max-abs {e:.2e} 1-cos {1 - c:.1e}")
    assert e < tol * max(1.0, np.abs(ref).max()) and c > 0.9999999, (what, e, c)


def _streams(prog, heads, steps):
    ops = [i.op for i in prog.instrs]
    assert ops.count(isa.Op.STREAM) == heads * steps and isa.Op.LD in ops
    for ins in prog.instrs:
        if ins.op == isa.Op.STREAM:
            assert isa.stream_hw_cfg(_desc_of(prog, ins), ins.flags) is not None


def _desc_of(prog, stream_ins):
    """The descriptor a STREAM reads: the FILLs at the program start that wrote its words."""
    d = stream_ins.fields["desc"]
    words = {}
    for ins in prog.instrs:
        if ins.op == isa.Op.VOP and ins.func == isa.VFunc.FILL and ins.fields["rows"] == 1:
            words.setdefault(ins.fields["dst"], ins.fields["imm"])
    return isa.StreamDesc.decode([words[d + i] for i in range(isa.STREAM_DESC_FIXED + 15) if d + i in words])


def _mamba2(img, t, w, steps, H, P, G, N, engine=None, state=None, gated=True):
    x, dt, b, c, z = t
    args = dict(x=img.tensor(x.reshape(steps, -1)), dt=img.tensor(dt), b=img.tensor(b.reshape(steps, -1)),
                c=img.tensor(c.reshape(steps, -1)), z=img.tensor(z.reshape(steps, -1)))
    weights = Mamba2Weights(img.tensor(w["a_log"]), img.tensor(w["dt_bias"]), img.tensor(w["d"]))
    state = img.tensor(shape=(H * P, N)) if state is None else state
    y = img.tensor(shape=(steps, H * P))

    def kern(x, dt, b, c, z, w, state, y):
        for s in ol.static_range(steps):
            out = mamba2_step(ol.load(x[s]).reshape(H, P), ol.load(dt[s]), ol.load(b[s]).reshape(G, N),
                              ol.load(c[s]).reshape(G, N), w, state,
                              z=ol.load(z[s]).reshape(H, P) if gated else None, engine=engine)
            ol.store(y[s], out.reshape(H * P))
    return ol.compile_kernel(kern, T, w=weights, state=state, y=y, **args), state, y


def _mamba2_inputs(rng, steps, H, P, G, N):
    t = [rng.standard_normal((steps, H, P)), rng.standard_normal((steps, H)) - 1.0,
         rng.standard_normal((steps, G, N)), rng.standard_normal((steps, G, N)), rng.standard_normal((steps, H, P))]
    w = dict(a_log=np.log(rng.uniform(1, 16, H)), dt_bias=rng.standard_normal(H) * 0.5, d=rng.standard_normal(H))
    return [a.astype(np.float32) for a in t], {n: a.astype(np.float32) for n, a in w.items()}


@pytest.mark.parametrize("H,P,G,N,gated", [(2, 16, 1, 64, True), (4, 8, 2, 128, False)])
def test_mamba2_step_against_the_float64_ssm(H, P, G, N, gated):
    rng = np.random.default_rng(H * N)
    steps = 3
    t, w = _mamba2_inputs(rng, steps, H, P, G, N)
    img = Image(T)
    prog, state, y = _mamba2(img, t, w, steps, H, P, G, N, gated=gated)
    _streams(prog, H, steps)
    m = img.run(prog)
    ref_y, ref_S = R.mamba2(*t[:4], w["a_log"], w["dt_bias"], w["d"], z=t[4] if gated else None)
    _check(img.read(y, m).reshape(steps, H, P), ref_y, "mamba2 y", 4e-6)
    _check(img.read(state, m).reshape(H, P, N), ref_S, "mamba2 state", 2e-6)


def _linear(img, q, k, v, g, steps, H, dk, dv, kind, engine=None, state=None):
    args = dict(q=img.tensor(q.reshape(steps, -1)), k=img.tensor(k.reshape(steps, -1)),
                v=img.tensor(v.reshape(steps, -1)), g=img.tensor(g.reshape(steps, -1) if kind == "gla" else g))
    state = img.tensor(shape=(H * dv, dk)) if state is None else state
    o = img.tensor(shape=(steps, H * dv))

    def kern(q, k, v, g, state, o):
        gamma = ol.load(g) if kind == "retnet" else None
        for s in ol.static_range(steps):
            qs, ks, vs = ol.load(q[s]).reshape(H, dk), ol.load(k[s]).reshape(H, dk), ol.load(v[s]).reshape(H, dv)
            if kind == "gla":
                out = gla_step(qs, ks, vs, ol.load(g[s]).reshape(H, dk), state, engine=engine)
            else:
                out = retnet_step(qs, ks, vs, gamma, state, engine=engine)
            ol.store(o[s], out.reshape(H * dv))
    return ol.compile_kernel(kern, T, state=state, o=o, **args), state, o


def _linear_inputs(rng, steps, H, dk, dv, kind):
    q, k, v = (rng.standard_normal((steps, H, n)).astype(np.float32) for n in (dk, dk, dv))
    if kind == "gla":     # GLA's gate: logsigmoid(.) / 16, a log decay per key dimension
        g = (-np.logaddexp(0, -rng.standard_normal((steps, H, dk)) * 2) / 16).astype(np.float32)
    else:                 # RetNet: gamma_h = 1 - 2^(-5-h)
        g = (1 - 2.0 ** (-5 - np.arange(H))).astype(np.float32)
    return q, k, v, g


@pytest.mark.parametrize("kind", ["gla", "retnet"])
@pytest.mark.parametrize("H,dk,dv", [(2, 64, 32), (3, 128, 16)])
def test_gla_and_retnet_steps_against_the_float64_recurrence(kind, H, dk, dv):
    rng = np.random.default_rng(H * dk + dv)
    steps = 4
    q, k, v, g = _linear_inputs(rng, steps, H, dk, dv, kind)
    img = Image(T)
    prog, state, o = _linear(img, q, k, v, g, steps, H, dk, dv, kind)
    _streams(prog, H, steps)
    m = img.run(prog)
    logd = g if kind == "gla" else np.broadcast_to(np.log(g.astype(np.float64)), (steps, H))
    ref_o, ref_S = R.gated_linear_attention(q, k, v, logd)
    _check(img.read(o, m).reshape(steps, H, dv), ref_o, f"{kind} o", 4e-6)
    _check(img.read(state, m).reshape(H, dv, dk).transpose(0, 2, 1), ref_S, f"{kind} state", 2e-6)


def test_states_carry_across_programs_and_the_vop_form_is_bit_identical():
    H, P, G, N = 2, 40, 1, 64            # 40 rows: the VOP form runs them in chunks of 16
    rng = np.random.default_rng(21)
    t, w = _mamba2_inputs(rng, 2, H, P, G, N)
    results = []
    for engine in ("stream", "vops"):
        img = Image(T)
        p1, state, _ = _mamba2(img, [a[:1] for a in t], w, 1, H, P, G, N, engine=engine)
        p2, _, y2 = _mamba2(img, [a[1:] for a in t], w, 1, H, P, G, N, engine=engine, state=state)
        assert (isa.Op.STREAM in [i.op for i in p2.instrs]) == (engine == "stream")
        m = img.machine(p1)
        m.run()
        m.load(p2.instrs, p2.arg_words())
        m.run()
        results.append((img.read(y2, m), img.read(state, m)))
    ref_y, ref_S = R.mamba2(*t[:4], w["a_log"], w["dt_bias"], w["d"], z=t[4])
    _check(results[0][0].reshape(H, P), ref_y[1], "mamba2 second program y", 4e-6)
    _check(results[0][1].reshape(H, P, N), ref_S, "mamba2 second program state", 2e-6)
    for a, b in zip(*results):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    q, k, v, g = _linear_inputs(rng, 2, 2, 64, 16, "gla")
    outs = []
    for engine in ("stream", "vops"):
        img = Image(T)
        prog, state, o = _linear(img, q, k, v, g, 2, 2, 64, 16, "gla", engine=engine)
        m = img.run(prog)
        outs.append((img.read(o, m).view(np.uint32), img.read(state, m).view(np.uint32)))
    assert all(np.array_equal(a, b) for a, b in zip(*outs))


def test_edge_decays_zero_and_one():
    """dt + dt_bias far positive with a large A (decay 0: the state restarts from dt x B) and far
    negative (dt 0: the state is kept); gla log decay 0 (keep) and -100 (forget)."""
    H, P, G, N = 2, 8, 1, 64
    rng = np.random.default_rng(2)
    t, w = _mamba2_inputs(rng, 2, H, P, G, N)
    t[1][:] = np.array([40.0, -40.0], np.float32)
    img = Image(T)
    prog, state, y = _mamba2(img, t, w, 2, H, P, G, N)
    m = img.run(prog)
    ref_y, ref_S = R.mamba2(*t[:4], w["a_log"], w["dt_bias"], w["d"], z=t[4])
    _check(img.read(y, m).reshape(2, H, P), ref_y, "mamba2 edge y", 4e-6)
    q, k, v, g = _linear_inputs(rng, 2, 2, 64, 16, "gla")
    g[:, 0] = 0.0
    g[:, 1] = -100.0
    img = Image(T)
    prog, state, o = _linear(img, q, k, v, g, 2, 2, 64, 16, "gla")
    m = img.run(prog)
    ref_o, _ = R.gated_linear_attention(q, k, v, g)
    _check(img.read(o, m).reshape(2, 2, 16), ref_o, "gla edge o", 4e-6)


def test_targets_without_stream_get_the_vop_form_and_refuse_an_explicit_stream():
    H, P, G, N = 2, 8, 1, 64
    t, w = _mamba2_inputs(np.random.default_rng(3), 1, H, P, G, N)
    img = Image("nangate45-small")
    with pytest.raises(ol.CompileError, match="STREAM = false"):
        _mamba2_on(img, t, w, H, P, G, N, "nangate45-small", "stream")
    prog = _mamba2_on(img, t, w, H, P, G, N, "nangate45-small", None)
    assert isa.Op.STREAM not in [i.op for i in prog.instrs]


def _mamba2_on(img, t, w, H, P, G, N, target, engine):
    x, dt, b, c, z = (img.tensor(a[0]) for a in t)
    weights = Mamba2Weights(img.tensor(w["a_log"]), img.tensor(w["dt_bias"]), img.tensor(w["d"]))
    state, y = img.tensor(shape=(H * P, N)), img.tensor(shape=(H, P))

    def kern(x, dt, b, c, w, state, y):
        ol.store(y, mamba2_step(ol.load(x), ol.load(dt), ol.load(b), ol.load(c), w, state, engine=engine))
    return ol.compile_kernel(kern, target, x=x, dt=dt, b=b, c=c, w=weights, state=state, y=y)
