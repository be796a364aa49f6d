"""Card power estimated from unit utilisation, for cards whose power nobody measures.

A power model is a fixed part plus, per unit, the dynamic watts the unit draws when busy all
the time; the estimate is fixed_w + sum(unit_w * clamp(util, 0, 1)) over the units, each
scaled by the free-running counter that says how busy it was (a counter missing from the
sample counts as fully busy, so the estimate errs high). Models come from a `power.json`
(format "openTPU-power", version 1, written from the Vivado power report of the build) or,
without one, from the board figures below, which are marked as such in every estimate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .errors import UsageError

FORMAT, VERSION = "openTPU-power", 1

# The counter whose utilisation scales each unit's dynamic power ("DRAM" is beats per cycle).
UNIT_COUNTER = {"MXU": "MXU_BUSY", "VPU": "VPU_BUSY", "QNT": "QNT_BUSY", "DMA": "DMA_BUSY",
                "TMEM": "RUNNING", "SEQ": "RUNNING", "DRAM": "DRAM"}

# Board figures used without a power report: a 6.0 W design of which 2.95 W is unit dynamic power.
BOARD_FIXED_W = 3.05
BOARD_UNITS_W = {"MXU": 1.20, "VPU": 0.35, "QNT": 0.15, "DMA": 0.20, "TMEM": 0.35, "SEQ": 0.10, "DRAM": 0.60}


@dataclass(frozen=True)
class PowerModel:
    fixed_w: float
    units: Mapping[str, float]
    max_w: float
    source: str

    def estimate(self, util: Mapping[str, float]) -> "PowerEstimate":
        per_unit = {}
        for unit, watts in self.units.items():
            u = util.get(UNIT_COUNTER.get(unit, unit))
            per_unit[unit] = watts * (1.0 if u is None else min(max(float(u), 0.0), 1.0))
        return PowerEstimate(self.fixed_w + sum(per_unit.values()), self.fixed_w, self.max_w, per_unit, self.source)


@dataclass(frozen=True)
class PowerEstimate:
    w: float
    fixed_w: float
    max_w: float
    units: dict[str, float] = field(default_factory=dict)
    source: str = ""

    def as_dict(self) -> dict:
        return {"w": round(self.w, 3), "fixed_w": self.fixed_w, "max_w": self.max_w,
                "units": {k: round(v, 3) for k, v in self.units.items()}, "source": self.source}


def board_model() -> PowerModel:
    return PowerModel(BOARD_FIXED_W, dict(BOARD_UNITS_W), BOARD_FIXED_W + sum(BOARD_UNITS_W.values()),
                      "board figures (no power report)")


def load(path: str | Path | None) -> PowerModel | None:
    """The model of a power.json; None when the file does not exist. A malformed file is a usage error."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        return None
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{p}: not a readable power report: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise UsageError(f"{p}: not an {FORMAT} version {VERSION} file",
                         hint="write one from the build's Vivado power report")
    try:
        units = {str(k): float(v) for k, v in doc["units"].items()}
        total = float(doc["total_w"])
        fixed = float(doc.get("fixed_w", total - sum(units.values())))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{p}: power report lacks total_w or units ({e})") from None
    return PowerModel(fixed, units, total, f"power report {p.name}")


def model(path: str | Path | None = None) -> PowerModel:
    """The report's model if there is one, else the board figures."""
    return load(path) or board_model()
