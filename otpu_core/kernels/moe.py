"""A mixture-of-experts FFN whose experts may live on the host: the card routes, looks each chosen
expert up in its directory and computes it; the host only copies missing experts into slots.

DRAM layout (`OffloadLayout`, the public openTPU's; every word 4 bytes):

    base          a `mailbox.Mailbox` (seq, the request row, served); the row holds the k global
                  expert ids g = layer * E + e (float32)
    base + 192    the directory: entry g at dir + 8g = {slot address (u32), present (float32 1.0 / 0.0)}
    slots         from the next 4 KiB page, layer after layer, `slots` per layer, `ExpertBlob.stride` each

An expert's blob (`ExpertBlob`) is its gate and up weights (rows, then scales) and its down
weight as F-chunk column parts, each area 128-byte aligned, so one address places all of it.

Per token and layer, `moe_ffn`: the router MM, the k best (value, index) pairs by ARGMAX with
knock-out (best first), routing weights w = softmax of the k values (or, without `renorm`, the
k values' probabilities under the softmax over every expert; a `SigmoidGate`, LFM2-MoE's: the
k best of sigmoid(logits) + bias, weighted by their sigmoids read back by index, renormalised
and scaled), the ids, each id's
directory entry loaded through an RLD-computed address. If any chosen expert is absent the ids
go to the host as a mailbox request (seq moved by 0 or 1: no loop level, so the MoE fits inside
the loops of a two-kind model's generate program). Then every chosen expert: its
slot address from the directory (RLD of the raw word), the SwiGLU MLP over the blob there, times
its w, summed. A token whose experts are all present costs the card no host round trip.

`moe_ffn_rows` is the same for R rows at once, expert-major (prefill): one router MM for the
rows, each row's k best, then one pass over the layer's experts in which every expert some row
chose is looked up (requested alone if absent), computed once over all R rows and added, times
each row's weight, into that row's accumulator of the expert's rank; a row that did not choose
it adds into a scratch row. The rows' outputs are then their rank accumulators summed best
first, so each row's bits are those `moe_ffn` gives it alone.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import formats, ol
from ..ol import CompileError, QTensor, Tensor, Tile
from .mailbox import BYTES as MAILBOX_BYTES
from .mailbox import MAX_ROW, Mailbox, request
from .matmul import linear
from .activations import sigmoid
from .mlp import swiglu_mlp
from .sampling import pair_column, topk_tile

ALIGN = 128
PAGE = 4096
MAX_K = MAX_ROW
ENTRY_BYTES = 8


def _align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class ExpertBlob:
    """One expert's SwiGLU weights as one relocatable block: gate and up [F, d], down [d, F] in
    column parts of `f_chunk`, all in weight format `wf` at block size `D`."""
    d: int
    ffn: int
    f_chunk: int
    wf: int
    D: int

    def __post_init__(self):
        if self.ffn % self.f_chunk or self.f_chunk % self.D or self.d % self.D:
            raise ValueError(f"expert shape d={self.d}, ffn={self.ffn} does not split into f_chunk={self.f_chunk} "
                             f"parts of whole D={self.D} blocks")

    def _sizes(self, n: int, k: int) -> tuple[int, int]:
        """Bytes of the rows and of the scales of an [n, k] weight, as formats.quantize lays them out."""
        kb = -(-k // self.D)
        return n * formats.row_bytes(self.wf, self.D, kb), n * formats.scale_row_bytes(self.wf, kb)

    @functools.lru_cache(maxsize=None)       # every address the host and the compiler ask for reads it
    def _layout(self) -> tuple[list[tuple[int, int, int, int]], int]:
        """(rows at, rows bytes, scales at, scales bytes) of gate, up and each down part; total bytes."""
        areas, at = [], 0
        for n, k in [(self.ffn, self.d), (self.ffn, self.d)] + [(self.d, self.f_chunk)] * (self.ffn // self.f_chunk):
            rb, sb = self._sizes(n, k)
            areas.append((at, rb, _align(at + rb), sb))
            at = _align(at + rb) + _align(sb)
        return areas, at

    @property
    def nbytes(self) -> int: return self._layout()[1]

    @property
    def stride(self) -> int:
        """Bytes between two slots: the blob rounded up to whole 128-byte chunks."""
        return _align(self.nbytes)

    def weights(self) -> tuple[QTensor, QTensor, QTensor]:
        """gate, up and down (column parts) as QTensors at offset 0 (`ol.shift` them to a slot)."""
        areas, _ = self._layout()
        kb_d, kb_f = -(-self.d // self.D), -(-self.f_chunk // self.D)

        def q(area, n, kb):
            rows_at, rb, sc_at, sb = area
            return QTensor(rows_at, sc_at, (n, kb * self.D), rb // n, sb // n, self.wf, self.D)
        gate, up, down = q(areas[0], self.ffn, kb_d), q(areas[1], self.ffn, kb_d), q(areas[2], self.d, kb_f)
        if len(areas) > 3:
            down.part_stride = (areas[3][0] - areas[2][0], areas[3][2] - areas[2][2])
        else:
            down.part_stride = (self.nbytes, self.nbytes)
        return gate, up, down

    def pack(self, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
        """The blob's bytes (uint8 [nbytes]) from float weights gate/up [F, d] and down [d, F]."""
        want = {"gate": (self.ffn, self.d), "up": (self.ffn, self.d), "down": (self.d, self.ffn)}
        mats = {"gate": w_gate, "up": w_up, "down": w_down}
        for name, shape in want.items():
            if np.shape(mats[name]) != shape:
                raise ValueError(f"expert {name} weight has shape {np.shape(mats[name])}, the blob holds {shape}")
        parts = [w_gate, w_up] + [np.asarray(w_down)[:, c:c + self.f_chunk] for c in range(0, self.ffn, self.f_chunk)]
        q = [formats.quantize(np.asarray(w, np.float32), self.wf, self.D) for w in parts]
        return self.from_packed(q[0], q[1], q[2:])

    def from_packed(self, gate: formats.PackedWeights, up: formats.PackedWeights,
                    down_parts: list[formats.PackedWeights]) -> np.ndarray:
        """The blob's bytes from weights already quantised in its format (down as its F-chunk parts)."""
        areas = self._layout()[0]
        if len(down_parts) != len(areas) - 2:
            raise ValueError(f"{len(down_parts)} down parts; the blob holds {len(areas) - 2} of {self.f_chunk} columns")
        out = np.zeros(self.nbytes, np.uint8)
        for (rows_at, rb, sc_at, sb), p in zip(areas, [gate, up, *down_parts]):
            if p.wf != self.wf or p.rows.size != rb or p.scales.size != sb:
                raise ValueError(f"a packed weight of {p.rows.size} + {p.scales.size} bytes in format {p.wf}; the "
                                 f"blob's area holds {rb} + {sb} bytes in format {self.wf}")
            out[rows_at:rows_at + rb] = np.asarray(p.rows).reshape(-1)
            out[sc_at:sc_at + sb] = np.asarray(p.scales).reshape(-1)
        return out

    def dequantized(self, blob: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """gate, up, down (float64) as the MXU multiplies them, read back from a blob's bytes."""
        mats = []
        D, areas = self.D, self._layout()[0]
        for (rows_at, rb, sc_at, sb), (n, k) in zip(areas, [(self.ffn, self.d)] * 2 +
                                                    [(self.d, self.f_chunk)] * (len(areas) - 2)):
            rows = blob[rows_at:rows_at + rb].reshape(n, rb // n)
            scales = blob[sc_at:sc_at + sb].reshape(n, sb // n)
            mats.append(formats.PackedWeights(self.wf, D, n, k, rows, scales).dequantize())
        return mats[0], mats[1], np.concatenate(mats[2:], axis=1)


@dataclass(frozen=True)
class OffloadLayout:
    """Where the mailbox, the directory and the slots are (bytes), for `layers` MoE layers of
    `experts` experts with `k` chosen per token and `slots` resident per layer."""
    base: int
    layers: int
    experts: int
    k: int
    slots: int
    blob: ExpertBlob

    def __post_init__(self):
        Mailbox(self.base)
        if not 1 <= self.k <= min(MAX_K, self.experts):
            raise ValueError(f"k={self.k} experts per token: must be 1..{min(MAX_K, self.experts)}")
        if not self.k <= self.slots <= self.experts:
            raise ValueError(f"{self.slots} slots per layer: must hold the k={self.k} chosen experts and at most "
                             f"all {self.experts}")

    @property
    def mailbox(self) -> Mailbox: return Mailbox(self.base)

    @property
    def dir(self) -> int: return self.base + MAILBOX_BYTES

    @property
    def slots_base(self) -> int: return _align(self.dir + ENTRY_BYTES * self.layers * self.experts, PAGE)

    def slot(self, layer: int, s: int) -> int:
        return self.slots_base + (layer * self.slots + s) * self.blob.stride

    @property
    def end(self) -> int: return self.slot(self.layers, 0)

    def entry(self, layer: int, e: int) -> int:
        return self.dir + ENTRY_BYTES * (layer * self.experts + e)


def routing_weights(values: Tile, total: Tile | None = None) -> Tile:
    """softmax over the k chosen router logits (best first): exp2((v - v0) log2 e) / sum; given
    `total` (`softmax_total` of every logit) the chosen ones' probabilities, not renormalised."""
    p = ol.exp2((values - values[0:1]) * ol.LOG2E)
    return p * ol.recip(ol.sum(p) if total is None else total)


def softmax_total(logits: Tile) -> Tile:
    """sum of exp2((l - max) log2 e) over every router logit (read before the top-k knocks them out)."""
    return ol.sum(ol.exp2((logits - ol.max(logits)) * ol.LOG2E))


@dataclass
class SigmoidGate:
    """A sigmoid router (LFM2-MoE): scores sigmoid(logits), the top-k over scores + `bias` (a loaded
    (E,) tile, or None), the chosen experts weighted by their unbiased scores (renormalised over
    the k, sum + SIGMOID_NORM_EPS, with `renorm`) times `scale`."""
    bias: Tile | None
    scale: float = 1.0


SIGMOID_NORM_EPS = 1e-6          # transformers' Lfm2MoeTopKRouter


def route(logits: Tile, k: int, renorm: bool, gate: SigmoidGate | None = None) -> tuple[Tile, Tile]:
    """(routing weights, expert indices) of one row's router logits (E,), best first; `logits` is
    overwritten (the top-k knocks its winners out)."""
    if gate is None:
        total = None if renorm else softmax_total(logits)
        pairs = topk_tile(logits, k)
        return routing_weights(pair_column(pairs, k, 0), total), pair_column(pairs, k, 1)
    scores = sigmoid(logits)
    if gate.bias is None:
        pairs = topk_tile(scores, k)
        w = pair_column(pairs, k, 0)
    else:
        pairs = topk_tile(scores + gate.bias, k)
        w = ol.empty((k,))
        for j in ol.static_range(k):            # the chosen experts' unbiased scores
            w[j:j + 1].set(Tile(scores.buf, scores.base + ol.rld(pairs[j, 1:2]), (1,)))
    if renorm:
        w = w * ol.recip(ol.sum(w) + SIGMOID_NORM_EPS)
    if gate.scale != 1.0:
        w = w * gate.scale
    return w, pair_column(pairs, k, 1)


def moe_ffn(x: Tile, router: QTensor, lay: OffloadLayout, layer_base: Tile, renorm: bool = True,
            gate: SigmoidGate | None = None) -> Tile:
    """x (d,) -> (d,): the k routed experts' SwiGLU outputs weighted by the router's softmax (over the
    k chosen, or with `renorm` False over every expert), or by `gate`'s sigmoid scores. `router`
    [E, d]; `layer_base` a (1,) tile holding float(layer * E), this layer's first global id."""
    k, E = lay.k, lay.experts
    if x.ndim != 1 or router.N != E or router.K < x.cols:
        raise CompileError(f"shape mismatch in moe_ffn: x of shape {x.shape}, router of shape {router.shape} "
                           f"for {E} experts")
    w, ids = route(linear(x, router), k, renorm, gate)
    ids = ids + layer_base
    entries = _lookup(lay, ids, k)
    present = pair_column(entries, k, 1)
    request(lay.mailbox, ids, when=ol.minimum(float(k) - ol.sum(present), 1.0))   # only if one is absent
    entries = _lookup(lay, ids, k)          # the host may have moved experts: read the directory again
    gate, up, down = lay.blob.weights()
    y = ol.zeros((x.cols,))
    for j in ol.static_range(k):
        at = ol.rld(entries[j, 0:1], raw=True)
        out = swiglu_mlp(x, ol.shift(gate, at), ol.shift(up, at), ol.shift(down, at), lay.blob.f_chunk)
        y += out * w[j:j + 1]
    return y


def _lookup(lay: OffloadLayout, ids: Tile, k: int) -> Tile:
    """The directory entries of the k ids, one LD each at dir + 8 * id."""
    entries = ol.empty((k, 2))
    for j in ol.static_range(k):
        ol.load(ol.shift(Tensor(lay.dir, (2,)), ol.rld(ids[j:j + 1], scale=ENTRY_BYTES)), out=entries[j])
    return entries


def moe_ffn_rows(x: Tile, router: QTensor, lay: OffloadLayout, layer_base: Tile, renorm: bool = True,
                 gate: SigmoidGate | None = None) -> Tile:
    """x (R, d) -> (R, d), expert-major: every chosen expert's weights are streamed once for the R rows."""
    k, E = lay.k, lay.experts
    if x.ndim != 2 or router.N != E or router.K < x.cols:
        raise CompileError(f"shape mismatch in moe_ffn_rows: x of shape {x.shape}, router of shape {router.shape} "
                           f"for {E} experts")
    R, d = x.shape
    logits = linear(x, router)
    acc = ol.zeros((k * R + 1, d))                            # row j*R + r: row r's expert of rank j; last: scratch
    weight = ol.zeros((E, R))                                 # per expert and row: its weight, its accumulator
    where = ol.full((E, R), float(k * R * acc.rs))
    if where.rs != weight.rs:                                 # one register addresses an expert's row of both
        raise CompileError(f"moe_ffn_rows: the weight and accumulator tables have row strides {weight.rs} and "
                           f"{where.rs}")
    chosen = ol.zeros((E,))
    for r in ol.static_range(R):
        w, ids = route(logits[r], k, renorm, gate)
        for j in ol.static_range(k):
            row = ol.rld(ids[j:j + 1], scale=weight.rs)
            Tile(weight.buf, weight.base + row + r, (1,)).set(w[j:j + 1])
            Tile(where.buf, where.base + row + r, (1,)).set(float((j * R + r) * acc.rs))
            Tile(chosen.buf, chosen.base + ol.rld(ids[j:j + 1]), (1,)).set(1.0)
    gate, up, down = lay.blob.weights()
    e = ol.full((1,), 0.0)
    for _ in ol.range(E):
        for _ in ol.range(ol.rld(Tile(chosen.buf, chosen.base + ol.rld(e), (1,)))):
            g = e + layer_base
            entry = _lookup(lay, g, 1)
            request(lay.mailbox, ol.zeros((k,)) + g, when=1.0 - entry[0, 1:2])   # k words, all this id; if absent
            at = ol.rld(_lookup(lay, g, 1)[0, 0:1], raw=True)
            out = swiglu_mlp(x, ol.shift(gate, at), ol.shift(up, at), ol.shift(down, at), lay.blob.f_chunk)
            row = ol.rld(e, scale=weight.rs)
            for r in ol.static_range(R):
                dst = Tile(acc.buf, acc.base + ol.rld(Tile(where.buf, where.base + row + r, (1,))), (d,))
                dst.set(dst + out[r] * Tile(weight.buf, weight.base + row + r, (1,)))
        e += 1.0
    y = ol.empty((R, d))
    for r in ol.static_range(R):
        t = acc[r]
        for j in ol.static_range(1, k):
            t = t + acc[j * R + r]
        y[r].set(t)
    return y
