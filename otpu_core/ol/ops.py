"""The `ol` operations a kernel calls: memory moves, quantize, dot, VOPs, reductions, loops, variables.

Each call lowers to one instruction, or to one per chunk when the hardware bounds a single one
(act_rows rows per QACT/MM, one LD/ST per row of a strided tensor). Functions that can fuse
with the instruction that produced their argument check whether that argument is an unnamed
temporary (its reference count, calibrated in vector.py) before asking `peephole.py`.
"""
from __future__ import annotations

import builtins
import dataclasses
import sys
from dataclasses import dataclass

from ..isa import VFunc, WF_SEED
from . import peephole, vector
from .affine import Affine, DevVar, RunVar
from .builder import current
from .errors import CompileError
from .ir import ACT, DRAM, TMEM, Access, Node
from .layouts import Chunk, QRange, QTensor, Stationary, Tensor, Tile
from .vector import ARG_TEMP_REFS, new_tile

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _unnamed(refs: int) -> bool:
    # `refs` is sys.getrefcount(arg) taken in the API function itself, minus nothing.
    return refs <= ARG_TEMP_REFS


# -- queries ------------------------------------------------------------------------------------
def config():
    return current().cfg


def block_size() -> int: return current().cfg.D


def mxu_columns() -> int: return current().cfg.MCOLS


def act_rows() -> int: return current().cfg.act_rows


# -- constructors -------------------------------------------------------------------------------
def empty(shape, banked: bool = True) -> Tile:
    """An uninitialised tile. A 2-D tile with rows > 1 and an even column count gets an odd row
    stride (its rows start in different TMEM banks) and rows spare words for MM row maxima,
    unless `banked=False` asks for a contiguous one (which can be reshaped)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if len(shape) == 2 and shape[0] > 1 and banked:
        rs = shape[1] + 1 if shape[1] % 2 == 0 else shape[1]
        t = new_tile(shape, rs, spare=shape[0])
        t.spare = shape[0]
        return t
    return new_tile(shape)


def full(shape, value) -> Tile:
    return vector.fill(empty(shape), value)


def zeros(shape) -> Tile:
    return full(shape, 0.0)


# -- memory -------------------------------------------------------------------------------------
def _ld_st(op: str, dram: Affine, tmem: Affine, n: int) -> Node:
    if n <= 0:
        raise CompileError(f"{op} of {n} words")
    dram_acc, tmem_acc = Access(DRAM, dram, 4 * n), Access(TMEM, tmem, n)
    reads, writes = ([dram_acc], [tmem_acc]) if op == "LD" else ([tmem_acc], [dram_acc])
    return current().emit(Node(op, {"dram": dram, "tmem": tmem}, {"n": n}, reads, writes))


def load(src: Tensor, out: Tile | None = None) -> Tile:
    """LD a DRAM tensor into a tile: one LD when rows are contiguous (or the strides agree), else one per row."""
    if not isinstance(src, Tensor):
        raise CompileError(f"load needs a Tensor, not {type(src).__name__}")
    shape = src.shape if len(src.shape) == 2 else (src.cols,)
    if out is None:
        out = new_tile(shape)
    if (out.rows, out.cols) != (src.rows, src.cols):
        raise CompileError(f"shape mismatch in load: tensor of shape {src.shape} into tile of shape {out.shape}")
    if src.rows == 1 or (src.rs == src.cols and out.rs == out.cols):
        _ld_st("LD", src.base, out.base, src.rows * src.cols)
    elif src.rs == out.rs:
        _ld_st("LD", src.base, out.base, (src.rows - 1) * src.rs + src.cols)
    else:
        for r in builtins.range(src.rows):
            _ld_st("LD", src.base + 4 * r * src.rs, out.base + r * out.rs, src.cols)
    out.buf.version += 1
    out.producer = out.fusion = None
    return out


def store(dst: Tensor, value: Tile) -> None:
    """ST a tile to a DRAM tensor: one ST when both are contiguous, else one per row."""
    if not isinstance(dst, Tensor) or not isinstance(value, Tile):
        raise CompileError("store needs a Tensor and a Tile")
    if (dst.rows, dst.cols) != (value.rows, value.cols):
        raise CompileError(f"shape mismatch in store: tile of shape {value.shape} into tensor of shape {dst.shape}")
    if dst.rows == 1 or (dst.rs == dst.cols and value.contiguous):
        _ld_st("ST", dst.base, value.base, dst.rows * dst.cols)
    else:
        for r in builtins.range(dst.rows):
            _ld_st("ST", dst.base + 4 * r * dst.rs, value.base + r * value.rs, dst.cols)


# -- quantize and dot ---------------------------------------------------------------------------
class _ActHold:
    """Owner of a Stationary's ACT RAM blocks: they are freed when it dies."""


def quantize(x: Tile, *, row: bool = False, dup: bool = False, cscale: Tile | None = None,
             rscale: Tile | None = None, suboffsets: bool = False) -> Stationary:
    """QACT a (rows, K) tile into ACT RAM (K a multiple of D): one QACT per chunk of act_rows rows
    (MCOLS/2 with `dup`, which also writes each row's copy for MM PAIR) and per ACT block range.
    `row` quantises each whole row with one scale (ROW mode, for the seed weight formats);
    `suboffsets` (implies `row`) adds a power-of-two offset per D/4 sub-block (QACT ROW + SUB),
    which only the seed weight formats can multiply."""
    unnamed = _unnamed(sys.getrefcount(x))
    b = current()
    cfg = b.cfg
    row = row or suboffsets
    if not isinstance(x, Tile):
        raise CompileError(f"quantize needs a tile, not {type(x).__name__}")
    if x.cols % cfg.D:
        raise CompileError(f"quantize needs whole blocks: a tile of shape {x.shape} has {x.cols} columns, "
                           f"not a multiple of D={cfg.D}", hint="pad the tile with zero columns")
    if dup and not cfg.PAIR:
        raise CompileError("quantize(dup=True) needs a target with PAIR (4-bit column reuse)")
    src, cs, rs = x, None, None
    if cscale is not None:
        cs = cscale.base.static()
    if rscale is not None:
        rs = rscale.base.static()
    if unnamed and cs is None and rs is None:
        fused = peephole.quantize_scales(x)
        if fused is not None:
            src, cs, rs = fused
    kb = src.cols // cfg.D
    step = cfg.MCOLS // 2 if dup else cfg.act_rows
    if step < 1:
        raise CompileError(f"quantize(dup=True) needs MCOLS >= 2, not {cfg.MCOLS}")
    hold = _ActHold()
    chunks = []
    for r0 in builtins.range(0, src.rows, step):
        rows = min(step, src.rows - r0)
        chunk = Chunk(r0, rows)
        kb0 = 0
        for ab, n, token in b.act_alloc(kb, hold, contiguous=row):
            base = src.base + r0 * src.rs + kb0 * cfg.D
            reads = [Access(TMEM, base, (rows - 1) * src.rs + n * cfg.D)]
            if cs is not None:
                reads.append(Access(TMEM, Affine(cs + kb0 * cfg.D), n * cfg.D))
            if rs is not None:
                reads.append(Access(TMEM, Affine(rs + r0), rows))
            b.emit(Node("QACT", {"src": base},
                        {"rows": rows, "ab": ab, "kb": n, "srs": src.drs if src.rows > 1 else src.cols,
                         "cscale_addr": cs + kb0 * cfg.D if cs is not None else 0,
                         "rscale_addr": (rs + r0) if rs is not None else 0,
                         "row": row, "cscale": cs is not None, "rscale": rs is not None, "dup": dup,
                         "sub": suboffsets},
                        reads, [Access(ACT, Affine(ab), n)]))
            chunk.qranges.append(QRange(kb0, ab, n, token))
            kb0 += n
        chunks.append(chunk)
    return Stationary(src.rows, kb, cfg.D, chunks, dup=dup, owner=hold, row=row, suboffsets=suboffsets)


def quant_mode_for(x: Tile, w: QTensor) -> dict:
    """The `quantize` keywords weight w wants for activations x: one scale per row with sub-block
    offsets for the seed formats (their exact path uses the offsets), DUP (for MM PAIR) for a
    4-bit weight when the target has PAIR and the rows fit half the MXU columns."""
    cfg = current().cfg
    dup = cfg.PAIR and w.four_bit and 2 * x.rows <= cfg.MCOLS and _pair_aligned(w)
    return {"suboffsets": w.wf in WF_SEED, "dup": dup}


def quantize_for(x: Tile, w: QTensor) -> Stationary:
    """quantize x the way weight w wants it (`quant_mode_for`)."""
    return quantize(x, **quant_mode_for(x, w))


def _pair_aligned(w: QTensor) -> bool:
    """MM PAIR reads scale words in pairs: the scale address and stride must be 8-aligned."""
    if w.scale is None:
        return True
    return w.srs % 8 == 0 and w.scale.const % 8 == 0 and \
        all(c * getattr(v, "align", 1) % 8 == 0 for v, c in w.scale.terms.items())


def _check_held(a: Stationary) -> None:
    act = current().act
    for ch in a.chunks:
        for q in ch.qranges:
            if not act.holds(q.ab, q.kb, q.token):
                raise CompileError("stationary operand was overwritten in ACT RAM")


def dot(a, w: QTensor, *, out: Tile | None = None, acc: Tile | None = None, rowmax: bool = False,
        acc_scale: Tile | None = None) -> Tile:
    """a[M, K] @ w[N, K]^T as MMs: one per act_rows row chunk and per ACT block range of `a`.

    `acc=` accumulates into a tile (MM ACC); `acc_scale=alpha` (M,) rescales it first (MM
    ASCALE; needs an unscaled weight). `rowmax=True` sets RMAX on the last MM; the maxima are
    `result.rowmax`.
    """
    b = current()
    cfg = b.cfg
    if not isinstance(w, QTensor):
        raise CompileError("dot needs a QTensor weight")
    if isinstance(a, Tile):
        a = quantize_for(a, w)
    if not isinstance(a, Stationary):
        raise CompileError("dot needs a quantized activation (or a tile)")
    if w.wf in WF_SEED and not a.row:
        raise CompileError("the seed weight formats (int8x, fp4x6) need activations quantized with one scale "
                           "per row: quantize(x, row=True) or quantize(x, suboffsets=True)")
    if w.wf not in WF_SEED and a.suboffsets:
        raise CompileError("activations quantized with sub-block offsets (suboffsets=True) multiply only the "
                           "seed weight formats (int8x, fp4x6); quantize without suboffsets for this weight")
    if w.kb != a.KB:
        raise CompileError(f"shape mismatch in dot: activation of shape {a.shape} and weight of shape {w.shape}")
    _check_held(a)
    M, N = a.M, w.N
    if N > 0xFFFF:
        raise CompileError(f"dot: N={N} rows in one MM; chunk the weight rows (at most 65535)")
    if acc is not None and out is not None:
        raise CompileError("dot takes out= or acc=, not both")
    if acc_scale is not None:
        if acc is None or w.scale is not None:
            raise CompileError("acc_scale needs acc= and an unscaled (UNIT) weight")
        if M > cfg.MCOLS:
            raise CompileError(f"acc_scale needs at most MCOLS={cfg.MCOLS} rows, not {M}")
    if rowmax and M > cfg.MCOLS:
        raise CompileError(f"rowmax needs at most MCOLS={cfg.MCOLS} rows, not {M}")
    target = acc if acc is not None else out
    if target is None:
        if M > 1 and N % 2 == 0:
            target = new_tile((M, N), N + 1, spare=M)
        else:
            target = new_tile((M, N) if M > 1 else (N,), spare=M)
        target.spare = M
    if (target.rows, target.cols) != (M, N):
        raise CompileError(f"shape mismatch in dot: result of shape {(M, N)} into a tile of shape {target.shape}")
    if rowmax and getattr(target, "spare", 0) < M:
        raise CompileError("rowmax needs the output tile's spare words: let dot allocate it, or use ol.empty")
    ors = target.rs if target.ndim == 2 else N
    if ors > 0xFFFF:
        raise CompileError(f"dot: an output row stride of {ors} words does not fit MM's 16-bit field; chunk N")
    if M > 1 and ors % 2 == 0:
        raise CompileError(f"dot: output rows {ors} words apart land in the same TMEM banks (the card stops on "
                           f"an MXU write bank conflict)", hint="allocate the output with ol.empty (odd row stride)")
    maxima = Tile(target.buf, target.base + M * ors, (M,))
    bb = w.block_bytes()
    mms = [(ch, qi, q) for ch in a.chunks for qi, q in enumerate(ch.qranges)]
    pair = a.dup and w.four_bit and _pair_aligned(w) and all(q.kb0 % 2 == 0 for _, _, q in mms)
    node = None
    for i, (ch, qi, q) in enumerate(mms):
        first_of_chunk = qi == 0
        ascale = acc_scale is not None and first_of_chunk
        accumulate = acc is not None or not first_of_chunk
        last = i == len(mms) - 1
        out_base = target.base + ch.r0 * ors
        sa = w.data + q.kb0 * bb
        if ascale:
            ssa = acc_scale.base + ch.r0
        elif w.scale is not None:
            ssa = w.scale + 4 * q.kb0
        else:
            ssa = Affine(0)
        reads = [Access(DRAM, sa, (N - 1) * w.rs + w.row_bytes(q.kb)), Access(ACT, Affine(q.ab), q.kb)]
        if w.scale is not None:
            reads.append(Access(DRAM, ssa, (N - 1) * w.srs + 4 * q.kb))
        out_words = (ch.rows - 1) * ors + N
        if accumulate:
            reads.append(Access(TMEM, out_base, out_words))
        if ascale:
            reads.append(Access(TMEM, ssa, ch.rows))
        writes = [Access(TMEM, out_base, out_words)]
        rmax = rowmax and last
        if rmax:
            writes.append(Access(TMEM, maxima.base, M))
        node = b.emit(Node("MM", {"sa": sa, "ssa": ssa, "out": out_base},
                           {"n": N, "kb": q.kb, "rs": w.rs, "ors": ors, "m": ch.rows, "ab": q.ab, "srs": w.srs,
                            "wf": w.wf, "unit": w.scale is None, "acc": accumulate, "rmax": rmax,
                            "ascale": ascale, "pair": pair}, reads, writes))
    target.buf.version += 1
    target.producer = target.fusion = None
    if rowmax:
        target._rowmax = maxima
    elif len(mms) == 1 and getattr(target, "spare", 0) >= M and M <= cfg.MCOLS:
        target.rowmax_of = (node, target.buf.version, maxima)
    return target


# -- elementwise --------------------------------------------------------------------------------
def exp2(x: Tile, out: Tile | None = None) -> Tile:
    if out is None and _unnamed(sys.getrefcount(x)) and peephole.exp2sub(x):
        return x
    return vector.unary(VFunc.EXP2, x, out)


def log2(x: Tile, out: Tile | None = None) -> Tile: return vector.unary(VFunc.LOG2, x, out)


def recip(x: Tile, out: Tile | None = None) -> Tile: return vector.unary(VFunc.RECIP, x, out)


def rsqrt(x: Tile, out: Tile | None = None) -> Tile: return vector.unary(VFunc.RSQRT, x, out)


def abs(x: Tile, out: Tile | None = None) -> Tile: return vector.unary(VFunc.ABS, x, out)


def copy(x: Tile, out: Tile | None = None) -> Tile: return vector.unary(VFunc.COPY, x, out)


def maximum(x, y, out: Tile | None = None) -> Tile: return vector.binary("max", x, y, out)


def minimum(x, y, out: Tile | None = None) -> Tile: return vector.binary("min", x, y, out)


def silu(x: Tile) -> Tile:
    """x * recip(1 + exp2(-x * log2 e)) (exactly -0 for very negative x, as recip(inf) is 0)."""
    return x * recip(exp2(x * -LOG2E) + 1.0)


# -- reductions ---------------------------------------------------------------------------------
def _axis(x, axis) -> None:
    if axis not in (-1, 1 if isinstance(x, Tile) and x.ndim == 2 else 0):
        raise CompileError(f"reductions run along the last axis only, not axis={axis}")


def sum(x: Tile, axis: int = -1, out: Tile | None = None) -> Tile:
    unnamed = _unnamed(sys.getrefcount(x))
    _axis(x, axis)
    if unnamed:
        fused = peephole.reduce_sum(x)
        if fused is not None:
            func, a, bb, brs, bmode, b_acc = fused
            return vector.reduce(func, a, b=bb, brs=brs, bmode=bmode, b_access=b_acc, out=out)
    return vector.reduce(VFunc.RSUM, x, out=out)


def max(x: Tile, axis: int = -1, out: Tile | None = None) -> Tile:
    _axis(x, axis)
    if out is None:
        maxima = peephole.rowmax(x)
        if maxima is not None:
            return maxima
    return vector.reduce(VFunc.RMAX, x, out=out)


def argmax(x: Tile, base=0, out: Tile | None = None) -> Tile:
    """Per row: (max, index + base) as fp32 pairs; `base` may be affine (a chunk offset)."""
    if out is None:
        out = new_tile((2,) if x.ndim == 1 else (x.rows, 2))
    node = vector.emit_vop(VFunc.ARGMAX, out, x, x.rows, x.cols, imm=Affine.of(base),
                           drs=out.rs if x.rows > 1 else 0, out_words=(x.rows - 1) * out.rs + 2)
    out.producer, out.fusion = node, None
    return out


# -- loops and variables ------------------------------------------------------------------------
def range(n):
    """A hardware LOOP: the body is traced once; yields the induction variable (for affine addresses).
    A static count <= 0 traces nothing."""
    b = current()
    if isinstance(n, int) and n <= 0:
        return
    loop = b.begin_loop(n)
    try:
        yield loop
    finally:
        b.end_loop()


static_range = builtins.range


def runvar(name: str) -> RunVar:
    """A value the host passes at run time (an argument register); use it in affine addresses."""
    return current().runvar(name)


def rld(word: Tile, *, raw: bool = False, scale: int = 1) -> DevVar:
    """RLD a TMEM word into a register: f2i (or its raw bits), times `scale`; usable as an address term."""
    if word.rows * word.cols != 1:
        raise CompileError(f"rld reads one word, not a tile of shape {word.shape}")
    b = current()
    v = DevVar(f"dev{len(b.devvars)}", align=(int(scale) if scale > 0 else -int(scale)) or 1)
    b.devvars.append(v)
    node = Node("RLD", {"addr": word.base}, {"raw": raw, "scale": int(scale), "var": v},
                [Access(TMEM, word.base, 1)], [])
    b.emit(node)
    v.node = node
    return v


# -- host handshakes and program chaining --------------------------------------------------------
WAITW_CMP = {"eq": 0, "ne": 1, "ge": 2}


def waitw(word: Tensor, dst: Tile, ref=0, cmp: str = "ne", mask: int = 0xFFFFFFFF, interval: int = 64,
          timeout: int = 0) -> None:
    """WAITW: poll the DRAM word until `(word & mask) cmp ref` holds, then copy it into `dst` (one
    TMEM word): a mailbox the host writes while the program runs. `ref` is a constant or a device
    value (`rld(..., raw=True)`: a word the program computed)."""
    if word.cols != 1 or len(word.shape) != 1 or dst.rows * dst.cols != 1:
        raise CompileError(f"waitw polls one DRAM word into one TMEM word, not {word.shape} into {dst.shape}")
    if cmp not in WAITW_CMP:
        raise CompileError(f"waitw compare {cmp!r}: one of {', '.join(WAITW_CMP)}")
    current().emit(Node("WAITW", {"addr": word.base, "dst": dst.base, "ref": Affine(ref & 0xFFFFFFFF) if isinstance(ref, int) else Affine.of(ref)},
                        {"mask": mask, "interval": interval, "timeout": timeout, "cmp": WAITW_CMP[cmp]},
                        [Access(DRAM, word.base, 4)], [Access(TMEM, dst.base, 1)]))
    dst.buf.version += 1
    dst.producer = dst.fusion = None


def halt_chain(addr: DevVar, length: DevVar) -> None:
    """End the program with HALT CHAIN: the card loads the program image at DRAM byte address
    `addr` (`length` instructions, both device values from `rld`) and runs it in the same run."""
    b = current()
    if not isinstance(addr, DevVar) or not isinstance(length, DevVar):
        raise CompileError("halt_chain takes the program address and length as device values (ol.rld)")
    if b.loops:
        raise CompileError("halt_chain ends the program: call it outside every loop")
    b.chain = (addr, length)


# -- KV cache -----------------------------------------------------------------------------------
@dataclass(eq=False)
class KVCache:
    """One head's cache: K token-major int8 [cap, d] with fp32 scales per (token, D-block); V^T
    dim-major int8 [d, cap] with one fp32 scale per token. Addresses in bytes; cap a multiple of D."""
    k: Affine
    k_scale: Affine
    vt: Affine
    v_scale: Affine
    cap: int
    d: int

    def __post_init__(self):
        self.k, self.k_scale, self.vt, self.v_scale = (Affine.of(a) for a in (self.k, self.k_scale, self.vt, self.v_scale))

    def keys(self, t0, n: int, D: int) -> QTensor:
        """Tokens [t0, t0+n) of K as MM weight rows."""
        return QTensor(self.k + t0 * self.d, self.k_scale + t0 * 4 * (self.d // D), (n, self.d),
                       self.d, 4 * (self.d // D), 0, D)

    def values_t(self, t0, n: int, D: int) -> QTensor:
        """V^T columns [t0, t0+n) (n a multiple of D) as MM weight rows, unscaled."""
        return QTensor(self.vt + t0, None, (self.d, n), self.cap, 0, 0, D)

    def value_scales(self, t0, n: int) -> Tensor:
        return Tensor(self.v_scale + 4 * t0, (n,))


def shift(obj, delta):
    """A DRAM layout (Tensor, QTensor or KVCache; a list of them) moved by `delta` bytes (affine):
    the same data in another identical block, e.g. layer l's at l * stride."""
    delta = Affine.of(delta)
    if isinstance(obj, Tensor):
        return Tensor(obj.base + delta, obj.shape, obj.rs)
    if isinstance(obj, QTensor):
        return dataclasses.replace(obj, data=obj.data + delta, scale=None if obj.scale is None else obj.scale + delta)
    if isinstance(obj, KVCache):
        return KVCache(obj.k + delta, obj.k_scale + delta, obj.vt + delta, obj.v_scale + delta, obj.cap, obj.d)
    if isinstance(obj, (list, tuple)):
        return [shift(o, delta) for o in obj]
    raise CompileError(f"shift moves DRAM layouts, not a {type(obj).__name__}")


def kv_append(kv: KVCache, pos, k: Tile, v: Tile) -> None:
    """Two QSTs: K as token row `pos` (per-block scales), V as column `pos` of V^T (one scale)."""
    kv_append_k(kv, pos, k)
    kv_append_v(kv, pos, v)


def _kv_check(kv: KVCache, name: str, t: Tile) -> None:
    if t.rows * t.cols != kv.d:
        raise CompileError(f"shape mismatch in kv_append: {name} of shape {t.shape}, head dim {kv.d}")


def kv_append_k(kv: KVCache, pos, k: Tile) -> None:
    """One QST: K as token row `pos` of the token-major K, with its per-block scales."""
    b = current()
    _kv_check(kv, "k", k)
    pos = Affine.of(pos)
    kb = kv.d // b.cfg.D
    kdst, ksd = kv.k + pos * kv.d, kv.k_scale + pos * (4 * kb)
    b.emit(Node("QST", {"src": k.base, "dst": kdst, "sdst": ksd},
                {"rows": 1, "kb": kb, "srs": kv.d, "drs": kv.d, "es": 1, "row": False, "half": False},
                [Access(TMEM, k.base, kv.d)], [Access(DRAM, kdst, kv.d), Access(DRAM, ksd, 4 * kb)]))


def kv_append_v(kv: KVCache, pos, v: Tile, half: bool = False) -> None:
    """One QST: V as column `pos` of the dim-major V^T (element stride = capacity), one scale (the
    slow byte-strided store: a program places it where its cost overlaps other work). `half`: V's
    second half is zero padding (a padded head's real dims first): HALF writes only the first
    half's rows of V^T (the scale is the whole row's, the same), the rest keeps the zeros the
    image wrote, so P.V^T reads the same bytes."""
    b = current()
    _kv_check(kv, "v", v)
    pos = Affine.of(pos)
    kb = kv.d // b.cfg.D
    written = kv.d // 2 if half else kv.d
    vdst, vsd = kv.vt + pos, kv.v_scale + 4 * pos
    b.emit(Node("QST", {"src": v.base, "dst": vdst, "sdst": vsd},
                {"rows": 1, "kb": kb, "srs": kv.d, "drs": 1, "es": kv.cap, "row": True, "half": half},
                [Access(TMEM, v.base, kv.d)],
                [Access(DRAM, vdst, (written - 1) * kv.cap + 1), Access(DRAM, vsd, 4)]))


__all__ = ["LOG2E", "LN2", "config", "block_size", "mxu_columns", "act_rows", "empty", "full", "zeros",
           "load", "store", "quantize", "quantize_for", "quant_mode_for", "dot", "exp2", "log2", "recip", "rsqrt", "abs", "copy", "maximum",
           "minimum", "silu", "sum", "max", "argmax", "range", "static_range", "runvar", "rld", "KVCache",
           "kv_append", "kv_append_k", "kv_append_v", "shift", "waitw", "halt_chain"]
