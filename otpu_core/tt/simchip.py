"""The simulated p150a: a Blackhole chip whose state lives in a run directory.

It answers NoC accesses the way the silicon does, including the ways it punishes mistakes:

- the 17x12 grid, 140 Tensix of which 120 are enabled (two harvested columns chosen per card
  name), translated coordinates, 1.5 MiB L1 per Tensix (one sparse file, mmap'd, so every
  process that opens the chip sees the same bytes), 8 GDDR6 banks of 4 GiB (sparse files);
- ARC at (8,0) with its scratch registers, the telemetry table in CSM and the message queues,
  handling TEST, AICLK, power, and the single-tile and all-Tensix resets;
- per-Tensix soft-reset register, PC snapshots, NIU node ids, and a BRISC firmware model that
  boots from our image, runs one-shot kernels and a resident-queue kernel (`layout`) which
  obeys the three rules: completion is produced by the work, retire by asking, bounded idle;
- power gating at the last close (Tensix clock-gated, every RISC in soft reset);
- hangs: an access to a harvested or missing tile, an unmapped address or RISC private RAM
  hangs the NoC; from then on every NoC read returns 0xFFFFFFFF and writes vanish until an
  ASIC reset. A soft reset asserted on a kernel blocked in a wait that was not asked to stop
  leaves the tile's NoC interface stuck (only a tile reset helps).

The chip is evaluated lazily: a Tensix runs its firmware when the tile is next read, which
is when any observer could tell. Cross-process effects are what hardware has: several
processes may touch one chip at once.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import json
import mmap
import os
import random
import time
from pathlib import Path

import numpy as np

from ..errors import UsageError
from . import consts as K
from . import layout as L
from .coords import physical_index, tensix_translation
from .faults import Fault

MASK = 0xFFFFFFFF
N_TILES = K.TENSIX_COLS_DIE * len(K.TENSIX_ROWS)
STATE_BYTES = 1 << 16
# header words
H_GEN, H_NEEDS_INIT, H_NOC_HUNG, H_LINK_LOST, H_NEEDS_SBR, H_EPOCH, H_AICLK_FORCED = range(7)
H_GATED, H_BUSY, H_FW_BUNDLE, H_PC_TICK, H_TOKEN, H_MAGIC = range(7, 13)
H_SCRATCH, H_TENSIX_RESET, H_RISC_RESET, H_LOCKS = 64, 128, 136, 160
STATE_MAGIC = 0x42484C31
# tile records
T_BASE, T_WORDS = 256, 16
T_SOFT, T_FW, T_BLOCKED, T_WEDGED, T_NIU_STUCK, T_NEEDS_ASIC, T_CTRL, T_NONCE, T_TOUCHED = range(9)
FW_NONE, FW_IDLE, FW_RESIDENT = 0, 1, 2
# doubles: boot time, then one last-activity time per tile
F_OFFSET, F_BOOT, F_TILE = 1 << 15, 0, 8

TGT_NONE, TGT_TENSIX, TGT_HARVESTED, TGT_ARC, TGT_DRAM, TGT_PCIE = range(6)
ARC_BOOT_SECONDS = 0.05
SPINS_PER_SECOND = 1_000_000        # one resident poll loop per microsecond at 800 MHz
CSM_BYTES = K.ARC_CSM[1] - K.ARC_CSM[0]
MSGQ_CB, MSGQ_BASE, MSGQ_COUNT, MSGQ_ENTRIES = 0x800, 0x1000, 4, 4
MSGQ_BYTES = 32 + 2 * MSGQ_ENTRIES * 32
TELEM_TABLE, TELEM_DATA = 0x2000, 0x2400
FW_BUNDLE = 0x13090000              # 19.9.0.0: has 0xAE
FW_BUNDLE_OLD = 0x13080000
BOARD_UPI = 0x40                    # p150a
BRISC = 1 << K.RISC_BITS["brisc"]
PCIE_NODE_ID = (K.PCIE_NOC0_XY[1] << 6) | K.PCIE_NOC0_XY[0]

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_FALLOC_PUNCH = 0x01 | 0x02         # KEEP_SIZE | PUNCH_HOLE


def _punch(fd: int, offset: int, length: int) -> bool:
    """Give back a byte range of a sparse file (it then reads as zeros)."""
    try:
        return _libc.fallocate(fd, _FALLOC_PUNCH, ctypes.c_long(offset), ctypes.c_long(length)) == 0
    except AttributeError:
        return False


class SimChip:
    """One simulated p150a, opened from (and created in) its run directory."""

    def __init__(self, run_dir: Path, name: str):
        self.dir, self.name = Path(run_dir), name
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "create.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (self.dir / "identity.json").exists():
                self._create()
            self.identity = json.loads((self.dir / "identity.json").read_text())
            self._open_files()
            if self.W[H_MAGIC] != STATE_MAGIC:
                self._power_on_reset()
        cols = self.identity["enabled_tensix_cols"]
        self.to_noc0_x, self.harvested_x = tensix_translation(cols)
        self.bdf = self.identity["bdf"]

    # ---- creation and files ------------------------------------------------------------
    def _create(self) -> None:
        seed = int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "little")
        rng = random.Random(seed)
        harvested = sorted(rng.sample(range(K.TENSIX_COLS_DIE), 2))
        enabled = 0x3FFF & ~sum(1 << i for i in harvested)
        serial = (BOARD_UPI << 36) | (seed & 0xFFFFFFFFF)
        ident = {"name": self.name, "board_id": f"{serial:016x}", "asic_id": f"{seed ^ (seed >> 17):016x}",
                 "enabled_tensix_cols": enabled, "harvested_phys_cols": harvested,
                 "enabled_eth": 0x3FFF & ~(1 << rng.randrange(14)) & ~(1 << 13),
                 "bdf": f"{0x1000 + (seed >> 40) % 0xE000:04x}:{0x10 + seed % 0xE0:02x}:00.0", "created": time.time(), "applied_faults": []}
        for fname, size in (("state.bin", STATE_BYTES), ("l1.bin", N_TILES * K.L1_BYTES), ("csm.bin", CSM_BYTES)):
            with open(self.dir / fname, "wb") as f:
                f.truncate(size)
        (self.dir / "dram").mkdir(exist_ok=True)
        for b in range(K.DRAM_BANKS):
            with open(self.dir / "dram" / f"bank{b}.bin", "wb") as f:
                f.truncate(K.DRAM_BANK_BYTES)
        _write_json(self.dir / "identity.json", ident)

    def _open_files(self) -> None:
        def mapped(fname: str):
            fd = os.open(self.dir / fname, os.O_RDWR | os.O_CLOEXEC)
            return fd, mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._state_fd, self._state = mapped("state.bin")
        self.W = memoryview(self._state).cast("I")
        self.F = memoryview(self._state)[F_OFFSET:].cast("d")
        self._l1_fd, self.l1 = mapped("l1.bin")
        self.l1_u32 = memoryview(self.l1).cast("I")
        self._csm_fd, self.csm = mapped("csm.bin")
        self.csm_u32 = memoryview(self.csm).cast("I")
        self._dram_fds: dict[int, int] = {}

    def close(self) -> None:
        for view in (self.W, self.F, self.l1_u32, self.csm_u32):
            view.release()
        for m in (self._state, self.l1, self.csm):
            m.close()
        for fd in (self._state_fd, self._l1_fd, self._csm_fd, *self._dram_fds.values()):
            os.close(fd)

    def save_identity(self) -> None:
        _write_json(self.dir / "identity.json", self.identity)

    # ---- resets and power ----------------------------------------------------------------
    def _power_on_reset(self) -> None:
        """State of a card that has just come out of an ASIC reset (or was just made)."""
        W = self.W
        self._wipe_memories()
        keep = {k: W[k] for k in (H_GEN, H_EPOCH, H_TOKEN, H_LINK_LOST, H_NEEDS_SBR)}
        keep_fw = W[H_FW_BUNDLE] or FW_BUNDLE
        locks = bytes(self._state[H_LOCKS * 4:(H_LOCKS + 64) * 4])
        self._state[:F_OFFSET] = bytes(F_OFFSET)
        for k, v in keep.items():
            W[k] = v
        self._state[H_LOCKS * 4:(H_LOCKS + 64) * 4] = locks
        W[H_MAGIC], W[H_FW_BUNDLE], W[H_GATED] = STATE_MAGIC, keep_fw, 1
        for i in range(N_TILES):
            W[T_BASE + i * T_WORDS + T_SOFT] = K.RISC_ALL
        for i in range(8):
            W[H_TENSIX_RESET + i] = W[H_RISC_RESET + i] = MASK
        self.F[F_BOOT] = time.time()
        self._arc_init()

    def _wipe_memories(self) -> None:
        W = self.W
        for i in range(N_TILES):
            if W[T_BASE + i * T_WORDS + T_TOUCHED]:
                if not _punch(self._l1_fd, i * K.L1_BYTES, K.L1_BYTES):
                    self.l1[i * K.L1_BYTES:(i + 1) * K.L1_BYTES] = bytes(K.L1_BYTES)
                W[T_BASE + i * T_WORDS + T_TOUCHED] = 0
        for b in range(K.DRAM_BANKS):
            path = self.dir / "dram" / f"bank{b}.bin"
            os.truncate(path, 0)
            os.truncate(path, K.DRAM_BANK_BYTES)

    def asic_reset(self) -> None:
        """RESET_DEVICE(ASIC_RESET): the IRQ path to ARC, so it works with a hung NoC."""
        W = self.W
        if W[H_LINK_LOST]:
            return
        if W[H_NEEDS_SBR]:
            return      # the reset request never lands; the chip stays as it was
        W[H_MAGIC] = 0
        self._power_on_reset()
        W[H_NEEDS_INIT] = 1
        self._hang_reason("")

    def power_cycle(self) -> None:
        """Power off and on: every memory, register, hang, lock and fault record gone.

        What stays is what is fused or printed on the board: name, serial, ASIC id, PCI
        address, harvested columns. Firmware returns to the current bundle (an `old_fw` fault
        is forgotten with the others). Descriptors from before are disowned.
        """
        W = self.W
        for k in (H_LINK_LOST, H_NEEDS_SBR, H_NOC_HUNG, H_NEEDS_INIT, H_FW_BUNDLE):
            W[k] = 0
        self._state[H_LOCKS * 4:(H_LOCKS + 64) * 4] = bytes(4 * 64)
        W[H_GEN] += 1
        W[H_EPOCH] += 1
        W[H_MAGIC] = 0
        self._power_on_reset()
        self._hang_reason("")
        self.identity["applied_faults"] = []
        self.save_identity()

    def secondary_bus_reset(self) -> None:
        if not self.W[H_LINK_LOST]:
            self.W[H_NEEDS_SBR] = 0

    def post_reset(self) -> None:
        self.W[H_NEEDS_INIT] = 0

    def power_down(self) -> None:
        """Last descriptor closed: Tensix clock-gated, and every RISC soft-reset first."""
        W = self.W
        for i in range(N_TILES):
            r = T_BASE + i * T_WORDS
            W[r + T_SOFT] = K.RISC_ALL
            W[r + T_FW] = W[r + T_BLOCKED] = W[r + T_WEDGED] = 0
        W[H_GATED], W[H_BUSY], W[H_AICLK_FORCED] = 1, 0, 0

    def power_up(self) -> None:
        """A legacy client opened the device: every domain on (RISCs stay in reset)."""
        self.W[H_GATED] = 0

    # ---- endpoints ---------------------------------------------------------------------------
    def resolve(self, x: int, y: int) -> tuple[int, int]:
        if (x, y) == K.ARC_XY:
            return TGT_ARC, 0
        if (x, y) == K.PCIE_TRANSLATED_XY:
            return TGT_PCIE, 0
        if x in K.DRAM_TRANSLATED_X and K.DRAM_TRANSLATED_Y0 <= y < K.DRAM_TRANSLATED_Y0 + 12:
            return TGT_DRAM, (x - K.DRAM_TRANSLATED_X[0]) * 4 + (y - K.DRAM_TRANSLATED_Y0) // 3
        if x in self.to_noc0_x and y in K.TENSIX_ROWS:
            kind = TGT_HARVESTED if x in self.harvested_x else TGT_TENSIX
            return kind, physical_index(self.to_noc0_x[x], y)
        return TGT_NONE, 0

    def translated_tile(self, x: int, y: int) -> int:
        kind, idx = self.resolve(x, y)
        if kind != TGT_TENSIX:
            live = sorted(set(self.to_noc0_x) - set(self.harvested_x))
            raise UsageError(f"({x},{y}) is not a live Tensix on simulated card {self.name}",
                             hint=f"live Tensix: x in {live}, y in 2..11 (translated)")
        return idx

    def _hang_reason(self, text: str) -> None:
        (self.dir / "hang.txt").write_text(text)

    def hang_reason(self) -> str:
        try:
            return (self.dir / "hang.txt").read_text()
        except OSError:
            return ""

    def _hang(self, why: str) -> int:
        if not self.W[H_NOC_HUNG]:
            self.W[H_NOC_HUNG] = 1
            self._hang_reason(why)
        return MASK

    def _dead(self) -> bool:
        return bool(self.W[H_NOC_HUNG] or self.W[H_LINK_LOST])

    # ---- 32-bit accesses ---------------------------------------------------------------------
    def read32(self, tgt: tuple[int, int], addr: int) -> int:
        W = self.W
        if W[H_NOC_HUNG] or W[H_LINK_LOST]:
            return MASK
        kind, idx = tgt
        if kind == TGT_TENSIX:
            r = T_BASE + idx * T_WORDS
            if W[H_GATED]:
                return self._hang(f"read of clock-gated Tensix {idx} at 0x{addr:x}")
            if W[r + T_NIU_STUCK] or W[r + T_NEEDS_ASIC]:
                return MASK
            if addr < K.L1_BYTES:
                if W[r + T_FW]:
                    self._advance(idx)
                return self.l1_u32[(idx * K.L1_BYTES + addr) >> 2]
            return self._tensix_reg(idx, addr, None)
        if kind == TGT_ARC:
            return self._arc_reg(addr, None)
        if kind == TGT_DRAM:
            return int.from_bytes(self._dram_rw(idx, addr, 4, None), "little")
        if kind == TGT_PCIE:
            if addr - K.PCIE_NIU_NOC_ADDR == K.NOC_NODE_ID:
                return PCIE_NODE_ID
            return self._hang(f"PCIe tile address 0x{addr:x} is unmapped")
        if kind == TGT_HARVESTED:
            return self._hang(f"read of 0x{addr:x} at harvested Tensix {idx} (a bad endpoint)")
        return self._hang(f"read of 0x{addr:x} at a coordinate with no live endpoint")

    def write32(self, tgt: tuple[int, int], addr: int, value: int) -> None:
        W = self.W
        if W[H_NOC_HUNG] or W[H_LINK_LOST]:
            return
        kind, idx = tgt
        if kind == TGT_TENSIX:
            r = T_BASE + idx * T_WORDS
            if W[H_GATED]:
                self._hang(f"write to clock-gated Tensix {idx}")
                return
            if W[r + T_NIU_STUCK] or W[r + T_NEEDS_ASIC]:
                return
            if addr < K.L1_BYTES:
                W[r + T_TOUCHED] = 1
                self.l1_u32[(idx * K.L1_BYTES + addr) >> 2] = value
                return
            self._tensix_reg(idx, addr, value)
        elif kind == TGT_ARC:
            self._arc_reg(addr, value)
        elif kind == TGT_DRAM:
            self._dram_rw(idx, addr, 4, value.to_bytes(4, "little"))
        else:
            self._hang(f"write of 0x{addr:x} at a coordinate with no live endpoint")

    # ---- block accesses ------------------------------------------------------------------
    def read(self, tgt: tuple[int, int], addr: int, length: int) -> bytes:
        kind, idx = tgt
        if self._dead():
            return b"\xff" * length
        if kind == TGT_TENSIX and addr + length <= K.L1_BYTES:
            r = T_BASE + idx * T_WORDS
            if self.W[H_GATED]:
                self._hang(f"read of clock-gated Tensix {idx}")
                return b"\xff" * length
            if self.W[r + T_NIU_STUCK] or self.W[r + T_NEEDS_ASIC]:
                return b"\xff" * length
            if self.W[r + T_FW]:
                self._advance(idx)
            base = idx * K.L1_BYTES + addr
            return self.l1[base:base + length]
        if kind == TGT_ARC and K.ARC_CSM[0] <= addr and addr + length <= K.ARC_CSM[1]:
            off = addr - K.ARC_CSM[0]
            if off < TELEM_DATA + 4 * len(K.TAGS) and off + length > TELEM_DATA:
                self._telemetry_refresh()
            return self.csm[off:off + length]
        if kind == TGT_DRAM:
            return self._dram_rw(idx, addr, length, None)
        if addr & 3 or length & 3:
            self._hang(f"unaligned block read at 0x{addr:x}")
            return b"\xff" * length
        return b"".join(self.read32(tgt, addr + i).to_bytes(4, "little") for i in range(0, length, 4))

    def write(self, tgt: tuple[int, int], addr: int, data: bytes) -> None:
        kind, idx = tgt
        if self._dead():
            return
        if kind == TGT_TENSIX and addr + len(data) <= K.L1_BYTES:
            r = T_BASE + idx * T_WORDS
            W = self.W
            if W[H_GATED]:
                self._hang(f"write to clock-gated Tensix {idx}")
            elif not (W[r + T_NIU_STUCK] or W[r + T_NEEDS_ASIC]):
                W[r + T_TOUCHED] = 1
                base = idx * K.L1_BYTES + addr
                self.l1[base:base + len(data)] = data
            return
        if kind == TGT_ARC and K.ARC_CSM[0] <= addr and addr + len(data) <= K.ARC_CSM[1]:
            off = addr - K.ARC_CSM[0]
            self.csm[off:off + len(data)] = data
            return
        if kind == TGT_DRAM:
            self._dram_rw(idx, addr, len(data), data)
            return
        if addr & 3 or len(data) & 3:
            self._hang(f"unaligned block write at 0x{addr:x}")
            return
        for i in range(0, len(data), 4):
            self.write32(tgt, addr + i, int.from_bytes(data[i:i + 4], "little"))

    def bar_read32(self, bar_offset: int) -> int:
        """BAR0 registers of the PCIe tile itself (no NoC involved)."""
        if self.W[H_LINK_LOST]:
            return MASK
        if bar_offset == K.BAR0_NIU_PAGE + K.NOC_NODE_ID:
            return PCIE_NODE_ID
        if bar_offset == K.BAR0_NIU_PAGE + 0x100:
            return 1 << 14      # NIU_CFG_0: NOC translation enabled
        return 0

    # ---- DRAM ------------------------------------------------------------------------------
    def _dram_rw(self, bank: int, addr: int, length: int, data: bytes | None) -> bytes:
        if addr + length > K.DRAM_BANK_BYTES:
            self._hang(f"DRAM bank {bank} address 0x{addr:x} is past 4 GiB")
            return b"\xff" * length
        fd = self._dram_fds.get(bank)
        if fd is None:
            fd = self._dram_fds[bank] = os.open(self.dir / "dram" / f"bank{bank}.bin", os.O_RDWR | os.O_CLOEXEC)
        if data is None:
            return os.pread(fd, length, addr).ljust(length, b"\0")
        os.pwrite(fd, data, addr)
        return b""

    # ---- Tensix registers ------------------------------------------------------------------
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
                words = np.frombuffer(self.l1, dtype="<u4", count=count, offset=base + src)
                status, value = 0, int(words.sum(dtype=np.uint64)) & MASK
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
            self.l1[base + a0:base + a0 + 4 * a1] = np.full(a1, a2, dtype="<u4").tobytes()
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
        self.l1[base + L.QUEUE_CTRL:base + L.QUEUE_CTRL + 4 * L.CTRL_WORDS] = np.array(ctrl, "<u4").tobytes()
        for i in range(pending):
            L.DESC_FMT.pack_into(self.l1, base + L.RING + i * L.DESC_BYTES, L.OP_NOP, 0, i, 0, 0, 0, 0, 0, 0)
        self.l1[base + L.SIGNAL_BYTE] = K.RUN_MSG_GO
        W[r + T_SOFT], W[r + T_FW], W[r + T_CTRL], W[r + T_NONCE] = K.RISC_ALL_BUT_BRISC, FW_RESIDENT, L.QUEUE_CTRL, nonce
        W[r + T_BLOCKED] = int(blocked)
        self.F[F_TILE + idx] = time.time()

    # ---- ARC -----------------------------------------------------------------------------------
    def _arc_init(self) -> None:
        self.csm[:0x4000] = bytes(0x4000)
        u, W = self.csm_u32, self.W
        u[MSGQ_CB >> 2], u[(MSGQ_CB >> 2) + 1] = K.ARC_CSM[0] + MSGQ_BASE, MSGQ_ENTRIES | (MSGQ_COUNT << 8)
        tags = sorted(K.TAGS.values())
        t = TELEM_TABLE >> 2
        u[t], u[t + 1] = K.TELEMETRY_VERSION, len(tags)
        for i, tag in enumerate(tags):
            u[t + 2 + i] = tag | (i << 16)
        W[H_SCRATCH + K.SCR_FW_VERSION] = W[H_FW_BUNDLE]
        W[H_SCRATCH + K.SCR_MSGQ_CB] = K.ARC_CSM[0] + MSGQ_CB
        W[H_SCRATCH + K.SCR_TELEM_DATA] = K.ARC_CSM[0] + TELEM_DATA
        W[H_SCRATCH + K.SCR_TELEM_TABLE] = K.ARC_CSM[0] + TELEM_TABLE
        W[H_SCRATCH + K.SCR_BOOT_STATUS0] = K.BOOT_READY
        self._telemetry_refresh()

    def _arc_reg(self, addr: int, value: int | None) -> int:
        W = self.W
        if K.ARC_CSM[0] <= addr < K.ARC_CSM[1]:
            off = addr - K.ARC_CSM[0]
            if value is None:
                if TELEM_DATA <= off < TELEM_DATA + 4 * len(K.TAGS):
                    self._telemetry_refresh()
                return self.csm_u32[off >> 2]
            self.csm_u32[off >> 2] = value
            return 0
        if K.SCRATCH_RAM <= addr < K.SCRATCH_RAM + 4 * 64:
            n = (addr - K.SCRATCH_RAM) >> 2
            if value is not None:
                W[H_SCRATCH + n] = value
                return 0
            if time.time() < self.F[F_BOOT] + ARC_BOOT_SECONDS and n in (K.SCR_BOOT_STATUS0, K.SCR_TELEM_TABLE, K.SCR_TELEM_DATA):
                return 0        # ARC firmware still booting
            return W[H_SCRATCH + n]
        for reg, words in ((K.TENSIX_RESET, H_TENSIX_RESET), (K.TENSIX_RISC_RESET, H_RISC_RESET)):
            if reg <= addr < reg + 32:
                n = (addr - reg) >> 2
                if value is None:
                    return W[words + n]
                W[words + n] = value
                return 0
        if addr == K.ARC_MISC_CNTL:
            if value is not None and value & K.ARC_IRQ0:
                self._arc_service()
            return 0
        if addr == K.MSI_FIFO:
            if value is not None:
                self._arc_service()
            return 0
        if K.ARC_APB[0] <= addr < K.ARC_APB[1]:
            return 0
        return self._hang(f"ARC address 0x{addr:x} is unmapped")

    def telemetry_values(self) -> dict[int, int]:
        W, T = self.W, K.TAGS
        now = time.time()
        up = max(0.0, now - self.F[F_BOOT])
        busy = sum(1 for i in range(N_TILES) if W[T_BASE + i * T_WORDS + T_FW] == FW_RESIDENT)
        aiclk = W[H_AICLK_FORCED] or (1350 if W[H_BUSY] else 800)
        vcore = 720 + (aiclk - 800) * 3 // 10
        power = 22 + busy * 0.3 + (aiclk - 800) * 0.03
        temp = 38.0 + power * 0.25 + 0.5 * np.sin(now / 7.0)
        ident = self.identity
        board, asic = int(ident["board_id"], 16), int(ident["asic_id"], 16)
        bundle = W[H_FW_BUNDLE]
        return {
            T["BOARD_ID_HIGH"]: board >> 32, T["BOARD_ID_LOW"]: board & MASK, T["ASIC_ID"]: asic & MASK,
            T["HARVESTING_STATE"]: 0, T["UPDATE_TELEM_SPEED"]: 100, T["VCORE"]: vcore, T["TDP"]: int(power),
            T["TDC"]: int(power * 1000 / vcore), T["VDD_LIMITS"]: (900 << 16) | 700, T["THM_LIMIT_SHUTDOWN"]: 110,
            T["ASIC_TEMPERATURE"]: int(temp * 65536) & MASK, T["VREG_TEMPERATURE"]: 0, T["BOARD_TEMPERATURE"]: 0,
            T["AICLK"]: aiclk, T["AXICLK"]: 960, T["ARCCLK"]: 540, T["ETH_LIVE_STATUS"]: 0,
            T["GDDR_STATUS"]: 0x55555555, T["GDDR_SPEED"]: 16000, T["ETH_FW_VERSION"]: 0x010700,
            T["GDDR_FW_VERSION"]: (2 << 16) | 9, T["DM_APP_FW_VERSION"]: 0x050D0000, T["DM_BL_FW_VERSION"]: 0x00080000,
            T["FLASH_BUNDLE_VERSION"]: bundle, T["CM_FW_VERSION"]: bundle, T["L2CPU_FW_VERSION"]: 0,
            T["FAN_SPEED"]: 35, T["TIMER_HEARTBEAT"]: int(up * 60) & MASK, T["TELEM_ENUM_COUNT"]: len(T),
            T["ENABLED_TENSIX_COL"]: ident["enabled_tensix_cols"], T["ENABLED_ETH"]: ident["enabled_eth"],
            T["ENABLED_GDDR"]: 0xFF, T["ENABLED_L2CPU"]: 0xF, T["PCIE_USAGE"]: 0x1, T["INPUT_CURRENT"]: int(power * 1000 / 12),
            T["NOC_TRANSLATION"]: 1, T["FAN_RPM"]: 1900, T["MAX_GDDR_TEMP"]: int(temp) - 4, T["BOARD_POWER_LIMIT"]: 300,
            T["INPUT_POWER"]: int(power + 18), T["TDC_LIMIT_MAX"]: 200, T["THM_LIMIT_THROTTLE"]: 90,
            T["TT_FLASH_VERSION"]: 0x030301, T["THERM_TRIP_COUNT"]: 0, T["ASIC_ID_HIGH"]: asic >> 32,
            T["ASIC_ID_LOW"]: asic & MASK, T["AICLK_LIMIT_MAX"]: 1350, T["TDP_LIMIT_MAX"]: 150,
        }

    def _telemetry_refresh(self) -> None:
        values = self.telemetry_values()
        base = TELEM_DATA >> 2
        for i, tag in enumerate(sorted(K.TAGS.values())):
            self.csm_u32[base + i] = values.get(tag, 0)

    # ---- ARC message queues -------------------------------------------------------------------
    def _arc_service(self) -> None:
        u = self.csm_u32
        for q in range(MSGQ_COUNT):
            h = (MSGQ_BASE + q * MSGQ_BYTES) >> 2
            n2 = 2 * MSGQ_ENTRIES
            while u[h + 4] != u[h]:                  # request rptr != wptr
                if (u[h + 5] - u[h + 1]) % n2 == MSGQ_ENTRIES:
                    break                            # response queue full: host is not reading
                slot = u[h + 4] % MSGQ_ENTRIES
                req = [u[h + 8 + slot * 8 + i] for i in range(8)]
                resp = self._arc_message(req, u[h + 6])
                rs = u[h + 5] % MSGQ_ENTRIES
                for i, w in enumerate(resp):
                    u[h + 8 + MSGQ_ENTRIES * 8 + rs * 8 + i] = w & MASK
                u[h + 4] = (u[h + 4] + 1) % n2
                u[h + 5] = (u[h + 5] + 1) % n2
                u[h + 6] = (u[h + 6] + 1) & MASK     # last serial

    def _arc_message(self, req: list[int], last_serial: int) -> list[int]:
        W, M = self.W, K.MSG
        code = req[0] & 0xFF
        ok = lambda *data: [0, *data, *([0] * (7 - len(data)))]  # noqa: E731
        if code == M["TEST"]:
            return ok(req[1] + 1, last_serial + 1)
        if code == M["TOGGLE_SINGLE_TENSIX_RESET"]:
            if W[H_FW_BUNDLE] < 0x13090000:
                return [K.MSG_STATUS_UNKNOWN] + [0] * 7
            x, y = req[1] & 0xFF, (req[1] >> 8) & 0xFF
            kind, idx = self.resolve(x, y)
            if kind != TGT_TENSIX:
                return ok(1)
            self._tile_reset(idx)
            return ok(0)
        if code == M["TOGGLE_TENSIX_RESET"]:
            for i in range(N_TILES):
                self._tile_reset(i)
            return ok()
        if code == M["FORCE_AICLK"]:
            W[H_AICLK_FORCED] = req[1]
            return ok()
        if code == M["GET_AICLK"]:
            aiclk = W[H_AICLK_FORCED] or (1350 if W[H_BUSY] else 800)
            return [aiclk << 16, aiclk, 0, 0, 0, 0, 0, 0]
        if code in (M["AICLK_GO_BUSY"], M["AICLK_GO_LONG_IDLE"]):
            W[H_BUSY] = int(code == M["AICLK_GO_BUSY"])
            return ok()
        if code == M["POWER_SETTING"]:
            flags = (req[0] >> 16) & 0xFFFF
            if flags & 4:
                self.power_up()
            else:
                self.power_down()
            return ok()
        if code in (M["REINIT_TENSIX"], M["ASIC_STATE0"], M["ASIC_STATE3"], M["SET_WDT_TIMEOUT"]):
            return ok()
        return [K.MSG_STATUS_UNKNOWN] + [0] * 7

    def _tile_reset(self, idx: int) -> None:
        """What the firmware's tile reset does: RISCs to 0x47800, NoC state of the tile re-inited."""
        W, r = self.W, T_BASE + idx * T_WORDS
        if W[r + T_NEEDS_ASIC]:
            return
        W[r + T_NIU_STUCK] = W[r + T_WEDGED] = W[r + T_BLOCKED] = W[r + T_FW] = 0
        W[r + T_SOFT] = K.RISC_ALL

    # ---- faults ------------------------------------------------------------------------------
    def inject(self, faults: list[Fault]) -> list[Fault]:
        """Apply each fault spec once in this chip's life (the record survives resets, so a
        recovered fault stays recovered when the next process opens with the same spec).
        Returns the specs that were not applied because the chip already had them; only
        `power_cycle` forgets the record."""
        applied = self.identity.setdefault("applied_faults", [])
        repeated = [f for f in faults if str(f) in applied]
        new = [f for f in faults if str(f) not in applied]
        for f in new:
            self._inject_one(f)
            applied.append(str(f))
        if new:
            self.save_identity()
        return repeated

    def _inject_one(self, f: Fault) -> None:
        W = self.W
        if f.kind == "hang_chip":
            self._hang("fault injected: NoC hung (as after a bad endpoint)")
        elif f.kind == "very_hung":
            self._hang("fault injected: NoC hung; the ASIC reset request will not land without an SBR")
            W[H_NEEDS_SBR] = 1
        elif f.kind == "link_lost":
            W[H_LINK_LOST] = 1
        elif f.kind == "old_fw":
            W[H_FW_BUNDLE] = FW_BUNDLE_OLD
            W[H_SCRATCH + K.SCR_FW_VERSION] = FW_BUNDLE_OLD
        else:
            idx = self.translated_tile(*f.xy())
            r = T_BASE + idx * T_WORDS
            self.power_up()
            if f.kind == "hang_resident":
                self.install_resident(idx, pending=1, blocked=True)
            elif f.kind == "wedge":
                self.install_resident(idx, pending=1, blocked=False)
                bit = 1 << K.RISC_BITS[f.risc]
                W[r + T_WEDGED] |= bit
                W[r + T_SOFT] &= ~bit & MASK
            elif f.kind == "noc_stuck":
                W[r + T_NIU_STUCK] = 1
            elif f.kind == "bad_tile":
                W[r + T_NEEDS_ASIC] = 1

    # ---- driver-side descriptor bookkeeping ------------------------------------------------------
    def new_token(self) -> int:
        self.W[H_TOKEN] = (self.W[H_TOKEN] % 0xFFFFFF) + 1
        return self.W[H_TOKEN]


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
