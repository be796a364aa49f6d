"""Expert offload (kernels/moe.py, llm/offload.py): a two-layer MoE FFN on the golden simulator with
every expert absent at the start and three slots a layer for eight experts, served by the host
through the WAITW mailbox while the program runs, gives the same bits as the same program with
every expert resident, and matches a float64 reference; the bytes streamed are counted; the
blob layout round-trips; a request out of sequence is refused."""
import numpy as np
import pytest

from otpu_core import ol
from otpu_core.board import Board, BoardBackend, IsaBackend
from otpu_core.isa import WF_NAMES
from otpu_core.kernels import reference as R
from otpu_core.kernels.moe import ExpertBlob, OffloadLayout, moe_ffn
from otpu_core.llm.offload import ExpertServer, OffloadError, run_serving
from otpu_core.ol.runtime import Image

T = "sim-small"
D_MODEL, FFN, F_CHUNK, E, K, LAYERS, TOKENS = 64, 64, 32, 8, 2, 2, 6


@pytest.fixture(scope="module")
def moe():
    rng = np.random.default_rng(7)
    experts = [[[(rng.standard_normal(s) * 0.3).astype(np.float32) for s in ((FFN, D_MODEL), (FFN, D_MODEL), (D_MODEL, FFN))]
                for _ in range(E)] for _ in range(LAYERS)]
    routers = [(rng.standard_normal((E, D_MODEL)) * 0.5).astype(np.float32) for _ in range(LAYERS)]
    xs = rng.standard_normal((TOKENS, D_MODEL)).astype(np.float32)
    return experts, routers, xs


def _build(moe, slots, fmt="int8", card=False):
    experts, routers, _ = moe
    img = Image(T)
    blob = ExpertBlob(D_MODEL, FFN, F_CHUNK, WF_NAMES[fmt], img.cfg.D)
    xt, outs = img.tensor(shape=(D_MODEL,)), [img.tensor(shape=(D_MODEL,)) for _ in range(LAYERS)]
    rq = [img.weight(r, "int8") for r in routers]
    lay = OffloadLayout(img.alloc(64), LAYERS, E, K, slots, blob)
    img.alloc(lay.end - lay.base)

    def kernel(x, out0, out1, r0, r1):
        xv = ol.load(x)
        for layer, (r, out) in enumerate(((r0, out0), (r1, out1))):
            ol.store(out, moe_ffn(xv, r, lay, ol.full((1,), float(layer * E))))
    prog = ol.compile_kernel(kernel, T, x=xt, out0=outs[0], out1=outs[1], r0=rq[0], r1=rq[1])
    blobs = {(li, e): blob.pack(*experts[li][e]) for li in range(LAYERS) for e in range(E)}
    be = BoardBackend(Board.open("sim:moe", T)) if card else IsaBackend(T, timing=False)
    be.write(0, img.dram[:img.cursor])
    server = ExpertServer(be, lay, lambda li, e: blobs[li, e])
    server.reset()
    return img, prog, be, server, xt, outs, rq, blob, blobs


def _tokens(moe, built):
    _, _, xs = moe
    img, prog, be, server, xt, outs, *_ = built
    got = []
    for x in xs:
        be.write(xt.base.const, x)
        run_serving(be, be.prepare(prog.instrs, prog.waits), prog.arg_words(), server)
        got.append([be.read(o.base.const, 4 * D_MODEL).view(np.float32).copy() for o in outs])
    return np.array(got)        # [tokens, layers, d]


def _reference(moe, img, rq, blob, blobs):
    """float64: the router on the quantised activation, the k best, their softmax, each expert's
    SwiGLU on the dequantised blob; and which experts each layer chose."""
    _, _, xs = moe
    out, chosen = np.zeros((TOKENS, LAYERS, D_MODEL)), [set() for _ in range(LAYERS)]
    for t, x in enumerate(xs):
        for li in range(LAYERS):
            logits = R.quantize_rows(x[None, :], img.cfg.D)[0] @ img.dequantized(rq[li]).T
            best = np.argsort(-logits, kind="stable")[:K]
            w = np.exp(logits[best] - logits[best[0]])
            w /= w.sum()
            for wj, e in zip(w, best):
                g, u, dn = blob.dequantized(blobs[li, e])
                out[t, li] += wj * R.swiglu_mlp(x[None, :], g, u, dn)[0]
            chosen[li] |= set(best.tolist())
    return out, chosen


def test_every_expert_absent_at_the_start_gives_the_bits_of_every_expert_resident(moe):
    cold = _build(moe, slots=3)
    got_cold = _tokens(moe, cold)
    st = cold[3].stats
    warm = _build(moe, slots=E)
    for li in range(LAYERS):
        warm[3].preload(li, range(E))
    warm[3].stats.__init__()
    got_warm = _tokens(moe, warm)
    assert np.array_equal(got_cold.view(np.uint32), got_warm.view(np.uint32))
    assert warm[3].stats.requests == 0 and warm[3].stats.bytes == 0      # all present: no host round trip

    img, _, _, _, _, _, rq, blob, blobs = cold
    ref, chosen = _reference(moe, img, rq, blob, blobs)
    err, cos = R.max_abs(got_cold, ref), R.cosine(got_cold, ref)
    print(f"\nmoe offload: max-abs {err:.3g}, cosine {cos:.6f}; {st.requests} requests, {st.streamed} experts "
          f"({st.bytes / TOKENS / 1024:.1f} KiB a token), {st.evictions} evictions, hit rate "
          f"{st.hit_rate(TOKENS * LAYERS * K):.3f}")
    assert cos > 0.999 and err < 0.05 * np.abs(ref).max(), (err, cos)
    # three slots for the experts the tokens chose: each one streamed at least once, some evicted
    assert st.streamed >= sum(len(c) for c in chosen) and st.evictions == st.streamed - LAYERS * 3
    assert st.bytes == st.streamed * blob.nbytes and 1 <= st.requests <= TOKENS * LAYERS


def test_the_simulated_card_served_through_its_transport_gives_the_same_bits(moe):
    """The card runs on its own thread; the host polls STATUS and serves through the Board's DRAM
    window while the card waits in its WAITW, as it would over PCIe."""
    card = _build(moe, slots=3, card=True)
    try:
        got = _tokens(moe, card)
    finally:
        card[2].close()
    ref = _tokens(moe, _build(moe, slots=3))
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert card[3].stats.requests > 0 and card[3].stats.evictions > 0


def test_with_a_slot_for_every_expert_each_chosen_expert_is_streamed_exactly_once(moe):
    built = _build(moe, slots=E)
    _tokens(moe, built)
    img, _, _, server, _, _, rq, blob, blobs = built
    _, chosen = _reference(moe, img, rq, blob, blobs)
    assert server.stats.streamed == sum(len(c) for c in chosen) and server.stats.evictions == 0
    for li in range(LAYERS):
        assert set(server.resident[li]) == chosen[li]


@pytest.mark.parametrize("fmt", ["int8", "fp4x6", "e2m1"])
def test_a_blob_round_trips_its_weights_through_the_format(fmt):
    rng = np.random.default_rng(1)
    blob = ExpertBlob(64, 128, 64, WF_NAMES[fmt], 32)
    w = [rng.standard_normal(s).astype(np.float32) for s in ((128, 64), (128, 64), (64, 128))]
    back = blob.dequantized(blob.pack(*w))
    for a, b in zip(w, back):
        assert a.shape == b.shape and R.cosine(b, a) > (0.999 if fmt == "int8" else 0.98)
    with pytest.raises(ValueError, match="expert down weight has shape"):
        blob.pack(w[0], w[1], w[2].T)


def test_a_request_out_of_sequence_is_refused_by_name(moe):
    _, _, be, server, *_ = _build(moe, slots=3)
    lay = server.lay
    be.write(lay.mailbox.seq, np.array([3.0], np.float32))
    with pytest.raises(OffloadError, match="request 3 is not the one after the last served"):
        server.poll()
    be.write(lay.mailbox.seq, np.array([1.0], np.float32))
    be.write(lay.mailbox.row, np.array([99.0, 0.0], np.float32))
    with pytest.raises(OffloadError, match="expert id 99; there are 16"):
        server.poll()


def test_a_layout_that_cannot_hold_the_chosen_experts_is_refused():
    blob = ExpertBlob(64, 64, 32, WF_NAMES["int8"], 32)
    with pytest.raises(ValueError, match="must hold the k=4 chosen experts"):
        OffloadLayout(4096, 1, 8, 4, 3, blob)
    with pytest.raises(ValueError, match="k=17"):
        OffloadLayout(4096, 1, 32, 17, 20, blob)


class _Dram:
    """A bare DRAM for the host side alone (no program runs)."""

    def __init__(self, n):
        self.b = np.zeros(n, np.uint8)

    def read(self, addr, n):
        return self.b[addr:addr + n].copy()

    def write(self, addr, data):
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.b[addr:addr + raw.size] = raw


def test_the_least_recently_requested_expert_is_the_one_evicted():
    """Two slots, one expert a request: A, B, A, C evicts B (A was asked for after it), then
    B again evicts A; worked by hand."""
    blob = ExpertBlob(32, 32, 32, WF_NAMES["int8"], 32)
    lay = OffloadLayout(0, 1, 4, 1, 2, blob)
    dram = _Dram(lay.end)
    server = ExpertServer(dram, lay, lambda li, e: np.full(blob.nbytes, e, np.uint8))
    server.reset()
    A, B, C = 0, 1, 2
    for n, e in enumerate((A, B, A, C), start=1):
        dram.write(lay.mailbox.row, np.array([e], np.float32))
        dram.write(lay.mailbox.seq, np.array([n], np.float32))
        assert server.poll()
    assert sorted(server.resident[0]) == [A, C] and server.stats.evictions == 1
    present = dram.read(lay.entry(0, B), 8).view(np.float32)[1]
    assert present == 0.0                                   # the victim's entry says absent
    dram.write(lay.mailbox.row, np.array([B], np.float32))
    dram.write(lay.mailbox.seq, np.array([5], np.float32))
    server.poll()
    assert sorted(server.resident[0]) == [B, C] and server.stats.streamed == 4
    slot_b = int(dram.read(lay.entry(0, B), 4).view(np.uint32)[0])
    assert np.all(dram.read(slot_b, blob.nbytes) == B)     # B's bytes where its entry points
    assert dram.read(lay.mailbox.served, 4).view(np.float32)[0] == 5.0
