"""The card programs of a model, written in `ol`: the step (rows of one or more sequences) and the generate loop.

Both read everything that changes from DRAM, so one compiled program serves every position of
its attention bucket: a row group's first position is an fp32 word of its slot's state block,
turned into address offsets by RLD (`Pos`), and its tokens are read from the slot's ids.

- `step_kernel(plan, spec)`: one run over `spec.groups` (row groups: `n` consecutive positions of
  one sequence slot, all in the bucket its page list ends with). Embeddings are gathered on the
  card from the int8 table; a one-kind model's layers run as one hardware loop over identical
  blocks, a two-kind model's as nested loops over each kind's blocks (`_layers`); in an attention layer each row appends its K and
  V^T to its page, then every row attends causally over its own prefix; in a convolution layer
  (LFM2) each group's rows run the short convolution over its slot's ring (kernels/conv.py); a
  mixture of experts' MLP is `kernels.moe` (the router MM, top-k and the directory lookup on
  the card, a mailbox request when a chosen expert is absent; a run of several rows
  expert-major), its layer's first global expert id counted on the card.
  Either way a run of R rows leaves the same bits as R runs of one row. Optionally the last
  row of each group writes its logits. Prefill is this with R rows and no logits.
- `generate_kernel(plan, spec)`: a hardware loop of tokens (count = min(tokens left, room in the
  bucket), computed on the card) around a 0/1 loop gated by `alive`: the step for one row, the
  LM head in chunks with the argmax or a draw (top-k, temperature, top-p, repetition penalty;
  `kernels.sampling`), the token written to ids[pos + 1], the stop ids and the host's stop
  request checked, pos and the counters stored back. Then, if the sequence goes on, a WAITW on
  the bucket's mailbox (the host writes the next bucket's program length once it has written
  the program) and HALT CHAIN into it; otherwise HALT CHAIN into the one-instruction HALT.
  One device run thus makes a whole reply; the host only watches the state block and ids.

`compile_program(plan, spec, target)` goes through the on-disk program cache (`ol.cache`),
keyed by the model layer's source too, so a program is traced once per shape and bucket.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .. import ol
from ..kernels.attention import PagedAttention
from ..kernels.conv import RingRows, short_conv
from ..kernels.embedding import embed
from ..kernels.mlp import UNROLL as MLP_UNROLL
from ..kernels.mlp import swiglu_mlp
from ..kernels.moe import moe_ffn, moe_ffn_rows
from ..kernels.norm import rmsnorm, rmsnorm_quantized
from ..kernels.rope import rope
from ..kernels.sampling import SampleParams, head_choice
from ..ol import KVCache, Tensor, Tile
from .layout import S_ALIVE, S_LEFT, S_PEN_A, S_PEN_B, S_POS, S_STOP, S_STOP_IDS, S_TINV, S_TOPP, ImagePlan


@dataclass(frozen=True)
class Group:
    """`n` consecutive rows of sequence `slot` starting at its state position; `pages` are the
    sequence's KV pages 0..bucket (every row lies in the last one)."""
    slot: int
    n: int
    pages: tuple[int, ...]

    @property
    def bucket(self) -> int: return len(self.pages) - 1


@dataclass(frozen=True)
class StepSpec:
    groups: tuple[Group, ...]
    logits: bool = False          # the last row of group g writes its logits to logits row g


@dataclass(frozen=True)
class GenSpec:
    slot: int
    pages: tuple[int, ...]        # pages 0..bucket of the sequence
    k: int = 1                    # candidates (1 with sample=False: greedy)
    sample: bool = False
    penalty: bool = False
    stop_ids: int = 0             # how many of the state's stop-id words are in use
    ring: bool = False            # store each token's logits in the slot's ring

    @property
    def bucket(self) -> int: return len(self.pages) - 1


class Pos:
    """A row group's first position: the fp32 word `word` (TMEM), scaled into address offsets by RLD.
    Every scale a loop body needs is taken before the loop (`prepare`)."""

    def __init__(self, word: Tile):
        self.word = word
        self._scaled: dict[int, object] = {}

    def times(self, k: int):
        if k not in self._scaled:
            self._scaled[k] = ol.rld(self.word, scale=k)
        return self._scaled[k]

    def prepare(self, *scales: int) -> None:
        for k in scales:
            self.times(k)


def _row(t: Tile, r: int) -> Tile:
    return t if t.ndim == 1 else t[r]


def _word(t: Tensor, offset) -> Tensor:
    """One fp32 word of a DRAM vector at a byte offset."""
    return Tensor(t.base + offset, (1,))


class _Rows:
    """The rows of one run: which group and index each row is, and the per-group positions."""

    def __init__(self, plan: ImagePlan, groups: tuple[Group, ...], pos_words: list[Tile]):
        self.plan, self.groups = plan, groups
        self.pos = [Pos(w) for w in pos_words]
        self.of = [(g, j) for g, grp in enumerate(groups) for j in range(grp.n)]
        cfg, P = plan.cfg, plan.opts.page
        hd = cfg.head_dim
        for p in self.pos:
            p.prepare(hd, 4 * (hd // plan.D), 1, 4, 4 * P, 2 * hd)
        self.ring = []                  # per group: its convolution ring rows (before any layer loop)
        if plan.conv is not None:
            taps = cfg.conv_taps
            self.ring = [RingRows(w, taps, 4 * cfg.d) for w in pos_words]

    @property
    def R(self) -> int: return len(self.of)

    def tile(self, cols: int) -> Tile:
        return ol.empty((self.R, cols)) if self.R > 1 else ol.empty((cols,))

    def table_rows(self, t: Tensor) -> Tile:
        """Rows pos..pos+n of a per-position table (cos, sin) for every group, as an (R, cols) tile."""
        out = self.tile(t.cols)
        r = 0
        for grp, pos in zip(self.groups, self.pos):
            src = Tensor(t.base + pos.times(4 * t.rs), (grp.n, t.cols) if grp.n > 1 else (t.cols,), t.rs)
            dst = out if self.R == 1 else (out[r] if grp.n == 1 else out[r:r + grp.n])
            ol.load(src, out=dst)
            r += grp.n
        return out

    def token_slot(self, page: KVCache, g: int, j: int) -> KVCache:
        """`page` seen from row j of group g's token slot: K row, K scales, V^T column, V scale."""
        pos, hd, bP = self.pos[g], page.d, self.groups[g].bucket * self.plan.opts.page
        kb = hd // self.plan.D
        t = j - bP
        return KVCache(page.k + pos.times(hd) + t * hd, page.k_scale + pos.times(4 * kb) + 4 * kb * t,
                       page.vt + pos.times(1) + t, page.v_scale + pos.times(4) + 4 * t, page.cap, page.d)

    def mask_row(self, g: int, j: int) -> Tensor:
        P, pos = self.plan.opts.page, self.pos[g]
        return Tensor(self.plan.mask.base + pos.times(4 * P) + 4 * P * (j - self.groups[g].bucket * P), (P,))


def _embed_rows(plan: ImagePlan, rows: _Rows) -> Tile:
    h = rows.tile(plan.cfg.d)
    r = 0
    for grp, pos in zip(rows.groups, rows.pos):
        ids = plan.io(grp.slot)["ids"]
        for j in range(grp.n):
            tok = ol.load(_word(ids, pos.times(4) + 4 * j))
            if plan.embed_kind == "f32":          # one LD of the fp32 row
                t = plan.embed
                e = ol.load(Tensor(t.base + ol.rld(tok, scale=4 * t.rs), (t.cols,)))
            else:                                 # int8 rows, gathered through the MXU
                e = embed(plan.embed, tok)
            if rows.R == 1:
                h = e
            else:
                h[r].set(e)
            r += 1
    return h


def _attention(plan: ImagePlan, Ly, h: Tile, rows: _Rows, cos: Tile, sin: Tile) -> Tile:
    """One layer's attention for every row: norms, q/k/v, q/k norms, RoPE, K/V appends, then
    each row over its own prefix, o_proj. Temporaries die with this frame (TMEM is tight)."""
    cfg, eps = plan.cfg, plan.cfg.norm_eps
    H, KV, hd, grp_size, mcols = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.group, ol.config().MCOLS
    xn = rmsnorm_quantized(h, ol.load(Ly.ln1), eps, Ly.wq)
    q, k, v = ol.dot(xn, Ly.wq), ol.dot(xn, Ly.wk), ol.dot(xn, Ly.wv)
    del xn
    c, s = cos, sin
    if cfg.nope_layers:                       # rope gate (1, 0) or (0, 1): cos*g0 + g1, sin*g0
        gate = ol.load(Ly.gate)
        c, s = cos * gate[0:1] + gate[1:2], sin * gate[0:1]
    qn, kn = (ol.load(Ly.qn), ol.load(Ly.kn)) if cfg.qk_norm else (None, None)
    qk_eps = cfg.qk_eps
    pending = None
    for r, (g, j) in enumerate(rows.of):
        # Row r appends its K and V^T, then attends; its mask hides every later slot of the page, so
        # whether later rows appended yet does not change a bit (a run of R rows = R runs of one).
        grp = rows.groups[g]
        qr, kr = _row(q, r).reshape(H, hd), _row(k, r).reshape(KV, hd)
        if qn is not None:
            qr, kr = rmsnorm(qr, qn, qk_eps), rmsnorm(kr, kn, qk_eps)
        qr, kr = rope(qr, _row(c, r), _row(s, r)), rope(kr, _row(c, r), _row(s, r))
        vr = _row(v, r)
        slots = [rows.token_slot(Ly.page(grp.pages[-1], kh), g, j) for kh in range(KV)]
        for kh in ol.static_range(KV):
            ol.kv_append_k(slots[kh], 0, kr[kh])
        del kr
        ar = _row(q, r).reshape(H, hd)       # the attention output takes row r of q: it is read already
        for kh in ol.static_range(KV):
            # each head's V^T append (a byte-strided store, the slow one) just before its queries:
            # it overlaps the heads before it instead of holding up the quantiser ahead of all of them
            ol.kv_append_v(slots[kh], 0, vr[kh * hd:(kh + 1) * hd])
            pages = [Ly.page(p, kh) for p in grp.pages]
            for h0 in range(kh * grp_size, (kh + 1) * grp_size, mcols):
                h1 = min(h0 + mcols, (kh + 1) * grp_size)
                unit = PagedAttention(qr[h0:h1], pages, last_mask=rows.mask_row(g, j)).start()
                if pending is not None:      # one unit in flight: its scores stream while the last one's softmax runs
                    pending[0][pending[1]:pending[2]].set(pending[3].finish())
                pending = (ar, h0, h1, unit)
        del qr, vr
    if pending is not None:
        pending[0][pending[1]:pending[2]].set(pending[3].finish())
    del k, v, pending
    return ol.dot(q, Ly.wo)


def _conv(plan: ImagePlan, Ly, h: Tile, rows: _Rows, block: Tile | None = None) -> Tile:
    """One convolution layer's mixer for every row: in_proj to B, C, x; per group the short
    convolution of B*x over its slot's ring; C times it; out_proj. `block`: the layer's block
    number as a (1,) tile, when `Ly` is addressed by it (its ring is then reached from block 0's)."""
    d = plan.cfg.d
    xn = rmsnorm_quantized(h, ol.load(Ly.ln1), plan.cfg.norm_eps, Ly.cin)
    # in_proj's three row blocks as three MMs (each output the bits of the one wide MM): B and x die
    # as soon as B*x exists, which keeps TMEM for wide models' prefill rows
    u = ol.dot(xn, Ly.cin.rows(0, d)) * ol.dot(xn, Ly.cin.rows(2 * d, d))
    c = ol.dot(xn, Ly.cin.rows(d, d))
    del xn
    r = 0
    for g, grp in enumerate(rows.groups):
        if block is None:
            ring, at = Ly.ring_of(grp.slot), rows.ring[g]
        else:
            ring, at = plan.conv.ring_of(grp.slot), rows.ring[g].moved(block, plan.conv.stride // (4 * d))
        for j, conv in enumerate(short_conv([_row(u, r + j) for j in range(grp.n)], Ly.taps, ring, at)):
            _row(c, r + j).set(_row(c, r + j) * conv)
        r += grp.n
    del u
    return ol.dot(c, Ly.cout)


def _mlp(plan: ImagePlan, Ly, h: Tile, split: bool) -> Tile:
    """The SwiGLU MLP; `split`: as unrolled groups of at most UNROLL chunks (no hardware loop, for
    a body already at the loop depth limit)."""
    fc = plan.f_chunk
    chunks = plan.cfg.ffn // fc
    if not split or chunks <= MLP_UNROLL:
        return swiglu_mlp(rmsnorm_quantized(h, ol.load(Ly.ln2), plan.cfg.norm_eps, Ly.wg), Ly.wg, Ly.wu, Ly.wd, fc)
    x = rmsnorm_quantized(h, ol.load(Ly.ln2), plan.cfg.norm_eps, Ly.wg)
    y = None
    for c0 in range(0, chunks, MLP_UNROLL):
        n = min(MLP_UNROLL, chunks - c0)
        down = dataclasses.replace(Ly.wd.part(c0), part_stride=Ly.wd.part_stride)
        part = swiglu_mlp(x, Ly.wg.rows(c0 * fc, n * fc), Ly.wu.rows(c0 * fc, n * fc), down, fc)
        y = part if y is None else y + part
    return y


EXPERT_MAJOR_TMEM = 4        # expert-major rows when their k * R rank accumulators take at most 1/4 of TMEM


def _experts(plan: ImagePlan, Ly, h: Tile, first: Tile) -> Tile:
    """A mixture of experts' MLP: each row's RMSNorm (fp32; the kernels quantise it for the router
    and for every expert alike), then its routed experts, for several rows expert-major
    (`moe_ffn_rows`) unless its accumulators would crowd TMEM, else row by row (`moe_ffn`).
    `first`: this layer's first global expert id, a (1,) tile."""
    ln2, d, lay = ol.load(Ly.ln2), plan.cfg.d, plan.offload

    def norm(x: Tile) -> Tile:
        return (x * ol.rsqrt(ol.sum(x * x) * (1.0 / d) + plan.cfg.norm_eps)) * ln2
    if h.ndim == 1:
        return moe_ffn(norm(h), Ly.router, lay, first, plan.cfg.norm_topk)
    R = h.shape[0]
    y = ol.empty(h.shape)
    if (lay.k * R + 1) * (d + 1) > ol.config().TMEM_WORDS // EXPERT_MAJOR_TMEM:
        for r in range(R):                # the rank accumulators would crowd TMEM: row by row
            y[r].set(moe_ffn(norm(h[r]), Ly.router, lay, first, plan.cfg.norm_topk))
        return y
    for r in range(R):
        y[r].set(norm(h[r]))
    return moe_ffn_rows(y, Ly.router, lay, first, plan.cfg.norm_topk)


def _layers(plan: ImagePlan, h: Tile, rows: _Rows) -> Tile:
    """One kind: one hardware loop over its blocks. Two kinds (LFM2): the convolution layers
    before the first attention layer, then a loop over the attention layers, each followed by
    a loop over its run of convolution layers (the count RLD'd from the attention block, the
    block from a counter on the card: a loop of run-time count cannot step addresses), so each kind's body is traced once whatever the order; a body inside the inner loop
    keeps its MLP unrolled (loops nest at most four deep, and the generate loop uses two)."""
    cfg = plan.cfg
    cos, sin = (rows.table_rows(plan.cos), rows.table_rows(plan.sin)) if plan.layer is not None else (None, None)

    def conv_layer(Ly, split=False, block=None):
        nonlocal h
        h += _conv(plan, Ly, h, rows, block)
        h += _mlp(plan, Ly, h, split)

    if not plan.mixed:
        kind = cfg.kinds[0]
        first = ol.full((1,), 0.0) if plan.offload is not None else None     # the layer's first global expert id
        for li in ol.range(cfg.layers):
            Ly = plan.block(kind).at(li)
            h += _conv(plan, Ly, h, rows) if kind == "conv" else _attention(plan, Ly, h, rows, cos, sin)
            if first is None:
                h += _mlp(plan, Ly, h, False)
            else:
                h += _experts(plan, Ly, h, first)
                first += float(cfg.experts)
        return h
    for li in (ol.range(plan.lead_convs) if plan.lead_convs > 1 else range(plan.lead_convs)):
        conv_layer(plan.conv.at(li))
    block = ol.full((1,), float(plan.lead_convs))          # the next convolution block, counted on the card
    for a in ol.range(len(cfg.kind_layers("attention"))):
        Ly = plan.layer.at(a)
        h += _attention(plan, Ly, h, rows, cos, sin)
        h += _mlp(plan, Ly, h, False)
        for _ in ol.range(ol.rld(ol.load(Ly.convs_after))):
            conv_layer(plan.conv.at(0, ol.rld(block, scale=plan.conv.stride)), split=True, block=block)
            block += 1.0
    return h


def _state_words(plan: ImagePlan, groups) -> list[Tile]:
    return [ol.load(plan.io(grp.slot)["state"][S_POS:S_POS + 1]) for grp in groups]


def step_kernel(plan: ImagePlan, spec: StepSpec, source: str = "") -> None:
    rows = _Rows(plan, spec.groups, _state_words(plan, spec.groups))
    h = _layers(plan, _embed_rows(plan, rows), rows)
    if not spec.logits:
        return
    chunk, V = min(plan.opts.head_chunk, plan.cfg.vocab), plan.cfg.vocab
    r = -1
    for g, grp in enumerate(spec.groups):
        r += grp.n
        hn = rmsnorm_quantized(_row(h, r), ol.load(plan.final_norm), plan.cfg.norm_eps, plan.head)
        full, tail = divmod(V, chunk)
        for ci in ol.range(full):
            ol.store(plan.logits.window(g, 1, ci * chunk, chunk), ol.dot(hn, plan.head.rows(ci * chunk, chunk)))
        if tail:
            ol.store(plan.logits.window(g, 1, full * chunk, tail), ol.dot(hn, plan.head.rows(full * chunk, tail)))


def generate_kernel(plan: ImagePlan, spec: GenSpec, source: str = "") -> None:
    io, P, b = plan.io(spec.slot), plan.opts.page, spec.bucket
    V, chunk = plan.cfg.vocab, min(plan.opts.head_chunk, plan.cfg.vocab)
    st = ol.load(io["state"])
    word = lambda i: st[i:i + 1]        # noqa: E731  (one state word as a (1,) tile)
    alive, left, pos_w = word(S_ALIVE), word(S_LEFT), word(S_POS)
    count = ol.minimum(float((b + 1) * P) - pos_w, left)
    one = ol.full((1,), 1.0)
    for _ in ol.range(ol.rld(count)):
        stop = ol.load(io["state"][S_STOP:S_STOP + 1])         # the host's stop request, read fresh
        alive.set(alive - alive * stop)
        for _ in ol.range(ol.rld(alive)):
            rows = _Rows(plan, (Group(spec.slot, 1, spec.pages),), [pos_w])
            pos = rows.pos[0]
            h = _layers(plan, _embed_rows(plan, rows), rows)
            hn = rmsnorm_quantized(h, ol.load(plan.final_norm), plan.cfg.norm_eps, plan.head)
            each = None
            if spec.ring:
                ring = io["ring"]
                base = ring.base + pos.times(4 * V) + 4 * V * ((b % 2) * P - b * P)
                each = lambda c0, n, lg: ol.store(Tensor(base + 4 * c0, (n,)), lg)   # noqa: E731
            prm = None
            if spec.sample or spec.penalty:
                prm = SampleParams(spec.k, word(S_TINV), word(S_TOPP), ol.load(_word(io["uniforms"], pos.times(4))),
                                   plan.tri, io["seen"] if spec.penalty else None, word(S_PEN_A), word(S_PEN_B))
            pair = head_choice(hn, plan.head, chunk, sample=prm if spec.sample else None, each=each,
                               penalty=prm if spec.penalty and not spec.sample else None)
            idx = pair[1:2]
            ol.store(_word(io["ids"], pos.times(4) + 4), idx)
            if spec.penalty:
                ol.store(_word(io["seen"], ol.rld(idx, scale=4)), one)
            if spec.stop_ids:
                stops = st[S_STOP_IDS:S_STOP_IDS + spec.stop_ids]
                hits = ol.sum(1.0 - ol.minimum(ol.abs(stops - idx), 1.0))
                alive.set(alive * (1.0 - ol.minimum(hits, 1.0)))
            left -= 1.0
            pos_w += 1.0
        ol.store(io["state"][S_POS:S_ALIVE + 1], st[S_POS:S_ALIVE + 1])
    _chain_or_halt(plan, b, alive * ol.minimum(left, 1.0))


def _chain_or_halt(plan: ImagePlan, b: int, cont: Tile) -> None:
    """If the sequence goes on (cont = 1): WAITW until the host has put bucket b+1's program in
    its slot (the mailbox word holds its length), then HALT CHAIN into it; else HALT CHAIN into
    the one-instruction HALT. The chain table holds raw words [HALT slot, slot, 1, 0] per slot."""
    t = (b + 1) % 2
    tbl = ol.load(plan.chain[4 * t:4 * t + 4])
    c = ol.rld(cont)
    for _ in ol.range(c):
        ol.waitw(plan.mailbox[b + 1], tbl[3:4], cmp="ne")
    addr = ol.rld(Tile(tbl.buf, tbl.base + c, (1,)), raw=True)
    n = ol.rld(Tile(tbl.buf, tbl.base + 2 + c, (1,)), raw=True)
    ol.halt_chain(addr, n)


# -- compiling ------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of the model layer's sources: part of every program's cache key."""
    files = sorted(Path(__file__).resolve().parent.glob("*.py"))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def compile_program(plan: ImagePlan, spec, target, cache: bool = True):
    from ..ol.cache import cached_compile
    fn = step_kernel if isinstance(spec, StepSpec) else generate_kernel
    if cache:
        return cached_compile(fn, target, plan=plan, spec=spec, source=source_digest())
    return ol.compile_kernel(fn, target, plan=plan, spec=spec, source=source_digest())


__all__ = ["Group", "StepSpec", "GenSpec", "Pos", "step_kernel", "generate_kernel", "compile_program",
           ]
