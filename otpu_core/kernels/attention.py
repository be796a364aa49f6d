"""Attention over a quantised KV cache: KV appends and flash attention in 256-token blocks.

Per block of keys (one KV head, a group of g <= MCOLS query heads):
  s = q.K^T (MM, RMAX epilogue gives the row maxima); m' = max(m, rowmax);
  p = exp2(s - m') (EXP2SUB); alpha = exp2(m - m') (EXP2SUB);
  acc = acc*alpha + quantize(p * v_scale) . V^T (QACT CSCALE, then MM ACC + ASCALE, V^T unscaled);
  l = l*alpha + sum(p); m = m'.
q is quantised with log2(e)/sqrt(d) folded in (QACT CSCALE), so the scores are already in base
2. The full blocks run as one hardware loop; a partial last block is padded to whole D-blocks
and its padding masked with a large negative score before its row maximum is taken. With a
run-time length (resident decode: one program per 256-position bucket, the position in an
argument register) the last block is a whole block masked by a row of an additive mask table;
paged attention can then run that page's first half alone when the run-time position lies in it
(`halves`: masked keys give p = +0, so the result is the same bits).
Paged attention takes a sliding window (Gemma's local layers): only the pages holding the last
W positions are read, the first of them masked before the window. `scale` replaces the
1/sqrt(d) of the scores (Gemma's q and k are normed, its scores are q.k: scale 1).
"""
from __future__ import annotations

import math

import numpy as np

from .. import ol
from ..ol import CompileError, KVCache, Tensor, Tile

ATTN_BLOCK = 256
MASKED = -1.0e30


def append_kv(kv: KVCache, pos, k: Tile, v: Tile) -> None:
    """Write one token's K row and V^T column (two QSTs)."""
    ol.kv_append(kv, pos, k, v)


def mask_table(block: int = ATTN_BLOCK) -> np.ndarray:
    """The additive mask rows a run-time-length attention reads: row t is 0 up to column t and
    MASKED after it (place it in DRAM, e.g. `Image.tensor(mask_table())`)."""
    cols = np.arange(block)
    return np.where(cols[None, :] <= cols[:, None], 0.0, MASKED).astype(np.float32)


class _Flash:
    """The online-softmax state of one query group (m, l, acc) and the block step that updates it."""

    def __init__(self, q2: Tile, d: int, scale: float | None = None):
        D = ol.config().D
        self.D = D
        qscale = ol.full((d,), ol.LOG2E * (1.0 / math.sqrt(d) if scale is None else scale))
        self.qs = ol.quantize(q2 * qscale[None, :])
        g = q2.shape[0]
        self.acc = ol.zeros((g, d))
        self.m = ol.full((g,), MASKED)
        self.l = ol.zeros((g,))

    def block(self, kv: KVCache, t0, n: int, mask_row: Tile | None, lo: int = 0) -> None:
        """Keys [t0, t0+n) of `kv`; a partial block (mask_row given, n short of whole blocks, or
        the keys before column `lo` outside a sliding window) is masked."""
        self.softmax_block(kv, t0, n, *self.scores(kv, t0, n, mask_row, lo))

    def scores(self, kv: KVCache, t0, n: int, mask_row: Tile | None, lo: int = 0) -> tuple[Tile, Tile]:
        """The block's scores (masked where asked) and the new row maxima."""
        return self.bound(self.score_mm(kv, t0, n, mask_row, lo), n, mask_row, lo)

    def _plain(self, n: int, mask_row: Tile | None, lo: int) -> bool:
        """Nothing of the block is masked: the MM's RMAX epilogue gives the row maxima."""
        return mask_row is None and n % self.D == 0 and not lo

    def score_mm(self, kv: KVCache, t0, n: int, mask_row: Tile | None, lo: int = 0, out: Tile | None = None) -> Tile:
        """The block's MXU half: q.K^T (with its row maxima when nothing is masked)."""
        npad = -(-n // self.D) * self.D
        return ol.dot(self.qs, kv.keys(t0, npad, self.D), rowmax=self._plain(n, mask_row, lo), out=out)

    def bound(self, s: Tile, n: int, mask_row: Tile | None, lo: int = 0,
              m_out: Tile | None = None) -> tuple[Tile, Tile]:
        """The scores' VPU half: the mask added where asked, the new row maxima (into `m_out`)."""
        D, m = self.D, self.m
        npad = -(-n // D) * D
        if self._plain(n, mask_row, lo):
            return s, ol.maximum(m, s.rowmax, out=m_out)
        if mask_row is None and (npad > n or lo):
            mask_row = ol.zeros((npad,))
            if npad > n:
                mask_row[n:npad].set(MASKED)
            if lo:
                mask_row[0:lo].set(MASKED)
        if mask_row is not None and mask_row.ndim == 2:    # a mask row per band of query rows
            band = s.rows // mask_row.rows
            for i in range(mask_row.rows):
                rows = s[i * band:(i + 1) * band]
                rows += mask_row[i][None, :]
        elif mask_row is not None:
            s += mask_row[None, :]
        return s, ol.maximum(m, ol.max(s), out=m_out)

    def softmax_block(self, kv: KVCache, t0, n: int, s: Tile, m_new: Tile) -> None:
        """The block's VPU half and P.V^T: p, alpha, the rescaled accumulation, l and m."""
        D, m, l = self.D, self.m, self.l
        npad = -(-n // D) * D
        p = ol.exp2(s - m_new[:, None])
        alpha = ol.exp2(m - m_new)
        vs = ol.zeros((npad,)) if npad > n else ol.empty((npad,))
        ol.load(kv.value_scales(t0, n), out=vs[:n] if npad > n else vs)
        ol.dot(ol.quantize(p * vs[None, :]), kv.values_t(t0, npad, D), acc=self.acc, acc_scale=alpha)
        l.set(l * alpha + ol.sum(p))
        m.set(m_new)

    def result(self) -> Tile:
        return self.acc * ol.recip(self.l)[:, None]


def _query(q: Tile, d: int) -> Tile:
    cfg = ol.config()
    q2 = q if q.ndim == 2 else q.reshape(1, q.cols)
    g, qd = q2.shape
    if qd != d:
        raise CompileError(f"shape mismatch in attention: q of shape {q.shape}, cache head dim {d}")
    if g > cfg.MCOLS:
        raise CompileError(f"attention: a query group of {g} rows exceeds MCOLS={cfg.MCOLS}; split the group")
    return q2


def attention(q: Tile, kv: KVCache, n_tokens, block: int = ATTN_BLOCK, *, full_blocks: int | None = None,
              mask: Tensor | None = None) -> Tile:
    """softmax(q K^T / sqrt(d)) V over the first n_tokens of the cache, for q (g, d).

    n_tokens is a compile-time count, or a run-time expression (e.g. `pos + 1`) with `full_blocks`
    (the static number of whole blocks before it: the position's bucket) and `mask` (the
    `mask_table(block)` in DRAM); the last block then always spans `block` tokens and its mask
    row is read at the run-time offset. Cache slots past the last token must hold finite scales
    (they are multiplied by zero)."""
    q2 = _query(q, kv.d)
    runtime = not isinstance(n_tokens, int)
    if runtime:
        if full_blocks is None or mask is None or mask.shape != (block, block):
            raise CompileError(f"attention over a run-time length needs full_blocks= and the ({block}, {block}) "
                               "mask table (mask_table())")
        if (full_blocks + 1) * block > kv.cap:
            raise CompileError(f"attention: block {full_blocks} ends past the cache capacity {kv.cap}")
    elif not 0 < n_tokens <= kv.cap:
        raise CompileError(f"attention: {n_tokens} tokens in a cache of {kv.cap}")
    if block % ol.config().D:
        raise CompileError(f"attention: block {block} is not a multiple of D={ol.config().D}")
    f = _Flash(q2, kv.d)
    full, tail = (full_blocks, None) if runtime else divmod(n_tokens, block)
    for b in ol.range(full):
        f.block(kv, b * block, block, None)
    if runtime:
        f.block(kv, full * block, block, ol.load(mask[n_tokens - 1 - full * block]))
    elif tail:
        f.block(kv, full * block, tail, None)
    out = f.result()
    return out if q.ndim == 2 else out.reshape(kv.d)


def _addrs(kv: KVCache) -> tuple:
    return kv.k, kv.k_scale, kv.vt, kv.v_scale


def page_runs(pages: list[KVCache]) -> list[tuple[KVCache, int, int]]:
    """Consecutive pages equally far apart (all four arrays) as (first page, count, stride) runs."""
    runs: list[tuple[KVCache, int, int]] = []
    for kv in pages:
        if runs:
            first, n, stride = runs[-1]
            deltas = [a - b for a, b in zip(_addrs(kv), _addrs(first))]
            if all(x.is_static() for x in deltas) and len({x.const for x in deltas}) == 1:
                c = deltas[0].const
                if c and (n == 1 or c == n * stride):
                    runs[-1] = (first, n + 1, c if n == 1 else stride)
                    continue
        runs.append((kv, 1, 0))
    return runs


class PagedAttention:
    """`paged_attention` in stages, so a caller can interleave several: `start()` issues every
    full page and the last page's scores (MXU work; `bound=False` leaves their mask and row maxima
    to `bound()`), `softmax()` the last page's softmax and P.V^T, `result()` the output (`finish()`
    the last two). Starting unit u+1 before unit u's softmax lets the MXU stream u+1's scores while
    the VPU works through u's softmax (the same instructions, another order)."""

    def __init__(self, q: Tile, pages: list[KVCache], *, last_n: int | None = None, last_mask: Tensor | None = None,
                 window: int | None = None, scale: float | None = None, halves=None):
        if not pages:
            raise CompileError("paged_attention needs at least one page")
        P = pages[0].cap
        if (last_n is None) == (last_mask is None):
            raise CompileError("paged_attention: give the last page's token count (last_n) or its mask row (last_mask)")
        if last_n is not None and not 0 < last_n <= P:
            raise CompileError(f"paged_attention: {last_n} tokens in a page of {P}")
        if last_mask is not None and (last_mask.cols != P or
                                      (len(last_mask.shape) == 2 and (q.ndim != 2 or q.shape[0] % last_mask.rows))):
            raise CompileError(f"paged_attention: the mask must be a row of {P} or, for queries in bands of equal "
                               f"rows, a row per band; not {last_mask.shape} for queries of shape {q.shape}")
        if window is not None and last_mask is not None and len(last_mask.shape) == 2:
            raise CompileError("paged_attention: a sliding window takes one mask row")
        if window is not None and window < 1:
            raise CompileError(f"paged_attention: a sliding window of {window} positions; it must be at least 1")
        if window is not None and last_mask is not None and window % P:
            raise CompileError(f"paged_attention: with a run-time position the sliding window ({window}) must be "
                               f"whole pages of {P}")
        if halves is not None and (last_mask is None or window is not None or P % (2 * ol.config().D)):
            raise CompileError(f"paged_attention: halves= needs a run-time mask, no window and a page of whole "
                               f"D-block pairs, not a page of {P}")
        self.q, self.pages, self.P = q, pages, P
        self.last_n, self.last_mask = last_n if last_n is not None else P, last_mask
        self.window, self.scale = window, scale
        # (count, columns) of the last page: run-time 0/1 loop counts of its whole width and of its first half
        self.halves = None if halves is None else ((halves[0], P), (halves[1], P // 2))
        self._pending = None

    def _window(self) -> tuple[int, int, bool]:
        """(first page attended, keys masked at its start, whether that mask is the run-time one):
        the pages holding the last `window` positions."""
        P, L, W = self.P, len(self.pages), self.window
        if W is None:
            return 0, 0, False
        if self.last_mask is None:
            start = max(0, (L - 1) * P + self.last_n - W)
            return start // P, start % P, False
        # W = m pages: position t of the last page keeps page L-1-m from column t+1 on
        m = W // P
        return (0, 0, False) if m >= L else (L - 1 - m, 0, True)

    def start(self, bound: bool = True) -> "PagedAttention":
        """Everything up to the last page's scores MM; `bound=False` leaves that page's mask and row
        maxima (VPU work) to `bound()`, so a caller can put another unit's softmax before them."""
        q2 = _query(self.q, self.pages[0].d)
        f = _Flash(q2, self.pages[0].d, self.scale)
        P = self.P
        first, lo, front = self._window()
        pages = self.pages[first:]
        mask = None
        middle = pages[:-1]
        if front:
            # the window starts after the last page's position: mask the first page's columns up
            # to it, the complement of the last page's mask row (MASKED - 0, MASKED - MASKED = 0)
            mask = ol.load(self.last_mask)
            f.block(pages[0], 0, P, MASKED - mask)
            middle = pages[1:-1]
        elif lo and len(pages) > 1:
            f.block(pages[0], 0, P, None, lo)
            middle = pages[1:-1]
        for run, n, stride in page_runs(middle):
            if n == 1:
                f.block(run, 0, P, None)
                continue
            for b in ol.range(n):
                f.block(KVCache(run.k + b * stride, run.k_scale + b * stride, run.vt + b * stride,
                                run.v_scale + b * stride, run.cap, run.d), 0, P, None)
        if mask is None and self.last_mask is not None:
            mask = ol.load(self.last_mask)
        lo = lo if len(pages) == 1 else 0
        if self.halves is None:
            s = f.score_mm(pages[-1], 0, self.last_n, mask, lo)
        else:
            s = ol.empty((q2.shape[0], P))
            for count, n in self.halves:
                for _ in ol.range(count):
                    f.score_mm(pages[-1], 0, n, mask, out=_cols(s, n))
        self._pending = (f, s, mask, lo)
        self._bound = None
        if bound:
            self.bound()
        return self

    def bound(self) -> "PagedAttention":
        """The last page's mask and row maxima."""
        f, s, mask, lo = self._pending
        if self.halves is None:
            self._bound = f.bound(s, self.last_n, mask, lo)
            return self
        m_new = ol.empty(f.m.shape)
        for count, n in self.halves:
            for _ in ol.range(count):
                f.bound(_cols(s, n), n, _cols(mask, n), m_out=m_new)
        self._bound = (s, m_new)
        return self

    def softmax(self) -> "PagedAttention":
        """The last page's softmax and P.V^T (the unit's VPU, quantiser and MXU tail)."""
        if self._bound is None:
            self.bound()
        f = self._pending[0]
        if self.halves is None:
            f.softmax_block(self.pages[-1], 0, self.last_n, *self._bound)
        else:
            # a page whose rows all lie in its first half leaves the second half's keys out: they are
            # masked, so their p is +0, and the sums, row maxima and the quantiser's D-blocks of the
            # first half do not change a bit without them
            s, m_new = self._bound
            for count, n in self.halves:
                for _ in ol.range(count):
                    f.softmax_block(self.pages[-1], 0, n, _cols(s, n), m_new)
        self._bound = None
        self._pending = (f, None, None, None)   # the scores and the mask die here (TMEM is tight)
        return self

    def result(self) -> Tile:
        """acc / l, once `softmax()` has run (it waits for P.V^T)."""
        f = self._pending[0]
        self._pending = None
        out = f.result()
        return out if self.q.ndim == 2 else out.reshape(self.pages[0].d)

    def finish(self) -> Tile:
        return self.softmax().result()


def _cols(t, n: int):
    """The first n columns of a tile or a loaded mask (one row or a row per band)."""
    if t.cols == n:
        return t
    return t[0:n] if t.ndim == 1 else t[:, 0:n]


def paged_attention(q: Tile, pages: list[KVCache], *, last_n: int | None = None,
                    last_mask: Tensor | None = None, window: int | None = None, halves=None) -> Tile:
    """softmax(q K^T / sqrt(d)) V for q (g, d) over a sequence's KV pages, P = pages[0].cap tokens each.

    Every page but the last is full. The last holds `last_n` tokens (a compile-time count), or is
    a whole page whose scores get the additive mask row `last_mask` (one row of `mask_table(P)`
    at a run-time offset: the position is known only on the card), or, for queries that are
    bands of equal rows (the heads of consecutive positions, attended together so each page is
    read once), a (bands, P) mask with a row per band. Runs of pages equally far
    apart in DRAM are one hardware loop, so a sequence laid out in consecutive pages costs one
    loop body whatever its length; a page list in any order still works, one block per page.
    `PagedAttention` is the same in two halves, for interleaving.

    `window=W` is sliding-window attention: only the last W positions (the current one
    included) are attended; pages wholly before them are not read and the keys before the
    window in its first page are masked. With a run-time position W must be whole pages.

    `halves=(whole, first)` (with `last_mask`, no window, pages of whole D-block pairs): run-time
    loop counts, one of them 1, the other 0: with `first` the last page's scores, softmax and P.V^T
    run over its first half only, for queries whose positions all lie in it (the rest is masked;
    leaving it out changes no bit)."""
    return PagedAttention(q, pages, last_n=last_n, last_mask=last_mask, window=window,
                          halves=halves).start().finish()
