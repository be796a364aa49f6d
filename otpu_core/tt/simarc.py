"""ARC of the simulated p150a: scratch registers, the telemetry table and the message queues.

What it publishes is what the firmware publishes (tt-zephyr-platforms lib/tenstorrent/bh_arc):
a telemetry table of TAG_COUNT (71) entries whose slots 2 and 66..70 are empty ({0, 0}), each
tag's value at offset == tag, no ASIC_ID, INPUT_CURRENT, FW_BUILD_DATE, TT_FLASH_VERSION or
ENABLED_TENSIX_ROW, and a TIMER_HEARTBEAT that counts one per 100 ms update (telemetry.c). The
four message queues of four entries answer as msgqueue.c does: the response starts zeroed, the
handler fills it and its exit code is ORed into word 0, so a refused 0xAE reads 1 in word 0 and
0 in word 1 (reset.c ToggleSingleTensixReset); an unknown code answers 0xFF in word 0.

`ArcModel` is a mixin of `SimChip`: it uses the chip's state words and tile records.
"""
from __future__ import annotations

import math
import time

from . import consts as K
from .ioctl import POWER_TENSIX_ENABLE
from .simstate import (F_BOOT, FW_RESIDENT, H_AICLK_FORCED, H_BUSY, H_FW_BUNDLE, H_NO_TRANSLATION, H_RISC_RESET,
                       H_SCRATCH, H_TENSIX_RESET, H_THROTTLE, MASK, N_TILES, T_BASE, T_FW, T_WORDS, TGT_HARVESTED,
                       TGT_TENSIX)

CSM_BYTES = K.ARC_CSM[1] - K.ARC_CSM[0]
MSGQ_CB, MSGQ_BASE, MSGQ_COUNT, MSGQ_ENTRIES = 0x800, 0x1000, 4, 4
MSGQ_BYTES = 32 + 2 * MSGQ_ENTRIES * 32
TELEM_TABLE, TELEM_DATA = 0x2000, 0x2400
ARC_BOOT_SECONDS = 0.05
TELEM_PERIOD = 0.1                  # telem_update_interval = 100 ms
# Slot -> tag of the firmware's tag_table: slot 2 (once ASIC_ID) and 66..70 are left empty.
FW_TAG_TABLE = (1, 2, 0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
                28, 29, 30, 31, 32, 34, 35, 36, 37, 38, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54,
                61, 62, 60, 33, 63, 55, 56, 64, 65, 66, 67, 68, 69, 70, 0, 0, 0, 0, 0)
PUBLISHED = frozenset(t for t in FW_TAG_TABLE if t)
ARB_MIN_BUSY = 1                    # aiclk_arb_min: fmin 0, busy 1
PPM_MIN_ARB, PPM_MAX_ARB, PPM_FORCED = 0, 1, 4   # enum targ_freq_reason
AICLK_FMAX, AICLK_FMIN = 1350, 800
FW_BUNDLE = 0x13090000              # 19.9.0.0: has 0xAE
FW_BUNDLE_OLD = 0x13080000


class ArcModel:
    """ARC registers, telemetry and messages of a `SimChip` (mixin: needs W, F, csm, csm_u32)."""

    # ---- boot ----------------------------------------------------------------------------------
    def _arc_init(self) -> None:
        self.csm[:0x4000] = bytes(0x4000)
        u, W = self.csm_u32, self.W
        u[MSGQ_CB >> 2], u[(MSGQ_CB >> 2) + 1] = K.ARC_CSM[0] + MSGQ_BASE, MSGQ_ENTRIES | (MSGQ_COUNT << 8)
        t = TELEM_TABLE >> 2
        u[t], u[t + 1] = K.TELEMETRY_VERSION, len(FW_TAG_TABLE)
        for i, tag in enumerate(FW_TAG_TABLE):
            u[t + 2 + i] = tag | (tag << 16)            # TELEM_OFFSET(tag) == tag; empty slots stay 0
        W[H_SCRATCH + K.SCR_FW_VERSION] = W[H_FW_BUNDLE]
        W[H_SCRATCH + K.SCR_MSGQ_CB] = K.ARC_CSM[0] + MSGQ_CB
        W[H_SCRATCH + K.SCR_TELEM_DATA] = K.ARC_CSM[0] + TELEM_DATA
        W[H_SCRATCH + K.SCR_TELEM_TABLE] = K.ARC_CSM[0] + TELEM_TABLE
        W[H_SCRATCH + K.SCR_BOOT_STATUS0] = K.BOOT_READY
        self._telemetry_refresh()

    # ---- registers -----------------------------------------------------------------------------
    def _arc_reg(self, addr: int, value: int | None) -> int:
        W = self.W
        if K.ARC_CSM[0] <= addr < K.ARC_CSM[1]:
            off = addr - K.ARC_CSM[0]
            if value is None:
                if TELEM_DATA <= off < TELEM_DATA + 4 * K.TAG_COUNT:
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
        if addr in (K.ARC_MISC_CNTL, K.MSI_FIFO):
            if value is not None and (addr == K.MSI_FIFO or value & K.ARC_IRQ0):
                self._arc_service()
            return 0
        if K.ARC_APB[0] <= addr < K.ARC_APB[1]:
            return 0
        return self._hang(f"ARC address 0x{addr:x} is unmapped")

    # ---- telemetry -----------------------------------------------------------------------------
    def aiclk(self) -> tuple[int, int, int]:
        """(AICLK MHz, effective max arbiter, effective max in MHz) as the firmware's arbiters set them."""
        W = self.W
        if W[H_THROTTLE]:
            arb = W[H_THROTTLE] - 1
            limit = 1000 if arb != K.ARB_FMAX else AICLK_FMAX
        else:
            arb, limit = K.ARB_FMAX, AICLK_FMAX
        want = W[H_AICLK_FORCED] or (AICLK_FMAX if W[H_BUSY] else AICLK_FMIN)
        return (want if W[H_AICLK_FORCED] else min(want, limit)), arb, limit

    def telemetry_values(self) -> dict[int, int]:
        """The value of every tag the firmware publishes (and only those)."""
        W, T = self.W, K.TAGS
        now = time.time()
        up = max(0.0, now - self.F[F_BOOT])
        busy = sum(1 for i in range(N_TILES) if W[T_BASE + i * T_WORDS + T_FW] == FW_RESIDENT)
        aiclk, arb, limit = self.aiclk()
        vcore = 720 + (aiclk - 800) * 3 // 10
        power = 22 + busy * 0.3 + (aiclk - 800) * 0.03
        temp = 38.0 + power * 0.25 + 0.5 * math.sin(now / 7.0)
        gddr_temp = int(temp) - 4
        ident = self.identity
        board, asic = int(ident["board_id"], 16), int(ident["asic_id"], 16)
        gddr = ident.get("enabled_gddr", 0xFF)
        status = sum((1 << 2 * b) | (1 << 16 + 2 * b) for b in range(K.DRAM_BANKS) if gddr >> b & 1)
        temps = [sum(((gddr_temp << 8 | gddr_temp) << 16 * (b % 2)) for b in (2 * i, 2 * i + 1) if gddr >> b & 1)
                 for i in range(4)]
        bundle = W[H_FW_BUNDLE]
        ppm = (PPM_FORCED << 16) if W[H_AICLK_FORCED] else ((PPM_MAX_ARB << 16 | arb) if aiclk == limit < AICLK_FMAX
                                                           else (PPM_MIN_ARB << 16 | (ARB_MIN_BUSY if W[H_BUSY] else 0)))
        values = {
            T["BOARD_ID_HIGH"]: board >> 32, T["BOARD_ID_LOW"]: board & MASK, T["HARVESTING_STATE"]: 0,
            T["UPDATE_TELEM_SPEED"]: int(TELEM_PERIOD * 1000), T["VCORE"]: vcore, T["TDP"]: int(power),
            T["TDC"]: int(power * 1000 / vcore), T["VDD_LIMITS"]: (900 << 16) | 700, T["THM_LIMIT_SHUTDOWN"]: 110,
            T["ASIC_TEMPERATURE"]: int(temp * 65536) & MASK, T["VREG_TEMPERATURE"]: 0, T["BOARD_TEMPERATURE"]: 0,
            T["AICLK"]: aiclk, T["AXICLK"]: 960, T["ARCCLK"]: 540, **{T[f"L2CPUCLK{i}"]: 1750 for i in range(4)},
            T["ETH_LIVE_STATUS"]: 0, T["GDDR_STATUS"]: status, T["GDDR_SPEED"]: 16000, T["ETH_FW_VERSION"]: 0x010700,
            T["GDDR_FW_VERSION"]: (2 << 16) | 9, T["DM_APP_FW_VERSION"]: 0x050D0000, T["DM_BL_FW_VERSION"]: 0x00080000,
            T["FLASH_BUNDLE_VERSION"]: bundle, T["CM_FW_VERSION"]: bundle, T["L2CPU_FW_VERSION"]: 0,
            T["FAN_SPEED"]: 35, T["TIMER_HEARTBEAT"]: int(up / TELEM_PERIOD) & MASK, T["TELEM_ENUM_COUNT"]: K.TAG_COUNT,
            T["ENABLED_TENSIX_COL"]: ident["enabled_tensix_cols"], T["ENABLED_ETH"]: ident["enabled_eth"],
            T["ENABLED_GDDR"]: gddr, T["ENABLED_L2CPU"]: 0xF, T["PCIE_USAGE"]: 0x1,
            T["NOC_TRANSLATION"]: 0 if W[H_NO_TRANSLATION] else 1, T["FAN_RPM"]: 1900,
            **{T[f"GDDR_{2 * i}_{2 * i + 1}_TEMP"]: temps[i] for i in range(4)},
            **{T[f"GDDR_{2 * i}_{2 * i + 1}_CORR_ERRS"]: 0 for i in range(4)}, T["GDDR_UNCORR_ERRS"]: 0,
            T["MAX_GDDR_TEMP"]: gddr_temp, T["ASIC_LOCATION"]: 0, T["BOARD_POWER_LIMIT"]: 300,
            T["INPUT_POWER"]: int(power + 18), T["TDC_LIMIT_MAX"]: 200, T["THM_LIMIT_THROTTLE"]: 90,
            T["THERM_TRIP_COUNT"]: 0, T["ASIC_ID_HIGH"]: asic >> 32, T["ASIC_ID_LOW"]: asic & MASK,
            T["AICLK_LIMIT_MAX"]: AICLK_FMAX, T["TDP_LIMIT_MAX"]: 150,
            T["AICLK_ARB_MIN"]: (AICLK_FMAX if W[H_BUSY] else AICLK_FMIN) | ((ARB_MIN_BUSY if W[H_BUSY] else 0) << 16),
            T["AICLK_ARB_MAX"]: limit | (arb << 16), T["ENABLED_MIN_ARB"]: 0b11,
            T["ENABLED_MAX_ARB"]: (1 << len(K.AICLK_ARB_MAX_NAMES)) - 1, T["AICLK_PPM_INFO"]: ppm,
            T["HOST_AICLK_LIMIT"]: 0,
        }
        assert values.keys() == PUBLISHED
        return values

    def _telemetry_refresh(self) -> None:
        base, u = TELEM_DATA >> 2, self.csm_u32
        for tag, value in self.telemetry_values().items():
            u[base + tag] = value

    # ---- message queues ------------------------------------------------------------------------
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
                resp = [0] * 8                       # `struct response response = {0}`
                self._arc_message(req, resp, u[h + 6])
                rs = u[h + 5] % MSGQ_ENTRIES
                for i, w in enumerate(resp):
                    u[h + 8 + MSGQ_ENTRIES * 8 + rs * 8 + i] = w & MASK
                u[h + 4] = (u[h + 4] + 1) % n2
                u[h + 5] = (u[h + 5] + 1) % n2
                u[h + 6] = (u[h + 6] + 1) & MASK     # last serial

    def _arc_message(self, req: list[int], resp: list[int], last_serial: int) -> None:
        """Run one request as msgqueue.c does: TEST inline, everything else through a handler
        whose exit code is ORed into response word 0; no handler: word 0 = 0xFF."""
        code = req[0] & 0xFF
        if code == K.MSG["TEST"]:
            resp[0], resp[1], resp[2] = 0, req[1] + 1, last_serial + 1
            return
        handler = self._ARC_HANDLERS.get(code)
        if code == K.MSG["TOGGLE_SINGLE_TENSIX_RESET"] and self.W[H_FW_BUNDLE] < K.FW_SINGLE_TILE_RESET:
            handler = None                           # registered from firmware 19.9.0 on
        if handler is None:
            resp[0] = K.MSG_STATUS_UNKNOWN
            return
        resp[0] |= handler(self, req, resp) & 0xFF

    # ---- handlers: each returns the exit code -------------------------------------------------
    def _msg_single_tensix_reset(self, req: list[int], resp: list[int]) -> int:
        x, y = req[1] & 0xFF, (req[1] >> 8) & 0xFF         # byte 4 = noc_x, byte 5 = noc_y (translated)
        kind, idx = self.resolve(x, y)
        if kind not in (TGT_TENSIX, TGT_HARVESTED):
            resp[0] = 1
            return 1
        self._tile_reset(idx)
        resp[0] = 0
        return 0

    def _msg_tensix_reset(self, req: list[int], resp: list[int]) -> int:
        for i in range(N_TILES):
            self._tile_reset(i)
        return 0

    def _msg_force_aiclk(self, req: list[int], resp: list[int]) -> int:
        self.W[H_AICLK_FORCED] = req[1]
        return 0

    def _msg_get_aiclk(self, req: list[int], resp: list[int]) -> int:
        resp[1] = self.aiclk()[0]
        return 0

    def _msg_go_busy(self, req: list[int], resp: list[int]) -> int:
        self.W[H_BUSY] = 1
        return 0

    def _msg_go_idle(self, req: list[int], resp: list[int]) -> int:
        self.W[H_BUSY] = 0
        return 0

    def _msg_power_setting(self, req: list[int], resp: list[int]) -> int:
        if (req[0] >> 16) & POWER_TENSIX_ENABLE:
            self.power_up()
        else:
            self.power_down()
        return 0

    def _msg_nothing(self, req: list[int], resp: list[int]) -> int:
        return 0

    _ARC_HANDLERS = {
        K.MSG["TOGGLE_SINGLE_TENSIX_RESET"]: _msg_single_tensix_reset, K.MSG["TOGGLE_TENSIX_RESET"]: _msg_tensix_reset,
        K.MSG["FORCE_AICLK"]: _msg_force_aiclk, K.MSG["GET_AICLK"]: _msg_get_aiclk,
        K.MSG["AICLK_GO_BUSY"]: _msg_go_busy, K.MSG["AICLK_GO_LONG_IDLE"]: _msg_go_idle,
        K.MSG["POWER_SETTING"]: _msg_power_setting, K.MSG["REINIT_TENSIX"]: _msg_nothing,
        K.MSG["ASIC_STATE0"]: _msg_nothing, K.MSG["ASIC_STATE3"]: _msg_nothing, K.MSG["SET_WDT_TIMEOUT"]: _msg_nothing,
    }
