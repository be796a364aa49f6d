"""Resident dispatch, host side: a kernel stays on a Tensix polling a 32-byte descriptor ring in its L1.

Submitting is one 32-byte write of the descriptor plus one 32-bit write of the posted counter;
`submit_batch` writes up to a whole batch with one block write (two at the ring's wrap) and one
counter bump. Completion is the completed count the kernel writes after executing each
descriptor, together with this run's nonce. Retiring is by asking: `stop()` sets stop_request
(every wait of the kernel polls it) and also appends the in-stream STOP sentinel. Residency is
bounded: the kernel exits by itself after `idle_spin_limit` idle polls, and the driver's NOC
cleanup writes stop_request if this process dies with the queue open. tt-kmd keeps one
SET_NOC_CLEANUP action per descriptor (a second call replaces the first; chardev.c
ioctl_set_noc_cleanup), so each queue registers its action on a descriptor of its own, and
several resident queues in one process each keep theirs.
"""
from __future__ import annotations

import struct
import time

import numpy as np

from ..errors import DeviceError, UsageError
from . import layout as L
from .coords import Tile
from .launch import launch
from .noc import Noc

MASK = 0xFFFFFFFF


class QueueError(DeviceError):
    """The resident kernel is gone, or did not complete in time."""


def read_ctrl(noc: Noc, tile: Tile, ctrl: int = L.QUEUE_CTRL) -> tuple[int, ...]:
    return struct.unpack(f"<{L.CTRL_WORDS}I", noc.read(tile, ctrl, 4 * L.CTRL_WORDS))


def ask_to_stop(noc: Noc, tile: Tile, words: tuple[int, ...], ctrl: int = L.QUEUE_CTRL) -> int:
    """Retire a resident kernel by asking: the STOP sentinel in its ring (when there is room) and
    its stop_request, which every wait of the kernel polls. Returns the posted count after."""
    slots, ring, posted, done = words[L.C_SLOTS], words[L.C_RING], words[L.C_POSTED], words[L.C_COMPLETED]
    if slots and (posted - done) & MASK < slots and ring + slots * L.DESC_BYTES <= L.USER_BASE:
        noc.write(tile, ring + (posted % slots) * L.DESC_BYTES, L.DESC_FMT.pack(L.OP_STOP, 0, posted, 0, 0, 0, 0, 0, 0))
        posted = (posted + 1) & MASK
        noc.write32(tile, ctrl + 4 * L.C_POSTED, posted)
    noc.write32(tile, ctrl + 4 * L.C_STOP, 1)
    return posted


class ResidentQueue:
    """The host side of one resident kernel."""

    def __init__(self, noc: Noc, tile: Tile, slots: int = L.RING_SLOTS, idle_spin_limit: int = 10_000_000,
                 start_timeout: float = 2.0):
        if slots <= 0 or slots & (slots - 1) or L.RING + slots * L.DESC_BYTES > L.USER_BASE:
            raise UsageError(f"ring of {slots} slots: must be a power of two that fits below {L.USER_BASE:#x}")
        self.noc, self.tile, self.slots = noc, tile, slots
        self.ctrl = L.QUEUE_CTRL
        self._posted_addr = self.ctrl + 4 * L.C_POSTED
        self._completed_addr = self.ctrl + 4 * L.C_COMPLETED
        noc.write(tile, self.ctrl, bytes(4 * L.CTRL_WORDS))
        self.posted = self.completed = 0
        self.nonce, _ = launch(noc, tile, L.KIND_RESIDENT_QUEUE,
                               L.RESIDENT_ARGS_FMT.pack(self.ctrl, L.RING, slots, idle_spin_limit))
        deadline = time.monotonic() + start_timeout
        while True:
            words = self._ctrl_words()
            if words[L.C_NONCE] == self.nonce and words[L.C_STATE] == L.QSTATE_POLLING:
                break
            if time.monotonic() >= deadline:
                raise QueueError(f"resident kernel on {tile} did not start (state {L.QSTATE_NAMES.get(words[L.C_STATE])})")
            time.sleep(0.0005)
        # If this process dies with the queue open, the driver's close-time write retires the kernel:
        # one descriptor per queue, because the driver keeps one cleanup action per descriptor.
        self._cleanup = noc.dev.open_another()
        try:
            self._cleanup.set_noc_cleanup(tile.x, tile.y, self.ctrl + 4 * L.C_STOP, 1)
        except BaseException:
            self._cleanup.close()
            raise
        self._desc = L.DESC_FMT

    def _ctrl_words(self) -> tuple[int, ...]:
        return read_ctrl(self.noc, self.tile, self.ctrl)

    # ---- submit --------------------------------------------------------------------------------
    def _room(self, n: int, timeout: float) -> None:
        if n > self.slots:
            raise UsageError(f"{n} descriptors do not fit a ring of {self.slots}")
        if (self.posted - self.completed) & MASK <= self.slots - n:
            return
        deadline = time.monotonic() + timeout
        while True:
            self.completed = self.noc.read32(self.tile, self._completed_addr)
            if (self.posted - self.completed) & MASK <= self.slots - n:
                return
            self._check_alive()
            if time.monotonic() >= deadline:
                raise QueueError(f"ring on {self.tile} stayed full for {timeout:g} s")
            time.sleep(0.0002)

    def submit(self, op: int, a0: int = 0, a1: int = 0, a2: int = 0, a3: int = 0, a4: int = 0, a5: int = 0,
               flags: int = 0, timeout: float = 2.0) -> int:
        """Post one descriptor; returns the count the kernel's completed counter reaches with it."""
        self._room(1, timeout)
        seq = self.posted
        self.noc.write(self.tile, L.RING + (seq % self.slots) * L.DESC_BYTES,
                       self._desc.pack(op, flags, seq, a0, a1, a2, a3, a4, a5))
        self.posted = (seq + 1) & MASK
        self.noc.write32(self.tile, self._posted_addr, self.posted)
        return self.posted

    def submit_batch(self, descriptors: np.ndarray, timeout: float = 2.0) -> int:
        """Post n descriptors given as an (n, 8) uint32 array: word 0 = op | flags << 16, word 1 = seq
        (filled in here), words 2..7 = a0..a5. One block write (two at the wrap), one counter bump."""
        desc = np.ascontiguousarray(descriptors, dtype="<u4")
        n = desc.shape[0]
        self._room(n, timeout)
        desc[:, 1] = (self.posted + np.arange(n, dtype=np.uint64)) & MASK
        first = self.posted % self.slots
        head = min(n, self.slots - first)
        raw = desc.tobytes()
        self.noc.write(self.tile, L.RING + first * L.DESC_BYTES, raw[:head * L.DESC_BYTES])
        if head < n:
            self.noc.write(self.tile, L.RING, raw[head * L.DESC_BYTES:])
        self.posted = (self.posted + n) & MASK
        self.noc.write32(self.tile, self._posted_addr, self.posted)
        return self.posted

    # ---- complete ------------------------------------------------------------------------------
    def wait(self, count: int | None = None, timeout: float = 2.0) -> int:
        """Wait until the kernel has completed `count` (default: everything posted) for this run."""
        target = self.posted if count is None else count
        deadline = time.monotonic() + timeout
        while True:
            done = self.noc.read32(self.tile, self._completed_addr)
            if (done - target) & MASK < 1 << 31:
                if self.noc.read32(self.tile, self.ctrl + 4 * L.C_NONCE) != self.nonce:
                    raise QueueError(f"completion on {self.tile} carries another run's nonce")
                self.completed = done
                return done
            self._check_alive()
            if time.monotonic() >= deadline:
                raise QueueError(f"resident kernel on {self.tile}: {done} of {target} done after {timeout:g} s",
                                 hint=f"`otpu-tt core probe {self.tile}`")
            time.sleep(0.0001)

    def _check_alive(self) -> None:
        words = self._ctrl_words()
        if words[L.C_STATE] == L.QSTATE_EXITED:
            raise QueueError(f"resident kernel on {self.tile} has exited ({L.EXIT_NAMES[words[L.C_EXIT]]})")

    def state(self) -> dict:
        w = self._ctrl_words()
        return {"state": L.QSTATE_NAMES.get(w[L.C_STATE], str(w[L.C_STATE])), "posted": w[L.C_POSTED],
                "completed": w[L.C_COMPLETED], "heartbeat": w[L.C_HEARTBEAT], "exit": L.EXIT_NAMES.get(w[L.C_EXIT], "")}

    # ---- retire --------------------------------------------------------------------------------
    def stop(self, timeout: float = 2.0) -> str:
        """Retire by asking: the STOP sentinel in the stream (when there is room) and the stop request."""
        self.posted = ask_to_stop(self.noc, self.tile, self._ctrl_words(), self.ctrl)
        deadline = time.monotonic() + timeout
        while True:
            w = self._ctrl_words()
            if w[L.C_STATE] == L.QSTATE_EXITED:
                self.release_cleanup()
                return L.EXIT_NAMES[w[L.C_EXIT]]
            if time.monotonic() >= deadline:
                raise QueueError(f"resident kernel on {self.tile} did not stop within {timeout:g} s",
                                 hint=f"`otpu-tt core recover {self.tile}`")
            time.sleep(0.0005)

    def release_cleanup(self) -> None:
        """The kernel is gone: drop its close-time action (disarmed first, so closing writes nothing)."""
        if self._cleanup is None:
            return
        try:
            self._cleanup.set_noc_cleanup(0, 0, 0, 0, enabled=False)
        except OSError:
            pass                 # a reset disowned it; nothing is armed any more
        self._cleanup.close()
        self._cleanup = None
