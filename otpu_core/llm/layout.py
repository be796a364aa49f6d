"""Where a model lives in card DRAM: the `ImagePlan` (addresses only, a pure function of its inputs).

Given a `ModelConfig`, the card format and the image options (sequence slots, KV pages, page
size, context, prefill rows, the logits ring), the plan places, from low to high addresses:

- the I/O area: per sequence slot a state block (`STATE_WORDS` fp32 words the programs read:
  position, tokens left, alive, stop request, sampling parameters, stop ids), the token ids
  (fp32, one per position: prompt tokens written by the host, sampled tokens written by the
  card), the sampling uniforms, the seen-token mask of the repetition penalty, and the logits
  ring of the generate loop (2 pages of rows, when asked for); then the logits rows of
  host-read steps (and with DeltaNet layers the rows a multi-row run parks its convolved
  channels in), the chain mailbox (one word per bucket) and the chain table;
- the tables: RoPE cos and sin for every position (llama 3 scaling already applied), the
  additive attention mask rows, the lower-triangular ones of the sampler's cumulative sums;
- the layer blocks, one array per layer kind (families.KINDS), all blocks of a kind one size
  and 4 KiB aligned so a loop over layers of that kind steps one address register. An attention block: norms, the rope
  gate (1, 0) or (0, 1), the quantised projections (W_down as F-chunk column parts), then the
  KV pool (in a model with convolution layers too, the count of those that follow the layer,
  an fp32 word the program RLDs, sits after the gate); `pages` pages of `page` tokens, each page holding
  per KV head K token-major [page, head_dim] int8 with fp32 scales per (token, D-block) and
  V^T dim-major [head_dim, page] int8 with one fp32 scale per token. A sequence owns a list of
  page numbers (the same page number in every layer and head), so whoever schedules
  sequences owns the pages. A convolution block (LFM2): norms, the taps [taps, d] fp32, in_proj
  (B, C, x rows), out_proj, the MLP, then per sequence slot its ring of fp32 rows
  (kernels/conv.py). A Gated DeltaNet block (Qwen3.5): norms, the convolution's taps [taps, C]
  fp32 (C = q, k, v channels), A_log, dt_bias and the gated norm's weight fp32, in_proj_qkv,
  in_proj_z, in_proj_b, in_proj_a, out_proj, the MLP, then per sequence slot its convolution
  ring [4 taps - 4, C] and its state, every value head's [dv, dk] fp32 rows (kernels/deltanet.py:
  DSTEP reads and writes them in place). A mixture of experts' attention (and convolution) block
  holds its router (and LFM2-MoE's selection bias, fp32) in place of the MLP; LFM2-MoE's leading
  dense layers (convolution layers before the first attention layer) have convolution blocks of
  their own after the routed ones (`conv_dense`, `block_of`), with the dense MLP of their width. After the blocks: the final norm, the LM head and the embedding table (`embed_kind`:
  fp32 rows gathered by one LD when the table is at most 64 MiB, else int8 rows gathered through
  the MXU: the head itself when it is tied and int8); then, for a mixture of experts, the
  offload area (kernels/moe.py `OffloadLayout`: the mailbox, the expert directory and
  `expert_slots` slots per layer, each an expert's `ExpertBlob`), which the host fills;
- the program slots the generate loop chains through (a one-instruction HALT and two bucket
  programs, double-buffered).

Gemma 4: one block per layer (gemma_layout.py: `GemmaBlocks`, its sliding layers' KV rings).

Heads narrower than the block size D (LFM2's 64 on a D=128 card) are zero-padded to a whole
block (`card_config`): each half of a q/k head's real dims starts a half of the padded head, so
rotate-half RoPE over the padded width turns the real pairs (the tables' padding frequencies
are 0), and convert.py scales the q/k norm weights so the norms and the attention's
1/sqrt(head_dim) come out as the real width's. A V head (and o_proj's input columns) holds its
real dims first: with at most half the width real, the V^T appends write only the first half's
rows of V^T (QST HALF) and the rest keeps the zeros the image wrote into the KV pool.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from .. import isa, ol
from ..kernels.conv import ring_rows
from ..kernels.moe import ExpertBlob, OffloadLayout
from ..ol import Affine, KVCache, QTensor, Tensor
from ..target import Config
from .config import ModelConfig
from .errors import ModelError
from .gemma_layout import GemmaBlocks, gemma_blocks
from .placement import ALIGN, BLOCK_ALIGN, Cursor, parts, weight
from .sampling import KMAX

BASE = 4096                       # address 0 stays unused: a zero address is usually a bug
STATE_WORDS = 16
MAX_STOP_IDS = 8
(S_POS, S_LEFT, S_ALIVE, S_STOP, S_TINV, S_TOPP, S_PEN_A, S_PEN_B) = range(8)
S_STOP_IDS = 8                    # words 8..15: stop token ids (-1 = unused)
EMBED_F32_BYTES = 64 << 20        # an embedding table this small stays fp32 (one LD per token)


@dataclass(frozen=True)
class CardFormat:
    """A `--format`: the weight format of the layers and of the LM head."""
    name: str
    layer_wf: int
    head_wf: int
    description: str


FORMATS = {f.name: f for f in (
    CardFormat("int8", isa.WF_INT8, isa.WF_INT8, "public int8: fp32 scale per 128-weight block (8.25 bits)"),
    CardFormat("fp4", isa.WF_E2M1, isa.WF_INT8, "public 4-bit E2M1 layers (4.25 bits), int8 LM head"),
    CardFormat("int8x", isa.WF_INT8X, isa.WF_INT8X, "seed int8x: exact accumulation, shift per block (8.06 bits)"),
    CardFormat("fp4x6", isa.WF_FP4X6, isa.WF_INT8X, "seed fp4x6 layers (4.25 bits), int8x LM head"),
)}


def card_format(name: str) -> CardFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ModelError(f"--format {name}: unknown card format", hint=f"formats: {', '.join(FORMATS)}") from None


@dataclass(frozen=True)
class ImageOptions:
    fmt: str = "int8"
    slots: int = 1              # sequences with their own state, ids, uniforms, seen mask
    pages: int = 8              # KV pages in the pool (shared by the slots)
    page: int = 256             # tokens per page = attention block
    ctx: int = 2048             # positions per sequence (RoPE table rows, ids)
    rows: int = 4               # most rows one prefill run processes
    ring: bool = False          # a logits ring per slot for the generate loop (--logits, --check)
    head_chunk: int = 8192
    f_chunk: int = 0            # 0: `f_chunk_for`'s choice
    expert_slots: int = 0       # mixture of experts: slots per layer (0: one for every expert)


def prefill_rows(cfg: ModelConfig, tcfg: Config) -> int:
    """Rows one prefill run takes: MCOLS (Gemma's layers too: their per-row work is a hardware loop over the rows)."""
    return tcfg.MCOLS


def sequence_options(cfg: ModelConfig, tcfg: Config, fmt: str, ctx: int | None, f_chunk: int, slots: int = 1,
                     pages: int | None = None, ring: bool = False, page: int = 256,
                     expert_slots: int = 0) -> ImageOptions:
    """The image a tool builds for `slots` sequences of up to `ctx` positions (None: the model's
    context; the model's context caps it), rounded up to whole pages; `pages` defaults to every
    slot's full context. Prefill runs take `prefill_rows` rows."""
    limit = min(ctx or cfg.context, cfg.context)
    ctx = -(-limit // page) * page
    return ImageOptions(fmt=fmt, slots=slots, pages=pages or slots * (ctx // page), page=page, ctx=ctx, ring=ring,
                        rows=prefill_rows(cfg, tcfg), f_chunk=f_chunk, expert_slots=expert_slots)


@dataclass(eq=False)
class LayerPlan:
    """Layer 0's descriptors and the strides that reach any layer, KV page and head."""
    ln1: Tensor
    ln2: Tensor
    qn: Tensor
    kn: Tensor
    gate: Tensor
    wq: QTensor
    wk: QTensor
    wv: QTensor
    wo: QTensor
    wg: QTensor
    wu: QTensor
    wd: QTensor
    kv: KVCache                 # page 0, KV head 0
    stride: int                 # bytes between layer blocks
    page_stride: int            # bytes between pages
    head_stride: int            # bytes between KV heads of one page
    convs_after: Tensor | None = None   # two-kind models: the count of convolution layers after this one (fp32)
    router: QTensor | None = None       # a mixture of experts (wg, wu, wd are then None)
    ebias: Tensor | None = None         # its selection bias (LFM2-MoE)

    def at(self, l) -> "LayerPlan":
        delta = Affine.of(l) * self.stride
        return dataclasses.replace(self, **{f.name: ol.shift(getattr(self, f.name), delta)
                                            for f in dataclasses.fields(self)
                                            if f.name not in ("stride", "page_stride", "head_stride")
                                            and getattr(self, f.name) is not None})

    def page(self, p, g: int) -> KVCache:
        """Page p (affine: a loop over a run of pages) of KV head g."""
        return ol.shift(self.kv, Affine.of(p) * self.page_stride + g * self.head_stride)


class _RingedBlocks:
    """Block 0 of a kind whose layers keep a per-slot ring (and state) beside their weights: every
    field but the two strides is an address, so block l and slot s follow from `stride` and
    `slot_stride`."""

    def at(self, l, base=0):
        """Block l (affine), moved by `base` bytes more (a device value: a run's first block)."""
        delta = Affine.of(l) * self.stride + base
        return dataclasses.replace(self, **{f.name: ol.shift(getattr(self, f.name), delta)
                                            for f in dataclasses.fields(self)
                                            if f.name not in ("stride", "slot_stride")
                                            and getattr(self, f.name) is not None})

    def ring_of(self, slot: int) -> Tensor:
        return ol.shift(self.ring, slot * self.slot_stride)


@dataclass(eq=False)
class ConvLayerPlan(_RingedBlocks):
    """Block 0 of the convolution layers (kernels/conv.py) and the strides to any block and slot's ring."""
    ln1: Tensor
    ln2: Tensor
    taps: Tensor                # [taps, d] fp32: tap k multiplies position p - (taps-1) + k
    cin: QTensor                # [3d, d]: rows B, C, x
    cout: QTensor
    wg: QTensor | None          # None in a mixture of experts' routed blocks
    wu: QTensor | None
    wd: QTensor | None
    ring: Tensor                # slot 0's ring [ring_rows(taps), d] fp32
    stride: int
    slot_stride: int
    router: QTensor | None = None       # a mixture of experts: the router, its selection bias
    ebias: Tensor | None = None



@dataclass(eq=False)
class GdnLayerPlan(_RingedBlocks):
    """Block 0 of the Gated DeltaNet layers and the strides to any block and slot's ring and state."""
    ln1: Tensor
    ln2: Tensor
    taps: Tensor                # [taps, C] fp32 over the q, k, v channels
    a_log: Tensor               # (Hv,) fp32
    dt_bias: Tensor             # (Hv,) fp32
    norm: Tensor                # (dv,) fp32: the gated RMSNorm's weight
    gqkv: QTensor               # [C, d]
    gz: QTensor                 # [Hv dv, d]
    gb: QTensor                 # [Hv, d]
    ga: QTensor                 # [Hv, d]
    gout: QTensor               # [d, Hv dv]
    wg: QTensor
    wu: QTensor
    wd: QTensor
    ring: Tensor                # slot 0's ring [ring_rows(taps), C] fp32
    state: Tensor               # slot 0's state [Hv dv, dk] fp32: value head h is rows h*dv..(h+1)*dv
    stride: int
    slot_stride: int

    def state_of(self, slot: int) -> Tensor:
        return ol.shift(self.state, slot * self.slot_stride)


def card_config(cfg: ModelConfig, D: int) -> ModelConfig:
    """The model as the card runs it: heads narrower than a multiple of D zero-padded to one."""
    padded = -(-cfg.head_dim // D) * D
    if padded == cfg.head_dim or cfg.real_head_dim:
        return cfg
    return cfg.with_(head_dim=padded, real_head_dim=cfg.head_dim)


def block_of(cfg: ModelConfig, layer: int) -> tuple[str, int]:
    """The blocks that hold a layer (its kind's, or "dense": a mixture of experts' leading dense
    layers, which have blocks of their own) and its index among them."""
    if layer < cfg.dense_layers:
        return "dense", layer
    kind = cfg.kinds[layer]
    return kind, [i for i in cfg.kind_layers(kind) if i >= cfg.dense_layers].index(layer)


def conv_runs(cfg: ModelConfig) -> tuple[int, list[tuple[int, int]]]:
    """A mixed model's order as (convolution layers before the first attention layer, and per
    attention layer the (first block, count) of the convolution layers that follow it), past the
    leading dense layers of a mixture of experts."""
    lead, after, conv = 0, [], 0
    for kind in cfg.kinds[cfg.dense_layers:]:
        if kind == "attention":
            after.append([conv, 0])
        elif after:
            after[-1][1] += 1
            conv += 1
        else:
            lead += 1
            conv += 1
    return lead, [tuple(a) for a in after]


@dataclass(eq=False)
class ImagePlan:
    cfg: ModelConfig                 # the card's view (card_config: heads padded to D)
    opts: ImageOptions
    D: int
    fmt: CardFormat
    layer: LayerPlan | None          # the attention blocks
    final_norm: Tensor
    head: QTensor
    embed: QTensor | Tensor      # int8 rows (a QTensor: the head itself when shared) or fp32 rows (a Tensor)
    cos: Tensor
    sin: Tensor
    mask: Tensor
    tri: Tensor
    logits: Tensor
    mailbox: Tensor
    chain: Tensor
    slot_io: list = field(default_factory=list)       # per slot: dict of Tensors (state, ids, uniforms, seen, ring)
    halt_slot: int = 0
    prog_slots: tuple = ()
    prog_bytes: int = 0
    layers_at: int = 0
    end: int = 0
    embed_kind: str = "head"          # embed_kind(): "f32", "head" or "int8"
    conv: ConvLayerPlan | None = None     # the convolution blocks
    lead_convs: int = 0                   # mixed models: layers of the other kind before the first attention layer
    gdn: GdnLayerPlan | None = None       # the Gated DeltaNet blocks
    gdn_rows: Tensor | None = None        # [rows, C] fp32: a multi-row run's convolved q/k/v channels
    offload: OffloadLayout | None = None  # a mixture of experts: mailbox, directory, slots
    gemma: GemmaBlocks | None = None      # Gemma 4's per-layer blocks
    conv_dense: ConvLayerPlan | None = None   # a mixture of experts' leading dense (convolution) layers

    @property
    def other(self):
        """A mixed model's second kind of block (convolution or DeltaNet), else None."""
        return self.conv or self.gdn

    @property
    def mixed(self) -> bool: return self.layer is not None and self.other is not None

    def io(self, slot: int) -> dict[str, Tensor]: return self.slot_io[slot]

    def block(self, kind: str):
        return {"attention": self.layer, "conv": self.conv, "deltanet": self.gdn}[kind]

    @property
    def f_chunk(self) -> int:
        if self.offload is not None:
            return self.offload.blob.f_chunk
        return self.gemma.layers[0].wd.K if self.gemma else (self.layer or self.conv or self.gdn).wd.K

    def kv_bytes(self) -> int:
        """DRAM of the KV pools (Gemma 4: every layer's with K/V of its own, the sliding layers' rings)."""
        if self.gemma is not None:
            return sum(L.pool_pages * L.page_stride for L in self.gemma.layers)
        return len(self.cfg.kind_layers("attention")) * self.opts.pages * self.layer.page_stride if self.layer else 0


def embed_kind(cfg: ModelConfig, fmt: CardFormat) -> str:
    """How the card gets a token's embedding: "f32" (an fp32 table, one LD), "head" (the tied int8
    head, through the MXU) or "int8" (an int8 table of its own, through the MXU)."""
    if cfg.vocab * cfg.d * 4 <= EMBED_F32_BYTES:
        return "f32"
    return "head" if cfg.tied and fmt.head_wf == isa.WF_INT8 else "int8"


def f_chunk_for(ffn: int, D: int, want: int = 0, wf: int = isa.WF_INT8) -> int:
    """The MLP's hidden chunk: the largest multiple of D dividing ffn, at most 1024; for a 4-bit
    weight format the largest of an even number of blocks when there is one. MM PAIR reads a
    weight's scale words in pairs (its scale row stride a multiple of 8 bytes), so a 4-bit down
    part of an odd block count cannot run paired and streams at half the rate."""
    if want:
        return want
    fits = [c for c in range(D, min(ffn, 1024) + 1, D) if ffn % c == 0]
    even = [c for c in fits if c // D % 2 == 0] if wf in isa.WF_4BIT else []
    return max(even or fits, default=0)


def check_fits(cfg: ModelConfig, tcfg: Config, opts: ImageOptions) -> None:
    """The model's sizes against the card's block size D and its other limits, named."""
    D = tcfg.D
    for what, v in (("hidden size", cfg.d), ("head_dim", cfg.head_dim), ("q width (heads x head_dim)",
                                                                         cfg.heads * cfg.head_dim)):
        if v % D:
            raise ModelError(f"{cfg.name}: {what} {v} is not a multiple of the card's D={D}",
                             hint="the card quantises activations in whole D-blocks")
    if "deltanet" in cfg.kinds:
        vd = cfg.lin_v_heads * cfg.lin_v_dim
        if vd % D:
            raise ModelError(f"{cfg.name}: the DeltaNet's value width {vd} (heads x head dim) is not a multiple of the "
                             f"card's D={D}", hint="the card quantises activations in whole D-blocks")
        if tcfg.DSTEP and (cfg.lin_k_dim not in isa.DSTEP_COLS or cfg.lin_v_dim > isa.DSTEP_MAX_ROWS):
            cols = ", ".join(map(str, isa.DSTEP_COLS))
            raise ModelError(f"{cfg.name}: DeltaNet heads of {cfg.lin_k_dim} keys x {cfg.lin_v_dim} values; DSTEP "
                             f"takes {cols} keys and at most {isa.DSTEP_MAX_ROWS} values")
    fc = f_chunk_for(cfg.ffn, D, opts.f_chunk, card_format(opts.fmt).layer_wf)
    if fc == 0 or any(f % fc for f in set(cfg.layer_ffn) | {cfg.ffn} | ({cfg.dense_ffn} if cfg.dense_layers else set())):
        raise ModelError(f"{cfg.name}: ffn {cfg.ffn} has no chunk that is a multiple of D={D} (at most 1024) "
                         "and divides every layer's MLP width")
    if cfg.global_head_dim % D or cfg.ple_dim % D:
        raise ModelError(f"{cfg.name}: the full layers' heads ({cfg.global_head_dim}) and the per-layer input width "
                         f"({cfg.ple_dim}) must be multiples of the card's D={D}")
    if "sliding" in cfg.kinds and cfg.sliding_window % opts.page:
        raise ModelError(f"{cfg.name}: sliding window of {cfg.sliding_window} positions is not whole KV pages of "
                         f"{opts.page}", hint="the card's windowed attention at a run-time position reads whole pages")
    if opts.page % D or opts.page < D:
        raise ModelError(f"KV page of {opts.page} tokens is not a multiple of D={D}")
    if opts.ctx % opts.page:
        raise ModelError(f"context {opts.ctx} is not a whole number of {opts.page}-token pages")
    if cfg.dense_layers and (set(cfg.kinds[:cfg.dense_layers]) != {"conv"} or "attention" not in cfg.kinds
                             or cfg.kinds.index("attention") < cfg.dense_layers):
        raise ModelError(f"{cfg.name}: leading dense layers of kinds {list(cfg.kinds[:cfg.dense_layers])}: the card "
                         "runs a mixture of experts' dense layers as convolution layers before the first attention "
                         "layer", hint="as LFM2-8B-A1B's: its first two layers")
    widest = max(cfg.d, cfg.heads * cfg.head_dim, cfg.ffn, cfg.dense_ffn)
    if widest > tcfg.ACT_BLOCKS * D:
        raise ModelError(f"{cfg.name}: a matmul input of {widest} exceeds the "
                         f"card's ACT RAM ({tcfg.ACT_BLOCKS} blocks of {D})")
    if not 1 <= opts.rows <= tcfg.MCOLS * 4:
        raise ModelError(f"prefill rows {opts.rows}: must be 1..{tcfg.MCOLS * 4}")


def plan(cfg: ModelConfig, tcfg: Config, opts: ImageOptions = ImageOptions()) -> ImagePlan:
    cfg = card_config(cfg, tcfg.D)
    check_fits(cfg, tcfg, opts)
    fmt = card_format(opts.fmt)
    D, P, V = tcfg.D, opts.page, cfg.vocab
    cur = Cursor(BASE)
    slot_io = []
    for _ in range(opts.slots):
        io = {"state": Tensor(cur.take(4 * STATE_WORDS), (STATE_WORDS,)),
              "ids": Tensor(cur.take(4 * opts.ctx), (opts.ctx,)),
              "uniforms": Tensor(cur.take(4 * opts.ctx), (opts.ctx,)),
              "seen": Tensor(cur.take(4 * V), (V,))}
        if opts.ring:
            io["ring"] = Tensor(cur.take(4 * 2 * P * V), (2 * P, V))
        slot_io.append(io)
    logits = Tensor(cur.take(4 * opts.rows * V), (opts.rows, V))
    C = cfg.gdn_conv_dim if "deltanet" in cfg.kinds else 0
    gdn_rows = Tensor(cur.take(4 * opts.rows * C), (opts.rows, C)) if C else None
    mailbox = Tensor(cur.take(4 * (opts.ctx // P + 2)), (opts.ctx // P + 2,))
    chain = Tensor(cur.take(4 * 8), (8,))            # per program slot: raw [HALT slot, slot, 1, 0]
    cos = Tensor(cur.take(4 * opts.ctx * cfg.head_dim // 2), (opts.ctx, cfg.head_dim // 2))
    sin = Tensor(cur.take(4 * opts.ctx * cfg.head_dim // 2), (opts.ctx, cfg.head_dim // 2))
    mask = Tensor(cur.take(4 * P * P), (P, P))
    tri = Tensor(cur.take(4 * KMAX * KMAX), (KMAX, KMAX))
    n_attn, n_conv = len(cfg.kind_layers("attention")), len(cfg.kind_layers("conv")) - cfg.dense_layers
    n_gdn = len(cfg.kind_layers("deltanet"))
    gemma = None
    if "sliding" in cfg.kinds:
        gemma = gemma_blocks(cfg, cur, opts, fmt.layer_wf, D, f_chunk_for(cfg.ffn, D, opts.f_chunk, fmt.layer_wf))
        n_attn = 0

    layers_at = -(-cur.at // BLOCK_ALIGN) * BLOCK_ALIGN
    d, q, kv, hd = cfg.d, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.head_dim
    wf = fmt.layer_wf
    fc = f_chunk_for(cfg.ffn, D, opts.f_chunk, wf)

    def mlp(lc: Cursor, f: int = cfg.ffn) -> tuple[QTensor, QTensor, QTensor]:
        wg, wu = weight(lc, f, d, wf, D), weight(lc, f, d, wf, D)
        return wg, wu, parts(lc, d, f, fc, wf, D)

    def ffn(lc: Cursor) -> tuple:
        """A block's MLP (wg, wu, wd), or a mixture of experts' router and selection bias instead."""
        if not cfg.experts:
            return mlp(lc) + (None, None)
        router = weight(lc, cfg.experts, d, fmt.head_wf, D)
        return None, None, None, router, Tensor(lc.take(4 * cfg.experts), (cfg.experts,)) if cfg.expert_bias else None

    def conv_blocks(lc: Cursor, mlp_parts) -> ConvLayerPlan:
        start = lc.at
        ln1, ln2, taps = Tensor(lc.take(4 * d), (d,)), Tensor(lc.take(4 * d), (d,)), cfg.conv_taps
        tw = Tensor(lc.take(4 * taps * d), (taps, d))
        cin, cout = weight(lc, 3 * d, d, wf, D), weight(lc, d, d, wf, D)
        wg, wu, wd, router, ebias = mlp_parts(lc)
        slot_stride = -(-4 * ring_rows(taps) * d // ALIGN) * ALIGN
        ring = Tensor(lc.take(slot_stride * opts.slots), (ring_rows(taps), d))
        unit = math.lcm(BLOCK_ALIGN, 4 * d)           # whole ring rows: a block's ring is m0's register moved
        stride = -(-(lc.at - start) // unit) * unit
        return ConvLayerPlan(ln1, ln2, tw, cin, cout, wg, wu, wd, ring, stride, slot_stride, router, ebias)

    at, layer, conv = layers_at, None, None
    if n_attn:
        lc = Cursor(at)
        ln1, ln2 = Tensor(lc.take(4 * d), (d,)), Tensor(lc.take(4 * d), (d,))
        qn, kn = Tensor(lc.take(4 * hd), (hd,)), Tensor(lc.take(4 * hd), (hd,))
        gate = Tensor(lc.take(8), (2,))
        after = Tensor(lc.take(4), (1,)) if n_conv or n_gdn else None
        wq = weight(lc, 2 * q if cfg.attn_gate else q, d, wf, D)       # with the output gates' rows (Qwen3.5)
        wk, wv = weight(lc, kv, d, wf, D), weight(lc, kv, d, wf, D)
        wo = weight(lc, d, q, wf, D)
        wg, wu, wd, router, ebias = ffn(lc)
        kb_h = hd // D
        kv0 = KVCache(lc.take(P * hd), lc.take(4 * P * kb_h), lc.take(hd * P), lc.take(4 * P), P, hd)
        head_stride = kv0.v_scale.const + 4 * P - kv0.k.const
        head_stride = -(-head_stride // ALIGN) * ALIGN
        page_stride = head_stride * cfg.kv_heads
        lc.at = kv0.k.const + page_stride * opts.pages
        stride = -(-(lc.at - at) // BLOCK_ALIGN) * BLOCK_ALIGN
        layer = LayerPlan(ln1, ln2, qn, kn, gate, wq, wk, wv, wo, wg, wu, wd, kv0, stride, page_stride, head_stride,
                          after, router, ebias)
        at += n_attn * stride
    conv_dense = None
    if n_conv:
        conv = conv_blocks(Cursor(at), ffn)
        at += n_conv * conv.stride
    if cfg.dense_layers:           # their own blocks: a dense MLP of the dense layers' width
        conv_dense = conv_blocks(Cursor(at), lambda lc: mlp(lc, cfg.dense_ffn) + (None, None))
        at += cfg.dense_layers * conv_dense.stride
    gdn = None
    if n_gdn:
        gdn = _gdn_plan(Cursor(at), cfg, opts, wf, D, mlp)
        at += n_gdn * gdn.stride

    gc = Cursor(at)
    final_norm = Tensor(gc.take(4 * d), (d,))
    head = weight(gc, V, d, fmt.head_wf, D)
    ekind = embed_kind(cfg, fmt)
    if ekind == "head":
        embed = head
    elif ekind == "f32":
        embed = Tensor(gc.take(4 * V * d), (V, d))
    else:
        embed = weight(gc, V, d, isa.WF_INT8, D)
    offload = None
    if cfg.experts:
        try:
            offload = OffloadLayout(gc.take(1, BLOCK_ALIGN), len(cfg.moe_layers), cfg.experts, cfg.experts_used,
                                    opts.expert_slots or cfg.experts, ExpertBlob(d, cfg.ffn, fc, wf, D))
        except ValueError as e:
            raise ModelError(f"{cfg.name}: --expert-slots {opts.expert_slots}: {e}") from None
        gc.at = offload.end
    halt_slot = gc.take(isa.BYTES_PER_INSTR, BLOCK_ALIGN)
    prog_bytes = tcfg.imem_instrs * (isa.BYTES_PER_INSTR + 8)
    slots = (gc.take(prog_bytes, BLOCK_ALIGN), gc.take(prog_bytes, BLOCK_ALIGN))
    end = -(-gc.at // BLOCK_ALIGN) * BLOCK_ALIGN
    room = tcfg.DRAM_BYTES - 2 * tcfg.IMEM_WORDS * 4        # the Board's program area sits at the top
    if end > room:
        raise ModelError(f"{cfg.name} in {fmt.name} with {opts.pages} KV pages needs {end / 2**20:.0f} MiB of card "
                         f"DRAM; the card has {tcfg.DRAM_BYTES / 2**20:.0f} MiB",
                         hint="use fewer KV pages (--ctx), a 4-bit --format" +
                         (" or fewer --expert-slots" if cfg.experts else ""))
    return ImagePlan(cfg, opts, D, fmt, layer, final_norm, head, embed, cos, sin, mask, tri, logits, mailbox, chain,
                     slot_io, halt_slot, slots, prog_bytes, layers_at, end, ekind, conv, conv_runs(cfg)[0], gdn,
                     gdn_rows, offload, gemma, conv_dense)


def _gdn_plan(lc: Cursor, cfg: ModelConfig, opts: ImageOptions, wf: int, D: int, mlp) -> GdnLayerPlan:
    d, taps, C = cfg.d, cfg.conv_taps, cfg.gdn_conv_dim
    hv, vd = cfg.lin_v_heads, cfg.lin_v_heads * cfg.lin_v_dim
    at = lc.at
    ln1, ln2 = Tensor(lc.take(4 * d), (d,)), Tensor(lc.take(4 * d), (d,))
    tw = Tensor(lc.take(4 * taps * C), (taps, C))
    a_log, dt_bias = Tensor(lc.take(4 * hv), (hv,)), Tensor(lc.take(4 * hv), (hv,))
    norm = Tensor(lc.take(4 * cfg.lin_v_dim), (cfg.lin_v_dim,))
    gqkv, gz = weight(lc, C, d, wf, D), weight(lc, vd, d, wf, D)
    gb, ga = weight(lc, hv, d, wf, D), weight(lc, hv, d, wf, D)
    gout = weight(lc, d, vd, wf, D)
    wg, wu, wd = mlp(lc)
    ring_bytes = -(-4 * ring_rows(taps) * C // ALIGN) * ALIGN
    state_bytes = -(-4 * vd * cfg.lin_k_dim // ALIGN) * ALIGN
    slot_stride = ring_bytes + state_bytes
    first = lc.take(slot_stride * opts.slots)
    ring = Tensor(first, (ring_rows(taps), C))
    state = Tensor(first + ring_bytes, (vd, cfg.lin_k_dim))
    unit = math.lcm(BLOCK_ALIGN, 4 * C)           # whole ring rows: a block's ring is m0's register moved
    stride = -(-(lc.at - at) // unit) * unit
    return GdnLayerPlan(ln1, ln2, tw, a_log, dt_bias, norm, gqkv, gz, gb, ga, gout, wg, wu, wd, ring, state, stride,
                        slot_stride)
