"""The LiteDRAM contract of the openTPU build: its CSR window at BAR0 0x10000 and its PHY settings, as data.

What LiteX generates for the build (reference host.md 1.8 and 6): `csr.csv` (17 blocks of
0x800, 32-bit CSRs, multi-word values most significant word first; channel 1's block of a
per-channel core follows channel 0's) and `sdram_init.py` (the PHY parameters and the JEDEC
init sequence), plus the layout the core's self-calibration CPU reports in. The simulated
controller (`litedram.py`) answers this map and host tools (otpu-memcal) drive it; neither
spells an offset of its own.
"""
from __future__ import annotations

# ---- PHY settings (sdram_init.py) ---------------------------------------------------------------
NCHANNELS = 2            # the CSR map has blocks for two channels
LANES = 9                # byte lanes: 8 data + the ECC lane ("modules")
DATABITS = 8 * LANES     # 72 DQ
NPHASES = 4              # DFI phases per controller cycle (1:4)
DELAYS = 32              # IDELAY taps
BITSLIPS = 8
TAP_PS = 78.125          # IDELAYE2 tap at a 200 MHz reference
HALF_SYS8X_TAPS = 6      # reset value of ddrphy_half_sys8x_taps
SYS_HZ = 133_333_333
VCO_HZ = 1_066_666_666
PERIOD_STEPS = round(56 * VCO_HZ / (4 * SYS_HZ))   # CK/DQS phase steps per tCK (112)
STEP_PS = 1e12 / (56 * VCO_HZ)                     # one phase step (16.7 ps)
RDPHASE, WRPHASE = 2, 3
CL, CWL = 7, 6
TCK_BITSLIPS = 2         # one tCK is two bit times: write latency moves in steps of 2 bitslips
IDENTIFIER = "openTPU LiteDRAM"
SCRATCH_RESET = 0x12345678
MIN_WINDOW = 3           # read taps a lane needs to count as working (core CPU and host alike)

# ---- CSR blocks (offsets inside the window) -----------------------------------------------------
BLOCK = 0x800
B_BIST, B_CAL, B_CTRL, B_DDRPHY, B_ECC, B_IDENT, B_PHASE, B_SDRAM, B_WCLK, B_SELFCAL = (
    0x0000, 0x1000, 0x2000, 0x2800, 0x3800, 0x4800, 0x5000, 0x6000, 0x7000, 0x8000)
PER_CHANNEL = (B_BIST, B_CAL, B_DDRPHY, B_ECC, B_PHASE, B_SDRAM, B_WCLK)

BIST_START, BIST_MODE, BIST_BASE, BIST_LENGTH, BIST_SEED = 0x00, 0x04, 0x08, 0x0C, 0x10
BIST_DONE, BIST_TICKS, BIST_BEATS, BIST_ERRORS, BIST_LANE_ERRORS, BIST_LANE_BITS = 0x18, 0x1C, 0x20, 0x24, 0x28, 0x4C
BIST_READ, BIST_ADDR_DATA = 1, 2                 # mode bits: read & check, address as data
CAL_READY = 0x00
CTRL_RESET, CTRL_SCRATCH, CTRL_BUS_ERRORS = 0x00, 0x04, 0x08
PHY_RST, PHY_DLY_SEL, PHY_HALF_SYS8X_TAPS, PHY_WLEVEL_EN, PHY_WLEVEL_STROBE = 0x00, 0x04, 0x08, 0x0C, 0x10
PHY_RDLY_DQ_RST, PHY_RDLY_DQ_INC, PHY_RDLY_DQ_BITSLIP_RST, PHY_RDLY_DQ_BITSLIP = 0x14, 0x18, 0x1C, 0x20
PHY_WDLY_DQ_BITSLIP_RST, PHY_WDLY_DQ_BITSLIP, PHY_RDPHASE, PHY_WRPHASE, PHY_DLY_SEL_BITS = 0x24, 0x28, 0x2C, 0x30, 0x34
ECC_ENABLE, ECC_CLEAR, ECC_SEC, ECC_DED = 0x00, 0x04, 0x08, 0x0C
PHASE_DQS_SHIFT, PHASE_DQS_BUSY, PHASE_DQS_STEPS = 0x00, 0x04, 0x08
DFII_CONTROL, DFII_PHASE0, DFII_PHASE_STRIDE = 0x00, 0x04, 0x38
PI_COMMAND, PI_ISSUE, PI_ADDRESS, PI_BADDRESS, PI_WRDATA, PI_RDDATA = 0x00, 0x04, 0x08, 0x0C, 0x10, 0x24
DATA_WORDS = 5                                   # 2 x 72 bits per phase, MSW first
WCLK_MMCM_RESET, WCLK_MMCM_LOCKED, WCLK_DRP_ADR, WCLK_DRP_DAT_W = 0x00, 0x04, 0x08, 0x0C
WCLK_DRP_DAT_R, WCLK_DRP_READ, WCLK_DRP_WRITE, WCLK_DRP_DRDY = 0x10, 0x14, 0x18, 0x1C
SC_HOLD, SC_CONFIG, SC_STATUS, SC_STATE = 0x00, 0x04, 0x08, 0x0C
SC_MBOX_ADR, SC_MBOX_DAT, SC_MEM_ADR, SC_MEM_DAT, SC_MEM_RDAT = 0x10, 0x14, 0x18, 0x1C, 0x20

# DFII command and control bits (positive logic, as liblitedram).
CMD_CS, CMD_WE, CMD_CAS, CMD_RAS, CMD_WRDATA, CMD_RDDATA = 1, 2, 4, 8, 16, 32
CTL_SEL, CTL_CKE, CTL_ODT, CTL_RESET_N = 1, 2, 4, 8
CMD_MASK = CMD_CS | CMD_WE | CMD_CAS | CMD_RAS
ACT, PRE, REF, MRS, ZQC = CMD_RAS | CMD_CS, CMD_RAS | CMD_WE | CMD_CS, CMD_RAS | CMD_CAS | CMD_CS, CMD_MASK, CMD_WE | CMD_CS
WRITE, READ = CMD_CAS | CMD_WE | CMD_CS, CMD_CAS | CMD_CS
HARDWARE = CTL_SEL | CTL_CKE | CTL_ODT | CTL_RESET_N      # the controller drives the DRAM
SOFTWARE = CTL_CKE | CTL_ODT | CTL_RESET_N                # DFII commands from the CSRs

# Mode registers for DDR3-1066, CL 7, CWL 6, BL8, WR 8 (JEDEC field encodings).
MR0 = (4 << 9) | (1 << 8) | ((CL - 4) << 4)      # WR=8, DLL reset, CL
MR1 = 0x0006                                     # DLL on, RZQ/7 drive, Rtt_nom RZQ/4
MR1_WLEVEL = 1 << 7
MR2 = (CWL - 5) << 3
MR3 = 0
# (what, address, bank, ("control", value) or ("command", DFII command), sys cycles to wait after it):
# the generated init sequence (JEDEC: 500 us after RESET# rises, tXPR after CKE, tMRD, tZQinit).
INIT_SEQUENCE = (
    ("release reset", 0, 0, ("control", CTL_ODT | CTL_RESET_N), 66_667),
    ("bring CKE high", 0, 0, ("control", CTL_CKE | CTL_ODT | CTL_RESET_N), 1_334),
    ("load MR2 (CWL 6)", MR2, 2, ("command", MRS), 16),
    ("load MR3", MR3, 3, ("command", MRS), 16),
    ("load MR1", MR1, 1, ("command", MRS), 16),
    ("load MR0 (CL 7, DLL reset)", MR0, 0, ("command", MRS), 16),
    ("ZQ calibration long", 1 << 10, 0, ("command", ZQC), 512),
)

# Write-clock MMCM: DRP register pairs (ClkReg1, ClkReg2) per CLKOUT and the static phases the
# calibration assumes (in 1/8 VCO periods: DQ clocks 0, DQS clocks +4).
DRP_REGS = {0: (0x08, 0x09), 1: (0x0A, 0x0B), 2: (0x0C, 0x0D), 3: (0x0E, 0x0F),
            4: (0x10, 0x11), 5: (0x06, 0x07), 6: (0x12, 0x13)}
EXPECTED_PHASES = {3: 0, 4: 4, 5: 0, 6: 4}


def drp_eighths(clkreg1: int, clkreg2: int) -> int:
    """Static phase of a CLKOUT in 1/8 VCO periods: DELAY_TIME (ClkReg2[5:0]) x 8 + PHASE_MUX (ClkReg1[15:13])."""
    return (clkreg2 & 0x3F) * 8 + (clkreg1 >> 13)


# ---- the self-calibration CPU ---------------------------------------------------------------------
SELFCAL_MAGIC = 0x5CA1   # selfcal_status[31:16]; [4:1] log2 firmware words; [0] held
SC_FW_LOG2_MAX = 15      # the most selfcal_status[4:1] can say
MBOX_WORDS = 256
MBOX_MAGIC = 0x53435231  # mailbox word 0 once the CPU has reported
CH_BLOCK = (16, 80)      # first mailbox word of each channel's 64-word block
SC_IDLE, SC_RUNNING, SC_OK, SC_FAILED = 0, 1, 2, 3      # selfcal_state: 2 bits per channel
SC_STATE_NAMES = ("idle", "running", "ok", "failed")
SC_DONE = 1 << 7
ERR_DRP_TIMEOUT, ERR_MMCM_UNLOCKED, ERR_BIST_TIMEOUT, ERR_MMCM_PHASES = 1, 2, 3, 4
ERR_NO_COMMON_PHASE, ERR_FINAL, ERR_SHIFT_BUSY = 5, 6, 7
ERROR_TEXT = {0: "none", ERR_DRP_TIMEOUT: "write clock DRP timeout", ERR_MMCM_UNLOCKED: "write clock MMCM not locked",
              ERR_BIST_TIMEOUT: "BIST timeout", ERR_MMCM_PHASES: "MMCM phases not as assumed",
              ERR_NO_COMMON_PHASE: "no CK phase common to every lane",
              ERR_FINAL: "calibration at the chosen phase failed", ERR_SHIFT_BUSY: "CK phase shift stuck busy"}


def channel_offset(block: int, ch: int, rel: int) -> int:
    """Offset in the window of register `rel` of `block` for channel `ch` (shared blocks ignore `ch`)."""
    return block + (ch * BLOCK if block in PER_CHANNEL else 0) + rel


def dfii(phase: int, rel: int) -> int:
    """Offset inside the sdram block of DFII phase `phase`'s register `rel`."""
    return DFII_PHASE0 + DFII_PHASE_STRIDE * phase + rel


def words_to_int(words) -> int:
    """A multi-word CSR value (most significant word first) as one integer."""
    v = 0
    for w in words:
        v = (v << 32) | (w & 0xFFFFFFFF)
    return v


def int_to_words(v: int, n: int = DATA_WORDS) -> list[int]:
    return [(v >> (32 * (n - 1 - i))) & 0xFFFFFFFF for i in range(n)]


def signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v
