"""The simulated card's core: one program run on the golden simulator, in time slices.

`CardRun.loop` runs on a thread of the process that set CTRL.RUN. It advances the golden
`Machine` (whose DRAM is the card's DRAM memmap, adopted without a copy) for about
`SLICE_SECONDS` at a time, then publishes the counter deltas of the timing model to the card's
registers, so another process reading SNAP/CYCLES sees them move. It stops when the program
halts (STATUS HALTED, with ERROR for an illegal program or a WAITW timeout), when the host
clears RUN or sets CLEAR, or at power-off. Faults: `hang` keeps the sequencer running after
HALT (cycles keep counting at the core clock) until the host gives up.

TMEM and ACT RAM live in the card's `<card>.tmem` file (`bind_onchip` maps each slice's
memories onto it), so they persist between programs and between host processes, as on a card,
until power-off. Host DMA from any process bumps the DRAM page generations, which invalidate
the simulator's decoded-weight cache before each run and each slice.
"""
from __future__ import annotations

import functools
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from . import faults as faults_mod
from . import regs
from .dram import PAGE_SHIFT
from .dram import beat_channels as _beat_channels
from .dram import channel_bytes as _channel_bytes
from .dram import logical_bytes as _logical_bytes

if TYPE_CHECKING:
    from .simcard import SimCard

SLICE_SECONDS = 0.02       # engine time between counter publications
STEP_BATCH = 256           # instructions per run_for call
POLL_SLEEP = 0.0005        # wall time between WAITW polls while the host has not written

def machine_for(card: "SimCard", trace: bool):
    """This process's Machine for a card at its current power-on, the DRAM page generations it
    has seen and its store logs (`store_logs`). Kept on the open card object: its DRAM views
    are that object's maps, which go when the card is closed (a Machine kept past that would
    read unmapped memory)."""
    from ..isasim import Machine
    key = (card.power_gen, os.stat(card.dram.path).st_ino)   # a re-created card is another
    held = getattr(card, "_machine", None)
    m, seen, logs = held[1] if held is not None and held[0] == key else (None, None, None)
    if m is None or bool(m.timing and m.timing.trace) != trace:
        size = card.cfg.DRAM_BYTES
        drams = [card.dram.mem[s * size:(s + 1) * size] for s in range(card.cfg.S)]
        m = Machine(card.target, drams=drams, trace=trace)
        m.wait_for_host = True
        bind_onchip(card, m)
        seen = np.zeros_like(card.dram.gens)
        logs = store_logs(card, m)
        card._machine = (key, (m, seen, logs))
    return m, seen, logs


@functools.lru_cache(maxsize=8)
def _onchip_layout(cfg) -> tuple[tuple[tuple[str, str, tuple[int, ...], np.dtype, int], ...], int]:
    """((memory, array, shape, dtype, byte offset), ...) of one slice's on-chip memories (every
    array a fresh TMEM and ACT RAM of the simulator hold), and the slice's bytes in the file."""
    from ..sim.memory import ActRam, Tmem
    fresh = {"tmem": Tmem(cfg.TMEM_WORDS), "act": ActRam(cfg.act_rows, cfg.ACT_BLOCKS, cfg.D)}
    parts, at = [], 0
    for mem, obj in fresh.items():
        for name, arr in vars(obj).items():
            if isinstance(arr, np.ndarray):
                at = -(-at // arr.dtype.itemsize) * arr.dtype.itemsize
                parts.append((mem, name, arr.shape, arr.dtype, at))
                at += arr.nbytes
    return tuple(parts), -(-at // 4096) * 4096


def onchip_bytes(cfg) -> int:
    """Bytes of the `<card>.tmem` file: every slice's TMEM and ACT RAM."""
    return cfg.S * _onchip_layout(cfg)[1]


def bind_onchip(card: "SimCard", m) -> None:
    """Put each slice's TMEM and ACT RAM on the card's shared file (in place of its own arrays)."""
    parts, per_slice = _onchip_layout(card.cfg)
    for sl in m.slices:
        base = sl.sid * per_slice
        for mem, name, shape, dt, at in parts:
            n = int(np.prod(shape)) * dt.itemsize
            setattr(getattr(sl, mem), name, card.onchip[base + at:base + at + n].view(dt).reshape(shape))


def note_host_writes(card: "SimCard", m, seen: np.ndarray) -> None:
    """Tell the simulator which DRAM pages host DMA changed since it last looked."""
    gens = np.asarray(card.dram.gens)
    changed = np.flatnonzero(gens != seen)
    if changed.size:
        size = card.cfg.DRAM_BYTES
        for sl in m.slices:
            lo, hi = sl.sid * size, (sl.sid + 1) * size
            for page in changed:
                a, b = int(page) << PAGE_SHIFT, (int(page) + 1) << PAGE_SHIFT
                if a < hi and b > lo:
                    sl.dram.note_write(max(a, lo) - lo, min(b, hi) - lo)
        seen[changed] = gens[changed]


class StoreLog:
    """The byte ranges one slice's stores wrote, in order. Kept on a card with aliased address
    lines, whose engine stores must reach every address of their cell in the order made."""

    def __init__(self, dram):
        self.ranges: list[tuple[int, int]] = []
        self.note = dram.note_write          # the simulator's own bookkeeping, still called
        dram.note_write = self._note

    def _note(self, lo: int, hi: int) -> None:
        self.ranges.append((lo, hi))
        self.note(lo, hi)

    def take(self) -> list[tuple[int, int]]:
        ranges, self.ranges = self.ranges, []
        return ranges


def store_logs(card: "SimCard", m) -> list[StoreLog] | None:
    """A StoreLog per slice when some channel of the card has an aliased address line."""
    if not any(faults_mod.alias_mask(card.faults, ch) for ch in range(regs.CHANNELS)):
        return None
    return [StoreLog(sl.dram) for sl in m.slices]


def engine_stores_through_pins(card: "SimCard", m, since: list[int], logs: list[StoreLog] | None) -> None:
    """Pass what the engine stored since write clocks `since` (one per slice) through the DRAM
    pins and address lines, as host writes pass at DMA time. Every beat of the DRAM pages
    written since then that lies on a channel whose pins change data gets its lanes garbled and
    stuck bits forced (both idempotent, so beats stored earlier may pass again); then, with
    aliased lines, each store in `logs` reaches every address of its cell, in store order.
    Nothing to do on healthy pins."""
    from ..sim.memory import PAGE_SHIFT as SIM_PAGE_SHIFT
    stores = [log.take() for log in logs] if logs else None
    channels = card.pin_fault_channels()
    size, per_page = card.cfg.DRAM_BYTES, (1 << SIM_PAGE_SHIFT) // regs.BEAT
    for sl in m.slices if channels else ():
        pages = np.flatnonzero(sl.dram.gens > since[sl.sid])
        if not pages.size:
            continue
        beats = (sl.sid * size // regs.BEAT + pages[:, None] * per_page + np.arange(per_page)).reshape(-1)
        beat_ch = _beat_channels(beats, card.dram.chash)
        for ch in channels:
            mine = beats[beat_ch == ch]
            pos = ((mine >> 1) * regs.BEAT)[:, None] + np.arange(regs.BEAT)
            card.dram.beats[mine] = card.pins_write(ch, pos.reshape(-1), card.dram.beats[mine].reshape(-1)).reshape(-1, regs.BEAT)
        note = logs[sl.sid].note if logs else sl.dram.note_write
        for page in pages:            # decoded weights cached from the clean bytes are stale now
            note(int(page) << SIM_PAGE_SHIFT, (int(page) + 1) << SIM_PAGE_SHIFT)
    if stores:
        _mirror_stores(card, m, stores, logs)


def _mirror_stores(card: "SimCard", m, stores: list[list[tuple[int, int]]], logs: list[StoreLog]) -> None:
    """Make each logged store on a channel with aliased lines reach every address of its cell.
    The stores' bytes are all read first and then replayed in store order, so the last store to
    any address of a cell wins, as on the pins. A strided store (QST) is logged as its whole
    span, so the bytes in its gaps are replayed too (with what they held)."""
    size, chash, mem = card.cfg.DRAM_BYTES, card.dram.chash, card.dram.mem
    masks = {ch: mk for ch in range(regs.CHANNELS) if (mk := faults_mod.alias_mask(card.faults, ch))}
    replay = []
    for sl, ranges in zip(m.slices, stores):
        for lo, hi in ranges:
            logical = np.arange(sl.sid * size + lo, sl.sid * size + hi, dtype=np.int64)
            chan, pos = _channel_bytes(logical, chash)
            for ch, mask in masks.items():
                on = chan == ch
                if on.any():
                    cells = pos[on] & ~np.int64(mask)
                    last = cells.size - 1 - np.unique(cells[::-1], return_index=True)[1]    # within a store the later byte wins
                    replay.append((ch, mask, cells[last], mem[logical[on][last]]))
    touched = []
    for ch, mask, cells, data in replay:
        for s in faults_mod.alias_class(mask):
            at = _logical_bytes(ch, cells | np.int64(s), chash)
            mem[at] = data
            touched.append((int(at.min()), int(at.max()) + 1))
    for lo, hi in touched:            # the simulator's cached weights of the copies are stale
        for sl, log in zip(m.slices, logs):
            a, b = max(lo, sl.sid * size), min(hi, (sl.sid + 1) * size)
            if a < b:
                log.note(a - sl.sid * size, b - sl.sid * size)


def vpu_lane_fault(card: "SimCard"):
    """The `vpu_lane:lane=,bit=` fault as a per-instruction hook: after each VOP, flip the bit in
    every result word the faulty lane wrote (lane = TMEM bank = word address mod LANES)."""
    from .. import isa
    faults = card.faults.get("vpu_lane")
    if not faults:
        return None
    lanes = card.cfg.LANES

    def hook(sl, pc: int, ins) -> None:
        if ins.op != isa.Op.VOP:
            return
        f = ins.fields
        w = sl.resolved(ins)
        cols = 2 if ins.func == isa.VFunc.ARGMAX else 1 if ins.func in isa.REDUCE else f["cols"]
        idx = (w[1] + np.arange(f["rows"])[:, None] * f["drs"] + np.arange(cols)[None, :]).reshape(-1)
        idx = idx[(idx >= 0) & (idx < sl.tmem.t.size)]
        for fault in faults:
            hit = idx[idx % lanes == fault["lane"] % lanes]
            sl.tmem.t[hit] ^= np.uint32(1 << fault["bit"])
    return hook


class CardRun:
    """One run of the loaded program on the card."""

    def __init__(self, card: "SimCard", words: np.ndarray, args: list[int], power_gen: int):
        self.card, self.words, self.args, self.gen = card, words, args, power_gen
        self.trace = bool(int(card.bar[regs.off("TRACE_CTRL") // 4]) & regs.TR_ENABLE)
        self.hang = card.faults.has("hang")

    def loop(self) -> None:
        from ..errors import UsageError
        from ..isa import decode_program
        card = self.card
        try:
            m, seen, logs = machine_for(card, self.trace)
            note_host_writes(card, m, seen)
            m.load(decode_program(self.words), self.args)
            m.max_steps = 1 << 62
            m.on_step = vpu_lane_fault(card)
            if m.timing is not None:
                for sc in m.timing.slices:
                    sc.groups.clear()
            self._run(m, seen, logs)
        except UsageError as e:
            timed_out = getattr(e, "kind", None) == "waitw-timeout"
            card.finish(self.gen, regs.ST_ERROR | (regs.ST_WAIT_TO if timed_out else 0), e.message)
        except Exception as e:      # the card must report, never take the host process down
            card.finish(self.gen, regs.ST_ERROR | regs.ST_AXI_ERR, f"simulated core failed: {type(e).__name__}: {e}")

    def _run(self, m, seen: np.ndarray, logs: "list[StoreLog] | None") -> None:
        from ..isasim import HALTED, POLLING
        card = self.card
        last = m.counters()
        spun = 0                     # cycles a hung sequencer has spent after its HALT
        hung_since = None
        while card.still_running(self.gen):
            state = None
            if hung_since is None:
                t_end = time.monotonic() + SLICE_SECONDS
                while time.monotonic() < t_end:
                    note_host_writes(card, m, seen)
                    since = [sl.dram.clock for sl in m.slices]
                    for log in logs or ():
                        log.take()               # host writes reached their cells' addresses at DMA time
                    state = m.run_for(STEP_BATCH)
                    engine_stores_through_pins(card, m, since, logs)
                    if state == HALTED:
                        break
                    if state == POLLING:
                        self._wait_poll(m)
                if state == HALTED and self.hang:
                    hung_since = time.monotonic()
            else:
                time.sleep(SLICE_SECONDS)
                now_t = time.monotonic()
                spun += int((now_t - hung_since) * card.core_hz)
                hung_since = now_t
            now = m.counters()
            delta = {k: now[k] - last.get(k, 0) for k in regs.COUNTER_NAMES if k in now}
            delta["RUNNING"] = delta.get("RUNNING", 0) + spun - last.get("_spun", 0)
            now["_spun"] = spun
            run = {k: now.get(k, 0) for k in ("ICOUNT", "B_RD", "B_WR", "A_RD", "SW_WR", "B_STALL")}
            run["CYCLES"] = now.get("CYCLES", 0) + spun
            done = state == HALTED and hung_since is None
            card.publish(self.gen, delta, run)
            last = now
            if done:
                if self.trace:
                    card.record(np.array(m.trace_records(0), dtype=np.uint64))
                card.finish(self.gen)
                return
        card.abandon(self.gen)

    def _wait_poll(self, m) -> None:
        """A WAITW is polling DRAM the host has not written yet: let wall time pass at the core clock."""
        t0 = time.monotonic()
        time.sleep(POLL_SLEEP)
        cycles = int((time.monotonic() - t0) * self.card.core_hz)
        for sl in m.slices:
            if sl.polls:
                interval = max(sl.prog[sl.pc].fields["interval"], 1)
                sl.polls += max(0, cycles // interval - 1)
