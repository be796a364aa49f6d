"""WAITC entries checked against the dynamic instruction stream of real runs.

The checker is independent of the generator: it records every executed instruction with its
resolved words, derives footprints from the reference's field meanings, and for every pair
(earlier i, later j) that conflicts (RAW/WAW: i must be complete; WAR: i must have released its
sources) checks that j's entry forces it: counts[q_i] <= the number of q_i-instructions
dispatched between them (or >= 15 of them, which the window guarantees), or for WAR the mask
bit of i's distance in queued dispatches."""

import numpy as np
import pytest

from otpu_core import isa, ol
from otpu_core.isa import BMode, Op, VFunc
from otpu_core.kernels import append_kv, attention, matmul, swiglu_mlp, topk
from otpu_core.ol.runtime import Image

T = "sim-small"
D = 32
LOOKBACK = 300       # dynamic instructions looked back per instruction (keeps the checker fast)


def footprint(ins, w, tmem=None):
    """(reads, writes): lists of (space, lo, hi) from resolved words w (a STREAM's descriptor is
    read from `tmem`, the slice's TMEM words)."""
    op, f = ins.op, ins.fields
    R, W = [], []
    if op == Op.DSTEP:
        rows, cols = f["rows"], f["cols"]
        state = ("D", w[1], w[1] + 4 * rows * cols)
        R += [("T", w[2], w[2] + 2 * cols), ("T", w[3], w[3] + rows), ("T", f["g"], f["g"] + 1),
              ("T", f["g"] + f["gs"], f["g"] + f["gs"] + 1)]
        R += [] if f["dzero"] else [state]
        W += [state, ("T", f["o"], f["o"] + rows)]
    elif op == Op.STREAM:
        desc = isa.StreamDesc.decode([int(x) for x in tmem[f["desc"]: f["desc"] + isa.STREAM_DESC_FIXED + 15]])
        rows, cols = desc.rows, desc.cols
        R.append(("T", f["desc"], f["desc"] + desc.nwords))
        slots, consts, uses_x = stream_uses(desc)
        R += [("T", w[4] + i * cols, w[4] + (i + 1) * cols) for i in slots]
        R += [("T", w[6] + j * f["ks"], w[6] + j * f["ks"] + 1) for j in consts]
        R += [("T", w[5], w[5] + rows)] if uses_x else []
        W += [("T", w[6] + j * f["ks"], w[6] + j * f["ks"] + 1) for j in range(4) if desc.rsave >> j & 1]
        for name, word, space_flag, none_flag, rs in (("src", 2, "src_t", "szero", desc.srs),
                                                      ("dst", 3, "dst_t", "nodst", desc.drs)):
            if f[none_flag]:
                continue
            span = ("T", w[word], w[word] + (rows - 1) * (rs or cols) + cols) if f[space_flag] else \
                ("D", w[word], w[word] + 4 * rows * cols)
            (R if name == "src" else W).append(span)
        if desc.q_en or desc.o_reg_en:
            W.append(("T", f["out"], f["out"] + rows))
    if op == Op.LD:
        R.append(("D", w[1], w[1] + 4 * f["n"])); W.append(("T", w[2], w[2] + f["n"]))
    elif op == Op.ST:
        R.append(("T", w[2], w[2] + f["n"])); W.append(("D", w[1], w[1] + 4 * f["n"]))
    elif op == Op.MM:
        n, kb, m = f["n"], f["kb"], f["m"]
        R.append(("D", w[1], w[1] + (n - 1) * f["rs"] + kb * D))
        if not f["unit"]:
            R.append(("D", w[2], w[2] + (n - 1) * f["srs"] + 4 * kb))
        if f["ascale"]:
            R.append(("T", w[2], w[2] + m))
        R.append(("A", f["ab"], f["ab"] + kb))
        out = ("T", w[3], w[3] + (m - 1) * f["ors"] + n)
        W.append(out)
        if f["acc"]:
            R.append(out)
        if f["rmax"]:
            W.append(("T", w[3] + m * f["ors"], w[3] + m * f["ors"] + m))
    elif op == Op.QACT:
        rows, kb = f["rows"], f["kb"]
        R.append(("T", w[1], w[1] + (rows - 1) * f["srs"] + kb * D))
        if f["cscale"]:
            R.append(("T", f["cscale_addr"], f["cscale_addr"] + kb * D))
        if f["rscale"]:
            R.append(("T", f["rscale_addr"], f["rscale_addr"] + rows))
        W.append(("A", f["ab"], f["ab"] + kb))
    elif op == Op.QST:
        rows, kb = f["rows"], f["kb"]
        R.append(("T", w[1], w[1] + (rows - 1) * f["srs"] + kb * D))
        W.append(("D", w[2], w[2] + (rows - 1) * f["drs"] + (kb * D - 1) * f["es"] + 1))
        W.append(("D", w[3], w[3] + 4 * (rows if f["row"] else rows * kb)))
    elif op == Op.VOP:
        func, rows, cols = ins.func, f["rows"], f["cols"]
        if func != VFunc.FILL:
            R.append(("T", w[2], w[2] + (rows - 1) * f["ars"] + cols))
        if func in isa.READS_B:
            bm = ins.bmode
            if bm == BMode.FULL:
                R.append(("T", w[3], w[3] + (rows - 1) * f["brs"] + cols))
            elif bm == BMode.ROW:
                R.append(("T", w[3], w[3] + (rows - 1) * f["brs"] + 1))
            elif bm == BMode.COL:
                R.append(("T", w[3], w[3] + cols))
        width = 2 if func == VFunc.ARGMAX else 1 if func in isa.REDUCE else cols
        W.append(("T", w[1], w[1] + (rows - 1) * f["drs"] + width))
    elif op == Op.RLD:
        R.append(("T", w[1], w[1] + 1))
    return R, W


def stream_uses(d):
    """(column slots, constants, X read) of a STREAM descriptor, from reference/isa.md 3.8 step 3."""
    ops = d.ops
    operands = [o[2] for o in ops] + [o[3] for o in ops if o[0] not in isa.SOP_UNARY]
    slots = {d.a_idx} if d.a_en and d.a_op == isa.A_SLOT else set()
    consts = {c - isa.OP_K0 for c in operands if isa.OP_K0 <= c < isa.OP_ZERO}
    consts |= {j for j in range(4) if (d.rinit | d.rsave) >> j & 1}
    if d.a_en and d.a_op == isa.A_CONST:
        consts.add(d.a_idx)
    if d.u_mode in (isa.U_FMMA, isa.U_MUL):
        (slots if d.g_src == isa.G_SLOT else consts if d.g_src == isa.G_CONST else set()).add(d.g_idx)
    if d.u_mode in (isa.U_FMMA, isa.U_ADD):
        (slots if d.b_src == isa.BS_SLOT else consts if d.b_src == isa.BS_CONST else set()).add(d.b_idx)
    if (d.q_en and not d.q_self) or d.out_p2:
        slots.add(d.q_idx)
    return slots, {j for j in consts if j < 4}, isa.OP_X in operands


def overlaps(xs, ys):
    return any(a[0] == b[0] and a[1] < b[2] and b[1] < a[2] for a in xs for b in ys)


def check(prog, img, **run_values):
    m = img.machine(prog, **run_values)
    trace = []
    m.on_step = lambda sl, pc, ins: trace.append((pc, ins, footprint(ins, sl.resolved(ins), sl.tmem.t)))
    m.run()
    queues = [isa.queue_of(ins.op) for _, ins, _ in trace]
    checked = 0
    for j, (pcj, insj, (rj, wj)) in enumerate(trace):
        if not (rj or wj):
            continue
        entry = prog.waits[pcj]
        between = {q: 0 for q in isa.Queue}
        queued = 0
        for i in range(j - 1, max(-1, j - 1 - LOOKBACK), -1):
            pci, insi, (ri, wi) = trace[i]
            qi = queues[i]
            if qi is not None:
                queued += 1
            hard = overlaps(wi, rj + wj)
            war = overlaps(ri, wj)
            if qi is not None and (hard or war):
                ok = entry.counts[qi] <= between[qi] or between[qi] >= 15
                if war and not hard:
                    ok = ok or (queued <= 31 and entry.mask >> (queued - 1) & 1)
                assert ok, (f"pc {pcj} {insj} must wait for pc {pci} {insi}: counts {entry.counts} "
                            f"mask {entry.mask:x}, {between[qi]} of its queue between")
                checked += 1
            if qi is not None:
                between[qi] += 1
    return checked


def test_waitc_matmul_loop():
    rng = np.random.default_rng(0)
    img = Image(T)
    x, w, y = img.tensor(rng.standard_normal((3, 80)).astype(np.float32)), \
        img.weight(rng.standard_normal((40, 80)).astype(np.float32)), img.tensor(shape=(3, 40))
    prog = ol.compile_kernel(matmul, T, x=x, w=w, y=y, n_chunk=12)
    assert check(prog, img) > 10


def test_waitc_attention_nested_loops_and_mlp():
    rng = np.random.default_rng(1)
    img = Image(T)
    n, d = 300, 64
    q, k, v = (img.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((2, d), (n, d), (n, d)))
    kv, out = img.kv_cache(320, d), img.tensor(shape=(2, d))
    wg, wu = img.weight(rng.standard_normal((128, d)).astype(np.float32)), img.weight(rng.standard_normal((128, d)).astype(np.float32))
    wd, y = img.weight_parts(rng.standard_normal((d, 128)).astype(np.float32), 64), img.tensor(shape=(2, d))

    def kern(q, kk, vv, kv, out, wg, wu, wd, y):
        for t in ol.range(n):
            append_kv(kv, t, ol.load(kk[t]), ol.load(vv[t]))
        a = attention(ol.load(q), kv, n)
        ol.store(out, a)
        ol.store(y, swiglu_mlp(a, wg, wu, wd, 64))
    prog = ol.compile_kernel(kern, T, q=q, kk=k, vv=v, kv=kv, out=out, wg=wg, wu=wu, wd=wd, y=y)
    assert check(prog, img) > 100


def test_waitc_device_values_topk():
    rng = np.random.default_rng(2)
    img = Image(T)
    logits, o = img.tensor(rng.standard_normal(700).astype(np.float32)), img.tensor(shape=(3, 2))

    def kern(l, o):
        ol.store(o, topk(l, 3, 128))
    prog = ol.compile_kernel(kern, T, l=logits, o=o)
    assert check(prog, img) > 20


def test_waitc_gated_deltanet_and_mamba2_on_the_stream_engine():
    """DSTEP and STREAM heads in a token loop, with the VOPs around them reading their outputs."""
    from otpu_core.kernels import GdnWeights, Mamba2Weights, gated_deltanet_step, mamba2_step
    rng = np.random.default_rng(4)
    img = Image(T)

    def t(*shape):
        return img.tensor(rng.standard_normal(shape).astype(np.float32))
    gw, mw = GdnWeights(t(2), t(2), t(32)), Mamba2Weights(t(2), t(2), t(2))
    gstate, mstate = img.tensor(shape=(64, 64)), img.tensor(shape=(32, 64))
    q, k, v, z, a, b = t(2, 128), t(2, 128), t(2, 64), t(2, 64), t(2, 2), t(2, 2)
    x, dt, bb, cc, y1, y2 = t(2, 32), t(2, 2), t(2, 64), t(2, 64), img.tensor(shape=(2, 64)), img.tensor(shape=(2, 32))

    def kern(q, k, v, z, a, b, x, dt, bb, cc, gw, mw, gstate, mstate, y1, y2):
        for s in ol.range(2):
            g = gated_deltanet_step(ol.load(q[s]).reshape(2, 64), ol.load(k[s]).reshape(2, 64),
                                    ol.load(v[s]).reshape(2, 32), ol.load(z[s]).reshape(2, 32), ol.load(a[s]),
                                    ol.load(b[s]), gw, gstate)
            ol.store(y1[s], g.reshape(64))
            m = mamba2_step(ol.load(x[s]).reshape(2, 16), ol.load(dt[s]), ol.load(bb[s]).reshape(1, 64),
                            ol.load(cc[s]).reshape(1, 64), mw, mstate)
            ol.store(y2[s], m.reshape(32))
    prog = ol.compile_kernel(kern, T, q=q, k=k, v=v, z=z, a=a, b=b, x=x, dt=dt, bb=bb, cc=cc, gw=gw, mw=mw,
                             gstate=gstate, mstate=mstate, y1=y1, y2=y2)
    ops = [i.op for i in prog.instrs]
    assert ops.count(Op.DSTEP) == 2 and ops.count(Op.STREAM) == 2
    assert check(prog, img) > 40


def test_halt_waits_for_everything_and_sequencer_glue_waits_for_nothing():
    img = Image(T)
    x, y = img.tensor(np.ones((4, 8), np.float32)), img.tensor(shape=(4, 8))

    def k(x, y):
        for i in ol.range(4):
            ol.store(y[i], ol.load(x[i]) + 1.0)
    prog = ol.compile_kernel(k, T, x=x, y=y)
    for ins, wt in zip(prog.instrs, prog.waits):
        if ins.op == Op.HALT:
            assert wt.sync
        elif ins.op in (Op.LOOP, Op.ADDI, Op.LI, Op.NOP):
            assert not wt.waits
    st = [wt for ins, wt in zip(prog.instrs, prog.waits) if ins.op == Op.ST][0]
    assert st.counts[isa.Queue.VPU] == 0          # the ST reads what the VOP just wrote


def test_the_checker_catches_missing_waits():
    img = Image(T)
    x, y = img.tensor(np.ones((4, 8), np.float32)), img.tensor(shape=(4, 8))

    def k(x, y):
        ol.store(y, ol.load(x) * 2.0)
    prog = ol.compile_kernel(k, T, x=x, y=y)
    prog.waits = [isa.NO_WAIT] * len(prog.instrs)
    with pytest.raises(AssertionError, match="must wait"):
        check(prog, img)


def test_a_big_program_with_a_long_loop_gets_its_waits():
    """The affine abstraction on a loop of 600 trips; its speed is benchmarks/bench_ol.py's (no timings in tests)."""
    img = Image(T)
    n, d = 600, 64
    rng = np.random.default_rng(3)
    q, k, v = (img.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, d), (n, d), (n, d)))
    kv, out = img.kv_cache(640, d), img.tensor(shape=(4, d))

    def kern(q, kk, vv, kv, out):
        for t in ol.range(n):
            append_kv(kv, t, ol.load(kk[t]), ol.load(vv[t]))
        for _ in ol.static_range(8):
            ol.store(out, attention(ol.load(q), kv, n))
    prog = ol.compile_kernel(kern, T, q=q, kk=k, vv=v, kv=kv, out=out)
    assert len(prog.instrs) > 300 and prog.stats.waits > 0


def test_waitc_whole_decoder_step_resident():
    """Layer loop, parent-initialised address registers, run-time position, nested attention loops."""
    from otpu_core.kernels.attention import mask_table
    from otpu_core.kernels.decoder import DecoderShape, check_layers, decoder_step, plan_layer
    rng = np.random.default_rng(4)
    s = DecoderShape(layers=2, d=64, heads=4, kv_heads=2, head_dim=32, ffn=128, vocab=200, cap=96,
                     f_chunk=64, head_chunk=128, attn_block=32)
    img = Image(T)
    layers = [plan_layer(s, lambda sh, parts=None: (img.weight_parts(rng.standard_normal(sh).astype(np.float32), parts)
                                                    if parts else img.weight(rng.standard_normal(sh).astype(np.float32))),
                         lambda sh: img.tensor(np.ones(sh, np.float32)), img.kv_cache) for _ in range(s.layers)]
    args = dict(layer=check_layers(layers), final_norm=img.tensor(np.ones(s.d, np.float32)),
                head=img.weight(rng.standard_normal((s.vocab, s.d)).astype(np.float32)),
                x=img.tensor(rng.standard_normal(s.d).astype(np.float32)), logits=img.tensor(shape=(s.vocab,)),
                cos=img.tensor(np.ones((s.cap, 16), np.float32)), sin=img.tensor(np.zeros((s.cap, 16), np.float32)),
                mask=img.tensor(mask_table(32)))
    prog = ol.compile_kernel(decoder_step, T, shape=s, bucket=2, **args)
    assert check(prog, img, pos=70) > 300


def test_waitc_device_count_loop_with_an_inner_loop():
    img = Image(T)
    x = img.tensor(np.array([3.0, 0, 0, 0], np.float32))
    y, out = img.tensor(np.arange(12, dtype=np.float32).reshape(3, 4)), img.tensor(shape=(3, 4))

    def kern(x, y, out):
        n = ol.rld(ol.load(x[0:1]))
        acc = ol.zeros((4,))
        for _ in ol.range(n):
            for j in ol.range(3):
                acc += ol.load(y[j])
                ol.store(out[j], acc)
    prog = ol.compile_kernel(kern, T, x=x, y=y, out=out)
    assert check(prog, img) > 20
