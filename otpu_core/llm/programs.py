"""The card programs of a model, written in `ol`: the step (rows of one or more sequences) and the generate loop.

Both read everything that changes from DRAM, so one compiled program serves every position of
its attention bucket: a row group's first position is an fp32 word of its slot's state block,
turned into address offsets by RLD (`Pos`), and its tokens are read from the slot's ids.

- `step_kernel(plan, spec)`: one run over `spec.groups` (row groups: `n` consecutive positions of
  one sequence slot, all in the bucket its page list ends with). Embeddings are gathered on the
  card from the int8 table; a one-kind model's layers run as one hardware loop over identical
  blocks, a two-kind model's as nested loops over each kind's blocks (`_layers`); in an attention layer each row appends its K and
  V^T to its page, then every row attends causally over its own prefix; in a convolution layer
  (LFM2) each group's rows run the short convolution over its slot's ring (kernels/conv.py); in
  a Gated DeltaNet layer (Qwen3.5) each group's rows run the SiLU convolution over the q/k/v
  channels, then one delta-rule step per row over the slot's state in DRAM (kernels/deltanet.py);
  a mixture of experts' MLP is `kernels.moe` (the router MM, top-k and the directory lookup on
  the card, a mailbox request when a chosen expert is absent; a run of several rows
  expert-major; LFM2-MoE's sigmoid router with its selection bias, its leading dense layers
  straight-line on their own blocks), its layer's first global expert id counted on the card.
  Gemma 4's layers have a block each, a run of one shape a hardware loop (`_gemma_layers`):
  sliding layers append to and attend over their window in their slot's ring of pages, the KV-sharing ones over an earlier layer's pages, scores with q.k
  unscaled, the sandwich norms, GeGLU, the per-layer inputs (the token's row of the table is
  asked of the host through the mailbox, kernels/mailbox.host_row) and the layer scalar; its
  logits are soft-capped wherever they are made; a run's per-row work is a hardware loop over its
  rows (`_row_loop`), which unrolled would not fit IMEM past one row; with several row groups
  (sequences) a layer-run loop counts each group's K row, K scale and V scale offsets on the card
  (`_RunPos`) rather than stepping a register for each.
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
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .. import ol
from ..kernels.activations import gelu_tanh, sigmoid, softcap
from ..kernels.attention import PagedAttention
from ..kernels.conv import RingRows, short_conv
from ..kernels.deltanet import GdnWeights, gated_deltanet_step
from ..kernels.embedding import embed
from ..kernels.mailbox import host_row
from ..kernels.mlp import UNROLL as MLP_UNROLL
from ..kernels.mlp import geglu_mlp, swiglu_mlp
from ..kernels.moe import SigmoidGate, moe_ffn, moe_ffn_rows
from ..kernels.norm import rmsnorm, rmsnorm_quantized
from ..kernels.rope import rope
from ..kernels.sampling import SampleParams, head_choice
from ..ol import Affine, KVCache, Tensor, Tile
from .gemma_layout import gemma_runs
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


class _RunPos:
    """A row group's K row, K scale and V scale offsets in a loop over a run of layers, counted on the
    card: fp32 words pos + l * stride / u (u the bytes per position of each), RLD'd with scale u each
    pass, so the three are device values of their pass rather than a loop-stepped register each (with
    several groups those registers do not fit the card's 16). The V^T column (a byte per position)
    stays a stepped register: its count would pass fp32's exact integers."""

    def __init__(self, word: Tile, hd: int, kb: int, stride: int):
        self.units = (hd, 4 * kb, 4)
        self.x = ol.full((len(self.units),), 0.0) + word       # before the loop
        self._pass = None
        self.step_by = ol.empty((len(self.units),))
        for i, u in enumerate(self.units):
            self.step_by[i:i + 1].set(float(stride // u))

    @staticmethod
    def exact(hd: int, kb: int, stride: int, n: int, ctx: int) -> bool:
        """Whether the counts stay exact fp32 integers over n layers of `ctx` positions."""
        return all(stride % u == 0 and ctx + (n - 1) * (stride // u) < 1 << 24 for u in (hd, 4 * kb, 4))

    def offsets(self) -> tuple:
        """This pass's offsets (RLD'd at the first call of a pass: a group of several rows takes them before
        its row loop, the others at their row, so few are live at once)."""
        if self._pass is None:
            self._pass = tuple(ol.rld(self.x[i:i + 1], scale=u) for i, u in enumerate(self.units))
        return self._pass

    def step(self) -> None:
        """On to the next layer of the run (after this pass's appends)."""
        self.x.set(self.x + self.step_by)
        self._pass = None


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
        self.counted: list[_RunPos] | None = None     # per group, in a Gemma layer-run loop of several groups
        self.ring = []                  # per group: its convolution ring rows (before any layer loop)
        if plan.other is not None:
            width = cfg.d if plan.conv is not None else cfg.gdn_conv_dim
            self.ring = [RingRows(w, cfg.conv_taps, 4 * width) for w in pos_words]

    @property
    def R(self) -> int: return len(self.of)

    def renew(self, *scales: int, looped: bool = True) -> None:
        """Fresh RLDs of the positions' offsets from here on (`scales` taken now; unless `looped`, only
        for the groups a row loop addresses: the others' are taken at their use, so few are live at once)."""
        self.pos = [Pos(p.word) for p in self.pos]
        for p, grp in zip(self.pos, self.groups):
            if looped or grp.n > 1:
                p.prepare(*scales)

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

    def token_slot(self, page: KVCache, g: int, j: int, counted: tuple | None = None) -> KVCache:
        """`page` seen from row j of group g's token slot: K row, K scales, V^T column, V scale.
        `counted`: (the page in the run's first layer, this pass's `_RunPos.offsets`) for all but V^T."""
        pos, hd, bP = self.pos[g], page.d, self.groups[g].bucket * self.plan.opts.page
        kb = hd // self.plan.D
        t = j - bP
        first, (k, ks, vs) = counted if counted else (page, (pos.times(hd), pos.times(4 * kb), pos.times(4)))
        return KVCache(first.k + k + t * hd, first.k_scale + ks + 4 * kb * t,
                       page.vt + pos.times(1) + t, first.v_scale + vs + 4 * t, page.cap, page.d)

    def mask_row(self, g: int, j: int) -> Tensor:
        return self.mask_rows(g, j, 1)

    def mask_rows(self, g: int, j: int, n: int) -> Tensor:
        """The mask table's rows for rows j..j+n of group g (consecutive rows of the table)."""
        P, pos = self.plan.opts.page, self.pos[g]
        return Tensor(self.plan.mask.base + pos.times(4 * P) + 4 * P * (j - self.groups[g].bucket * P),
                      (n, P) if n > 1 else (P,))


def _embed_rows(plan: ImagePlan, rows: _Rows) -> Tile:
    h = rows.tile(plan.cfg.d)
    # Gemma's rows as a hardware loop (its programs are at IMEM's limit), the other families' unrolled
    each = _row_loop(rows) if plan.gemma is not None else ((r, g, j) for r, (g, j) in enumerate(rows.of))
    for r, g, j in each:
        grp, pos = rows.groups[g], rows.pos[g]
        tok = ol.load(_word(plan.io(grp.slot)["ids"], pos.times(4) + 4 * j))
        if plan.embed_kind == "f32":          # one LD of the fp32 row
            t = plan.embed
            e = ol.load(Tensor(t.base + ol.rld(tok, scale=4 * t.rs), (t.cols,)))
        else:                                 # int8 rows, gathered through the MXU
            e = embed(plan.embed, tok)
        if plan.cfg.spec.embed_scaled:
            e = e * math.sqrt(plan.cfg.d)
        if rows.R == 1:
            h = e
        else:
            h[r].set(e)
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
    gated = cfg.attn_gate                     # Qwen3.5: q_proj gives per head the query, then its output gate
    qw = 2 * hd if gated else hd
    att = rows.tile(H * hd) if gated else None
    # a padded head's V is its real dims, then zeros (convert.pad_heads): at most half real, the
    # V^T appends write the first half alone (QST HALF) and the zeros the image wrote stay
    v_half = 0 < cfg.real_head_dim <= hd // 2
    pending, done = [], []
    for batch in _attention_batches(rows, grp_size, mcols):
        # Each row appends its K and V^T, then attends; its mask hides every later slot of the page, so
        # whether later rows appended yet does not change a bit (a run of R rows = R runs of one). The
        # rows of a batch (consecutive positions of one sequence) attend together: a page is read once.
        g, j0 = rows.of[batch[0]]
        grp = rows.groups[g]
        slots = [rows.token_slot(Ly.page(grp.pages[-1], kh), g, j0) for kh in range(KV)]
        qrs, vrs, ars = [], [], []
        for i, r in enumerate(batch):
            qr, kr = _row(q, r).reshape(H, qw), _row(k, r).reshape(KV, hd)
            qr = qr[:, 0:hd] if gated else qr
            if qn is not None:
                qr, kr = rmsnorm(qr, qn, qk_eps), rmsnorm(kr, kn, qk_eps)
            qr = _rope(qr, _row(c, r), _row(s, r), cfg.rotary_dim)
            kr = _rope(kr, _row(c, r), _row(s, r), cfg.rotary_dim)
            for kh in ol.static_range(KV):
                ol.kv_append_k(slots[kh], i, kr[kh])
            del kr
            qrs.append(qr)
            vrs.append(_row(v, r))
            # the attention output takes row r of q (it is read already), or of its own tile beside the gates
            ars.append(_row(att, r).reshape(H, hd) if gated else _row(q, r).reshape(H, hd))
        mask = rows.mask_rows(g, j0, len(batch))
        halves = _page_halves(rows, g, j0 + len(batch) - 1)
        for kh in ol.static_range(KV):
            # each head's V^T appends (byte-strided stores, the slow ones) just before its queries:
            # they overlap the heads before it instead of holding up the quantiser ahead of all of them
            for i, vr in enumerate(vrs):
                ol.kv_append_v(slots[kh], i, vr[kh * hd:(kh + 1) * hd], half=v_half)
            pages = [Ly.page(p, kh) for p in grp.pages]
            for h0 in range(kh * grp_size, (kh + 1) * grp_size, mcols):
                h1 = min(h0 + mcols, (kh + 1) * grp_size)
                if len(batch) == 1:
                    qb = qrs[0][h0:h1]
                else:
                    qb = ol.empty((len(batch) * (h1 - h0), hd))
                    for i, qr in enumerate(qrs):
                        qb[i * (h1 - h0):(i + 1) * (h1 - h0)].set(qr[h0:h1])
                # a unit in flight: its scores MM streams while the one before runs its softmax, and the VPU
                # takes that softmax before this unit's mask and row maxima (which wait for the MM), and
                # the output of the one before that last (which waits for its P.V^T)
                unit = PagedAttention(qb, pages, last_mask=mask, halves=halves).start(bound=False)
                if pending:
                    done.append(pending.pop(0))
                    done[-1][3].softmax()
                unit.bound()
                pending.append((ars, h0, h1, unit))
                if len(done) > 1:
                    _finish_unit(*done.pop(0))
        del qrs, vrs
    for unit in pending:
        unit[3].softmax()
        done.append(unit)
    for unit in done:
        _finish_unit(*unit)
    del k, v, pending, done
    if not gated:
        return ol.dot(q, Ly.wo)
    for r in range(rows.R):
        ar = _row(att, r).reshape(H, hd)
        ar.set(ar * sigmoid(_row(q, r).reshape(H, qw)[:, hd:qw]))
    del q
    return ol.dot(att, Ly.wo)


def _page_halves(rows: _Rows, g: int, j: int):
    """Run-time 0/1 loop counts (whole page, first half only) of the last page's attention for rows
    up to row j of group g: the first half alone when row j's position lies in it. None when a
    page is not whole D-block pairs."""
    P, D = rows.plan.opts.page, rows.plan.D
    if P % (2 * D):
        return None
    # row j's column in the page, less P/2 - 1: >= 1 exactly when it reaches the second half
    past = rows.pos[g].word + float(j - rows.groups[g].bucket * P - P // 2 + 1)
    full = ol.minimum(ol.maximum(past, 0.0), 1.0)
    return ol.rld(full), ol.rld(1.0 - full)


def _attention_batches(rows: _Rows, grp_size: int, mcols: int) -> list[list[int]]:
    """The run's rows in batches that attend together: consecutive rows of one sequence, as many as
    fit the MXU columns with a KV head's query heads each (the scores' RMAX and the rescaling
    ASCALE take at most MCOLS rows); one row a batch when a head group fills the columns."""
    most = max(1, mcols // grp_size)
    batches: list[list[int]] = []
    for r, (g, _) in enumerate(rows.of):
        if batches and len(batches[-1]) < most and rows.of[batches[-1][0]][0] == g:
            batches[-1].append(r)
        else:
            batches.append([r])
    return batches


def _finish_unit(outs: list[Tile], h0: int, h1: int, unit: PagedAttention) -> None:
    """A batch's attention unit, its softmax run: the output rows back into each row's heads."""
    if len(outs) == 1:
        outs[0][h0:h1].set(unit.result())   # an unnamed result: the last VOP writes the heads in place
        return
    res = unit.result()
    for i, out in enumerate(outs):
        out[h0:h1].set(res[i * (h1 - h0):(i + 1) * (h1 - h0)])


def _rope(x: Tile, c: Tile, s: Tile, rot: int) -> Tile:
    """RoPE over the whole head, or (partial RoPE, Qwen3.5) over its first `rot` dims in place."""
    if not rot:
        return rope(x, c, s)
    x[:, 0:rot].set(rope(x[:, 0:rot], c[0:rot // 2], s[0:rot // 2]))
    return x


def _group_ring(plan: ImagePlan, Ly, rows: _Rows, g: int, block: Tile | None, width: int):
    """Row group g's ring (rows of `width` fp32) and its run-time row address: Ly's own, or, when Ly
    is addressed by the block counter `block`, block 0's ring with the address moved by that many
    blocks (a loop-stepped address cannot add a device value of its own loop)."""
    slot = rows.groups[g].slot
    if block is None:
        return Ly.ring_of(slot), rows.ring[g]
    return plan.other.ring_of(slot), rows.ring[g].moved(block, plan.other.stride // (4 * width))


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
        ring, at = _group_ring(plan, Ly, rows, g, block, d)
        for j, conv in enumerate(short_conv([_row(u, r + j) for j in range(grp.n)], Ly.taps, ring, at)):
            _row(c, r + j).set(_row(c, r + j) * conv)
        r += grp.n
    del u
    return ol.dot(c, Ly.cout)


GDN_CONV_PART = 2048              # channels one short_conv call takes (its taps and history rows live in TMEM)


def _deltanet(plan: ImagePlan, Ly, h: Tile, rows: _Rows, block: Tile | None = None) -> Tile:
    """One Gated DeltaNet layer's mixer for every row: in_proj_qkv and per group the SiLU convolution
    of the q, k and v channels over its slot's ring (in parts of at most GDN_CONV_PART); z, b, a;
    then per row one delta-rule step over the slot's state in DRAM (the decay zeroed at position
    0, so a new sequence starts from nothing); the gated norms' rows into out_proj. `block` as in
    `_conv`. The projection's rows die before z, b and a exist, and a run of several rows parks
    its convolved channels in DRAM (`gdn_rows`) until each row's step, which keeps TMEM for the
    heads (the 0.8B's 4-row prefill)."""
    cfg = plan.cfg
    hk, hv, dk, dv, C = cfg.lin_k_heads, cfg.lin_v_heads, cfg.lin_k_dim, cfg.lin_v_dim, cfg.gdn_conv_dim
    kd = hk * dk
    parts = [(0, C)] if C <= GDN_CONV_PART else [(c, min(c + GDN_CONV_PART, hi)) for lo, hi in (
        (0, kd), (kd, 2 * kd), (2 * kd, C)) for c in range(lo, hi, GDN_CONV_PART)]
    park = plan.gdn_rows if rows.R > 1 else None    # several rows: their convolved channels wait in DRAM
    xn = rmsnorm_quantized(h, ol.load(Ly.ln1), cfg.norm_eps, Ly.gqkv)
    convs = [[None] * len(parts) for _ in rows.groups]      # per group, per part: the rows' convolved channels
    for p, (c0, c1) in enumerate(parts):
        # each part's projection rows as their own MM (the bits of the one wide MM), dead once convolved
        mixed = ol.dot(xn, Ly.gqkv if len(parts) == 1 else Ly.gqkv.rows(c0, c1 - c0))
        r = 0
        for g, grp in enumerate(rows.groups):
            ring, at = _group_ring(plan, Ly, rows, g, block, C)
            out = short_conv([_row(mixed, r + j) for j in range(grp.n)], Ly.taps[:, c0:c1], ring[:, c0:c1], at,
                             activation="silu")
            if park is None:
                convs[g][p] = out
            else:
                for j, o in enumerate(out):
                    ol.store(park[r + j, c0:c1], o)
                del out, o
            r += grp.n
        del mixed
    z, b, a = ol.dot(xn, Ly.gz), ol.dot(xn, Ly.gb), ol.dot(xn, Ly.ga)
    del xn
    w = GdnWeights(Ly.a_log, Ly.dt_bias, Ly.norm)
    y = rows.tile(hv * dv)
    r = 0
    for g, grp in enumerate(rows.groups):
        state = Ly.state_of(grp.slot)
        for j in range(grp.n):
            if park is not None:
                cv = ol.load(park[r + j])
                q, k, v = cv[0:kd], cv[kd:2 * kd], cv[2 * kd:C]
                del cv
            elif len(parts) == 3:   # q, k and v convolved apart
                q, k, v = (convs[g][p][j] for p in range(3))
            else:                 # one part, or more than one for q, k or v: the row's channels in one tile
                cv = convs[g][0][j]
                if len(parts) > 1:
                    cv = ol.empty((C,))
                    for p, (c0, c1) in enumerate(parts):
                        cv[c0:c1].set(convs[g][p][j])
                        convs[g][p][j] = None
                q, k, v = cv[0:kd], cv[kd:2 * kd], cv[2 * kd:C]
                del cv
            out = gated_deltanet_step(q.reshape(hk, dk), k.reshape(hk, dk), v.reshape(hv, dv),
                                      _row(z, r + j).reshape(hv, dv), _row(a, r + j), _row(b, r + j), w, state,
                                      cfg.norm_eps, keep=rows.ring[g].valid[-1] if j == 0 else None)
            _row(y, r + j).set(out.reshape(hv * dv))
            del q, k, v
            for part in convs[g] if park is None else ():
                part[j] = None
        r += grp.n
    del convs, z, a, b
    return ol.dot(y, Ly.gout)


def _mlp(plan: ImagePlan, Ly, h: Tile, split: bool, mlp=swiglu_mlp) -> Tile:
    """The gated MLP (SwiGLU, or `mlp` = geglu_mlp); `split`: as unrolled groups of at most UNROLL
    chunks (no hardware loop, for a body already at the loop depth limit)."""
    fc = plan.f_chunk
    chunks = Ly.wg.N // fc
    if not split or chunks <= MLP_UNROLL:
        return mlp(rmsnorm_quantized(h, ol.load(Ly.ln2), plan.cfg.norm_eps, Ly.wg), Ly.wg, Ly.wu, Ly.wd, fc)
    x = rmsnorm_quantized(h, ol.load(Ly.ln2), plan.cfg.norm_eps, Ly.wg)
    y = None
    for c0 in range(0, chunks, MLP_UNROLL):
        n = min(MLP_UNROLL, chunks - c0)
        down = dataclasses.replace(Ly.wd.part(c0), part_stride=Ly.wd.part_stride)
        part = mlp(x, Ly.wg.rows(c0 * fc, n * fc), Ly.wu.rows(c0 * fc, n * fc), down, fc)
        y = part if y is None else y + part
    return y


EXPERT_MAJOR_TMEM = 4        # expert-major rows when their k * R rank accumulators take at most 1/4 of TMEM


def _experts(plan: ImagePlan, Ly, h: Tile, first: Tile) -> Tile:
    """A mixture of experts' MLP: each row's RMSNorm (fp32; the kernels quantise it for the router
    and for every expert alike), then its routed experts, for several rows expert-major
    (`moe_ffn_rows`) unless its accumulators would crowd TMEM, else row by row (`moe_ffn`).
    `first`: this layer's first global expert id, a (1,) tile."""
    cfg, ln2, d, lay = plan.cfg, ol.load(Ly.ln2), plan.cfg.d, plan.offload
    gate = None
    if cfg.spec.moe_gating == "sigmoid":
        gate = SigmoidGate(ol.load(Ly.ebias) if Ly.ebias is not None else None, cfg.routed_scale)

    def norm(x: Tile) -> Tile:
        return (x * ol.rsqrt(ol.sum(x * x) * (1.0 / d) + cfg.norm_eps)) * ln2
    if h.ndim == 1:
        return moe_ffn(norm(h), Ly.router, lay, first, cfg.norm_topk, gate)
    R = h.shape[0]
    y = ol.empty(h.shape)
    if (lay.k * R + 1) * (d + 1) > ol.config().TMEM_WORDS // EXPERT_MAJOR_TMEM:
        for r in range(R):                # the rank accumulators would crowd TMEM: row by row
            y[r].set(moe_ffn(norm(h[r]), Ly.router, lay, first, cfg.norm_topk, gate))
        return y
    for r in range(R):
        y[r].set(norm(h[r]))
    return moe_ffn_rows(y, Ly.router, lay, first, cfg.norm_topk, gate)


def _ffn(plan: ImagePlan, Ly, h: Tile, split: bool, first: Tile | None) -> Tile:
    """A block's MLP: its routed experts when it has a router (`first`, this layer's first global
    expert id, then moves on to the next routed layer's), else the dense one."""
    if first is None or Ly.router is None:       # no experts in the model, or a dense layer of one
        return _mlp(plan, Ly, h, split)
    y = _experts(plan, Ly, h, first)
    first += float(plan.cfg.experts)
    return y


def _row_loop(rows: _Rows):
    """(r, g, j) of every row, a group of several rows one hardware loop over them (its body traced
    once; r and j are then affine): Gemma's per-row work, which unrolled does not fit IMEM past a row.
    Row r still runs after rows < r and before rows > r, so the bits are those of the unrolled rows."""
    r0 = 0
    for g, grp in enumerate(rows.groups):
        if grp.n == 1:
            yield r0, g, 0
        else:
            for j in ol.range(grp.n):
                yield Affine.of(j) + r0, g, j
        r0 += grp.n


def _gemma_ple(plan: ImagePlan, h: Tile, rows: _Rows) -> None:
    """Each row's per-layer inputs into its scratch row: (norm(e Wp / sqrt(d)) + table row * sqrt(ple)) / sqrt(2),
    the table row fetched from the host (one mailbox request per row)."""
    cfg, G, ple = plan.cfg, plan.gemma, plan.cfg.ple_dim
    pln = ol.load(G.pln)
    for r, g, j in _row_loop(rows):
        grp, pos = rows.groups[g], rows.pos[g]
        tok = ol.load(_word(plan.io(grp.slot)["ids"], pos.times(4) + 4 * j))
        proj = (ol.dot(_row(h, r), G.plp) * (1.0 / math.sqrt(cfg.d))).reshape(cfg.layers, ple)
        proj = rmsnorm(proj, pln, cfg.norm_eps)
        row = host_row(G.mailbox, G.landing, tok).reshape(cfg.layers, ple)
        ol.store(Tensor(G.ple_in.base + 4 * r * G.ple_in.rs, (cfg.layers, ple), ple),
                 (proj + row * math.sqrt(ple)) * math.sqrt(0.5))


def _gemma_attention(plan: ImagePlan, kind: str, Ly, block0, src, h: Tile, rows: _Rows, tables: dict) -> Tile:
    """One Gemma layer's attention for every row (q/k/v norms, RoPE of its kind, appends to its own
    pages, the window or the shared layer's pages `src`; `block0`: its run's first block), o_proj and the
    post-attention norm. Every
    row appends before any attends (a row's mask hides the later rows' slots, so the bits are those
    of one row at a time), which keeps the append loop's addresses out of the attention loop's."""
    cfg, G = plan.cfg, plan.gemma
    H, KV, hd, grp_size, mcols = cfg.heads, cfg.kv_heads, Ly.hd, cfg.group, ol.config().MCOLS
    window = cfg.sliding_window if kind == "sliding" else None
    cos, sin = tables[kind]
    xn = rmsnorm_quantized(h, ol.load(Ly.ln1), cfg.norm_eps, Ly.wq)
    q = ol.dot(xn, Ly.wq)
    own = Ly.kv is not None
    k, v = (ol.dot(xn, Ly.wk), ol.dot(xn, Ly.wv)) if own else (None, None)
    del xn
    if own:
        kn, ones = ol.load(Ly.kn), ol.full((hd,), 1.0)
        counted = rows.counted
        for c, grp in zip(counted or (), rows.groups):
            if grp.n > 1:
                c.offsets()
        for r, g, j in _row_loop(rows):
            grp = rows.groups[g]
            kr = rope(rmsnorm(_row(k, r).reshape(KV, hd), kn, cfg.norm_eps), _row(cos, r), _row(sin, r))
            vr = rmsnorm(_row(v, r).reshape(KV, hd), ones, cfg.norm_eps)
            for kh in ol.static_range(KV):
                page = G.kv_page(kind, grp.slot, grp.bucket, grp.pages[-1])
                at = counted and (block0.page(page, kh), counted[g].offsets())
                slot = rows.token_slot(Ly.page(page, kh), g, j, at)
                ol.kv_append_k(slot, 0, kr[kh])
                ol.kv_append_v(slot, 0, vr[kh])
            del kr, vr
        for c in counted or ():
            c.step()
        del kn, ones
    del k, v
    qn = ol.load(Ly.qn)
    for pos in rows.pos:          # the mask rows' offsets, taken before the row loop
        pos.prepare(4 * plan.opts.page)
    for r, g, j in _row_loop(rows):
        grp = rows.groups[g]
        qr = rope(rmsnorm(_row(q, r).reshape(H, hd), qn, cfg.norm_eps), _row(cos, r), _row(sin, r))
        ar = _row(q, r).reshape(H, hd)        # the output takes row r of q (read already): TMEM for 4 full rows
        for kh in ol.static_range(KV):
            # a sliding layer's list repeats its ring's pages: PagedAttention reads only the window's
            pages = [src.page(G.kv_page(kind, grp.slot, i, p), kh) for i, p in enumerate(grp.pages)]
            for h0 in range(kh * grp_size, (kh + 1) * grp_size, mcols):
                h1 = min(h0 + mcols, (kh + 1) * grp_size)
                ar[h0:h1].set(PagedAttention(qr[h0:h1], pages, last_mask=rows.mask_row(g, j), window=window,
                                             scale=1.0 if cfg.spec.unit_scores else None).start().finish())
        del qr, ar
    o = ol.dot(q, Ly.wo)
    del q                         # before the norm's temporaries (TMEM for 4 rows of wider models)
    return rmsnorm(o, ol.load(Ly.an), cfg.norm_eps)


def _gemma_layer(plan: ImagePlan, kind: str, Ly, block0, src, li, h: Tile, rows: _Rows, tables: dict,
                 looped: bool) -> None:
    """One Gemma layer on h (in place): attention, the MLP, the per-layer input (layer li's slice of
    each row's scratch, li affine in a loop), the scalar. `looped`: inside a layer loop, whose
    depth leaves the MLP's chunks unrolled."""
    cfg, G, eps = plan.cfg, plan.gemma, plan.cfg.norm_eps
    h += _gemma_attention(plan, kind, Ly, block0, src, h, rows, tables)
    h += rmsnorm(_mlp(plan, Ly, h, looped, geglu_mlp), ol.load(Ly.fn), eps)
    if cfg.ple_dim:
        ple = cfg.ple_dim
        per = rows.tile(ple)
        for r in range(rows.R):
            row = ol.shift(Tensor(G.ple_in.base + 4 * r * G.ple_in.rs, (ple,)), Affine.of(li) * (4 * ple))
            ol.load(row, out=per if rows.R == 1 else per[r])
        y = ol.dot(gelu_tanh(ol.dot(h, Ly.pg)) * per, Ly.pp)
        h += rmsnorm(y, ol.load(Ly.pn), eps)
        del y, per
    ls = ol.load(Ly.ls)
    h.set(h * ls[0:1])


def _gemma_layers(plan: ImagePlan, h: Tile, rows: _Rows) -> Tile:
    """Gemma 4's layers: each run of layers of one shape (gemma_layout.gemma_runs) one hardware loop over
    its blocks (a shared layer reads the same earlier layer's pages every pass), a lone layer straight."""
    cfg, G = plan.cfg, plan.gemma
    if cfg.ple_dim:
        _gemma_ple(plan, h, rows)
    tables = {"sliding": (rows.table_rows(plan.cos), rows.table_rows(plan.sin)),
              "attention": (rows.table_rows(G.gcos), rows.table_rows(G.gsin))}
    for first, n in gemma_runs(cfg, G.layers):
        kind, shared = cfg.kinds[first], cfg.shares_kv(first)
        hd = G.layers[first].hd
        kb, block0 = hd // plan.D, G.layers[first]
        # several groups in a loop: their K row, K scale and V scale offsets counted on the card (`_RunPos`)
        counted = len(rows.groups) > 1 and not shared and n > 1 and \
            _RunPos.exact(hd, kb, block0.stride, n, plan.opts.ctx)
        if rows.R > 1:
            # each run RLDs its own position offsets (its token slots'; the mask rows' are taken in each
            # layer), so no offset stays in a register through the other runs: a row loop inside a layer
            # loop needs the registers
            rows.renew(*(() if shared else (1,) if counted else (hd, 4 * kb, 1, 4)), looped=n > 1)
        rows.counted = [_RunPos(p.word, hd, kb, block0.stride) for p in rows.pos] if counted else None
        for l in (ol.range(n) if n > 1 else range(1)):
            Ly = block0.at(l)
            src = G.layers[cfg.kv_source(first)] if shared else Ly
            _gemma_layer(plan, kind, Ly, block0, src, Affine.of(l) + first, h, rows, tables, n > 1)
        rows.counted = None
    return h


def _layers(plan: ImagePlan, h: Tile, rows: _Rows) -> Tile:
    """One kind: one hardware loop over its blocks. Two kinds (LFM2, Qwen3.5): the convolution
    (or DeltaNet) layers before the first attention layer, then a loop over the attention layers,
    each followed by a loop over its run of the other kind's layers (the count RLD'd from the attention block, the
    block from a counter on the card: a loop of run-time count cannot step addresses), so each kind's body is traced once whatever the order; a body inside the inner loop
    keeps its MLP unrolled (loops nest at most four deep, and the generate loop uses two; a mixture
    of experts' routed MLP adds no loop level to a one-row run, and two to an expert-major one).
    LFM2-MoE's leading dense layers run straight before them, on their own blocks."""
    cfg = plan.cfg
    if plan.gemma is not None:
        return _gemma_layers(plan, h, rows)
    cos, sin = (rows.table_rows(plan.cos), rows.table_rows(plan.sin)) if plan.layer is not None else (None, None)

    mixers = {"conv": _conv, "deltanet": _deltanet}

    first = ol.full((1,), 0.0) if plan.offload is not None else None     # the layer's first global expert id

    def other_layer(Ly, split=False, block=None):
        nonlocal h
        h += mixers[other_kind](plan, Ly, h, rows, block)
        h += _ffn(plan, Ly, h, split, first)

    if not plan.mixed and cfg.kinds[0] == "attention":
        for li in ol.range(cfg.layers):
            Ly = plan.layer.at(li)
            h += _attention(plan, Ly, h, rows, cos, sin)
            h += _ffn(plan, Ly, h, False, first)
        return h
    other_kind = next(k for k in cfg.kinds if k != "attention")
    for i in range(cfg.dense_layers):      # a mixture of experts' leading dense layers: their own blocks, unrolled
        other_layer(plan.conv_dense.at(i))
    other, lead = plan.other, plan.lead_convs if plan.mixed else cfg.layers
    # NOTE: a loop over these blocks counts them on the card rather than stepping an address register:
    # the ring's m0 is rld'd at its first use, inside the loop, and a loop-stepped address cannot add a
    # device value computed in its own loop (lowering sets the register before the first iteration)
    if lead == 1:
        other_layer(other.at(0))
    elif lead:
        block = ol.full((1,), 0.0)
        for _ in ol.range(lead):
            other_layer(other.at(0, ol.rld(block, scale=other.stride)), block=block)
            block += 1.0
    if not plan.mixed:
        return h
    block = ol.full((1,), float(lead))          # the next other-kind block, counted on the card
    for a in ol.range(len(cfg.kind_layers("attention"))):
        Ly = plan.layer.at(a)
        h += _attention(plan, Ly, h, rows, cos, sin)
        h += _ffn(plan, Ly, h, False, first)
        for _ in ol.range(ol.rld(ol.load(Ly.convs_after))):
            other_layer(other.at(0, ol.rld(block, scale=other.stride)), split=True, block=block)
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
    cap = plan.cfg.logit_softcap

    def capped(lg: Tile) -> Tile:
        return softcap(lg, cap) if cap else lg
    r = -1
    for g, grp in enumerate(spec.groups):
        r += grp.n
        hn = rmsnorm_quantized(_row(h, r), ol.load(plan.final_norm), plan.cfg.norm_eps, plan.head)
        full, tail = divmod(V, chunk)
        for ci in ol.range(full):
            ol.store(plan.logits.window(g, 1, ci * chunk, chunk), capped(ol.dot(hn, plan.head.rows(ci * chunk, chunk))))
        if tail:
            ol.store(plan.logits.window(g, 1, full * chunk, tail),
                     capped(ol.dot(hn, plan.head.rows(full * chunk, tail))))


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
                               penalty=prm if spec.penalty and not spec.sample else None, cap=plan.cfg.logit_softcap)
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
