"""The simulated p150a: a Blackhole chip whose state lives in a run directory.

It answers NoC accesses the way the silicon and its firmware do, including the ways they punish
mistakes:

- the 17x12 grid, 140 Tensix of which 120 are enabled (two harvested columns chosen per card
  name), 1.5 MiB L1 per Tensix (one sparse file, mmap'd, so every process that opens the chip
  sees the same bytes), 8 GDDR6 banks of 4 GiB (sparse files), of which a p100a (a card whose
  name starts with `p100a`) has one harvested;
- NOC translation as the firmware programs it (tt-zephyr-platforms noc_init.c
  ComputeNocTranslation): translation tables per axis, rows 0 and 1 masked from column
  translation, so NOC0 coordinates of a Tensix are reinterpreted as translated ones while ARC,
  PCIe and DRAM still answer at NOC0; with translation off (fault `translation_off`) only NOC0
  coordinates have endpoints;
- ARC (`simarc`): scratch registers, the firmware's telemetry table and message queues;
- the Tensix tiles (`simtensix`): soft reset, PC snapshots, NIU ids, the BRISC firmware model;
- power gating at the last close (Tensix clock-gated, every RISC in soft reset);
- hangs: an access to a harvested or missing tile, an unmapped address or RISC private RAM
  hangs the NoC; from then on every NoC read returns 0xFFFFFFFF and writes vanish until an
  ASIC reset. A read of a tile whose NIU is stuck returns 0xFFFFFFFF and never completes
  inside the NoC: past STUCK_READ_CAPACITY such reads the NoC itself hangs (luwen's
  apps/drunken-monkey/src/hang/noc.rs: "100 accesses is enough to overcome that capability").
  Writes into the top 16 MiB of a DRAM bank are lost (tt-metal issue 9144).

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

from ..errors import UsageError
from . import consts as K
from .coords import physical_index
from .faults import Fault
from .simarc import CSM_BYTES, FW_BUNDLE, FW_BUNDLE_OLD, TELEM_DATA, ArcModel
from .simstate import (F_BOOT, F_OFFSET, FW_FOREIGN, H_AICLK_FORCED, H_BUSY, H_EPOCH, H_FW_BUNDLE, H_GATED, H_GEN, H_LINK_LOST,
                       H_LOCKS, H_MAGIC, H_NEEDS_INIT, H_NEEDS_SBR, H_NO_TRANSLATION, H_NOC_HUNG, H_RISC_RESET,
                       H_SCRATCH, H_TENSIX_RESET, H_THROTTLE, H_TOKEN, LINK_DOWN, LINK_GONE, LINK_UP, MASK, N_TILES,
                       STATE_BYTES, STATE_MAGIC, T_BASE, T_BLOCKED, T_FW, T_NEEDS_ASIC, T_NIU_STUCK, T_SOFT,
                       T_STUCK_READS, T_TOUCHED, T_WEDGED, T_WORDS, TGT_ARC, TGT_DRAM, TGT_DRAM_HARVESTED,
                       TGT_HARVESTED, TGT_NONE, TGT_PCIE, TGT_TENSIX)
from .simtensix import TensixModel

BOARDS = {"p150a": 0x40, "p100a": 0x43}      # UPI; a p100a has one GDDR bank harvested
STUCK_READ_CAPACITY = 64                     # reads a stuck NIU swallows before the NoC wedges
TABLE_SIZE = 32                              # NOC translation table entries per axis

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_FALLOC_PUNCH = 0x01 | 0x02         # KEEP_SIZE | PUNCH_HOLE


def _punch(fd: int, offset: int, length: int) -> bool:
    """Give back a byte range of a sparse file (it then reads as zeros)."""
    try:
        return _libc.fallocate(fd, _FALLOC_PUNCH, ctypes.c_long(offset), ctypes.c_long(length)) == 0
    except AttributeError:
        return False



def translation_tables(enabled_cols: int, enabled_gddr: int, pcie_x: int) -> tuple[list[int], list[int]]:
    """The firmware's per-axis NOC0 translation tables (index: translated coordinate, value: NOC0)."""
    tx, ty = list(range(TABLE_SIZE)), list(range(TABLE_SIZE))
    good = sorted(K.PHYS_COL_X[i] for i in range(K.TENSIX_COLS_DIE) if enabled_cols >> i & 1)
    bad = [i for i in range(K.TENSIX_COLS_DIE) if not enabled_cols >> i & 1]
    for noc_x in (*range(1, 8), *range(10, 17)):
        if good:
            tx[noc_x] = good.pop(0)
    for noc_x in range(16, 9, -1):
        if bad:
            tx[noc_x] = K.PHYS_COL_X[bad.pop(0)]
    bad_gddr = next((b for b in range(K.DRAM_BANKS) if not enabled_gddr >> b & 1), None)
    tx[17], tx[18] = (9, 0) if bad_gddr is not None and bad_gddr < 4 else (0, 9)
    order = [0, 1, 2, 3]
    if bad_gddr is not None:
        order.remove(bad_gddr % 4)
        order.append(bad_gddr % 4)
    for slot, row in enumerate(order):
        ty[12 + 3 * slot:15 + 3 * slot] = K.DRAM_NOC0_Y[row]
    tx[19], ty[24] = pcie_x, 0
    return tx, ty


class SimChip(TensixModel, ArcModel):
    """One simulated Blackhole card, opened from (and created in) its run directory."""

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
        ident = self.identity
        self.enabled_cols, self.enabled_gddr = ident["enabled_tensix_cols"], ident.get("enabled_gddr", 0xFF)
        self.pcie_x = K.PCIE_NOC0_XY[0]
        self._tx, self._ty = translation_tables(self.enabled_cols, self.enabled_gddr, self.pcie_x)
        tensix_x = (*range(1, 8), *range(10, 17))
        self.to_noc0_x = {t: self._tx[t] for t in tensix_x}
        self.harvested_x = [t for t in tensix_x if not self.enabled_cols >> K.PHYS_COL_X.index(self._tx[t]) & 1]
        self.bdf = ident["bdf"]

    # ---- creation and files ------------------------------------------------------------
    def _create(self) -> None:
        seed = int.from_bytes(hashlib.sha256(self.name.encode()).digest()[:8], "little")
        rng = random.Random(seed)
        board = "p100a" if self.name.startswith("p100a") else "p150a"
        harvested = sorted(rng.sample(range(K.TENSIX_COLS_DIE), 2))
        enabled = 0x3FFF & ~sum(1 << i for i in harvested)
        gddr = 0xFF & ~(1 << rng.randrange(K.DRAM_BANKS)) if board == "p100a" else 0xFF
        serial = (BOARDS[board] << 36) | (seed & 0xFFFFFFFFF)
        ident = {"name": self.name, "board": board, "board_id": f"{serial:016x}", "asic_id": f"{seed ^ (seed >> 17):016x}",
                 "enabled_tensix_cols": enabled, "harvested_phys_cols": harvested, "enabled_gddr": gddr,
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
        """State of a card that has just come out of an ASIC reset (or was just made). What lives
        in flash (firmware bundle, fw_table settings) and in the link survives it."""
        W = self.W
        self._wipe_memories()
        keep = {k: W[k] for k in (H_GEN, H_EPOCH, H_TOKEN, H_LINK_LOST, H_NEEDS_SBR, H_NO_TRANSLATION, H_THROTTLE)}
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

    def asic_reset(self) -> bool:
        """RESET_DEVICE(ASIC_RESET): a config-space write that interrupts ARC, so it works with a hung
        NoC but not without a link. False when the request never landed."""
        W = self.W
        if W[H_LINK_LOST] or W[H_NEEDS_SBR]:
            return False        # the chip stays as it was
        W[H_MAGIC] = 0
        self._power_on_reset()
        W[H_NEEDS_INIT] = 1
        self._hang_reason("")
        return True

    def power_cycle(self) -> None:
        """Power off and on: every memory, register, hang, lock and fault record gone.

        What stays is what is fused or printed on the board: name, serial, ASIC id, PCI
        address, harvested columns and banks. Firmware returns to the current bundle and
        fw_table (an `old_fw` or `translation_off` fault is forgotten with the others).
        Descriptors from before are disowned.
        """
        W = self.W
        for k in (H_LINK_LOST, H_NEEDS_SBR, H_NOC_HUNG, H_NEEDS_INIT, H_FW_BUNDLE, H_NO_TRANSLATION, H_THROTTLE):
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
        """RESET_DEVICE(RESET_PCIE_LINK): the bridge's secondary bus reset retrains a link that went
        down, and lets a reset request land again; a link that is gone stays gone."""
        W = self.W
        if W[H_LINK_LOST] == LINK_DOWN:
            W[H_LINK_LOST] = LINK_UP
        if W[H_LINK_LOST] != LINK_GONE:
            W[H_NEEDS_SBR] = 0

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
    @property
    def translation(self) -> bool:
        return not self.W[H_NO_TRANSLATION]

    def resolve(self, x: int, y: int) -> tuple[int, int]:
        """What a NoC request to (x, y) reaches: (kind, Tensix physical index or DRAM bank)."""
        if self.translation:
            if not (0 <= x < TABLE_SIZE and 0 <= y < TABLE_SIZE):
                return TGT_NONE, 0
            x, y = (x if y in (0, 1) else self._tx[x]), self._ty[y]
        return self._endpoint(x, y)

    def _endpoint(self, x: int, y: int) -> tuple[int, int]:
        """The tile at NOC0 (x, y)."""
        if (x, y) == K.ARC_XY:
            return TGT_ARC, 0
        if (x, y) == (self.pcie_x, 0):
            return TGT_PCIE, 0
        if x in K.DRAM_NOC0_X and 0 <= y < K.GRID_Y:
            row = next((r for r, ys in enumerate(K.DRAM_NOC0_Y) if y in ys), None)
            if row is not None:
                bank = 4 * K.DRAM_NOC0_X.index(x) + row
                return (TGT_DRAM if self.enabled_gddr >> bank & 1 else TGT_DRAM_HARVESTED), bank
        if x in K.PHYS_COL_X and y in K.TENSIX_ROWS:
            live = self.enabled_cols >> K.PHYS_COL_X.index(x) & 1
            return (TGT_TENSIX if live else TGT_HARVESTED), physical_index(x, y)
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

    def _stuck_read(self, idx: int) -> int:
        """A read of a tile whose NIU is stuck: all ones after the completion timeout, and one more
        transaction the NoC never gets back; past the capacity the whole NoC wedges."""
        W = self.W
        W[T_BASE + idx * T_WORDS + T_STUCK_READS] += 1
        if sum(W[T_BASE + i * T_WORDS + T_STUCK_READS] for i in range(N_TILES)) > STUCK_READ_CAPACITY:
            self._hang(f"more than {STUCK_READ_CAPACITY} reads of unresponsive Tensix tiles are outstanding: "
                       "the NoC ran out of room for transactions")
        return MASK

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
                return self._stuck_read(idx)
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
                return self.pcie_x          # y = 0
            return self._hang(f"PCIe tile address 0x{addr:x} is unmapped")
        if kind == TGT_HARVESTED:
            return self._hang(f"read of 0x{addr:x} at harvested Tensix {idx} (a bad endpoint)")
        if kind == TGT_DRAM_HARVESTED:
            return self._hang(f"read of 0x{addr:x} at harvested DRAM bank {idx} (a bad endpoint)")
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
                if W[r + T_FW] == FW_FOREIGN:
                    self._foreign_l1_written(idx, addr)
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
                self._stuck_read(idx)
                return b"\xff" * length
            if self.W[r + T_FW]:
                self._advance(idx)
            base = idx * K.L1_BYTES + addr
            return self.l1[base:base + length]
        if kind == TGT_ARC and K.ARC_CSM[0] <= addr and addr + length <= K.ARC_CSM[1]:
            off = addr - K.ARC_CSM[0]
            if off < TELEM_DATA + 4 * K.TAG_COUNT and off + length > TELEM_DATA:
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
                if W[r + T_FW] == FW_FOREIGN:
                    self._foreign_l1_written(idx, addr)
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
            return self.pcie_x
        if bar_offset == K.BAR0_NIU_PAGE + 0x100:
            return (1 << 14) if self.translation else 0     # NIU_CFG_0: NOC translation enabled
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
        keep = max(0, min(length, K.DRAM_BANK_ADDRESSABLE - addr))     # the top 16 MiB drop writes
        if keep:
            os.pwrite(fd, bytes(data[:keep]), addr)
        return b""

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
            W[H_LINK_LOST] = LINK_GONE
        elif f.kind == "link_down":
            W[H_LINK_LOST] = LINK_DOWN
        elif f.kind == "old_fw":
            W[H_FW_BUNDLE] = FW_BUNDLE_OLD
            W[H_SCRATCH + K.SCR_FW_VERSION] = FW_BUNDLE_OLD
        elif f.kind == "translation_off":
            W[H_NO_TRANSLATION] = 1
        elif f.kind == "throttle":
            W[H_THROTTLE] = K.AICLK_ARB_MAX_NAMES.index(f.params["arb"]) + 1
            W[H_BUSY] = 1
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
            elif f.kind == "foreign_fw":
                self.install_foreign(idx)
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
