"""Tiles and their coordinates, derived only from ARC telemetry and the harvesting mask.

A `Tile` is the only way to name an endpoint to `noc`: tools get one from `TileMap.tile`, which
refuses (UsageError naming x, y and why) any coordinate that is not a live tile of the asked
kind. Nothing here probes the chip: a wrong endpoint does not fail a read, it hangs the NoC.

With NOC translation on (the firmware's default for p150a), coordinates are translated as the
firmware programs them (tt-zephyr-platforms lib/tenstorrent/bh_arc/noc_init.c
ComputeNocTranslation; tt-umd device/coordinates/blackhole_coordinate_manager.cpp agrees): live
Tensix columns fill translated x 1..7 then 10..16 in ascending NOC0-x order and the harvested
ones take 16, 15, ... lowest physical column index first; rows 2..11 are unchanged. DRAM
controllers fill x 17 (west) and 18 (east), three y per bank from 12 in bank order, except that
a harvested bank's row moves to the end (y 21..23) and, when it is a west bank, the two columns
swap. The PCIe endpoint is (19, 24); ARC stays at (8, 0). With translation off, every tile is
addressed at its NOC0 coordinates. The PCIe tile also answers at NOC0 (x, 0) either way (rows 0
and 1 are masked from column translation), which is where hang detection reads it, as tt-umd's
blackhole_hang_detector.cpp does.
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
    dead_phys = [i for i in range(K.TENSIX_COLS_DIE) if not enabled_cols >> i & 1]     # lowest index first
    table = {K.TRANSLATED_TENSIX_X[k]: x0 for k, x0 in enumerate(live)}
    dead_tx = [K.TRANSLATED_TENSIX_X[-1 - k] for k in range(len(dead_phys))]
    table.update({tx: K.PHYS_COL_X[i] for tx, i in zip(dead_tx, dead_phys)})
    return table, dead_tx


def dram_noc0(bank: int, port: int) -> tuple[int, int]:
    return K.DRAM_NOC0_X[bank // 4], K.DRAM_NOC0_Y[bank % 4][port]


def dram_translation(enabled_gddr: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(bank, port) -> translated (x, y) for every bank, harvested or not (the firmware handles one
    harvested bank: the lowest disabled one)."""
    bad = next((b for b in range(K.DRAM_BANKS) if not enabled_gddr >> b & 1), None)
    west_x = K.DRAM_TRANSLATED_X[1] if bad is not None and bad < 4 else K.DRAM_TRANSLATED_X[0]
    rows = [0, 1, 2, 3]
    if bad is not None:
        rows.remove(bad % 4)
        rows.append(bad % 4)
    east_x = sum(K.DRAM_TRANSLATED_X) - west_x
    return {(b, p): (west_x if b < 4 else east_x, K.DRAM_TRANSLATED_Y0 + 3 * rows.index(b % 4) + p)
            for b in range(K.DRAM_BANKS) for p in range(K.DRAM_PORTS)}


def physical_index(noc0_x: int, y: int) -> int:
    return K.PHYS_COL_X.index(noc0_x) * len(K.TENSIX_ROWS) + (y - K.TENSIX_ROWS[0])


class TileMap:
    """The endpoints of one card, built from its telemetry values."""

    def __init__(self, enabled_tensix_cols: int, enabled_gddr: int = 0xFF, translation: bool = True,
                 pcie_instance: int = 0):
        self.enabled_tensix_cols, self.enabled_gddr, self.translation = enabled_tensix_cols, enabled_gddr, translation
        table, dead_tx = tensix_translation(enabled_tensix_cols)
        if not translation:
            table = {x0: x0 for x0 in table.values()}
            dead_tx = [K.PHYS_COL_X[i] for i in range(K.TENSIX_COLS_DIE) if not enabled_tensix_cols >> i & 1]
        self.to_noc0_x = table
        self.harvested_x = sorted(dead_tx)
        self.harvested_noc0_x = [table[x] for x in self.harvested_x]
        live_x = sorted(x for x in table if x not in dead_tx)
        self._tensix = {(x, y): Tile(TENSIX, x, y, (table[x], y), physical_index(table[x], y))
                        for y in K.TENSIX_ROWS for x in live_x}
        self.arc = Tile(ARC, *K.ARC_XY, K.ARC_XY)
        pcie0 = (K.PCIE_NOC0_XY[0] if pcie_instance == 0 else 11, 0)
        self.pcie_noc0 = Tile(PCIE, *pcie0, pcie0)
        self.pcie = Tile(PCIE, *K.PCIE_TRANSLATED_XY, pcie0) if translation else self.pcie_noc0
        translated = dram_translation(enabled_gddr)
        self._dram: dict[tuple[int, int], Tile] = {}
        self._dram_ports: dict[tuple[int, int], Tile] = {}
        for (bank, port), txy in translated.items():
            if enabled_gddr >> bank & 1:
                noc0 = dram_noc0(bank, port)
                x, y = txy if translation else noc0
                self._dram[(x, y)] = self._dram_ports[(bank, port)] = Tile(DRAM, x, y, noc0, bank)

    @classmethod
    def from_telemetry(cls, values: dict[int, int]) -> "TileMap":
        try:
            cols = values[K.TAGS["ENABLED_TENSIX_COL"]]
        except KeyError:
            raise UsageError("telemetry has no ENABLED_TENSIX_COL tag: cannot tell which Tensix are alive",
                             hint="firmware older than the tag is not supported; update the card's firmware bundle") from None
        pcie_usage = values.get(K.TAGS["PCIE_USAGE"], 1)
        return cls(cols & 0x3FFF, values.get(K.TAGS["ENABLED_GDDR"], 0xFF) & 0xFF,
                   bool(values.get(K.TAGS["NOC_TRANSLATION"], 1)), 0 if pcie_usage & 3 == 1 else 1)

    @property
    def tensix(self) -> list[Tile]:
        """Live Tensix in row-major order of their coordinates."""
        return [self._tensix[k] for k in sorted(self._tensix, key=lambda k: (k[1], k[0]))]

    @property
    def tensix_columns(self) -> list[int]:
        return sorted({t.x for t in self._tensix.values()})

    @property
    def dram_banks(self) -> list[int]:
        return sorted({bank for bank, _ in self._dram_ports})

    def dram(self, bank: int, port: int = 0) -> Tile:
        """Port `port` of DRAM bank `bank` (a harvested bank is refused)."""
        tile = self._dram_ports.get((bank, port))
        if tile is None:
            raise UsageError(f"refusing to address DRAM bank {bank} port {port}: "
                             + ("the bank is harvested on this card" if 0 <= bank < K.DRAM_BANKS and 0 <= port < K.DRAM_PORTS
                                else f"banks are 0..{K.DRAM_BANKS - 1}, ports 0..{K.DRAM_PORTS - 1}"),
                             hint=f"enabled banks: {', '.join(map(str, self.dram_banks))}")
        return tile

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
            if (x, y) in ((self.pcie.x, self.pcie.y), (self.pcie_noc0.x, self.pcie_noc0.y)):
                return None
            return f"the PCIe endpoint is at {self.pcie}" + (" (translated)" if self.translation else " (NOC0)")
        if kind == DRAM:
            if (x, y) in self._dram:
                return None
            where = "x 17/18, y 12..23 (translated)" if self.translation else "x 0/9 (NOC0)"
            return f"({x},{y}) is not an enabled DRAM tile ({where})"
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
        if kind == PCIE:
            return self.pcie if (x, y) == (self.pcie.x, self.pcie.y) else self.pcie_noc0
        return self.arc

    def owns(self, tile: Tile) -> bool:
        return self.why_not(tile.kind, tile.x, tile.y) is None

    def as_dict(self) -> dict:
        return {"translation": self.translation, "enabled_tensix_cols": f"0x{self.enabled_tensix_cols:04x}",
                "harvested_x": self.harvested_x, "harvested_noc0_x": self.harvested_noc0_x,
                "live_tensix": len(self._tensix), "tensix_columns": self.tensix_columns,
                "dram_banks": self.dram_banks, "pcie": [self.pcie.x, self.pcie.y],
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
