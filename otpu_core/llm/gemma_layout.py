"""Gemma 4's layer blocks in card DRAM (`GemmaBlocks`): one block per layer, its KV pools and its rings.

Its layers differ in shape (sliding and full heads, the shared layers' double-wide MLP and no K/V
projections or pool of their own), so each has its own block: norms (ln1, the post-attention
norm, ln2, the post-MLP norm, the PLE norm, the layer scalar), q/k norms, projections, the MLP,
PLE gate and projection, then the layer's KV pool: a full layer's `pages` pages (the store's page
numbers), a sliding layer's per sequence slot a ring of `ring_pages` pages (the window's pages and
one more: position p writes ring page (p // page) mod R, `GemmaBlocks.kv_page`), so its DRAM does
not grow with the context. Before the blocks: the full layers' RoPE tables, the PLE model
projection and norm, the host mailbox (kernels/mailbox.py) with the landing row the host writes a
token's per-layer embeddings into (the table stays on the host), and a scratch row per prefill
row for the per-layer inputs. `gemma_runs` groups consecutive layers of one shape, which one loop
body serves.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import ol
from ..kernels.mailbox import BYTES as MAILBOX_BYTES
from ..kernels.mailbox import Mailbox
from ..ol import Affine, KVCache, QTensor, Tensor
from .config import ModelConfig
from .placement import BLOCK_ALIGN, Cursor, kv_pool, parts, vector, weight

if TYPE_CHECKING:
    from .layout import ImageOptions


@dataclass(eq=False)
class GemmaLayerPlan:
    """One Gemma 4 layer's block (static addresses); kv/wk/wv/kn are None in a KV-sharing layer."""
    ln1: Tensor
    an: Tensor
    ln2: Tensor
    fn: Tensor
    qn: Tensor
    kn: Tensor | None
    ls: Tensor
    pn: Tensor | None
    wq: QTensor
    wk: QTensor | None
    wv: QTensor | None
    wo: QTensor
    wg: QTensor
    wu: QTensor
    wd: QTensor
    pg: QTensor | None
    pp: QTensor | None
    kv: KVCache | None
    hd: int
    page_stride: int = 0
    head_stride: int = 0
    stride: int = 0              # the block's bytes: the next layer of its shape starts this far on
    pool_pages: int = 0          # pages in its KV pool (a sliding layer's: every slot's ring)

    def at(self, l) -> "GemmaLayerPlan":
        """The block l strides on (affine: a loop over a run of layers of one shape)."""
        delta = Affine.of(l) * self.stride
        return dataclasses.replace(self, **{f.name: ol.shift(getattr(self, f.name), delta)
                                            for f in dataclasses.fields(self)[:18] if getattr(self, f.name) is not None})

    def page(self, p, g: int) -> KVCache:
        return ol.shift(self.kv, Affine.of(p) * self.page_stride + g * self.head_stride)


@dataclass(eq=False)
class GemmaBlocks:
    layers: list                 # GemmaLayerPlan per layer
    gcos: Tensor                 # the full layers' RoPE tables [ctx, global_head_dim/2]
    gsin: Tensor
    plp: QTensor | None          # PLE: the model projection [layers*ple, d], its norm, the host's mailbox,
    pln: Tensor | None           # the landing row [layers*ple] and per prefill row the per-layer inputs
    mailbox: Mailbox | None
    landing: Tensor | None
    ple_in: Tensor | None
    ring_pages: int = 0          # R: pages of a slot's sliding-layer ring

    def kv_page(self, kind: str, slot: int, index: int, page: int) -> int:
        """The pool page holding a sequence's page `index` (the store's page number `page`) in a layer of
        `kind`: a full layer's is `page`; a sliding layer's is its slot's ring page index mod R."""
        return slot * self.ring_pages + index % self.ring_pages if kind == "sliding" else page


def ring_pages(cfg: ModelConfig, opts: "ImageOptions") -> int:
    """Pages of a sliding layer's ring: the W/P pages of the window and the one being written. A run
    (prefill rows, a decode token) writes only the last page it attends and reads from the page W/P
    before it (its first row's keys after the window start), so the page R before the written one is
    the only one it overwrites and none it reads. Never more than a sequence's context."""
    return min(cfg.sliding_window // opts.page + 1, opts.ctx // opts.page)


def ln1_at(norms: list) -> int:
    return norms[0].base.const


def gemma_runs(cfg: ModelConfig, blocks: list) -> list[tuple[int, int]]:
    """(first layer, count) of each run of consecutive layers one loop body serves: one kind, KV of
    their own (or all of one earlier layer's), one MLP width, blocks a stride apart."""
    runs: list[list] = []
    for i in range(cfg.layers):
        key = (cfg.kinds[i], cfg.kv_source(i) if cfg.shares_kv(i) else -1, cfg.ffn_of(i))
        if runs and runs[-1][2] == key and \
                ln1_at([blocks[i].ln1]) - ln1_at([blocks[runs[-1][0]].ln1]) == runs[-1][1] * blocks[i].stride:
            runs[-1][1] += 1
        else:
            runs.append([i, 1, key])
    return [(a, n) for a, n, _ in runs]


def gemma_blocks(cfg: ModelConfig, cur: Cursor, opts: ImageOptions, wf: int, D: int, fc: int) -> GemmaBlocks:
    d, P, ple = cfg.d, opts.page, cfg.ple_dim
    ghd = cfg.global_head_dim or cfg.head_dim
    gcos = Tensor(cur.take(4 * opts.ctx * ghd // 2), (opts.ctx, ghd // 2))
    gsin = Tensor(cur.take(4 * opts.ctx * ghd // 2), (opts.ctx, ghd // 2))
    plp = pln = mb = landing = ple_in = None
    if ple:
        plp, pln = weight(cur, cfg.layers * ple, d, wf, D), Tensor(cur.take(4 * ple), (ple,))
        mb = Mailbox(cur.take(MAILBOX_BYTES, 64))
        landing = Tensor(cur.take(4 * cfg.layers * ple), (cfg.layers * ple,))
        ple_in = Tensor(cur.take(4 * opts.rows * cfg.layers * ple), (opts.rows, cfg.layers * ple))
    R = ring_pages(cfg, opts)
    layers = []
    for i in range(cfg.layers):
        lc, hd, f, own = Cursor(-(-cur.at // BLOCK_ALIGN) * BLOCK_ALIGN), cfg.head_dim_of(i), cfg.ffn_of(i), \
            not cfg.shares_kv(i)
        norms = [vector(lc, d) for _ in range(4)]
        qn, kn, ls = vector(lc, hd), vector(lc, hd) if own else None, vector(lc, 1)
        pn = vector(lc, d) if ple else None
        q, kv = cfg.heads * hd, cfg.kv_heads * hd
        wq = weight(lc, q, d, wf, D)
        wk, wv = (weight(lc, kv, d, wf, D), weight(lc, kv, d, wf, D)) if own else (None, None)
        wo, wg, wu = weight(lc, d, q, wf, D), weight(lc, f, d, wf, D), weight(lc, f, d, wf, D)
        wd = parts(lc, d, f, fc, wf, D)
        pg, pp = (weight(lc, ple, d, wf, D), weight(lc, d, ple, wf, D)) if ple else (None, None)
        n_pages = (opts.slots * R if cfg.kinds[i] == "sliding" else opts.pages) if own else 0
        kv0, hs, ps = kv_pool(lc, hd, cfg.kv_heads, P, n_pages, D) if own else (None, 0, 0)
        start = ln1_at(norms)
        stride = -(-(lc.at - start) // BLOCK_ALIGN) * BLOCK_ALIGN
        layers.append(GemmaLayerPlan(*norms, qn, kn, ls, pn, wq, wk, wv, wo, wg, wu, wd, pg, pp, kv0, hd, ps, hs, stride,
                                     n_pages))
        cur.at = start + stride
    return GemmaBlocks(layers, gcos, gsin, plp, pln, mb, landing, ple_in, R)
