"""The safe liveness probe of a Tensix: registers and our mailbox only, coordinates from telemetry.

Per tile it reads the NIU's translated node id (a known answer: all ones means the tile does not
answer), the soft-reset register, the PC snapshot of each RISC out of reset, the go signal and
the resident queue's control block; then, one interval later, the PCs and the heartbeat again.
It never reads RISC private memory, and it reads our mailbox only on a core that runs our
firmware (its signature at L1 FW_BASE): a core running foreign firmware (tt-metal's) keeps its
own data where our mailbox would be, so nothing of it is read, only its PCs. A tile that does
not answer is read once per probe, and not at all when the caller says it was found stuck
before (`skip`): each such read is a NoC transaction that never completes (see `cardmemo`).
States:

  in reset      every RISC held in soft reset (clean; ready for firmware)
  foreign fw    RISCs running firmware that is not ours, PCs moving
  idle          firmware up, nothing running
  resident      a resident kernel polling its ring, heartbeat advancing
  running       a one-shot kernel started and not yet done
  hung          a kernel blocked in a wait (it still answers a stop request)
  wedged        a RISC out of reset whose PC no longer moves (deaf to stop requests)
  unresponsive  the tile does not answer on the NoC (its NIU is stuck)
  chip hung     the NoC itself is hung;   link lost: the PCIe link is gone
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import consts as K
from . import layout as L
from .coords import Tile
from .noc import MASK, LinkLost, Noc, NocHung
from .launch import runs_our_firmware
from .queue import read_ctrl

HEALTHY = ("in reset", "foreign fw", "idle", "resident", "running")
STUCK_BEFORE = ("found unresponsive before: not read again (each read of a stuck tile is a NoC transaction that "
                "never completes) until recovery or --reprobe")
PC_SAMPLES = 8


@dataclass
class CoreState:
    tile: Tile
    state: str
    detail: str = ""
    data: dict = field(default_factory=dict)

    @property
    def healthy(self) -> bool: return self.state in HEALTHY

    def as_dict(self) -> dict:
        return {"x": self.tile.x, "y": self.tile.y, "noc0": list(self.tile.noc0), "state": self.state,
                "healthy": self.healthy, "detail": self.detail, **self.data}


def _snapshot(noc: Noc, tile: Tile) -> dict:
    node = noc.read32(tile, K.NIU0_BASE + K.NOC_ID_TRANSLATED)
    snap = {"node": node}
    if node == MASK:
        return snap
    soft = noc.read32(tile, K.SOFT_RESET_0)
    snap["soft_reset"] = soft
    snap["pcs"] = {r: noc.read32(tile, K.PC_SNAPSHOT[r]) for r, bit in K.RISC_BITS.items() if not soft >> bit & 1}
    if not soft >> K.RISC_BITS["brisc"] & 1:
        if not runs_our_firmware(noc, tile):
            snap["foreign"] = True
            return snap
        snap["signal"] = noc.read32(tile, L.GO_WORD) >> 24
        snap["ctrl"] = read_ctrl(noc, tile)
    return snap



def _frozen(samples: list[dict]) -> list[str]:
    """RISCs out of reset in every sample whose PC never moved."""
    common = set(samples[0]).intersection(*samples[1:])
    return [r for r in K.RISC_BITS if r in common and len({s[r] for s in samples}) == 1]


def _classify(tile: Tile, a: dict, b: dict, frozen: list[str]) -> CoreState:
    expected = (tile.y << 6) | tile.x
    if a["node"] == MASK or b["node"] == MASK:
        return CoreState(tile, "unresponsive", "the tile's NoC interface does not answer (NoC itself is fine)")
    if a["node"] & 0xFFF != expected:
        return CoreState(tile, "unresponsive", f"node id {a['node']:#x} is not this tile's ({expected:#x})")
    soft = b["soft_reset"]
    data = {"soft_reset": f"{soft:#07x}", "pcs": {r: f"{pc:#x}" for r, pc in b.get("pcs", {}).items()}}
    if soft & K.RISC_ALL == K.RISC_ALL:
        return CoreState(tile, "in reset", "all RISCs held in soft reset", data)
    ctrl, ctrl0 = b.get("ctrl"), a.get("ctrl")
    signal = b.get("signal")
    if ctrl is not None:
        pending = (ctrl[L.C_POSTED] - ctrl[L.C_COMPLETED]) & MASK
        data.update(posted=ctrl[L.C_POSTED], completed=ctrl[L.C_COMPLETED], pending=pending,
                    queue_state=L.QSTATE_NAMES.get(ctrl[L.C_STATE], str(ctrl[L.C_STATE])),
                    exit=L.EXIT_NAMES.get(ctrl[L.C_EXIT], ""))
    if frozen:
        return CoreState(tile, "wedged", ", ".join(f"{r.upper()} PC {b['pcs'][r]:#x} frozen" for r in frozen)
                         + (" (stop requests go unanswered)" if not b.get("foreign") else " (foreign firmware)"), data)
    if b.get("foreign"):
        return CoreState(tile, "foreign fw", f"runs firmware that is not ours (no signature at L1 {L.FW_BASE:#x}): "
                         "its mailbox is not read or written, only its PCs are watched", data)
    if ctrl is not None and signal == K.RUN_MSG_GO and ctrl[L.C_STATE] == L.QSTATE_BLOCKED:
        return CoreState(tile, "hung", f"resident kernel blocked in a wait, {data['pending']} descriptor(s) pending", data)
    if ctrl is not None and signal == K.RUN_MSG_GO and ctrl[L.C_STATE] == L.QSTATE_POLLING:
        if ctrl0 is not None and ctrl0[L.C_HEARTBEAT] == ctrl[L.C_HEARTBEAT]:
            return CoreState(tile, "wedged", "resident kernel heartbeat stopped", data)
        return CoreState(tile, "resident", f"resident queue: {ctrl[L.C_COMPLETED]} done, {data['pending']} pending", data)
    if signal == K.RUN_MSG_GO:
        return CoreState(tile, "running", "kernel running", data)
    last = f" (last resident kernel exited: {data['exit']})" if ctrl is not None and ctrl[L.C_STATE] == L.QSTATE_EXITED else ""
    return CoreState(tile, "idle", "firmware up, nothing running" + last, data)


def _pc_samples(noc: Noc, tile: Tile, snap: dict) -> dict:
    return {r: noc.read32(tile, K.PC_SNAPSHOT[r]) for r in snap.get("pcs", {})}


def probe_many(noc: Noc, tiles: list[Tile], interval: float = 0.02, samples: int = PC_SAMPLES,
               skip=frozenset()) -> list[CoreState]:
    """Probe tiles together: a snapshot each, PC samples spread over one interval, a last snapshot.

    A RISC counts as frozen only when every sample shows the same PC: a tight polling loop of a
    live RISC can show one PC twice in a row, rarely `samples` times. Tiles whose (x, y) is in
    `skip` were found unresponsive before and are not read at all; a tile that does not answer
    its first read is not read again.
    """
    try:
        first = {t: _snapshot(noc, t) for t in tiles if (t.x, t.y) not in skip}
        live = [t for t in first if first[t]["node"] != MASK]
        seen = {t: [first[t].get("pcs", {})] for t in live}
        for _ in range(samples - 2):
            time.sleep(interval / (samples - 1))
            for t in live:
                if first[t].get("pcs"):
                    seen[t].append(_pc_samples(noc, t, first[t]))
        time.sleep(interval / (samples - 1))
        out = []
        for t in tiles:
            if (t.x, t.y) in skip:
                out.append(CoreState(t, "unresponsive", STUCK_BEFORE, {"remembered": True}))
                continue
            last = _snapshot(noc, t) if t in seen else first[t]
            pcs = seen.get(t, [{}])
            pcs.append(last.get("pcs", {}))
            out.append(_classify(t, first[t], last, _frozen(pcs)))
        return out
    except NocHung as e:
        return [CoreState(t, "chip hung", e.message) for t in tiles]
    except LinkLost as e:
        return [CoreState(t, "link lost", e.message) for t in tiles]


def probe(noc: Noc, tile: Tile, interval: float = 0.02) -> CoreState:
    return probe_many(noc, [tile], interval)[0]
