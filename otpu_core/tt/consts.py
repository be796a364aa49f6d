"""Facts of the Blackhole p150a that every layer shares (see docs/tenstorrent.md for sources).

Only architecture facts live here: addresses, bit positions, tag and message numbers. Which
tiles are alive on a given card is never a constant; it comes from telemetry (`coords`).
"""
from __future__ import annotations

PCI_VENDOR, PCI_DEVICE_BH = 0x1E52, 0xB140
# Board names as tt-smi shows them (tt-smi tt_smi/utils.py get_board_type).
UPI_NAMES = {0x40: "p150a", 0x41: "p150b", 0x42: "p150c", 0x43: "p100a", 0x36: "bh-scrappy",
             0x44: "p300b", 0x45: "p300a", 0x46: "p300c", 0x47: "tt-galaxy-bh"}

# ---- NoC grid (NOC0 coordinates) ---------------------------------------------------------
GRID_X, GRID_Y = 17, 12
# Tensix physical column i sits at NOC0 x = PHYS_COL_X[i]; the same order is the bit order of
# telemetry tag ENABLED_TENSIX_COL.
PHYS_COL_X = (1, 16, 2, 15, 3, 14, 4, 13, 5, 12, 6, 11, 7, 10)
TENSIX_ROWS = tuple(range(2, 12))
TENSIX_COLS_DIE = 14
TRANSLATED_TENSIX_X = (1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16)
ARC_XY = (8, 0)                 # never translated
PCIE_TRANSLATED_XY = (19, 24)   # active PCIe endpoint, translated
PCIE_NOC0_XY = (2, 0)           # p150a uses instance 0 (the other is (11, 0))
DRAM_TRANSLATED_X = (17, 18)    # west banks 0-3, east banks 4-7
DRAM_TRANSLATED_Y0 = 12         # three consecutive y per bank, bank order
DRAM_BANKS, DRAM_PORTS = 8, 3
DRAM_BANK_BYTES = 4 << 30
# The top 16 MiB of a bank are not addressable (a Blackhole bug; tt-metal issue 9144): tt-metal's
# soc descriptor gives dram_bank_size 4278190080.
DRAM_BANK_ADDRESSABLE = DRAM_BANK_BYTES - (16 << 20)
# NOC0 y of the three ports of GDDR controller b % 4 (x 0 for banks 0-3, 9 for 4-7);
# tt-zephyr-platforms lib/tenstorrent/bh_arc/noc_init.c kGddrY.
DRAM_NOC0_X = (0, 9)
DRAM_NOC0_Y = ((0, 1, 11), (2, 10, 3), (9, 4, 8), (5, 7, 6))

# ---- Tensix address map ------------------------------------------------------------------
L1_BYTES = 0x180000                      # 1.5 MiB
SOFT_RESET_0 = 0xFFB121B0
RISC_BITS = {"brisc": 11, "trisc0": 12, "trisc1": 13, "trisc2": 14, "ncrisc": 18}
RISC_ALL = 0x47800
RISC_ALL_BUT_BRISC = 0x47000
PC_SNAPSHOT = {"brisc": 0xFFB13138, "ncrisc": 0xFFB1313C, "trisc0": 0xFFB13140,
               "trisc1": 0xFFB13144, "trisc2": 0xFFB13148}
DEBUG_REGS = (0xFFB12000, 0xFFB14000)    # soft reset, reset PCs, PC snapshots
PRIVATE_RAM = ((0xFFB00000, 0xFFB12000), (0xFFB14000, 0xFFB1E000))  # never over the NoC on BH
NIU0_BASE = 0xFFB20000
NIU_REGS = (0xFFB20000, 0xFFB40000)      # NOC0 and NOC1 NIU
NOC_NODE_ID = 0x44                       # x = bits 5:0, y = bits 11:6
NOC_ID_TRANSLATED = 0x148
REG_WINDOW_BASE = 0xFFA00000             # the 2 MiB window that holds every Tensix register

# ---- ARC (tile 8,0) ----------------------------------------------------------------------
ARC_CSM = (0x10000000, 0x10080000)
ARC_RESET_UNIT = 0x80030000
TENSIX_RESET = 0x80030020                # 8 words, active low, one bit per Tensix
TENSIX_RISC_RESET = 0x80030040           # 8 words
SCRATCH_RAM = 0x80030400                 # + 4n
ARC_MISC_CNTL = 0x80030100
ARC_IRQ0 = 1 << 16
MSI_FIFO = 0x800B0000
ARC_APB = (0x80030000, 0x80031000)
SCR_FW_VERSION, SCR_BOOT_STATUS0, SCR_MSGQ_CB, SCR_TELEM_DATA, SCR_TELEM_TABLE = 0, 2, 11, 12, 13
BOOT_READY = 0x5                         # msg queue ready + hw init done

# ---- PCIe tile ---------------------------------------------------------------------------
BAR0_NIU_PAGE = 0x1FD04000               # the PCIe tile's own NOC0 NIU, through the BAR
PCIE_NIU_NOC_ADDR = 0xFFFFFFFFFF000000   # the PCIe NIU seen over the NoC

# ---- telemetry tags (tt-zephyr-platforms lib/tenstorrent/bh_arc/telemetry.h) -------------
TAGS = {
    "BOARD_ID_HIGH": 1, "BOARD_ID_LOW": 2, "ASIC_ID": 3, "HARVESTING_STATE": 4, "UPDATE_TELEM_SPEED": 5,
    "VCORE": 6, "TDP": 7, "TDC": 8, "VDD_LIMITS": 9, "THM_LIMIT_SHUTDOWN": 10, "ASIC_TEMPERATURE": 11,
    "VREG_TEMPERATURE": 12, "BOARD_TEMPERATURE": 13, "AICLK": 14, "AXICLK": 15, "ARCCLK": 16,
    "L2CPUCLK0": 17, "L2CPUCLK1": 18, "L2CPUCLK2": 19, "L2CPUCLK3": 20,
    "ETH_LIVE_STATUS": 21, "GDDR_STATUS": 22, "GDDR_SPEED": 23, "ETH_FW_VERSION": 24,
    "GDDR_FW_VERSION": 25, "DM_APP_FW_VERSION": 26, "DM_BL_FW_VERSION": 27, "FLASH_BUNDLE_VERSION": 28,
    "CM_FW_VERSION": 29, "L2CPU_FW_VERSION": 30, "FAN_SPEED": 31, "TIMER_HEARTBEAT": 32,
    "TELEM_ENUM_COUNT": 33, "ENABLED_TENSIX_COL": 34, "ENABLED_ETH": 35, "ENABLED_GDDR": 36,
    "ENABLED_L2CPU": 37, "PCIE_USAGE": 38, "INPUT_CURRENT": 39, "NOC_TRANSLATION": 40, "FAN_RPM": 41,
    "GDDR_0_1_TEMP": 42, "GDDR_2_3_TEMP": 43, "GDDR_4_5_TEMP": 44, "GDDR_6_7_TEMP": 45,
    "GDDR_0_1_CORR_ERRS": 46, "GDDR_2_3_CORR_ERRS": 47, "GDDR_4_5_CORR_ERRS": 48, "GDDR_6_7_CORR_ERRS": 49,
    "GDDR_UNCORR_ERRS": 50, "MAX_GDDR_TEMP": 51, "ASIC_LOCATION": 52, "BOARD_POWER_LIMIT": 53,
    "INPUT_POWER": 54, "TDC_LIMIT_MAX": 55, "THM_LIMIT_THROTTLE": 56, "FW_BUILD_DATE": 57,
    "TT_FLASH_VERSION": 58, "ENABLED_TENSIX_ROW": 59, "THERM_TRIP_COUNT": 60, "ASIC_ID_HIGH": 61,
    "ASIC_ID_LOW": 62, "AICLK_LIMIT_MAX": 63, "TDP_LIMIT_MAX": 64, "AICLK_ARB_MIN": 65, "AICLK_ARB_MAX": 66,
    "ENABLED_MIN_ARB": 67, "ENABLED_MAX_ARB": 68, "AICLK_PPM_INFO": 69, "HOST_AICLK_LIMIT": 70,
}
TAG_NAMES = {v: k for k, v in TAGS.items()}
TAG_COUNT = 71
TELEMETRY_VERSION = 0x00000100
# tt-smi's snapshot names a tag as tt-umd's Python enum does (tt-umd nanobind/py_api_telemetry.cpp):
# the firmware's name except these renames; the tags that enum lacks are not in tt-smi's
# smbus_telem under their own names (INPUT_POWER is added by number, tt-smi tt_smi/backend.py
# get_smbus_board_info; 69 appears as the enum's NUMBER_OF_TAGS).
UMD_TAG_NAMES = {22: "DDR_STATUS", 23: "DDR_SPEED", 33: "TELEMETRY_ENUM_COUNT"}
UMD_UNNAMED_TAGS = frozenset({39, 54, 57, 59, 69, 70})
# AICLK_ARB_MAX: low 16 bits the effective maximum in MHz, high 16 bits the arbiter that sets it
# (tt-zephyr-platforms lib/tenstorrent/bh_arc/aiclk_ppm.h enum aiclk_arb_max).
AICLK_ARB_MAX_NAMES = ("fmax", "tdp", "fast_tdc", "tdc", "thermal", "board_power", "voltage", "gddr_thermal",
                       "doppler_slow", "doppler_critical", "host_fmax")
ARB_FMAX = 0

# ---- ARC messages (tt-zephyr-platforms include/tenstorrent/smc_msg.h) ----------------------
MSG = {
    "REINIT_TENSIX": 0x20, "POWER_SETTING": 0x21, "FORCE_AICLK": 0x33, "GET_AICLK": 0x34,
    "AICLK_GO_BUSY": 0x52, "AICLK_GO_LONG_IDLE": 0x54, "TEST": 0x90, "ASIC_STATE0": 0xA0,
    "ASIC_STATE3": 0xA3, "TOGGLE_SINGLE_TENSIX_RESET": 0xAE, "TOGGLE_TENSIX_RESET": 0xAF,
    "SET_WDT_TIMEOUT": 0xC1,
}
MSG_STATUS_UNKNOWN = 0xFF              # MSG_ERROR_REPLY: no handler for the code
MSG_STATUS_SCRATCH_ONLY = 0xFE
# Queue use proposed by Tenstorrent's system engineers (tt-umd types/blackhole_arc.hpp): 0 kmd,
# 1 monitoring, 2 tools (luwen, so tt-flash and tt-smi --use_luwen), 3 application (tt-umd).
APP_QUEUE = 3
FW_SINGLE_TILE_RESET = 0x13090000        # 19.9.0: first bundle with message 0xAE

# ---- tt-metal run-message values (the mailbox signal byte) -------------------------------
RUN_MSG_INIT, RUN_MSG_GO, RUN_MSG_DONE = 0x40, 0x80, 0x00

# ---- TLB windows ---------------------------------------------------------------------------
TLB_2M = 2 << 20
TLB_4G = 4 << 30
BAR0_MMAP_UC = 0
TLB_MMAP_UC, TLB_MMAP_WC = 6 << 36, 7 << 36
ORDERING_RELAXED, ORDERING_STRICT, ORDERING_POSTED = 0, 1, 2


def version_tuple(word: int) -> tuple[int, int, int, int]:
    """A bundle / CM / DM firmware version word: bytes major.minor.patch.build."""
    return (word >> 24) & 0xFF, (word >> 16) & 0xFF, (word >> 8) & 0xFF, word & 0xFF


def version_text(word: int) -> str:
    return ".".join(str(v) for v in version_tuple(word))
