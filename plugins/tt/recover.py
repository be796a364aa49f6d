"""The recovery ladder of `otpu-tt core recover`: lowest rung first, probe after each, climb while bad.

  0 post-reset    finish a reset someone else left: POST_RESET (tt-kmd refuses everything else
                  until it; chardev.c needs_hw_init), only when the card needs it
  1 stop          ask the resident kernel to stop (stop request + STOP sentinel), our firmware only
  2 soft-reset    per-RISC soft reset (after a stop request: never reset a kernel blocked in a wait
                  that was not asked to stop; that is what wedges tiles)
  3 tile-reset    single-tile reset through ARC (message 0xAE, firmware >= 19.9.0); refused when
                  word 0 of the response is nonzero (tt-zephyr-platforms reset.c, msgqueue.c)
  4 tensix-reset  all-Tensix reset through ARC (FORCE_AICLK 250, 0xAF, REINIT 0x20, RISCs held)
  5 asic-reset    ASIC reset on an O_EXCL descriptor, find the card by PCI address, POST_RESET
  6 pcie-sbr      PCIe secondary bus reset with config restore, then the ASIC reset of rung 5
  7 power-cycle   the honest answer: nothing software can do (not an action the tool takes)

Rungs 3 to 6 touch more than the core (or need ARC and a quiet card): they run only with
`yes=True`, and under the card's advisory lock. Rung 3 resets one core, so other users are
named but not refused; rung 4 resets every Tensix, so it waits for (`$OTPU_LOCK_WAIT`) or refuses
other users unless `force=True`, which names whom it affects; rungs 5 and 6 kill every user's
mappings and are refused while anyone else has the card open. A refusal stops the ladder with
"close PID N (command) and retry": climbing on to "needs a power cycle" would be wrong.

Tiles found unresponsive are remembered (`cardmemo`) and read again only by the rungs that can
fix them: each read of a stuck tile is a NoC transaction that never completes.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from otpu_core.errors import DeviceBusy, OtpuError
from otpu_core.tt import consts as K
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card
from otpu_core.tt.coords import TENSIX, Tile
from otpu_core.tt.launch import runs_our_firmware
from otpu_core.tt.noc import LinkLost
from otpu_core.tt.probe import CoreState, probe_many
from otpu_core.tt.queue import ask_to_stop, read_ctrl

CARD = Tile("card", 0, 0, (-1, -1))     # the whole card, when the NoC cannot tell cores apart
DEAD = ("chip hung", "link lost", "reset pending")


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    action: str
    needs_yes: bool
    chip_wide: bool


RUNGS = (
    Rung(0, "post-reset", "finish a reset another process left: POST_RESET, under the advisory lock", False, True),
    Rung(1, "stop", "ask the resident kernel to stop (stop request and STOP sentinel)", False, False),
    Rung(2, "soft-reset", "per-RISC soft reset (SOFT_RESET_0 = 0x47800), RISCs left held", False, False),
    Rung(3, "tile-reset", "single-tile reset through ARC (message 0xAE), under the advisory lock", True, False),
    Rung(4, "tensix-reset", "all-Tensix reset through ARC (0x33 250 MHz, 0xAF, 0x20, RISCs held), card quiet", True, True),
    Rung(5, "asic-reset", "ASIC reset on an O_EXCL descriptor, find the card by PCI address, POST_RESET", True, True),
    Rung(6, "pcie-sbr", "PCIe link reset with config restore, then ASIC reset and POST_RESET", True, True),
    Rung(7, "power-cycle", "nothing software can do: the card needs its power cycled", False, True),
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
    busy: str | None = None             # stopped because other processes hold the card
    notes: list[str] = field(default_factory=list)

    @property
    def recovered(self) -> bool: return self.busy is None and all(s.healthy for s in self.after)

    def as_dict(self) -> dict:
        return {"recovered": self.recovered, "fixed_at_rung": self.fixed_at,
                "before": [s.as_dict() for s in self.before], "steps": [s.as_dict() for s in self.steps],
                "after": [s.as_dict() for s in self.after],
                "needs_yes": [{"rung": r.number, "name": r.name, "action": r.action} for r in self.needs_yes],
                "then_power_cycle": self.then_power_cycle, "busy": self.busy, "notes": self.notes}


def remember_stuck(card: Card, states: list[CoreState]) -> None:
    """Note in the card's memo which tiles answered and which are stuck (with the firmware heartbeat,
    so a later reboot of the chip is noticed)."""
    stuck = [(s.tile.x, s.tile.y) for s in states if s.state == "unresponsive"]
    if stuck:
        try:
            heartbeat = card.telemetry.read().get(K.TAGS["TIMER_HEARTBEAT"])
        except OtpuError:
            heartbeat = None
        card.memo.mark_stuck(stuck, heartbeat)
    card.memo.clear([(s.tile.x, s.tile.y) for s in states if s.healthy])


class Stop(Exception):
    """A rung found other users and the ladder must stop (not climb on)."""


def recover_command(card: Card, states: list[CoreState], xy: tuple[int, int] | None = None) -> str:
    """The full command that recovers these states, with `--yes` when a rung that needs it will."""
    target = f"{xy[0]},{xy[1]}" if xy else "--all"
    yes = any(s.state in ("unresponsive", "chip hung", "link lost") for s in states)
    return f"`otpu-tt core recover {target}{' --yes' if yes else ''} --dev {card.spec}`"


def recover_hint(card: Card, states: list[CoreState], xy: tuple[int, int] | None = None) -> str:
    text = recover_command(card, states, xy) + " climbs the recovery ladder"
    if any(s.state == "link lost" for s in states):
        text += f"; if the link stays lost: {card.dev.power_cycle_hint()}"
    return text


class Ladder:
    """Climb the rungs for some cores of one open card."""

    def __init__(self, card: Card, max_rung: int = TOP_RUNG, yes: bool = False, settle: float = 2.0,
                 interval: float = 0.02, stop_timeout: float = 0.5, force: bool = False,
                 say: Callable[[str], None] = lambda s: None):
        self.card, self.max_rung, self.yes, self.settle, self.force = card, max_rung, yes, settle, force
        self.interval, self.stop_timeout, self.say = interval, stop_timeout, say
        self.notes: list[str] = []

    # ---- probing -------------------------------------------------------------------------------
    def _probe(self, xys: list[tuple[int, int]] | None, reprobe=frozenset()) -> list[CoreState]:
        """Probe the cores at `xys` (every live Tensix when None). Tiles remembered stuck are read only
        when in `reprobe` (after a rung that can have fixed them)."""
        card = self.card
        if card.broken is not None:
            # Without the NoC there is no telemetry: the whole card is one bad target.
            state = ("reset pending" if card.needs_post_reset else
                     "link lost" if isinstance(card.broken, LinkLost) else "chip hung")
            targets = xys if xys is not None else [(t.x, t.y) for t in card.tiles.tensix]
            tiles = [Tile(TENSIX, x, y, (-1, -1)) for x, y in targets] or [CARD]
            return [CoreState(t, state, card.broken.message) for t in tiles]
        tiles = card.tiles.tensix if xys is None else [card.tiles.tile(TENSIX, x, y) for x, y in xys]
        skip = card.memo.stuck() - set(reprobe)
        states = probe_many(card.noc, tiles, self.interval, skip=skip)
        remember_stuck(card, states)
        return states

    def run(self, xys: list[tuple[int, int]] | None = None) -> Report:
        """Recover the cores at `xys` (translated), or every live Tensix when None."""
        everyone = xys is None
        report = Report(before=self._probe(xys), notes=self.notes)
        bad = [s for s in report.before if not s.healthy]
        report.after = list(report.before)
        if not bad:
            return report
        for rung in RUNGS:
            if rung.number > self.max_rung:
                break
            if rung.number == 0 and not self.card.needs_post_reset:
                continue
            if rung.needs_yes and not self.yes:
                report.needs_yes = [r for r in RUNGS if rung.number <= r.number <= self.max_rung and r.needs_yes]
                report.then_power_cycle = self.max_rung >= TOP_RUNG
                break
            targets = [_name(s.tile) for s in bad]
            self.say(f"rung {rung.number} ({rung.name}) on {', '.join(targets) if len(targets) < 6 else f'{len(targets)} cores'}")
            t0 = time.monotonic()
            try:
                result = self._apply(rung, bad)
            except Stop as e:
                report.busy = str(e)
                report.steps.append(Step(rung.number, rung.name, targets, f"refused: {e}", time.monotonic() - t0))
                break
            if result is not None:
                still = bad
            elif everyone and (rung.chip_wide or self.card.broken is not None):
                still = [s for s in self._probe(None, self._touched(rung, bad)) if not s.healthy]
            else:
                still = [s for s in self._probe([(s.tile.x, s.tile.y) for s in bad], self._touched(rung, bad))
                         if not s.healthy]
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
        report.after = bad if report.busy or self._dead(bad) else self._probe(xys)
        return report

    @staticmethod
    def _touched(rung: Rung, bad: list[CoreState]) -> set[tuple[int, int]]:
        """Tiles a rung may have brought back, so they are read again: rungs 1 and 2 do not touch an
        unresponsive tile, a tile reset touches its targets, anything chip-wide touches them all."""
        if rung.number <= 2:
            return set()
        return {(s.tile.x, s.tile.y) for s in bad}

    @staticmethod
    def _dead(states: list[CoreState]) -> bool:
        return any(s.state in DEAD for s in states)

    # ---- rungs -------------------------------------------------------------------------------
    def _apply(self, rung: Rung, bad: list[CoreState]) -> str | None:
        """Do one rung. Returns a result text when the rung could not run (then nobody is re-probed)."""
        states = {s.state for s in bad}
        if rung.number == 7:
            return f"needs a power cycle: {self.card.dev.power_cycle_hint()}"
        if "reset pending" in states and rung.number > 0:
            return "skipped: the card still needs POST_RESET"
        if "link lost" in states and rung.number < 6:
            return "skipped: the PCIe link is gone (only a link reset can bring it back)"
        if "chip hung" in states and rung.number < 5:
            return "skipped: the NoC is hung and this rung needs it"
        try:
            if rung.number == 0:
                return self._post_reset()
            if rung.number == 1:
                return self._stop(bad)
            if rung.number == 2:
                return self._soft_reset(bad)
            if rung.number == 3:
                return self._tile_reset(bad)
            if rung.number == 4:
                return self._tensix_reset()
            self._quiesce()
            with self._locked(rung):
                self.card.asic_reset(settle=self.settle, sbr=rung.number == 6)
            return None
        except Stop:
            raise
        except OtpuError as e:
            return f"failed: {e.message}"

    @contextmanager
    def _locked(self, rung: Rung):
        """The advisory lock for a rung. Other users stop the ladder, except for rung 0 (their
        descriptors are disowned already), rung 3 (one core) and rung 4 with `force`, which go on
        and say whom they affect."""
        allow = rung.number in (0, 3) or (rung.number == 4 and self.force)
        try:
            with self.card.exclusive(allow_others=allow) as others:
                if others and rung.number:
                    who = ", ".join(f"PID {pid} ({cmd})" for pid, cmd in others)
                    what = "only the cores named are reset" if rung.number == 3 else "every Tensix was reset under them"
                    self.notes.append(f"rung {rung.number}: {who} also had the card open; {what}")
                yield
        except DeviceBusy as e:
            raise Stop(e.message + (" (or --force, to reset every Tensix under them)" if rung.number == 4 else "")) from None

    def _post_reset(self) -> str | None:
        with self._locked(RUNGS[0]):
            if not self.card.needs_post_reset:
                return None
            self.notes.append(self.card.complete_reset(self.settle))
        return None

    def _kernel_present(self, tile: Tile) -> tuple[int, ...] | None:
        """The control block of our resident kernel on the tile, if one is there (foreign firmware's
        L1 is never read as ours)."""
        noc = self.card.noc
        if noc.read32(tile, K.SOFT_RESET_0) >> K.RISC_BITS["brisc"] & 1:
            return None
        if not runs_our_firmware(noc, tile):
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
        asked = [s.tile for s in bad if s.state != "unresponsive" and self._ask_to_stop(s.tile)]
        if not asked:
            return "nothing to stop: no resident kernel of ours on these cores"
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

    def _firmware(self) -> int:
        return self.card.telemetry.read().get(K.TAGS["FLASH_BUNDLE_VERSION"], 0)

    def _tile_reset(self, bad: list[CoreState]) -> str | None:
        bundle = self._firmware()
        if bundle < K.FW_SINGLE_TILE_RESET:
            return (f"skipped: firmware {K.version_text(bundle)} has no single-tile reset (ARC 0xAE arrived in "
                    f"{K.version_text(K.FW_SINGLE_TILE_RESET)})")
        with self._locked(RUNGS[3]):
            for s in bad:
                resp = self.card.arc.send(K.MSG["TOGGLE_SINGLE_TENSIX_RESET"], s.tile.x | (s.tile.y << 8))
                status = resp[0] & 0xFF               # the handler's refusal is ORed into word 0
                if status:
                    return f"failed: ARC refused the reset of core {s.tile} (status {status})"
        return None

    def _tensix_reset(self) -> str | None:
        card, M = self.card, K.MSG
        self._quiesce()
        with self._locked(RUNGS[4]):
            noc = card.noc
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
            card.memo.clear()
        return None

    def _quiesce(self) -> None:
        """Before a chip-wide rung: ask every resident kernel of ours to stop, then give them a moment."""
        if self.card.broken is not None:
            return                             # no NoC: nobody can be asked
        stuck = self.card.memo.stuck()
        try:
            asked = [t for t in self.card.tiles.tensix if (t.x, t.y) not in stuck and self._ask_to_stop(t)]
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
