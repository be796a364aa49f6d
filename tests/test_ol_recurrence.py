"""ol.dstep, ol.stream and ol.outer: lowering, refusals, descriptor placement, wait entries.

DSTEP is checked bit for bit against the fp32 sequence reference/isa.md 3.4 defines (rdot, mul,
sub, mul, outer, rdot in otpu_core.fp32) over several steps whose state stays in DRAM, against
the same step written as VOPs (ol.outer), and against STREAM with the Gated DeltaNet descriptor.
"""
import dataclasses

import numpy as np
import pytest

from otpu_core import fp32 as F
from otpu_core import isa, ol
from otpu_core.isasim import Machine
from otpu_core.ol.runtime import Image
from otpu_core.target import load as load_target

T = "sim-small"


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def dstep_reference(S, q, k, v, e, beta):
    """reference/isa.md 3.4 on fp32 bit patterns: (new state, output)."""
    S, q, k, v = (_bits(a) for a in (S, q, k, v))
    e, beta = np.uint32(_bits([e])[0]), np.uint32(_bits([beta])[0])
    kv = F.rdot(S, k[None, :])
    d = F.mul(F.sub(v, F.mul(kv, e)), beta)
    S2 = F.outer(S, e, d[:, None], k[None, :])
    return S2, F.rdot(S2, q[None, :])


def _step_inputs(rng, steps, rows, cols):
    qk = rng.standard_normal((steps, 2 * cols)).astype(np.float32)
    v = rng.standard_normal((steps, rows)).astype(np.float32)
    gates = np.stack([rng.uniform(0.5, 1.0, steps), rng.uniform(0.0, 1.0, steps)], 1).astype(np.float32)
    return qk, v, gates


@pytest.mark.parametrize("rows,cols", [(5, 64), (32, 128), (3, 192)])
def test_dstep_steps_a_dram_state_bit_exact_over_several_steps(rows, cols):
    rng = np.random.default_rng(rows * cols)
    steps = 4
    qk, v, gates = _step_inputs(rng, steps, rows, cols)
    img = Image(T)
    state = img.tensor(shape=(rows, cols))
    qkt, vt, gt, ot = img.tensor(qk), img.tensor(v), img.tensor(gates), img.tensor(shape=(steps, rows))

    def kern(state, qk, v, g, o):
        for t in ol.range(steps):
            ol.store(o[t], ol.dstep(state, ol.load(qk[t]), ol.load(v[t]), ol.load(g[t]), zero=False))
    # the state starts at +0 in DRAM (the image is zero): the first step reads it like the others
    prog = ol.compile_kernel(kern, T, state=state, qk=qkt, v=vt, g=gt, o=ot)
    assert [i.op for i in prog.instrs].count(isa.Op.DSTEP) == 1         # one DSTEP in the loop body
    m = img.run(prog)
    S = np.zeros((rows, cols), np.uint32)
    outs = []
    for t in range(steps):
        S, o = dstep_reference(S.view(np.float32), qk[t, :cols], qk[t, cols:], v[t], *gates[t])
        outs.append(o)
    assert np.array_equal(_bits(img.read(state, m)), S)
    assert np.array_equal(_bits(img.read(ot, m)), np.stack(outs))
    assert np.count_nonzero(S) > rows * cols // 2


def test_dstep_zero_starts_from_zero_whatever_dram_holds():
    rng = np.random.default_rng(3)
    rows, cols = 4, 64
    qk, v, gates = _step_inputs(rng, 1, rows, cols)
    img = Image(T)
    state = img.tensor(np.full((rows, cols), 7.0, np.float32))
    qkt, vt, gt, ot = img.tensor(qk[0]), img.tensor(v[0]), img.tensor(gates[0]), img.tensor(shape=(rows,))

    def kern(state, qk, v, g, o):
        ol.store(o, ol.dstep(state, ol.load(qk), ol.load(v), ol.load(g), zero=True))
    prog = ol.compile_kernel(kern, T, state=state, qk=qkt, v=vt, g=gt, o=ot)
    assert prog.instrs[[i.op for i in prog.instrs].index(isa.Op.DSTEP)].has(isa.F_DZERO)
    m = img.run(prog)
    S, o = dstep_reference(np.zeros((rows, cols), np.float32), qk[0, :cols], qk[0, cols:], v[0], *gates[0])
    assert np.array_equal(_bits(img.read(state, m)), S) and np.array_equal(_bits(img.read(ot, m)), o)


def _vop_step(state_tile, qk, v, gates, cols):
    """The DSTEP of one row block as VOPs: RDOT, MUL, SUB, MUL, OUTER (decay scalar), RDOT."""
    q, k = qk[:cols], qk[cols:]
    e, beta = gates[0:1], gates[1:2]
    kv = state_tile @ k
    d = (v - kv * e) * beta
    ol.outer(state_tile, d, k, decay=e)
    return state_tile @ q


def test_dstep_equals_its_vop_sequence_and_the_gdn_stream():
    rng = np.random.default_rng(11)
    rows, cols = 6, 64
    S0 = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float32)
    qk, v, gates = _step_inputs(rng, 1, rows, cols)
    img = Image(T)
    s_dstep, s_vop, s_stream = img.tensor(S0), img.tensor(S0), img.tensor(S0)
    qkt, vt, gt = img.tensor(qk[0]), img.tensor(v[0]), img.tensor(gates[0])
    o1, o2, o3 = (img.tensor(shape=(rows,)) for _ in range(3))

    def kern(s1, s2, s3, qk, v, g, o1, o2, o3):
        qkv, vv, gg = ol.load(qk), ol.load(v), ol.load(g)
        ol.store(o1, ol.dstep(s1, qkv, vv, gg))
        st = ol.load(s2)
        ol.store(o2, _vop_step(st, qkv, vv, gg, cols))
        ol.store(s2, st)
        # STREAM with the Gated DeltaNet descriptor: slots q | k, X = v, K0 = decay, K1 = beta
        ol.store(o3, ol.stream(isa.gdn_desc(rows, cols), src=s3, dst=s3, slots=qkv, x=vv, consts=gg))
    prog = ol.compile_kernel(kern, T, s1=s_dstep, s2=s_vop, s3=s_stream, qk=qkt, v=vt, g=gt, o1=o1, o2=o2, o3=o3)
    ops = [i.op for i in prog.instrs]
    assert isa.Op.DSTEP in ops and isa.Op.STREAM in ops
    m = img.run(prog)
    ref_S, ref_o = dstep_reference(S0, qk[0, :cols], qk[0, cols:], v[0], *gates[0])
    for s, o in ((s_dstep, o1), (s_vop, o2), (s_stream, o3)):
        assert np.array_equal(_bits(img.read(s, m)), ref_S)
        assert np.array_equal(_bits(img.read(o, m)), ref_o)


def test_stream_tmem_source_and_destination_and_shared_descriptor_slots():
    """A PASS/MUL stream on TMEM rows (SRC_T | DST_T), twice with one descriptor: one set of FILLs."""
    rng = np.random.default_rng(5)
    rows, cols = 3, 40
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    gate = rng.standard_normal(cols).astype(np.float32)
    img = Image(T)
    xt, gt, yt = img.tensor(x), img.tensor(gate), img.tensor(shape=(rows, cols))
    desc = isa.StreamDesc(rows, cols, u_mode=isa.U_MUL, g_src=isa.G_SLOT, g_idx=0)

    def kern(x, g, y):
        t = ol.load(x)
        gg = ol.load(g)
        a = ol.empty((rows, cols), banked=False)
        ol.stream(desc, src=t, dst=a, slots=gg)
        ol.stream(desc, src=a, dst=a, slots=gg)
        ol.store(y, a)
    prog = ol.compile_kernel(kern, T, x=xt, g=gt, y=yt)
    fills = [i for i in prog.instrs if i.op == isa.Op.VOP and i.func == isa.VFunc.FILL]
    assert len(fills) == desc.nwords                     # placed once, shared by both streams
    got = img.read(yt, img.run(prog))
    ref = F.mul(F.mul(_bits(x), _bits(gate)[None, :]), _bits(gate)[None, :])
    assert np.array_equal(_bits(got), ref)


def test_the_descriptor_fills_run_once_before_a_loop_of_streams():
    rows, cols = 2, 64
    img = Image(T)
    st = img.tensor(np.ones((rows, cols), np.float32))
    k = img.tensor(np.full(2, 0.5, np.float32))
    desc = isa.StreamDesc(rows, cols, u_mode=isa.U_MUL, g_src=isa.G_CONST, g_idx=0)

    def kern(st, k):
        kk = ol.load(k)
        for _ in ol.range(3):
            ol.stream(desc, src=st, dst=st, consts=kk)
    prog = ol.compile_kernel(kern, T, st=st, k=k)
    ops = [i.op for i in prog.instrs]
    assert ops.index(isa.Op.LOOP) > max(i for i, ins in enumerate(prog.instrs) if ins.op == isa.Op.VOP)
    assert np.all(img.read(st, img.run(prog)) == 0.125)


def _compile_error(kern, target=T, **args):
    with pytest.raises(ol.CompileError) as e:
        ol.compile_kernel(kern, target, **args)
    return str(e.value)


def test_targets_without_the_stream_engine_refuse_at_compile_time():
    img = Image("nangate45-small")
    st, qk, v, g = img.tensor(shape=(4, 64)), img.tensor(shape=(128,)), img.tensor(shape=(4,)), img.tensor(shape=(2,))

    def d(st, qk, v, g):
        ol.dstep(st, ol.load(qk), ol.load(v), ol.load(g))

    def s(st, qk, v, g):
        ol.stream(isa.gdn_desc(4, 64), src=st, dst=st, slots=ol.load(qk), x=ol.load(v), consts=ol.load(g))
    assert "DSTEP = false" in _compile_error(d, "ypcb-00338", st=st, qk=qk, v=v, g=g)
    assert "STREAM = false" in _compile_error(s, "nangate45-small", st=st, qk=qk, v=v, g=g)
    ol.compile_kernel(d, "nangate45-small", st=st, qk=qk, v=v, g=g)       # it has DSTEP


def test_a_subset_only_target_refuses_a_descriptor_outside_the_hardware_subset():
    """nangate45-stream's engine (the card's, the RTL's) runs only isa.stream_hw_cfg's descriptors:
    the compiler refuses any other, which sim-small (generic: the golden's general form) compiles."""
    rows, cols = 4, 64
    img = Image("nangate45-stream")
    st, sl, v, g = img.tensor(shape=(rows, cols)), img.tensor(shape=(4 * cols,)), img.tensor(shape=(rows,)), \
        img.tensor(shape=(2,))

    def kern(desc, **flags):
        def k(st, sl, v, g):
            ol.stream(desc, src=None if flags.get("szero") else st, dst=st, slots=ol.load(sl), x=ol.load(v),
                      consts=ol.load(g))
        return k
    args = dict(st=st, sl=sl, v=v, g=g)
    for desc in (isa.gdn_desc(rows, cols), isa.state_desc(rows, cols, isa.D_DOT, a_idx=2, gate="col", q=False)):
        ol.compile_kernel(kern(desc), "nangate45-stream", **args)
    ol.compile_kernel(kern(isa.gdn_desc(rows, cols), szero=True), "nangate45-stream", **args)
    for bad in (dataclasses.replace(isa.gdn_desc(rows, cols), u_mode=isa.U_MUL),
                dataclasses.replace(isa.gdn_desc(rows, cols), q_idx=1),
                isa.gdn_desc(rows, 32)):
        big = bad.cols != cols
        a = dict(st=img.tensor(shape=(rows, bad.cols)), sl=img.tensor(shape=(4 * bad.cols,)), v=v, g=g) if big else args
        msg = _compile_error(kern(bad), "nangate45-stream", **a)
        assert "outside the stream engine's hardware subset" in msg, msg
        ol.compile_kernel(kern(bad), T, **{k: Image(T).tensor(shape=t.shape) for k, t in a.items()})


def test_bad_operands_are_compile_errors_naming_the_problem():
    img = Image(T)
    st, odd, qk, v, g = (img.tensor(shape=s) for s in ((4, 64), (4, 96), (128,), (4,), (2,)))

    def wrong_cols(st, qk, v, g):
        ol.dstep(st, ol.load(qk), ol.load(v), ol.load(g))
    assert "cols one of (64, 128, 192, 256)" in _compile_error(wrong_cols, st=odd, qk=qk, v=v, g=g)

    def short_qk(st, qk, v, g):
        ol.dstep(st, ol.load(qk)[:64], ol.load(v), ol.load(g))
    assert "128 contiguous words" in _compile_error(short_qk, st=st, qk=qk, v=v, g=g)

    def looped_gates(st, qk, v, g):
        gg = ol.zeros((4, 2))
        for i in ol.range(2):
            ol.dstep(st, ol.load(qk), ol.load(v), gg[i])
    assert "absolute field" in _compile_error(looped_gates, st=st, qk=qk, v=v, g=g)

    def misaligned(st, qk, v, g):
        ol.dstep(ol.Tensor(st.base + 4, (4, 64)), ol.load(qk), ol.load(v), ol.load(g))
    assert "multiple of D=32" in _compile_error(misaligned, st=st, qk=qk, v=v, g=g)

    def no_slots(st, qk, v, g):
        ol.stream(isa.gdn_desc(4, 64), src=st, dst=st, x=ol.load(v), consts=ol.load(g))
    assert "column slots [0, 1]" in _compile_error(no_slots, st=st, qk=qk, v=v, g=g)

    def split_register(st, qk, v, g):
        for i in ol.range(2):
            ol.stream(isa.gdn_desc(4, 64), src=ol.shift(st, i * 1024), dst=st, slots=ol.load(qk), x=ol.load(v),
                      consts=ol.load(g))
    assert "share one address register" in _compile_error(split_register, st=st, qk=qk, v=v, g=g)

    def area_taken(st, qk, v, g):
        big = ol.empty((16384 - 40,))          # reaches into the top-of-TMEM descriptor area
        del big
        ol.stream(isa.gdn_desc(4, 64), src=st, dst=st, slots=ol.load(qk), x=ol.load(v), consts=ol.load(g))
    assert "used before its first stream" in _compile_error(area_taken, st=st, qk=qk, v=v, g=g)


def test_an_integer_column_index_is_a_compile_error_not_a_traceback():
    def kern():
        ol.zeros((4, 8))[:, 0]
    assert "use t[:, 0:1]" in _compile_error(kern)


def test_outer_refuses_an_accumulator_overlapping_its_operands():
    def kern():
        acc = ol.zeros((4, 8))
        ol.outer(acc, acc[:, 0:1], ol.zeros((8,)))
    assert "must not overlap" in _compile_error(kern)


def test_waits_order_dstep_and_stream_on_a_wait_entry_target():
    """On a SEQ_WC target the wait entries replace the scoreboard and the timing model refuses an
    entry too weak for the footprints it knows (a Fault 'hazard'): a GDN step then a STREAM on
    the same state, with VOPs reading their outputs, runs clean and bit-exact."""
    target = load_target(T)
    cfg = dataclasses.replace(target.config(), SEQ_WC=True)
    rng = np.random.default_rng(2)
    rows, cols = 4, 64
    qk, v, gates = _step_inputs(rng, 2, rows, cols)
    img = Image(T)
    st, qkt, vt, gt, ot = img.tensor(shape=(rows, cols)), img.tensor(qk), img.tensor(v), img.tensor(gates), \
        img.tensor(shape=(3, 8))

    def kern(st, qk, v, g, o):
        o1 = ol.dstep(st, ol.load(qk[0]), ol.load(v[0]), ol.load(g[0]))
        ol.store(o[0][0:rows], o1 * 1.0)
        o2 = ol.stream(isa.gdn_desc(rows, cols), src=st, dst=st, slots=ol.load(qk[1]), x=ol.load(v[1]),
                       consts=ol.load(g[1]))
        # a FILL just past the stream's outputs: disjoint from what STREAM touches, but inside the
        # conservative footprint the timing model holds a STREAM to, so its entry must wait
        near = ol.full((8,), 3.0)
        ol.store(o[1][0:rows], o2 * 1.0)
        ol.store(o[2], near)
    prog = ol.compile_kernel(kern, cfg, st=st, qk=qkt, v=vt, g=gt, o=ot)
    m = Machine(target, cfg=cfg, timing=True)
    m.write_dram(0, img.dram[: img.cursor])
    m.load(prog.instrs, prog.arg_words(), waits=prog.waits)
    m.run()
    S = np.zeros((rows, cols), np.float32)
    outs = []
    for t in range(2):
        S, o = dstep_reference(S, qk[t, :cols], qk[t, cols:], v[t], *gates[t])
        S = S.view(np.float32)
        outs.append(o)
    assert np.array_equal(_bits(img.read(ot, m)[:2, :rows]), np.stack(outs))
    assert np.all(img.read(ot, m)[2] == 3.0)
    assert sum(w.waits for w in prog.waits) >= 4
