"""The Blackhole facts of otpu_core/tt, pinned to Tenstorrent's public sources.

The simulated chip, the host code and the other tests all read otpu_core/tt/consts.py, so a wrong
constant there agrees with itself everywhere else. The values below are copied, as data, from:

- tenstorrent/tt-umd @3ed9cb6d0 (UMD): device/api/umd/device/arch/blackhole_implementation.hpp
  (UMD_ARCH) and device/api/umd/device/types/telemetry.hpp (UMD_TAGS);
- tenstorrent/tt-zephyr-platforms @74122be72 (the ARC firmware): lib/tenstorrent/bh_arc/
  telemetry.h (FW_TELEMETRY), include/tenstorrent/smc_msg.h (FW_MESSAGES), lib/tenstorrent/bh_arc/
  noc.c (FW_NOC: kPhysXToNoc0), lib/tenstorrent/bh_arc/noc_init.c (FW_NOC_INIT: kTensixEthNoc0X,
  ComputeNocTranslation), lib/tenstorrent/bh_arc/init.h (FW_INIT: the reset unit),
  lib/tenstorrent/bh_arc/status_reg.h (FW_STATUS: the boot status word);
- tenstorrent/tt-kmd @4af71921a (KMD): blackhole.c and enumerate.h.

Changing any of these constants in otpu_core/tt fails a test here.
"""
import itertools

import pytest

from otpu_core.tt import consts as K
from otpu_core.tt.coords import TileMap

UMD_ARCH = "tt-umd device/api/umd/device/arch/blackhole_implementation.hpp"
UMD_TAGS = "tt-umd device/api/umd/device/types/telemetry.hpp"
FW_TELEMETRY = "tt-zephyr-platforms lib/tenstorrent/bh_arc/telemetry.h"
FW_MESSAGES = "tt-zephyr-platforms include/tenstorrent/smc_msg.h"
FW_NOC = "tt-zephyr-platforms lib/tenstorrent/bh_arc/noc.c"
FW_NOC_INIT = "tt-zephyr-platforms lib/tenstorrent/bh_arc/noc_init.c"
FW_INIT = "tt-zephyr-platforms lib/tenstorrent/bh_arc/init.h"
FW_STATUS = "tt-zephyr-platforms lib/tenstorrent/bh_arc/status_reg.h"
KMD = "tt-kmd blackhole.c"
KMD_ENUM = "tt-kmd enumerate.h"

# HARVESTING_NOC_LOCATIONS (UMD_ARCH); kTensixEthNoc0X (FW_NOC_INIT)
DIE_COLUMN_NOC0_X = (1, 16, 2, 15, 3, 14, 4, 13, 5, 12, 6, 11, 7, 10)
# kPhysXToNoc0 (FW_NOC); TensixPhysXToNoc(i) = PhysXToNoc(i + 1)
PHYS_X_TO_NOC0 = (0, 1, 16, 2, 15, 3, 14, 4, 13, 5, 12, 6, 11, 7, 10, 8, 9)
# SOFT_RESET_BRISC .. SOFT_RESET_NCRISC (UMD_ARCH)
SOFT_RESET_BITS = {"brisc": 1 << 11, "trisc0": 1 << 12, "trisc1": 1 << 13, "trisc2": 1 << 14, "ncrisc": 1 << 18}

FACTS = [  # (name in consts, public value, source)
    ("GRID_X", 17, f"{UMD_ARCH} GRID_SIZE"), ("GRID_Y", 12, f"{UMD_ARCH} GRID_SIZE"),
    ("TRANSLATED_TENSIX_X", (1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16), f"{UMD_ARCH} T6_X_LOCATIONS"),
    ("TENSIX_ROWS", tuple(range(2, 12)), f"{UMD_ARCH} T6_Y_LOCATIONS"),
    ("TENSIX_COLS_DIE", 14, f"{UMD_ARCH} TENSIX_GRID_SIZE"),
    ("ARC_XY", (8, 0), f"{UMD_ARCH} ARC_CORES_NOC0; {KMD} ARC_X, ARC_Y"),
    ("PCIE_NOC0_XY", (2, 0), f"{UMD_ARCH} PCIE_CORES_TYPE2_NOC0; {FW_NOC_INIT} pcie_x for instance 0"),
    ("PCIE_TRANSLATED_XY", (19, 24), f"{UMD_ARCH} pcie_translated_coordinate_start_x/y"),
    ("DRAM_TRANSLATED_X", (17, 18), f"{UMD_ARCH} dram_translated_coordinate_start_x; {FW_NOC_INIT} west 17, east 18"),
    ("DRAM_TRANSLATED_Y0", 12, f"{UMD_ARCH} dram_translated_coordinate_start_y"),
    ("DRAM_BANKS", 8, f"{UMD_ARCH} NUM_DRAM_BANKS"), ("DRAM_PORTS", 3, f"{UMD_ARCH} NUM_NOC_PORTS_PER_DRAM_BANK"),
    ("DRAM_BANK_BYTES", 4294967296, f"{UMD_ARCH} DRAM_BANK_SIZE"),
    ("L1_BYTES", 1572864, f"{UMD_ARCH} TENSIX_L1_SIZE"),
    ("SOFT_RESET_0", 0xFFB121B0, f"{UMD_ARCH} TENSIX_SOFT_RESET_ADDR"),
    ("NIU0_BASE", 0xFFB20000, f"{UMD_ARCH} NOC0_CONTROL_REG_ADDR_BASE_MAP TENSIX; {FW_NOC} NOC_REGS_START_ADDR"),
    ("PCIE_NIU_NOC_ADDR", 0xFFFFFFFFFF000000, f"{UMD_ARCH} NOC0_CONTROL_REG_ADDR_BASE_MAP PCIE"),
    ("BAR0_NIU_PAGE", 0x1FD04000, f"{UMD_ARCH} NIU_CFG_NOC0_BAR_PCIE_ADDR; {KMD} NOC2AXI_CFG_START + 0x4000"),
    ("NOC_NODE_ID", 0x44, f"{UMD_ARCH} NOC_NODE_ID_OFFSET"),
    ("NOC_ID_TRANSLATED", 0x148, f"{UMD_ARCH} NOC_ID_TRANSLATED_OFFSET"),
    ("ARC_RESET_UNIT", 0x80030000, f"{UMD_ARCH} ARC_NOC_XBAR_ADDRESS_START + ARC_RESET_UNIT_OFFSET"),
    ("ARC_MISC_CNTL", 0x80030100, f"{UMD_ARCH} ARC_FW_INT_ADDR"),
    ("ARC_IRQ0", 65536, f"{UMD_ARCH} ARC_FW_INT_VAL"),
    ("SCRATCH_RAM", 0x80030400, f"{KMD} RESET_SCRATCH(0); {UMD_ARCH} SCRATCH_RAM_0"),
    ("SCR_BOOT_STATUS0", 2, f"{KMD} ARC_BOOT_STATUS = RESET_SCRATCH(2)"),
    ("BOOT_READY", 1 | 2 << 1, f"{FW_STATUS} STATUS_BOOT_STATUS0: msg_queue_ready (bit 0) and hw_init_status "
                               f"(bits 2:1) = kHwInitDone = 2 ({FW_INIT})"),
    ("SCR_MSGQ_CB", 11, f"{KMD} ARC_MSG_QCB_PTR = RESET_SCRATCH(11)"),
    ("SCR_TELEM_DATA", 12, f"{KMD} ARC_TELEMETRY_DATA = RESET_SCRATCH(12)"),
    ("SCR_TELEM_TABLE", 13, f"{KMD} ARC_TELEMETRY_PTR = RESET_SCRATCH(13)"),
    ("MSI_FIFO", 0x800B0000, f"{KMD} ARC_MSI_FIFO"),
    ("TENSIX_RESET", 0x80030020, f"{FW_INIT} RESET_UNIT_TENSIX_RESET_0_REG_ADDR"),
    ("TENSIX_RISC_RESET", 0x80030040, f"{FW_INIT} RESET_UNIT_TENSIX_RISC_RESET_0_REG_ADDR"),
    ("PCI_VENDOR", 0x1E52, f"{KMD_ENUM} PCI_VENDOR_ID_TENSTORRENT"),
    ("PCI_DEVICE_BH", 0xB140, f"{KMD_ENUM} PCI_DEVICE_ID_BLACKHOLE"),
    ("TLB_2M", 2 << 20, f"{KMD} TLB_2M_WINDOW_SIZE; {UMD_ARCH} TLB_2M_SIZE"),
    ("TLB_4G", 4 << 30, f"{KMD} TLB_4G_WINDOW_SIZE; {UMD_ARCH} TLB_4G_SIZE"),
]

# TAG_* (FW_TELEMETRY), every tag consts.TAGS names; the firmware's names without TAG_.
FIRMWARE_TAGS = {
    "BOARD_ID_HIGH": 1, "BOARD_ID_LOW": 2, "ASIC_ID": 3, "HARVESTING_STATE": 4, "UPDATE_TELEM_SPEED": 5,
    "VCORE": 6, "TDP": 7, "TDC": 8, "VDD_LIMITS": 9, "THM_LIMIT_SHUTDOWN": 10, "ASIC_TEMPERATURE": 11,
    "VREG_TEMPERATURE": 12, "BOARD_TEMPERATURE": 13, "AICLK": 14, "AXICLK": 15, "ARCCLK": 16,
    "L2CPUCLK0": 17, "L2CPUCLK1": 18, "L2CPUCLK2": 19, "L2CPUCLK3": 20, "ETH_LIVE_STATUS": 21,
    "GDDR_STATUS": 22, "GDDR_SPEED": 23, "ETH_FW_VERSION": 24, "GDDR_FW_VERSION": 25, "DM_APP_FW_VERSION": 26,
    "DM_BL_FW_VERSION": 27, "FLASH_BUNDLE_VERSION": 28, "CM_FW_VERSION": 29, "L2CPU_FW_VERSION": 30,
    "FAN_SPEED": 31, "TIMER_HEARTBEAT": 32, "TELEM_ENUM_COUNT": 33, "ENABLED_TENSIX_COL": 34, "ENABLED_ETH": 35,
    "ENABLED_GDDR": 36, "ENABLED_L2CPU": 37, "PCIE_USAGE": 38, "INPUT_CURRENT": 39, "NOC_TRANSLATION": 40,
    "FAN_RPM": 41, "GDDR_0_1_TEMP": 42, "GDDR_2_3_TEMP": 43, "GDDR_4_5_TEMP": 44, "GDDR_6_7_TEMP": 45,
    "GDDR_0_1_CORR_ERRS": 46, "GDDR_2_3_CORR_ERRS": 47, "GDDR_4_5_CORR_ERRS": 48, "GDDR_6_7_CORR_ERRS": 49,
    "GDDR_UNCORR_ERRS": 50, "MAX_GDDR_TEMP": 51, "ASIC_LOCATION": 52, "BOARD_POWER_LIMIT": 53, "INPUT_POWER": 54,
    "TDC_LIMIT_MAX": 55, "THM_LIMIT_THROTTLE": 56, "FW_BUILD_DATE": 57, "TT_FLASH_VERSION": 58,
    "ENABLED_TENSIX_ROW": 59, "THERM_TRIP_COUNT": 60, "ASIC_ID_HIGH": 61, "ASIC_ID_LOW": 62,
    "AICLK_LIMIT_MAX": 63, "TDP_LIMIT_MAX": 64, "AICLK_ARB_MIN": 65, "AICLK_ARB_MAX": 66, "ENABLED_MIN_ARB": 67,
    "ENABLED_MAX_ARB": 68, "AICLK_PPM_INFO": 69, "HOST_AICLK_LIMIT": 70,
}
# TelemetryTag (UMD_TAGS), without its NUMBER_OF_TAGS sentinel: the same numbers, TELEM_ENUM_COUNT
# spelt TELEMETRY_ENUM_COUNT, and INPUT_CURRENT (39) gone (firmware 18.3 replaced it by INPUT_POWER:
# tt-zephyr-platforms doc/release/migration-guide-18.3.md).
UMD_TAGS_BY_NAME = {
    "BOARD_ID_HIGH": 1, "BOARD_ID_LOW": 2, "ASIC_ID": 3, "HARVESTING_STATE": 4, "UPDATE_TELEM_SPEED": 5, "VCORE": 6,
    "TDP": 7, "TDC": 8, "VDD_LIMITS": 9, "THM_LIMIT_SHUTDOWN": 10, "ASIC_TEMPERATURE": 11, "VREG_TEMPERATURE": 12,
    "BOARD_TEMPERATURE": 13, "AICLK": 14, "AXICLK": 15, "ARCCLK": 16, "L2CPUCLK0": 17, "L2CPUCLK1": 18,
    "L2CPUCLK2": 19, "L2CPUCLK3": 20, "ETH_LIVE_STATUS": 21, "GDDR_STATUS": 22, "GDDR_SPEED": 23, "ETH_FW_VERSION": 24,
    "GDDR_FW_VERSION": 25, "DM_APP_FW_VERSION": 26, "DM_BL_FW_VERSION": 27, "FLASH_BUNDLE_VERSION": 28,
    "CM_FW_VERSION": 29, "L2CPU_FW_VERSION": 30, "FAN_SPEED": 31, "TIMER_HEARTBEAT": 32, "TELEMETRY_ENUM_COUNT": 33,
    "ENABLED_TENSIX_COL": 34, "ENABLED_ETH": 35, "ENABLED_GDDR": 36, "ENABLED_L2CPU": 37, "PCIE_USAGE": 38,
    "NOC_TRANSLATION": 40, "FAN_RPM": 41, "GDDR_0_1_TEMP": 42, "GDDR_2_3_TEMP": 43, "GDDR_4_5_TEMP": 44,
    "GDDR_6_7_TEMP": 45, "GDDR_0_1_CORR_ERRS": 46, "GDDR_2_3_CORR_ERRS": 47, "GDDR_4_5_CORR_ERRS": 48,
    "GDDR_6_7_CORR_ERRS": 49, "GDDR_UNCORR_ERRS": 50, "MAX_GDDR_TEMP": 51, "ASIC_LOCATION": 52,
    "BOARD_POWER_LIMIT": 53, "INPUT_POWER": 54, "TDC_LIMIT_MAX": 55, "THM_LIMIT_THROTTLE": 56, "TT_FLASH_VERSION": 58,
    "THERM_TRIP_COUNT": 60, "ASIC_ID_HIGH": 61, "ASIC_ID_LOW": 62, "AICLK_LIMIT_MAX": 63, "TDP_LIMIT_MAX": 64,
    "AICLK_ARB_MIN": 65, "AICLK_ARB_MAX": 66, "ENABLED_MIN_ARB": 67, "ENABLED_MAX_ARB": 68,
}

# TT_SMC_MSG_* (FW_MESSAGES), the whole list: consts.MSG must use these numbers.
FIRMWARE_MESSAGES = {
    "SET_VOLTAGE": 0x12, "GET_VOLTAGE": 0x13, "SWITCH_CLK_SCHEME": 0x14, "DEBUG_NOC_TRANSLATION": 0x15,
    "REPORT_SCRATCH_ONLY": 0x16, "SEND_PCIE_MSI": 0x17, "SWITCH_VOUT_CONTROL": 0x18, "READ_EEPROM": 0x19,
    "WRITE_EEPROM": 0x1A, "READ_TS": 0x1B, "READ_PD": 0x1C, "READ_VM": 0x1D, "I2C_MESSAGE": 0x1E,
    "REINIT_TENSIX": 0x20, "POWER_SETTING": 0x21, "SET_TDP_LIMIT": 0x22, "SET_ASIC_HOST_FMAX": 0x23,
    "GET_FREQ_CURVE_FROM_VOLTAGE": 0x30, "AISWEEP_START": 0x31, "AISWEEP_STOP": 0x32, "FORCE_AICLK": 0x33,
    "GET_AICLK": 0x34, "COUNTER": 0x35, "FORCE_VDD": 0x39, "AICLK_GO_BUSY": 0x52, "AICLK_GO_LONG_IDLE": 0x54,
    "TRIGGER_RESET": 0x56, "TEST": 0x90, "PCIE_DMA_CHIP_TO_HOST_TRANSFER": 0x9B,
    "PCIE_DMA_HOST_TO_CHIP_TRANSFER": 0x9C, "ASIC_STATE0": 0xA0, "ASIC_STATE3": 0xA3,
    "GET_VOLTAGE_CURVE_FROM_FREQ": 0xA6, "FORCE_FAN_SPEED": 0xAC, "GET_DRAM_TEMPERATURE": 0xAD,
    "TOGGLE_SINGLE_TENSIX_RESET": 0xAE, "TOGGLE_TENSIX_RESET": 0xAF, "TOGGLE_GDDR_RESET": 0xB6,
    "SET_LAST_SERIAL": 0xBE, "PING_DM": 0xC0, "SET_WDT_TIMEOUT": 0xC1, "FLASH_UNLOCK": 0xC2, "FLASH_LOCK": 0xC3,
    "CONFIRM_FLASHED_SPI": 0xC4, "BLINKY": 0xC5, "CHARACTERISATION": 0xC6,
}
KMD_MESSAGES = {"ASIC_STATE0": 0xA0, "ASIC_STATE3": 0xA3, "SET_WDT_TIMEOUT": 0xC1, "POWER_SETTING": 0x21,
                "TEST": 0x90}                                           # ARC_MSG_TYPE_* (KMD)


@pytest.mark.parametrize("name, value, source", FACTS, ids=[f[0] for f in FACTS])
def test_constant_matches_the_public_source(name, value, source):
    assert getattr(K, name) == value, f"consts.{name} = {getattr(K, name)!r}, {source} says {value!r}"


def test_the_die_column_to_noc0_table_in_both_public_sources():
    assert DIE_COLUMN_NOC0_X == tuple(PHYS_X_TO_NOC0[i + 1] for i in range(14))       # the two sources agree
    assert K.PHYS_COL_X == DIE_COLUMN_NOC0_X, f"{UMD_ARCH} HARVESTING_NOC_LOCATIONS, {FW_NOC} kPhysXToNoc0"


def test_every_risc_reset_bit_and_their_or():
    assert {r: 1 << b for r, b in K.RISC_BITS.items()} == SOFT_RESET_BITS, UMD_ARCH
    everything = 0
    for bit in SOFT_RESET_BITS.values():
        everything |= bit
    assert everything == 0x47800
    assert K.RISC_ALL == everything, f"RISC_ALL must be the OR of {UMD_ARCH} SOFT_RESET_* bits"
    assert K.RISC_ALL_BUT_BRISC == everything & ~SOFT_RESET_BITS["brisc"] == 0x47000


def test_every_telemetry_tag_number_is_the_firmware_s():
    """Each tag consts.TAGS names has the number the firmware (or tt-umd, by its name) gives it."""
    def public(name):
        return FIRMWARE_TAGS.get(name, UMD_TAGS_BY_NAME.get(name))
    wrong = {n: (v, public(n)) for n, v in K.TAGS.items() if public(n) != v}
    assert not wrong, f"tag (ours, {FW_TELEMETRY} / {UMD_TAGS}): {wrong}"
    assert K.TAG_NAMES == {v: n for n, v in K.TAGS.items()} and len(K.TAG_NAMES) == len(K.TAGS)


def test_the_firmware_and_tt_umd_number_the_tags_alike():
    both = set(FIRMWARE_TAGS) & set(UMD_TAGS_BY_NAME)
    assert len(both) == 64 and all(FIRMWARE_TAGS[n] == UMD_TAGS_BY_NAME[n] for n in both)
    assert FIRMWARE_TAGS["TELEM_ENUM_COUNT"] == UMD_TAGS_BY_NAME["TELEMETRY_ENUM_COUNT"] == 33


def test_every_arc_message_number():
    wrong = {n: (v, FIRMWARE_MESSAGES.get(n)) for n, v in K.MSG.items() if FIRMWARE_MESSAGES.get(n) != v}
    assert not wrong, f"message (ours, {FW_MESSAGES}): {wrong}"
    assert {n: K.MSG[n] for n in KMD_MESSAGES} == KMD_MESSAGES, KMD


def firmware_translation(bad_die_cols: int) -> dict[int, int]:
    """Translated Tensix x -> NOC0 x, as ComputeNocTranslation (FW_NOC_INIT) fills
    translate_table_x: good columns in ascending NOC0 x over 1..7 then 10..16, then the bad ones by
    ascending die index (lowest bit first) from 16 downwards. tt-umd's
    fill_tensix_noc0_translated_mapping (device/coordinates/blackhole_coordinate_manager.cpp)
    sorts the harvested columns by die index the same way."""
    good = sorted(x for i, x in enumerate(DIE_COLUMN_NOC0_X) if not bad_die_cols >> i & 1)
    bad = [DIE_COLUMN_NOC0_X[i] for i in range(14) if bad_die_cols >> i & 1]
    table = dict(zip([*range(1, 8), *range(10, 17)], good))
    table.update(zip(range(16, 9, -1), bad))
    return table


PAIRS = list(itertools.combinations(range(14), 2))


def test_live_tensix_columns_fill_translated_x_in_noc0_order():
    for i, j in PAIRS:
        bad = 1 << i | 1 << j
        want = firmware_translation(bad)
        tiles = TileMap(0x3FFF & ~bad)
        live = {x: tiles.to_noc0_x[x] for x in tiles.tensix_columns}
        assert live == {x: n for x, n in want.items() if x <= 14}, (i, j)


def test_harvested_tensix_columns_take_translated_x_by_die_index():
    wrong = []
    for i, j in PAIRS:
        bad = 1 << i | 1 << j
        if TileMap(0x3FFF & ~bad).to_noc0_x != firmware_translation(bad):
            wrong.append((i, j))
    assert not wrong, f"die columns {wrong[:5]}... ({len(wrong)} of {len(PAIRS)} harvest pairs)"


def test_dram_and_pcie_tiles_where_the_firmware_translates_them():
    tiles = TileMap(0x3FFF)
    for bank in range(8):
        for port in range(3):
            t = tiles.dram(bank, port)
            # GDDR bank b (west 0-3 at NOC0 x 0, east 4-7 at x 9): translated (17 or 18, 12 + 3 (b mod 4) + p)
            assert (t.x, t.y, t.noc0[0]) == (17 + bank // 4, 12 + 3 * (bank % 4) + port, 0 if bank < 4 else 9)
    assert (tiles.pcie.x, tiles.pcie.y, tiles.pcie.noc0) == (19, 24, (2, 0))
    assert (tiles.arc.x, tiles.arc.y) == (8, 0)


def test_telemetry_is_read_by_the_firmware_s_tag_numbers():
    """A TileMap built from raw firmware telemetry (tag 34 ENABLED_TENSIX_COL, 36 ENABLED_GDDR, 40
    NOC_TRANSLATION) sees the columns the firmware reported."""
    tiles = TileMap.from_telemetry({34: 0x3FFF & ~(1 << 0 | 1 << 1), 36: 0xFF, 40: 1})
    assert len(tiles.tensix) == 120 and sorted(tiles.harvested_noc0_x) == [1, 16]
