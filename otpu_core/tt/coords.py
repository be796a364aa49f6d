"""Tiles and their coordinates, derived only from ARC telemetry and the harvesting mask.

A `Tile` is the only way to name an endpoint to `noc`: tools get one from `TileMap.tile`, which
refuses (UsageError naming x, y and why) any coordinate that is not a live tile of the asked
kind. Nothing here probes the chip: a wrong endpoint does not fail a read, it hangs the NoC.

Coordinates are translated (the firmware turns NOC translation on for p150a): live Tensix
columns fill translated x 1..7 then 10..16 in ascending NOC0-x order, harvested columns are
placed from 16 downwards, rows 2..11 are unchanged; DRAM bank b port p is at x 17 + b // 4,
y 12 + 3 * (b % 4) + p; the PCIe endpoint is (19, 24); ARC stays at (8, 0).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from . import consts as K

TENSIX, ARC, DRAM, PCIE = "tensix", "arc", "dram", "pcie"


@dataclass(frozen=True)
class Tile:
    kind: str
    x: int          # the coordinates a TLB is aimed at (translated when translation is on)
    y: int
    noc0: tuple[int, int]
    index: int = 0  # DRAM bank; Tensix physical column * 10 + row - 2

    def __str__(self) -> str: return f"{self.x},{self.y}"


def tensix_translation(enabled_cols: int) -> tuple[dict[int, int], list[int]]:
    """(translated x -> NOC0 x for every column, translated x of the harvested columns)."""
    live = sorted(K.PHYS_COL_X[i] for i in range(K.TENSIX_COLS_DIE) if enabled_cols >> i & 1)
    dead = sorted(K.PHYS_COL_X[i] for i in range(K.TENSIX_COLS_DIE) if not enabled_cols >> i & 1)
    table = {K.TRANSLATED_TENSIX_X[k]: x0 for k, x0 in enumerate(live)}
    dead_tx = [K.TRANSLATED_TENSIX_X[-1 - k] for k in range(len(dead))]
    table.update({tx: x0 for tx, x0 in zip(dead_tx, dead)})
    return table, dead_tx


def physical_index(noc0_x: int, y: int) -> int:
    return K.PHYS_COL_X.index(noc0_x) * len(K.TENSIX_ROWS) + (y - K.TENSIX_ROWS[0])


class TileMap:
    """The endpoints of one card, built from its telemetry values."""

    def __init__(self, enabled_tensix_cols: int, enabled_gddr: int = 0xFF, translation: bool = True):
        self.enabled_tensix_cols, self.enabled_gddr, self.translation = enabled_tensix_cols, enabled_gddr, translation
        table, dead_tx = tensix_translation(enabled_tensix_cols)
        if not translation:
            table = {x0: x0 for x0 in table.values()}
            dead_tx = [K.PHYS_COL_X[i] for i in range(K.TENSIX_COLS_DIE) if not enabled_tensix_cols >> i & 1]
        self.to_noc0_x = table
        self.harvested_x = sorted(dead_tx)
        self.harvested_noc0_x = sorted(table[x] for x in dead_tx)
        live_x = sorted(x for x in table if x not in dead_tx)
        self._tensix = {(x, y): Tile(TENSIX, x, y, (table[x], y), physical_index(table[x], y))
                        for y in K.TENSIX_ROWS for x in live_x}
        self.arc = Tile(ARC, *K.ARC_XY, K.ARC_XY)
        self.pcie = Tile(PCIE, *K.PCIE_TRANSLATED_XY, K.PCIE_NOC0_XY)
        self._dram = {}
        for bank in range(K.DRAM_BANKS):
            if enabled_gddr >> bank & 1:
                for port in range(K.DRAM_PORTS):
                    x, y = K.DRAM_TRANSLATED_X[bank // 4], K.DRAM_TRANSLATED_Y0 + 3 * (bank % 4) + port
                    self._dram[(x, y)] = Tile(DRAM, x, y, (0 if bank < 4 else 9, -1), bank)

    @classmethod
    def from_telemetry(cls, values: dict[int, int]) -> "TileMap":
        try:
            cols = values[K.TAGS["ENABLED_TENSIX_COL"]]
        except KeyError:
            raise UsageError("telemetry has no ENABLED_TENSIX_COL tag: cannot tell which Tensix are alive",
                             hint="firmware older than the tag is not supported; update the card's firmware bundle") from None
        return cls(cols & 0x3FFF, values.get(K.TAGS["ENABLED_GDDR"], 0xFF) & 0xFF,
                   bool(values.get(K.TAGS["NOC_TRANSLATION"], 1)))

    @property
    def tensix(self) -> list[Tile]:
        """Live Tensix in row-major order of their coordinates."""
        return [self._tensix[k] for k in sorted(self._tensix, key=lambda k: (k[1], k[0]))]

    @property
    def tensix_columns(self) -> list[int]:
        return sorted({t.x for t in self._tensix.values()})

    def dram(self, bank: int, port: int = 0) -> Tile:
        return self.tile(DRAM, K.DRAM_TRANSLATED_X[bank // 4], K.DRAM_TRANSLATED_Y0 + 3 * (bank % 4) + port)

    def why_not(self, kind: str, x: int, y: int) -> str | None:
        """None if (x, y) is a live tile of `kind`, else the reason it is not."""
        if kind == TENSIX:
            if (x, y) in self._tensix:
                return None
            if x in self.harvested_x and y in K.TENSIX_ROWS:
                return (f"column x={x} is harvested on this card (NOC0 x {self.to_noc0_x[x]}); "
                        f"live Tensix columns are {_ranges(self.tensix_columns)}")
            return f"({x},{y}) is not a Tensix tile; Tensix are x in {_ranges(self.tensix_columns)}, y in 2..11"
        if kind == ARC:
            return None if (x, y) == K.ARC_XY else f"ARC is at {K.ARC_XY[0]},{K.ARC_XY[1]}, not ({x},{y})"
        if kind == PCIE:
            return None if (x, y) == K.PCIE_TRANSLATED_XY else "the PCIe endpoint is at 19,24 (translated)"
        if kind == DRAM:
            return None if (x, y) in self._dram else f"({x},{y}) is not an enabled DRAM tile (x 17/18, y 12..23)"
        return f"unknown tile kind '{kind}'"

    def tile(self, kind: str, x: int, y: int) -> Tile:
        """The live tile of `kind` at (x, y); refuses anything else before it can be addressed."""
        why = self.why_not(kind, x, y)
        if why is not None:
            raise UsageError(f"refusing to address {kind} tile x={x}, y={y}: {why}",
                             hint="coordinates come from telemetry; `otpu-tt core status` shows the live grid")
        if kind == TENSIX:
            return self._tensix[(x, y)]
        if kind == DRAM:
            return self._dram[(x, y)]
        return self.arc if kind == ARC else self.pcie

    def owns(self, tile: Tile) -> bool:
        return self.why_not(tile.kind, tile.x, tile.y) is None

    def as_dict(self) -> dict:
        return {"translation": self.translation, "enabled_tensix_cols": f"0x{self.enabled_tensix_cols:04x}",
                "harvested_x": self.harvested_x, "harvested_noc0_x": self.harvested_noc0_x,
                "live_tensix": len(self._tensix), "tensix_columns": self.tensix_columns,
                "translated_to_noc0_x": {str(k): v for k, v in sorted(self.to_noc0_x.items())}}


def harvest_label(translated_x: list[int], noc0_x: list[int]) -> str:
    """The harvested columns, translated first (the coordinates every command takes), NOC0 after."""
    def xs(v: list[int]) -> str:
        return ", ".join(map(str, v)) or "none"
    return f"harvested translated x {xs(translated_x)} (NOC0 x {xs(noc0_x)})"


def parse_xy(text: str) -> tuple[int, int]:
    """`X,Y` from the command line."""
    try:
        x, y = (int(v, 0) for v in text.split(","))
    except ValueError:
        raise UsageError(f"'{text}' is not a coordinate", hint="write X,Y, e.g. 1,2 (translated, as `core status` shows)") from None
    return x, y


def _ranges(xs: list[int]) -> str:
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}..{x}" if x != start else str(x))
            start = None
    return ", ".join(out)
