"""A whole decoder step (Qwen3-style, 2 layers in a hardware loop) on the golden simulator, three
positions in a row with the KV cache growing in DRAM, against a float64 numpy decoder on the
same (dequantised) weights; logits compared by max-abs error and cosine."""
import numpy as np

from otpu_core import ol
from otpu_core.kernels import reference as R
from otpu_core.kernels.decoder import DecoderShape, decoder_step, random_decoder
from otpu_core.ol.runtime import Image

T = "sim-small"
SHAPE = DecoderShape(layers=2, d=64, heads=4, kv_heads=2, head_dim=32, ffn=128, vocab=200, cap=64,
                     f_chunk=64, head_chunk=128, attn_block=32)


def _setup(rng):
    img = Image(T)
    layers, args, theta = random_decoder(img, SHAPE, rng)
    return img, layers, args, theta


def _reference(img, layers, args, theta, xs):
    s, grp = SHAPE, SHAPE.heads // SHAPE.kv_heads
    val = lambda t: img.read(t)
    deq = img.dequantized
    kcache = [[] for _ in layers]
    vcache = [[] for _ in layers]
    for p, x in enumerate(xs):
        h = x.astype(np.float64)
        c, sn = np.cos(theta[p]).astype(np.float32), np.sin(theta[p]).astype(np.float32)
        for li, L in enumerate(layers):
            xn = R.rmsnorm(h, val(L.ln1))
            q = R.rope(R.rmsnorm((xn @ deq(L.wq).T).reshape(s.heads, -1), val(L.qn)), c, sn)
            k = R.rope(R.rmsnorm((xn @ deq(L.wk).T).reshape(s.kv_heads, -1), val(L.kn)), c, sn)
            v = (xn @ deq(L.wv).T).reshape(s.kv_heads, -1)
            kcache[li].append(k)
            vcache[li].append(v)
            K, V = np.stack(kcache[li]), np.stack(vcache[li])
            att = np.concatenate([R.attention(q[g * grp:(g + 1) * grp], K[:, g], V[:, g]) for g in range(s.kv_heads)])
            h = h + att.reshape(-1) @ deq(L.wo).T
            h = h + R.swiglu_mlp(R.rmsnorm(h, val(L.ln2)), deq(L.wg), deq(L.wu), deq(L.wd))
        logits = R.rmsnorm(h, val(args["final_norm"])) @ deq(args["head"]).T
    return logits


def test_decoder_three_positions_against_float64():
    rng = np.random.default_rng(42)
    img, layers, args, theta = _setup(rng)
    xs = [rng.standard_normal(SHAPE.d).astype(np.float32) for _ in range(3)]
    machine = None
    for p, x in enumerate(xs):
        prog = ol.compile_kernel(decoder_step, T, shape=SHAPE, pos=p, **args)
        first_loop = next(i for i in prog.instrs if i.op.name == "LOOP")
        assert first_loop["count"] == SHAPE.layers and first_loop["body"] > len(prog.instrs) // 2   # the layer loop
        if machine is None:
            machine = img.machine(prog)
        else:
            machine.load(prog.instrs, prog.arg_words())
        machine.write_dram(args["x"].base.const, x)
        machine.run()
    got = img.read(args["logits"], machine)
    ref = _reference(img, layers, args, theta, xs)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert cos > 0.995 and err < 0.1 * np.abs(ref).max(), (err, cos)
    assert np.argmax(got) == np.argmax(ref)


def test_resident_program_with_runtime_position_is_bit_identical_to_per_position_programs():
    from otpu_core.kernels.attention import mask_table
    rng = np.random.default_rng(7)
    img, layers, args, theta = _setup(rng)
    mask = img.tensor(mask_table(SHAPE.attn_block))
    xs = [rng.standard_normal(SHAPE.d).astype(np.float32) for _ in range(SHAPE.attn_block + 3)]
    resident = ol.compile_kernel(decoder_step, T, shape=SHAPE, bucket=1, mask=mask, **args)
    assert resident.run_args and all(n == "pos" for combo in resident.run_args for n, _ in combo)
    outs = {}
    for form in ("per-position", "resident"):
        machine = None
        for p, x in enumerate(xs):
            if form == "resident" and p >= SHAPE.attn_block:          # bucket 1: one program, pos at run time
                prog, words = resident, resident.arg_words(pos=p)
            else:
                prog = ol.compile_kernel(decoder_step, T, shape=SHAPE, pos=p, **args)
                words = prog.arg_words()
            if machine is None:
                machine = img.machine(prog)
            else:
                machine.load(prog.instrs, words)
            machine.write_dram(args["x"].base.const, x)
            machine.run()
        outs[form] = img.read(args["logits"], machine)
    assert np.array_equal(outs["resident"].view(np.uint32), outs["per-position"].view(np.uint32))
