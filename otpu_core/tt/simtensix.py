"""The Tensix tiles of the simulated p150a: debug registers, NIU ids, and the firmware running on BRISC.

Per tile: the soft-reset register (a RISC leaving reset runs whatever L1 holds: our firmware
image if its signature is there, else it wedges), PC snapshots that move while a RISC runs and
freeze when it is wedged, the NIU's node ids, and a BRISC firmware model that runs one-shot
kernels and the resident-queue kernel (`layout`), which keeps the three rules: completion is
produced by the work, retire by asking, bounded idle. A core may instead run foreign firmware
(tt-metal's): it keeps its own mailboxes in low L1, and a host write there corrupts it.

What the tile reset of ARC (0xAE, or every tile for 0xAF) does is the firmware's
(tt-zephyr-platforms lib/tenstorrent/bh_arc/reset.c): RISCs back to 0x47800, the tile's NoC
interface re-initialised, so a stuck NIU and the reads it swallowed are gone.

`TensixModel` is a mixin of `SimChip`: it uses the chip's state words, tile records and L1.
"""
from __future__ import annotations

import random
import struct
import time

from . import consts as K
from . import layout as L
from .simstate import (F_TILE, FW_FOREIGN, FW_IDLE, FW_NONE, FW_RESIDENT, H_NO_TRANSLATION, H_PC_TICK, MASK, T_BASE,
                       T_BLOCKED, T_CTRL, T_FW, T_NEEDS_ASIC, T_NIU_STUCK, T_NONCE, T_SOFT, T_STUCK_READS, T_TOUCHED,
                       T_WEDGED, T_WORDS)

SPINS_PER_SECOND = 1_000_000        # one resident poll loop per microsecond at 800 MHz
BRISC = 1 << K.RISC_BITS["brisc"]
FOREIGN_FW = b"\x6f\x00\x00\x00metal-fw"   # a JAL and bytes that are not our signature
FOREIGN_LOW_L1 = L.USER_BASE               # foreign firmware keeps mailboxes and code below this


class TensixModel:
    """Registers and firmware of the Tensix tiles of a `SimChip` (mixin: needs W, F, l1, l1_u32)."""

    # ---- registers -----------------------------------------------------------------------------
    def _tensix_reg(self, idx: int, addr: int, value: int | None) -> int:
        W, r = self.W, T_BASE + idx * T_WORDS
        for lo, hi in K.PRIVATE_RAM:
            if lo <= addr < hi:
                return self._hang(f"RISC private memory 0x{addr:x} of Tensix {idx} accessed over the NoC")
        if addr == K.SOFT_RESET_0:
            if value is None:
                return W[r + T_SOFT]
            self._soft_reset_write(idx, value)
            return 0
        if K.DEBUG_REGS[0] <= addr < K.DEBUG_REGS[1]:
            for risc, pc_addr in K.PC_SNAPSHOT.items():
                if addr == pc_addr:
                    return self._pc(idx, risc) if value is None else 0
            return 0
        if K.NIU_REGS[0] <= addr < K.NIU_REGS[1]:
            off = (addr - K.NIU_REGS[0]) & 0xFFFF
            col, row = divmod(idx, len(K.TENSIX_ROWS))
            x0, y = K.PHYS_COL_X[col], row + K.TENSIX_ROWS[0]
            if value is None and off == K.NOC_NODE_ID:
                return (y << 6) | x0
            if value is None and off == K.NOC_ID_TRANSLATED:
                if W[H_NO_TRANSLATION]:
                    return (y << 6) | x0
                tx = next(t for t, n in self.to_noc0_x.items() if n == x0)
                return (y << 6) | tx
            return 0
        return self._hang(f"Tensix {idx} address 0x{addr:x} is unmapped")

    def _pc(self, idx: int, risc: str) -> int:
        W, r = self.W, T_BASE + idx * T_WORDS
        bit = 1 << K.RISC_BITS[risc]
        if W[r + T_SOFT] & bit:
            return 0
        if W[r + T_WEDGED] & bit:
            return 0x5A00 + 4 * K.RISC_BITS[risc]
        W[H_PC_TICK] = (W[H_PC_TICK] + 1) & MASK
        return L.FW_BASE + 0x40 + 4 * (W[H_PC_TICK] % 48)

    def _soft_reset_write(self, idx: int, value: int) -> None:
        W, r = self.W, T_BASE + idx * T_WORDS
        old, new = W[r + T_SOFT], value & MASK
        asserted, released = new & ~old, old & ~new
        if asserted & K.RISC_ALL and W[r + T_FW] == FW_RESIDENT and W[r + T_BLOCKED]:
            ctrl = (idx * K.L1_BYTES + W[r + T_CTRL]) >> 2
            if not self.l1_u32[ctrl + L.C_STOP]:
                # Reset of a kernel blocked in a wait that was never asked to stop: the tile's
                # NoC interface is left mid-transaction.
                W[r + T_NIU_STUCK] = 1
        W[r + T_WEDGED] &= ~new & MASK
        if new & BRISC:
            W[r + T_FW] = FW_NONE
            W[r + T_BLOCKED] = 0
        W[r + T_SOFT] = new
        if released & BRISC:
            base = idx * K.L1_BYTES + L.FW_BASE
            if self.l1[base:base + len(L.FW_MAGIC)] == L.FW_MAGIC:
                W[r + T_FW] = FW_IDLE
                self.l1[idx * K.L1_BYTES + L.SIGNAL_BYTE] = K.RUN_MSG_DONE
            else:
                W[r + T_WEDGED] |= BRISC      # running whatever L1 held

    def _foreign_l1_written(self, idx: int, addr: int) -> None:
        """A host write landed in the L1 of a core running foreign firmware: in its low L1 (its
        mailboxes and code) it corrupts that firmware."""
        if addr < FOREIGN_LOW_L1:
            self.W[T_BASE + idx * T_WORDS + T_WEDGED] |= BRISC

    def _tile_reset(self, idx: int) -> None:
        """The firmware's tile reset: RISCs to 0x47800, the tile's NoC state re-initialised."""
        W, r = self.W, T_BASE + idx * T_WORDS
        if W[r + T_NEEDS_ASIC]:
            return
        W[r + T_NIU_STUCK] = W[r + T_WEDGED] = W[r + T_BLOCKED] = W[r + T_FW] = W[r + T_STUCK_READS] = 0
        W[r + T_SOFT] = K.RISC_ALL

    # ---- the BRISC firmware model ----------------------------------------------------------
    def _advance(self, idx: int) -> None:
        W, r = self.W, T_BASE + idx * T_WORDS
        fw = W[r + T_FW]
        if W[r + T_WEDGED] & BRISC:
            return
        base = idx * K.L1_BYTES
        if fw == FW_IDLE:
            if self.l1[base + L.SIGNAL_BYTE] == K.RUN_MSG_GO:
                self._start_kernel(idx)
        elif fw == FW_RESIDENT:
            self._queue_step(idx)

    def _start_kernel(self, idx: int) -> None:
        W, r, base = self.W, T_BASE + idx * T_WORDS, idx * K.L1_BYTES
        magic, text, args, nonce, result, _enables, _, _ = L.LAUNCH_FMT.unpack_from(self.l1, base + L.LAUNCH)
        if magic != L.LAUNCH_MAGIC or text + L.KERNEL_FMT.size > K.L1_BYTES:
            self.l1[base + L.SIGNAL_BYTE] = K.RUN_MSG_DONE
            return
        kmagic, kind, _, _ = L.KERNEL_FMT.unpack_from(self.l1, base + text)
        if kmagic != L.KERNEL_MAGIC or kind not in (L.KIND_SUM, L.KIND_RESIDENT_QUEUE):
            W[r + T_WEDGED] |= BRISC          # jumped into bytes that are not a kernel
            return
        W[r + T_NONCE] = nonce
        if kind == L.KIND_SUM:
            src, count = L.SUM_ARGS_FMT.unpack_from(self.l1, base + args)
            if src + 4 * count > K.L1_BYTES:
                status, value = 1, 0
            else:
                status, value = 0, sum(self.l1_u32[(base + src) >> 2:((base + src) >> 2) + count]) & MASK
            done = L.RESULT_FMT.unpack_from(self.l1, base + result)[0]
            L.RESULT_FMT.pack_into(self.l1, base + result, (done + 1) & MASK, nonce, status, value)
            self.l1[base + L.SIGNAL_BYTE] = K.RUN_MSG_DONE
            return
        ctrl, ring, slots, idle = L.RESIDENT_ARGS_FMT.unpack_from(self.l1, base + args)
        c = (base + ctrl) >> 2
        u = self.l1_u32
        u[c + L.C_SLOTS], u[c + L.C_RING], u[c + L.C_IDLE_LIMIT] = slots, ring, idle
        u[c + L.C_STATE], u[c + L.C_EXIT], u[c + L.C_NONCE] = L.QSTATE_POLLING, L.EXIT_NONE, nonce
        W[r + T_CTRL], W[r + T_FW] = ctrl, FW_RESIDENT
        self.F[F_TILE + idx] = time.time()
        self._queue_step(idx)

    def _queue_exit(self, idx: int, reason: int) -> None:
        W, r, base = self.W, T_BASE + idx * T_WORDS, idx * K.L1_BYTES
        c = (base + W[r + T_CTRL]) >> 2
        self.l1_u32[c + L.C_STATE], self.l1_u32[c + L.C_EXIT] = L.QSTATE_EXITED, reason
        W[r + T_FW], W[r + T_BLOCKED] = FW_IDLE, 0
        self.l1[base + L.SIGNAL_BYTE] = K.RUN_MSG_DONE

    def _queue_step(self, idx: int) -> None:
        W, r, base, u = self.W, T_BASE + idx * T_WORDS, idx * K.L1_BYTES, self.l1_u32
        c = (base + W[r + T_CTRL]) >> 2
        if W[r + T_BLOCKED] or W[r + T_WEDGED]:
            # Every wait polls stop_request in the same loop: the only way out of a stuck wait.
            u[c + L.C_STATE] = L.QSTATE_BLOCKED
            if u[c + L.C_STOP]:
                self._queue_exit(idx, L.EXIT_STOP_REQUEST)
            else:
                u[c + L.C_HEARTBEAT] = (u[c + L.C_HEARTBEAT] + 1) & MASK
            return
        if u[c + L.C_STOP]:
            self._queue_exit(idx, L.EXIT_STOP_REQUEST)
            return
        now = time.time()
        done, posted = u[c + L.C_COMPLETED], u[c + L.C_POSTED]
        u[c + L.C_HEARTBEAT] = (u[c + L.C_HEARTBEAT] + 1) & MASK
        if done == posted:
            if (now - self.F[F_TILE + idx]) * SPINS_PER_SECOND > u[c + L.C_IDLE_LIMIT]:
                self._queue_exit(idx, L.EXIT_IDLE_LIMIT)
            return
        ring, slots, nonce = u[c + L.C_RING], u[c + L.C_SLOTS], W[r + T_NONCE]
        l1, unpack = self.l1, L.DESC_FMT.unpack_from
        while done != posted:
            op, _flags, _seq, a0, a1, a2, _a3, _a4, _a5 = unpack(l1, base + ring + (done % slots) * L.DESC_BYTES)
            if op == L.OP_STOP:
                u[c + L.C_COMPLETED], u[c + L.C_NONCE] = (done + 1) & MASK, nonce
                self._queue_exit(idx, L.EXIT_STOP_SENTINEL)
                return
            if not self._execute(base, op, a0, a1, a2):
                self._queue_exit(idx, L.EXIT_BAD_DESCRIPTOR)
                return
            done = (done + 1) & MASK
            # Completion is produced by the work item: count and nonce after executing it.
            u[c + L.C_COMPLETED], u[c + L.C_NONCE] = done, nonce
        self.F[F_TILE + idx] = now

    def _execute(self, base: int, op: int, a0: int, a1: int, a2: int) -> bool:
        u, top = self.l1_u32, K.L1_BYTES
        if op == L.OP_NOP:
            return True
        if op == L.OP_ADD:
            if a0 & 3 or a0 + 4 > top:
                return False
            u[(base + a0) >> 2] = (u[(base + a0) >> 2] + a1) & MASK
            return True
        if op == L.OP_FILL:
            if a0 & 3 or a0 + 4 * a1 > top:
                return False
            self.l1[base + a0:base + a0 + 4 * a1] = a2.to_bytes(4, "little") * a1
            return True
        if op == L.OP_COPY:
            if a0 + a2 > top or a1 + a2 > top:
                return False
            self.l1[base + a1:base + a1 + a2] = self.l1[base + a0:base + a0 + a2]
            return True
        return False

    def install_resident(self, idx: int, pending: int, blocked: bool) -> None:
        """Leave a resident kernel on a tile as a user process would have (for fault injection)."""
        W, r, base = self.W, T_BASE + idx * T_WORDS, idx * K.L1_BYTES
        W[r + T_TOUCHED] = 1
        self.l1[base + L.FW_BASE:base + L.FW_BASE + len(L.FW_IMAGE)] = L.FW_IMAGE
        self.l1[base + L.KERNEL_TEXT:base + L.KERNEL_TEXT + L.KERNEL_FMT.size] = L.kernel_image(L.KIND_RESIDENT_QUEUE)
        L.RESIDENT_ARGS_FMT.pack_into(self.l1, base + L.KERNEL_ARGS, L.QUEUE_CTRL, L.RING, L.RING_SLOTS, 0xFFFFFFFF)
        nonce = random.getrandbits(32)
        L.LAUNCH_FMT.pack_into(self.l1, base + L.LAUNCH, L.LAUNCH_MAGIC, L.KERNEL_TEXT, L.KERNEL_ARGS, nonce,
                               L.RESULT, L.ENABLE_BRISC, 0, 0)
        ctrl = [0] * L.CTRL_WORDS
        ctrl[L.C_POSTED], ctrl[L.C_STATE], ctrl[L.C_NONCE] = pending, L.QSTATE_POLLING, nonce
        ctrl[L.C_SLOTS], ctrl[L.C_RING], ctrl[L.C_IDLE_LIMIT] = L.RING_SLOTS, L.RING, 0xFFFFFFFF
        self.l1[base + L.QUEUE_CTRL:base + L.QUEUE_CTRL + 4 * L.CTRL_WORDS] = struct.pack(f"<{L.CTRL_WORDS}I", *ctrl)
        for i in range(pending):
            L.DESC_FMT.pack_into(self.l1, base + L.RING + i * L.DESC_BYTES, L.OP_NOP, 0, i, 0, 0, 0, 0, 0, 0)
        self.l1[base + L.SIGNAL_BYTE] = K.RUN_MSG_GO
        W[r + T_SOFT], W[r + T_FW], W[r + T_CTRL], W[r + T_NONCE] = K.RISC_ALL_BUT_BRISC, FW_RESIDENT, L.QUEUE_CTRL, nonce
        W[r + T_BLOCKED] = int(blocked)
        self.F[F_TILE + idx] = time.time()

    def install_foreign(self, idx: int) -> None:
        """Leave a core running firmware that is not ours (as tt-metal leaves a worker): every RISC out
        of reset, a kernel in flight, and in our layout's places its own data (a go signal of GO and
        a word where our queue state would be that reads as 'blocked')."""
        W, r, base = self.W, T_BASE + idx * T_WORDS, idx * K.L1_BYTES
        W[r + T_TOUCHED] = 1
        self.l1[base + L.FW_BASE:base + L.FW_BASE + len(FOREIGN_FW)] = FOREIGN_FW
        self.l1[base + L.SIGNAL_BYTE] = K.RUN_MSG_GO
        self.l1_u32[(base + L.QUEUE_CTRL + 4 * L.C_STATE) >> 2] = L.QSTATE_BLOCKED
        W[r + T_SOFT], W[r + T_FW], W[r + T_BLOCKED] = 0, FW_FOREIGN, 0
