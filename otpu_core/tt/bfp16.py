"""Tile packing straight from a checkpoint's 16-bit values (F16, BF16), by table lookup.

A 16-bit float has 65536 values, and an element's block-float code depends only on its value
and its face row's shared exponent. So the packer never makes float32 values: a face row's
exponent is that of its largest magnitude (in both formats the low 15 bits order the magnitudes
as integers, so the maximum is taken on the bits), and each element's code is one lookup in a
table indexed by (exponent, bits). A table row is filled on first use, for the exponents a
model has, by `bfp`'s exact packer, the one place the rounding is defined: the bytes are those
of decoding to float32 and calling `bfp.pack_strips`, in a few passes over half the memory.
The tile and face order is `bfp.face_rows` and `bfp.assemble`, shared with the float32 path.
"""
from __future__ import annotations

import threading

import numpy as np

from ..gguf_source import DECODE16
from . import bfp

EXPONENT_SHIFT = 16                       # table index: exponent field << 16 | the 16 bits


class NonFinite(ValueError):
    """A block holds an infinity or a NaN, which no tile format encodes."""


class Bits16:
    """A 16-bit source format: its decode table and its block-float code tables."""

    def __init__(self, decode: np.ndarray):
        self.decode = decode
        magnitudes = decode[:0x8000]
        self.exponent = (magnitudes.view(np.uint32) >> 23).astype(np.uint8)     # float32 exponent field
        self.first_nonfinite = int(np.argmin(np.isfinite(magnitudes)))          # 0x7C00 (F16), 0x7F80 (BF16)
        self._tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def pack_strips(self, bits: np.ndarray, fmt: bfp.TileFormat, transposed: bool) -> np.ndarray:
        """(S*32, C) uint16 patterns to (S, C/32, fmt.tile_bytes) uint8, as `bfp.pack_strips`
        packs their float32 values; raises NonFinite if any is an infinity or a NaN."""
        if not fmt.block_float:
            if int(np.bitwise_and(bits, 0x7FFF).max(initial=0)) >= self.first_nonfinite:
                raise NonFinite
            return bfp.pack_strips(self.decode.take(bits), fmt, transposed)
        S, ct = bits.shape[0] // bfp.TILE, bits.shape[1] // bfp.TILE
        # NMAJOR: a face row runs down 16 rows, `bfp.face_rows` brings it to axis 1 as a view.
        # SOURCE: it is 16 adjacent values; only the magnitudes are transposed (numpy's max is
        # fast across rows, slow along 16 adjacent values), the codes stay in row order.
        if transposed:
            groups = bfp.face_rows(bits, True)
            mag = np.bitwise_and(groups, 0x7FFF, out=bfp.scratch("mag16", groups.shape, np.uint16))
            top, axis = bfp.shared_maxima(mag), 1
        else:
            groups = bits.reshape(-1, bits.shape[1] // bfp.FACE, bfp.FACE)
            across = bits.reshape(S, bfp.TILE, groups.shape[1], bfp.FACE).transpose(0, 3, 1, 2)
            mag = np.bitwise_and(across, 0x7FFF, out=bfp.scratch("mag16", across.shape, np.uint16))
            top, axis = bfp.shared_maxima(mag).reshape(groups.shape[:2]), 2
        if int(top.max(initial=0)) >= self.first_nonfinite:
            raise NonFinite
        exp = self.exponent.take(top)
        table = self._table(fmt.mantissa_bits, exp)
        index = bfp.scratch("index16", groups.shape, np.intp)
        np.copyto(index, groups)          # then OR in place: twice as fast as one mixed-type OR
        index |= np.expand_dims(exp.astype(np.intp) << EXPONENT_SHIFT, axis)
        codes = table.take(index, out=bfp.scratch("codes16", groups.shape, np.uint8))
        return bfp.assemble(codes, exp, fmt, S, ct, transposed, rows=not transposed)

    def _table(self, width: int, exp: np.ndarray) -> np.ndarray:
        """The flat (256 << 16) code table for `width`, with the rows for the exponents in `exp`
        filled (untouched rows cost no memory: the table is zero pages until written)."""
        with self._lock:
            if width not in self._tables:
                self._tables[width] = (np.zeros(256 << EXPONENT_SHIFT, np.uint8), np.zeros(256, bool))
            table, filled = self._tables[width]
            lo, hi = int(exp.min(initial=255)), int(exp.max(initial=0))
            if not filled[lo:hi + 1].all():
                for e in np.unique(exp[~filled.take(exp)]).tolist():
                    table[e << EXPONENT_SHIFT:(e + 1) << EXPONENT_SHIFT] = self._codes_under(e, width)
                    filled[e] = True
            return table

    def _codes_under(self, exp: int, width: int) -> np.ndarray:
        """Every pattern's code in a face row whose shared exponent field is `exp` (patterns
        larger than the row's maximum, and the non-finite ones, never occur there)."""
        values = self.decode.reshape(1, -1, 1)
        with np.errstate(invalid="ignore"):
            codes = bfp.codes_exact(values, np.abs(values), np.full((1, 1), exp, np.int32), width)
        return codes.reshape(-1).copy()


SOURCES = {name: Bits16(decode) for name, decode in DECODE16.items()}
