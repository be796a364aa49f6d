"""The layout of the simulated p150a's shared state file (`state.bin`), used by every part of the model.

One mmap'd file of 32-bit words (and, from F_OFFSET, doubles) so every process that opens the
chip sees the same registers: a header of chip-wide words, ARC scratch and reset registers, the
driver's 64 LOCK_CTL locks, then one record of T_WORDS words per Tensix (physical index).
"""
from __future__ import annotations

from . import consts as K

MASK = 0xFFFFFFFF
N_TILES = K.TENSIX_COLS_DIE * len(K.TENSIX_ROWS)
STATE_BYTES = 1 << 16
STATE_MAGIC = 0x42484C32                    # bumped whenever the layout of a card's files changes

# ---- header words ---------------------------------------------------------------------------
H_GEN, H_NEEDS_INIT, H_NOC_HUNG, H_LINK_LOST, H_NEEDS_SBR, H_EPOCH, H_AICLK_FORCED = range(7)
H_GATED, H_BUSY, H_FW_BUNDLE, H_PC_TICK, H_TOKEN, H_MAGIC = range(7, 13)
H_NO_TRANSLATION, H_THROTTLE = 13, 14      # fw_table: noc_translation_en off; a max arbiter holding AICLK
H_RESET_MARKER = 15                        # the driver's reset marker in PCI config space
H_SCRATCH, H_TENSIX_RESET, H_RISC_RESET, H_LOCKS = 64, 128, 136, 160
LINK_UP, LINK_GONE, LINK_DOWN = 0, 1, 2    # H_LINK_LOST: gone for good, or down until a bus reset

# ---- Tensix records -------------------------------------------------------------------------
T_BASE, T_WORDS = 256, 16
T_SOFT, T_FW, T_BLOCKED, T_WEDGED, T_NIU_STUCK, T_NEEDS_ASIC, T_CTRL, T_NONCE, T_TOUCHED = range(9)
T_STUCK_READS = 9                          # reads issued to this tile's stuck NIU, never completed
FW_NONE, FW_IDLE, FW_RESIDENT, FW_FOREIGN = 0, 1, 2, 3

# ---- doubles: boot time, then one last-activity time per tile --------------------------------
F_OFFSET, F_BOOT, F_TILE = 1 << 15, 0, 8

# ---- what a NoC coordinate reaches ----------------------------------------------------------
TGT_NONE, TGT_TENSIX, TGT_HARVESTED, TGT_ARC, TGT_DRAM, TGT_PCIE, TGT_DRAM_HARVESTED = range(7)
