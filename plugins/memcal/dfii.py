"""One DDR3 channel driven from the host in software mode: JEDEC init, DFII test bursts, PHY strobes.

What liblitedram's `sdram.c` does through the CSRs, for a PHY without write leveling: the
DRAM is initialised through the DFII (PHY reset, the generated JEDEC sequence); a test writes
a pseudo-random burst (Python's `random.Random(seed)`, 2 x 72 bits per DFI phase, the seeds of
the BIOS) to row 0 of bank 0 and reads it back, giving the wrong DQ bits. `ddrphy_dly_sel`
picks the byte lanes a delay or bitslip strobe acts on, so a scan moves all nine lanes at
once; with `ddrphy_dly_sel_bits` a read bitslip strobe can be narrowed to single DQ bits.

Every test opens the row, moves the data and closes it again (ACT on DFI phase 0, the read or
write on its phase, PRE on phase 1), as the BIOS does; each seed's burst has a column of its
own so several seeds are written once and read back at every tap.
"""
from __future__ import annotations

import random
import time

from otpu_core.card import litedram_map as M

from .csr import Chan

SEEDS = (42, 84, 36)           # liblitedram's test patterns
SCAN_SEEDS = (42,)             # a scan reads one pattern per tap (the reference's sweep does too)
ALL = (1 << M.LANES) - 1
BEAT_MASK = (1 << M.DATABITS) - 1
_ACT_PHASE, _PRE_PHASE = 0, 1
_RDDATA = [M.dfii(p, M.PI_RDDATA) + 4 * i for p in range(M.NPHASES) for i in range(M.DATA_WORDS)]
# open row 0, read on rdphase, close the row; then the 4 x 5 data words
_READ_BACK = ([(M.B_SDRAM, M.dfii(_ACT_PHASE, M.PI_ISSUE), 1), (M.B_SDRAM, M.dfii(M.RDPHASE, M.PI_ISSUE), 1),
               (M.B_SDRAM, M.dfii(_PRE_PHASE, M.PI_ISSUE), 1)] + [(M.B_SDRAM, rel, None) for rel in _RDDATA])


def pattern(seed: int) -> list[int]:
    """The burst of a seed: one 2 x 72-bit word per DFI phase."""
    rng = random.Random(seed)
    return [rng.getrandbits(2 * M.DATABITS) for _ in range(M.NPHASES)]


def lane_bits(mask: int, lane: int) -> int:
    """The eight wrong-bit flags of a lane in a 72-bit mask."""
    return (mask >> (8 * lane)) & 0xFF


def lane_errors(mask: int) -> list[int]:
    """Wrong DQ bits per lane."""
    return [bin(lane_bits(mask, lane)).count("1") for lane in range(M.LANES)]


class Dram:
    """The DFII and PHY of one channel. Tracks the settings it made (the PHY cannot be read back)."""

    def __init__(self, chan: Chan):
        self.c = chan
        # WL7DDRPHY-style per-bit read bitslips: the PHY has dly_sel_bits (reset 0xFF; an absent CSR reads 0)
        self.per_bit = bool(chan.r(M.B_DDRPHY, M.PHY_DLY_SEL_BITS))
        self.patterns = {s: pattern(s) for s in SEEDS}
        self.columns = {s: 8 * i for i, s in enumerate(SEEDS)}       # one BL8 burst each
        self.reset_tracking()

    def reset_tracking(self) -> None:
        self.wb = [0] * M.LANES              # write bitslip per lane, as set
        self.rb = [0] * M.LANES              # read bitslip
        self.rd = [0] * M.LANES              # read delay (taps)
        self.boff = [[0] * 8 for _ in range(M.LANES)]

    # ---- DFII commands -------------------------------------------------------------------------

    @staticmethod
    def _command(phase: int, cmd: int, address: int = 0, bank: int = 0, issue: bool = True) -> list:
        out = [(M.B_SDRAM, M.dfii(phase, M.PI_ADDRESS), address), (M.B_SDRAM, M.dfii(phase, M.PI_BADDRESS), bank),
               (M.B_SDRAM, M.dfii(phase, M.PI_COMMAND), cmd)]
        return out + [(M.B_SDRAM, M.dfii(phase, M.PI_ISSUE), 1)] if issue else out

    def control(self, value: int) -> None: self.c.w(M.B_SDRAM, M.DFII_CONTROL, value)

    def hardware(self) -> None:
        """Hand the DRAM back to the controller (DFII SEL)."""
        self.control(M.HARDWARE)

    def software(self) -> None:
        self.control(M.SOFTWARE)

    def in_hardware_mode(self) -> bool: return bool(self.c.r(M.B_SDRAM, M.DFII_CONTROL) & M.CTL_SEL)

    def init(self) -> None:
        """PHY reset, the JEDEC init sequence, every lane's delays and bitslips back to 0."""
        c = self.c
        c.wm([(M.B_DDRPHY, M.PHY_RDPHASE, M.RDPHASE), (M.B_DDRPHY, M.PHY_WRPHASE, M.WRPHASE)])
        if self.per_bit:
            c.w(M.B_DDRPHY, M.PHY_DLY_SEL_BITS, 0xFF)
        self.software()
        c.w(M.B_DDRPHY, M.PHY_RST, 1)
        time.sleep(0.001)
        c.w(M.B_DDRPHY, M.PHY_RST, 0)
        time.sleep(0.001)
        for _what, address, bank, (kind, value), wait in M.INIT_SEQUENCE:
            if kind == "control":
                self.control(value)
            else:
                c.wm(self._command(0, value, address, bank))
            time.sleep(max(wait / M.SYS_HZ, 20e-6))
        c.wm(self._strobes(M.PHY_WDLY_DQ_BITSLIP_RST, ALL) + self._strobes(M.PHY_RDLY_DQ_RST, ALL)
             + self._strobes(M.PHY_RDLY_DQ_BITSLIP_RST, ALL))
        self.reset_tracking()
        self.prepare()

    def prepare(self) -> None:
        """Load the test's commands into their DFI phases: ACT and PRE (all banks), the read on rdphase
        (its column is set per read). Needs an initialised DRAM and software mode."""
        self.c.wm(self._command(_ACT_PHASE, M.ACT, issue=False) + self._command(_PRE_PHASE, M.PRE, 1 << 10, issue=False)
                  + self._command(M.RDPHASE, M.READ | M.CMD_RDDATA, issue=False))

    # ---- PHY strobes ---------------------------------------------------------------------------

    @staticmethod
    def _strobes(rel: int, mask: int, times: int = 1) -> list:
        """Select lanes, pulse a strobe `times` times, deselect."""
        return ([(M.B_DDRPHY, M.PHY_DLY_SEL, mask)] + [(M.B_DDRPHY, rel, 1)] * times
                + [(M.B_DDRPHY, M.PHY_DLY_SEL, 0)])

    def set_write_bitslip(self, lanes: dict[int, int]) -> None:
        """Write bitslip per lane ({lane: bitslip})."""
        writes = []
        for lane, v in lanes.items():
            writes += self._strobes(M.PHY_WDLY_DQ_BITSLIP_RST, 1 << lane) + self._strobes(M.PHY_WDLY_DQ_BITSLIP, 1 << lane, v)
            self.wb[lane] = v
        self.c.wm(writes)

    def set_write_bitslip_all(self, v: int) -> None:
        self.c.wm(self._strobes(M.PHY_WDLY_DQ_BITSLIP_RST, ALL) + self._strobes(M.PHY_WDLY_DQ_BITSLIP, ALL, v))
        self.wb = [v] * M.LANES

    def set_read(self, lane: int, bitslip: int, tap: int, offsets=None) -> list:
        """The writes that set a lane's read bitslip, its bits' own bitslips (offsets) and its tap."""
        writes = (self._strobes(M.PHY_RDLY_DQ_BITSLIP_RST, 1 << lane) + self._strobes(M.PHY_RDLY_DQ_BITSLIP, 1 << lane, bitslip)
                  + self._strobes(M.PHY_RDLY_DQ_RST, 1 << lane) + self._strobes(M.PHY_RDLY_DQ_INC, 1 << lane, tap))
        offsets = list(offsets or [0] * 8)
        if any(offsets) and self.per_bit:
            for bit, off in enumerate(offsets):
                if off:
                    own = (bitslip + off) % M.BITSLIPS
                    writes += ([(M.B_DDRPHY, M.PHY_DLY_SEL_BITS, 1 << bit)]
                               + self._strobes(M.PHY_RDLY_DQ_BITSLIP_RST, 1 << lane)
                               + self._strobes(M.PHY_RDLY_DQ_BITSLIP, 1 << lane, own))
            writes.append((M.B_DDRPHY, M.PHY_DLY_SEL_BITS, 0xFF))
        self.rb[lane], self.rd[lane], self.boff[lane] = bitslip, tap, offsets if self.per_bit else [0] * 8
        return writes

    def apply(self, writes: list) -> None: self.c.wm(writes)

    def reset_read_all(self) -> None:
        """Every lane to read bitslip 0, tap 0 (and its bits' own bitslips with it)."""
        self.c.wm(self._strobes(M.PHY_RDLY_DQ_BITSLIP_RST, ALL) + self._strobes(M.PHY_RDLY_DQ_RST, ALL))
        self.rb, self.rd = [0] * M.LANES, [0] * M.LANES
        self.boff = [[0] * 8 for _ in range(M.LANES)]

    def tap_inc_all(self, selected: bool = False) -> list:
        """+1 tap on every lane (`selected`: the lanes are already selected, pulse only)."""
        self.rd = [(t + 1) % M.DELAYS for t in self.rd]
        return [(M.B_DDRPHY, M.PHY_RDLY_DQ_INC, 1)] if selected else self._strobes(M.PHY_RDLY_DQ_INC, ALL)

    def tap_rst_all(self) -> list:
        self.rd = [0] * M.LANES
        return self._strobes(M.PHY_RDLY_DQ_RST, ALL)

    def bitslip_inc_all(self) -> list:
        self.rb = [(b + 1) % M.BITSLIPS for b in self.rb]
        return self._strobes(M.PHY_RDLY_DQ_BITSLIP, ALL)

    # ---- test bursts ---------------------------------------------------------------------------

    def write_bursts(self, seeds=SCAN_SEEDS) -> None:
        """Write each seed's burst to its column of row 0 (at the lanes' current write bitslips)."""
        writes = []
        for s in seeds:
            writes.append((M.B_SDRAM, M.dfii(_ACT_PHASE, M.PI_ISSUE), 1))
            for p, v in enumerate(self.patterns[s]):
                writes += [(M.B_SDRAM, M.dfii(p, M.PI_WRDATA) + 4 * i, w) for i, w in enumerate(M.int_to_words(v))]
            writes += self._command(M.WRPHASE, M.WRITE | M.CMD_WRDATA, self.columns[s])
            writes.append((M.B_SDRAM, M.dfii(_PRE_PHASE, M.PI_ISSUE), 1))
        self.c.wm(writes)

    def read_ops(self, seeds=SCAN_SEEDS, before: list | None = None) -> list:
        """The accesses that read each seed's burst back (after `before`, writes such as a strobe):
        per seed the commands, then the 4 x 5 rddata words."""
        ops = list(before or [])
        for s in seeds:
            ops.append((M.B_SDRAM, M.dfii(M.RDPHASE, M.PI_ADDRESS), self.columns[s]))
            ops += _READ_BACK
        return ops

    def errors_of(self, words: list[int], seeds=SCAN_SEEDS) -> int:
        """The 72-bit mask of DQ bits that read wrong in any seed's burst (`words` from `read_ops`)."""
        wrong = 0
        for k, s in enumerate(seeds):
            got = words[k * len(_RDDATA):(k + 1) * len(_RDDATA)]
            for p, want in enumerate(self.patterns[s]):
                x = M.words_to_int(got[p * M.DATA_WORDS:(p + 1) * M.DATA_WORDS]) ^ want
                wrong |= (x | (x >> M.DATABITS)) & BEAT_MASK
        return wrong

    def read_errors(self, seeds=SCAN_SEEDS, before: list | None = None) -> int:
        """Read each seed's burst back: the wrong-bit mask."""
        return self.errors_of(self.c.batch(self.read_ops(seeds, before)), seeds)

    def test(self, seeds=SEEDS) -> int:
        """Write then read back every seed: the wrong-bit mask (0 is a clean channel)."""
        self.write_bursts(seeds)
        return self.read_errors(seeds)
