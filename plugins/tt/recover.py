"""The recovery ladder of `otpu-tt core recover`: lowest rung first, probe after each, climb while bad.

  1 stop          ask the resident kernel to stop (stop request + STOP sentinel)
  2 soft-reset    per-RISC soft reset (after a stop request: never reset a kernel blocked in a wait
                  that was not asked to stop; that is what wedges tiles)
  3 tile-reset    single-tile reset through ARC (message 0xAE, firmware >= 19.9.0)
  4 tensix-reset  all-Tensix reset through ARC (FORCE_AICLK 250, 0xAF, REINIT 0x20, RISCs held)
  5 asic-reset    ASIC reset under the advisory lock, find the card by PCI address, POST_RESET
  6 pcie-sbr      PCIe secondary bus reset, then the ASIC reset of rung 5
  7 power-cycle   the honest answer: nothing software can do (not an action the tool takes)

Rungs 3 to 6 touch more than the core (or need ARC and a quiet card) and run only with
`yes=True`; without it the ladder stops and reports what it would do, and that rung 7 comes
after them as an answer, not as something `--yes` would run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from otpu_core.errors import OtpuError
from otpu_core.tt import consts as K
from otpu_core.tt import layout as L
from otpu_core.tt.arc import ArcError
from otpu_core.tt.card import Card
from otpu_core.tt.coords import TENSIX, Tile
from otpu_core.tt.noc import LinkLost
from otpu_core.tt.probe import CoreState, probe_many
from otpu_core.tt.queue import ask_to_stop, read_ctrl

CARD = Tile("card", 0, 0, (-1, -1))     # the whole card, when the NoC cannot tell cores apart


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    action: str
    needs_yes: bool
    chip_wide: bool


RUNGS = (
    Rung(1, "stop", "ask the resident kernel to stop (stop request and STOP sentinel)", False, False),
    Rung(2, "soft-reset", "per-RISC soft reset (SOFT_RESET_0 = 0x47800), RISCs left held", False, False),
    Rung(3, "tile-reset", "single-tile reset through ARC (message 0xAE)", True, False),
    Rung(4, "tensix-reset", "all-Tensix reset through ARC (0x33 250 MHz, 0xAF, 0x20, RISCs held)", True, True),
    Rung(5, "asic-reset", "ASIC reset under the advisory lock, find the card by PCI address, POST_RESET", True, True),
    Rung(6, "pcie-sbr", "PCIe secondary bus reset, then ASIC reset and POST_RESET", True, True),
    Rung(7, "power-cycle", "nothing software can do: the host needs a power cycle", False, True),
)
TOP_RUNG = RUNGS[-1].number


@dataclass
class Step:
    rung: int
    name: str
    targets: list[str]
    result: str
    seconds: float
    fixed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict: return vars(self)


@dataclass
class Report:
    before: list[CoreState]
    steps: list[Step] = field(default_factory=list)
    after: list[CoreState] = field(default_factory=list)
    fixed_at: int | None = None
    needs_yes: list[Rung] = field(default_factory=list)
    then_power_cycle: bool = False      # the plan that stopped for --yes would end at rung 7

    @property
    def recovered(self) -> bool: return all(s.healthy for s in self.after)

    def as_dict(self) -> dict:
        return {"recovered": self.recovered, "fixed_at_rung": self.fixed_at,
                "before": [s.as_dict() for s in self.before], "steps": [s.as_dict() for s in self.steps],
                "after": [s.as_dict() for s in self.after],
                "needs_yes": [{"rung": r.number, "name": r.name, "action": r.action} for r in self.needs_yes],
                "then_power_cycle": self.then_power_cycle}


class Ladder:
    """Climb the rungs for some cores of one open card."""

    def __init__(self, card: Card, max_rung: int = TOP_RUNG, yes: bool = False, settle: float = 2.0,
                 interval: float = 0.02, stop_timeout: float = 0.5, say: Callable[[str], None] = lambda s: None):
        self.card, self.max_rung, self.yes, self.settle = card, max_rung, yes, settle
        self.interval, self.stop_timeout, self.say = interval, stop_timeout, say

    def _probe(self, xys: list[tuple[int, int]] | None) -> list[CoreState]:
        """Probe the cores at `xys`, or every live Tensix when None."""
        card = self.card
        if card.broken is not None:
            # Without the NoC there is no telemetry: the whole card is one bad target.
            state = "link lost" if isinstance(card.broken, LinkLost) else "chip hung"
            targets = xys if xys is not None else ([(t.x, t.y) for t in card.tiles.tensix] if card.tiles else [])
            tiles = [Tile(TENSIX, x, y, (-1, -1)) for x, y in targets] or [CARD]
            return [CoreState(t, state, card.broken.message) for t in tiles]
        tiles = card.tiles.tensix if xys is None else [card.tiles.tile(TENSIX, x, y) for x, y in xys]
        return probe_many(card.noc, tiles, self.interval)

    def run(self, xys: list[tuple[int, int]] | None = None) -> Report:
        """Recover the cores at `xys` (translated), or every live Tensix when None."""
        everyone = xys is None
        report = Report(before=self._probe(xys))
        bad = [s for s in report.before if not s.healthy]
        report.after = list(report.before)
        if not bad:
            return report
        for rung in RUNGS:
            if rung.number > self.max_rung:
                break
            if rung.needs_yes and not self.yes:
                report.needs_yes = [r for r in RUNGS if rung.number <= r.number <= self.max_rung and r.needs_yes]
                report.then_power_cycle = self.max_rung >= TOP_RUNG
                break
            targets = [_name(s.tile) for s in bad]
            self.say(f"rung {rung.number} ({rung.name}) on {', '.join(targets) if len(targets) < 6 else f'{len(targets)} cores'}")
            t0 = time.monotonic()
            result = self._apply(rung, bad)
            if result is not None:
                still = bad
            elif everyone and (rung.chip_wide or self.card.broken is not None):
                still = [s for s in self._probe(None) if not s.healthy]
            else:
                still = [s for s in self._probe([(s.tile.x, s.tile.y) for s in bad]) if not s.healthy]
            seconds = time.monotonic() - t0
            left = {_name(s.tile) for s in still}
            fixed = [t for t in targets if t not in left and t != _name(CARD)]
            if result is None:
                result = "fixed" if not still else f"still bad: {_states(still)}"
            report.steps.append(Step(rung.number, rung.name, targets, result, seconds, fixed))
            bad = still
            if not bad:
                report.fixed_at = rung.number
                break
        report.after = bad if self._dead(bad) else self._probe(xys)
        return report

    @staticmethod
    def _dead(states: list[CoreState]) -> bool:
        return any(s.state in ("chip hung", "link lost") for s in states)

    # ---- rungs -------------------------------------------------------------------------------
    def _apply(self, rung: Rung, bad: list[CoreState]) -> str | None:
        """Do one rung. Returns a result text when the rung could not run (then nobody is re-probed)."""
        states = {s.state for s in bad}
        if "link lost" in states and rung.number < 7:
            return "skipped: the PCIe link is gone"
        if "chip hung" in states and rung.number < 5:
            return "skipped: the NoC is hung and this rung needs it"
        try:
            if rung.number == 1:
                return self._stop(bad)
            if rung.number == 2:
                return self._soft_reset(bad)
            if rung.number == 3:
                return self._tile_reset(bad)
            if rung.number == 4:
                return self._tensix_reset()
            if rung.number in (5, 6):
                self._quiesce()
                with self.card.exclusive():
                    self.card.asic_reset(settle=self.settle, sbr=rung.number == 6)
                return None
            return "needs a power cycle"
        except OtpuError as e:
            return f"failed: {e.message}"

    def _kernel_present(self, tile: Tile) -> tuple[int, ...] | None:
        """The control block of a resident kernel on the tile, if one is there."""
        noc = self.card.noc
        if noc.read32(tile, K.SOFT_RESET_0) >> K.RISC_BITS["brisc"] & 1:
            return None
        if noc.read32(tile, L.GO_WORD) >> 24 != K.RUN_MSG_GO:
            return None
        ctrl = read_ctrl(noc, tile)
        return ctrl if ctrl[L.C_STATE] in (L.QSTATE_POLLING, L.QSTATE_BLOCKED) else None

    def _ask_to_stop(self, tile: Tile) -> bool:
        ctrl = self._kernel_present(tile)
        if ctrl is not None:
            ask_to_stop(self.card.noc, tile, ctrl)
        return ctrl is not None

    def _stop(self, bad: list[CoreState]) -> str | None:
        asked = [s.tile for s in bad if s.state not in ("unresponsive",) and self._ask_to_stop(s.tile)]
        if not asked:
            return "nothing to stop: no resident kernel on these cores"
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline:
            if all(self._kernel_present(t) is None for t in asked):
                break
            time.sleep(0.005)
        return None

    def _soft_reset(self, bad: list[CoreState]) -> str | None:
        reachable = [s.tile for s in bad if s.state != "unresponsive"]
        if not reachable:
            return "skipped: the tile does not answer, a soft reset cannot reach it"
        noc = self.card.noc
        for tile in reachable:
            self._ask_to_stop(tile)          # the rule: ask before any reset
            noc.write32(tile, K.SOFT_RESET_0, noc.read32(tile, K.SOFT_RESET_0) | K.RISC_ALL)
        return None

    def _tile_reset(self, bad: list[CoreState]) -> str | None:
        try:
            for s in bad:
                resp = self.card.arc.send(K.MSG["TOGGLE_SINGLE_TENSIX_RESET"], s.tile.x | (s.tile.y << 8))
                if resp[1] == 1:
                    return f"failed: ARC refused coordinate {s.tile}"
        except ArcError as e:
            return f"failed: {e.message} (single-tile reset needs firmware 19.9.0)"
        return None

    def _tensix_reset(self) -> str | None:
        card, noc, M = self.card, self.card.noc, K.MSG
        self._quiesce()
        card.arc.send(M["FORCE_AICLK"], 250)
        try:
            for i in range(8):
                noc.write32(card.tiles.arc, K.TENSIX_RISC_RESET + 4 * i, 0)
            card.arc.send(M["TOGGLE_TENSIX_RESET"])
            card.arc.send(M["REINIT_TENSIX"])
            for tile in card.tiles.tensix:
                noc.write32(tile, K.SOFT_RESET_0, K.RISC_ALL)
            for i in range(8):
                noc.write32(card.tiles.arc, K.TENSIX_RISC_RESET + 4 * i, 0xFFFFFFFF)
        finally:
            card.arc.send(M["FORCE_AICLK"], 0)
        return None

    def _quiesce(self) -> None:
        """Before a chip-wide rung: ask every resident kernel on the card to stop, then give them a moment."""
        if self.card.broken is not None:
            return                             # no NoC: nobody can be asked
        try:
            asked = [t for t in self.card.tiles.tensix if self._ask_to_stop(t)]
        except OtpuError:
            return                             # NoC hung: nobody can be asked
        deadline = time.monotonic() + self.stop_timeout
        while asked and time.monotonic() < deadline:
            asked = [t for t in asked if self._kernel_present(t) is not None]
            time.sleep(0.005)


def _name(tile: Tile) -> str:
    return "card" if tile is CARD else f"{tile.x},{tile.y}"


def _states(states: list[CoreState]) -> str:
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in counts.items())
