"""The card contract: the BAR0 register map and the DRAM address map, declared once as data.

Everything a host or the simulated card needs to know about where a register lives, who may
write it and what its bits mean is a `Reg` in `REGS` (control window) or a constant of this
module; no other module spells a BAR0 offset as a literal. The table checks itself on import
(aligned, no overlaps, unique names, resets that fit).

BAR0 (1 MiB, the XDMA AXI-Lite master) has four 64 KiB windows: otpu_ctrl at 0x00000 (decodes
12 address bits, so its 4 KiB map repeats through the window), the LiteDRAM CSRs of both
channels at 0x10000, nothing at 0x20000, the XADC at 0x30000. DRAM: one 4 GiB logical space
interleaved in 64-byte beats over two channels, channel 1 at AXI 0x8000_0000, with the CHASH
swap of odd-parity chunks (`split`/`join`).

CFG_HASH (0x05C) is this project's addition: the target's `arch_hash()`, compared by the host
with the target it was asked for.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

# Windows --------------------------------------------------------------------------------------

BAR0_BYTES = 1 << 20            # lspci "Region 0 ... size=1M"
HOST_MAP_BYTES = 0x40000        # the host maps windows 0..3
WINDOW_BYTES = 0x10000
CTRL_BASE = 0x00000             # otpu_ctrl, core clock
CTRL_DECODE = 0x1000            # otpu_ctrl decodes 12 address bits: the map repeats every 4 KiB
LITEDRAM_BASE = 0x10000         # LiteDRAM CSRs of both channels (CAPS HOSTCAL)
LITEDRAM_BYTES = 0x10000
XADC_BASE = 0x30000             # XADC Wizard AXI-Lite (temperature)
XADC_BYTES = 0x10000
I2C_BASE = 0x220                # the two pin registers, as one peripheral window (I2C_CTRL, I2C_IN)
I2C_BYTES = 8

UNMAPPED = 0xDEADBEEF           # what an undefined offset reads
LINK_DOWN = 0xFFFFFFFF          # what every read returns when the PCIe link is down
ID_OTPU = 0x4F545055            # "OTPU"; the first 4 bytes of the user node read 55 50 54 4f
DRAM_INIT = 0x5C2BED00          # SCRATCH after a DRAM scrub (configuration resets it to 0)
TEMP_VALID = 1 << 31
REGMAP_VERSION = 3              # 3 adds MXU_STARVE
VOPS_SINCE = 3                  # REGMAP >= 3 is known to have RDOT / OUTER / LOG2


class Access(enum.Enum):
    RO = "ro"          # writes are ignored
    RW = "rw"          # reads return what was written (or what the card set)
    ACTION = "action"  # a write triggers something; a read returns a status value


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int = 1
    desc: str = ""

    @property
    def mask(self) -> int: return ((1 << self.width) - 1) << self.lsb

    def get(self, value: int) -> int: return (value & self.mask) >> self.lsb


@dataclass(frozen=True)
class Reg:
    name: str
    offset: int
    access: Access
    desc: str
    reset: int = 0
    size: int = 4                  # bytes: 4, or 8 for a counter read as low then high word
    fields: tuple[Field, ...] = ()
    since: int = 2                 # first REGMAP version that has it

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name}")

    def bit(self, name: str) -> int: return self.field(name).mask


RO, RW, ACTION = Access.RO, Access.RW, Access.ACTION

CTRL_FIELDS = (
    Field("RUN", 0, desc="run the loaded program (clear to stop)"),
    Field("LOAD", 1, desc="load PROG_N instructions from PROG_ADDR into IMEM"),
    Field("CLEAR", 2, desc="clear the per-run counters; also holds the core in reset"),
)
STATUS_FIELDS = (
    Field("HALTED", 0, desc="the run ended (last store left the core)"),
    Field("ERROR", 1, desc="illegal instruction, or a WAITW timeout with WAIT_TO"),
    Field("LOADING", 2, desc="the program loader is busy"),
    Field("WR_IDLE", 3, desc="every write of the memory adapter is acknowledged"),
    Field("AXI_ERR", 4, desc="the memory path reported an error"),
    Field("CALIB0", 5, desc="DRAM channel 0 calibrated"),
    Field("CALIB1", 6, desc="DRAM channel 1 calibrated"),
    Field("RUN", 7, desc="CTRL.RUN as the core sees it"),
    Field("WAIT_TO", 8, desc="a WAITW timed out (set with ERROR)"),
)
CAPS_FIELDS = (
    Field("TRACE", 0, desc="trace buffer present"),
    Field("TEMP", 1, desc="TEMP register present"),
    Field("I2C", 2, desc="I2C pin registers present"),
    Field("DDR", 3, desc="DDR_MTS valid"),
    Field("W4", 4, desc="MXU runs 4-bit weights"),
    Field("PAIR", 5, desc="column reuse (MM PAIR / QACT DUP)"),
    Field("DSTEP", 6, desc="DMA Gated-DeltaNet head step"),
    Field("CHASH", 7, desc="hashed channel interleave"),
    Field("TRACE_LOG2", 8, 8, desc="log2 of the trace depth in records"),
    Field("PQ_LOG2", 16, 8, desc="log2 of the P/Q activity window in cycles"),
    Field("ACT", 24, desc="ACT_ROWS valid"),
    Field("ARGS", 25, desc="ARG0..7 present"),
    Field("STREAM", 26, desc="stream engine"),
    Field("HOSTCAL", 27, desc="LiteDRAM controllers, calibrated through the CSR window"),
    Field("GEN", 30, desc="decode loop on the card: RLD, VOP ARGMAX, HALT CHAIN"),
    Field("WAITW", 31, desc="WAITW instruction"),
)
TRACE_CTRL_FIELDS = (
    Field("ENABLE", 0, desc="record while RUN"),
    Field("CLEAR", 1, desc="write 1: empty the buffer and zero COUNT/DROP; reads 0"),
    Field("STOP_WHEN_FULL", 2, desc="1 keep the first DEPTH records, 0 ring keeps the last"),
    Field("BUSY", 3, desc="read-only: captured events not yet written"),
)
I2C_FIELDS = (
    Field("SCL0", 0), Field("SDA0", 1), Field("SCL1", 2), Field("SDA1", 3),
    Field("ALERT0", 4, desc="I2C_IN only: LM73 ALERT, active low"),
)
I2C_BUS_NAMES = ("sensor", "smbus")     # bus 0: the LM73; bus 1: the PCIe edge connector's SMBus
I2C_ALERT0 = 1 << 4


def i2c_scl(bus: int) -> int: return 1 << (2 * bus)


def i2c_sda(bus: int) -> int: return 1 << (2 * bus + 1)


# The counters, in the order the host reads them (low word, high word; SNAP read last).
COUNTER_NAMES = ("UPTIME", "RUNNING", "MXU_BUSY", "MXU_MAC", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY",
                 "TMEM_DENY", "DRAM_RD", "DRAM_WR", "DRAM_WAIT", "INSTR", "MXU_STARVE")
COUNTER_BASE = 0x100
COUNTER_SINCE = {"MXU_STARVE": 3}
EVENT_COUNTERS = frozenset({"DRAM_RD", "DRAM_WR", "INSTR"})   # events, not cycles
_COUNTER_DESC = {
    "UPTIME": "every cycle since reset", "RUNNING": "RUN and not HALTED",
    "MXU_BUSY": "MXU has an instruction in flight", "MXU_MAC": "MXU consumes a weight chunk",
    "VPU_BUSY": "VPU has an instruction", "QNT_BUSY": "quantizer has an instruction",
    "DMA_BUSY": "DMA has an instruction", "TMEM_DENY": "some unit's TMEM request not granted",
    "DRAM_RD": "event: 64-byte beats read", "DRAM_WR": "event: 64-byte beats written",
    "DRAM_WAIT": "a slice DRAM request not accepted", "INSTR": "event: instructions retired",
    "MXU_STARVE": "MXU streaming and its chunk FIFO empty",
}

# Per-run counters, 32-bit, cleared by CTRL.CLEAR, in the order Board.wait reads them.
RUN_COUNTER_NAMES = ("CYCLES_LO", "CYCLES_HI", "ICOUNT", "B_RD", "B_WR", "A_RD", "SW_WR", "B_STALL")

ARG_COUNT = 8
ARG_BASE = 0x060

REGS: tuple[Reg, ...] = (
    Reg("ID", 0x000, RO, "0x4F545055 ('OTPU')", reset=ID_OTPU, since=1),
    Reg("VERSION", 0x004, RO, "D in [31:16], MCOLS in [15:8], LANES in [7:0]", since=1,
        fields=(Field("LANES", 0, 8), Field("MCOLS", 8, 8), Field("D", 16, 16))),
    Reg("CTRL", 0x008, RW, "run control", fields=CTRL_FIELDS, since=1),
    Reg("STATUS", 0x00C, RO, "core status", fields=STATUS_FIELDS, since=1),
    Reg("PROG_ADDR", 0x010, RW, "program byte address in DRAM (logical)", since=1),
    Reg("PROG_N", 0x014, RW, "program length in instructions (8 words each)", since=1),
    Reg("CYCLES_LO", 0x018, RO, "cycles of the current/last run, low word", since=1),
    Reg("CYCLES_HI", 0x01C, RO, "cycles of the current/last run, high word", since=1),
    Reg("ICOUNT", 0x020, RO, "instructions retired in the run", since=1),
    Reg("B_RD", 0x024, RO, "port-B read requests in the run", since=1),
    Reg("B_WR", 0x028, RO, "port-B write requests in the run", since=1),
    Reg("A_RD", 0x02C, RO, "port-A read requests in the run", since=1),
    Reg("SW_WR", 0x030, RO, "scalar/QST write requests in the run (v1 name A_WR)", since=1),
    Reg("B_STALL", 0x034, RO, "cycles a port-B request waited in the run", since=1),
    Reg("SCRATCH", 0x038, RW, "host test register; DRAM_INIT after a scrub", since=1),
    Reg("REGMAP", 0x03C, RO, "register-map version", reset=REGMAP_VERSION),
    Reg("CAPS", 0x040, RO, "capability bits", fields=CAPS_FIELDS),
    Reg("CORE_KHZ", 0x044, RO, "core clock in kHz"),
    Reg("BUILD_ID", 0x048, RO, "first 8 hex digits of the build's git commit (0 if unknown)"),
    Reg("TEMP", 0x04C, RO, "bit31 valid; [11:0] XADC code; C = code*503.975/4096 - 273.15",
        fields=(Field("CODE", 0, 12), Field("VALID", 31))),
    Reg("SNAP", 0x050, ACTION, "write: latch every free-running counter; read: snapshots taken"),
    Reg("DDR_MTS", 0x054, RO, "DDR3 data rate of the build in MT/s (CAPS DDR)"),
    Reg("ACT_ROWS", 0x058, RO, "ACT RAM rows (CAPS ACT)"),
    Reg("CFG_HASH", 0x05C, RO, "project addition: arch_hash() of the target the bitstream was built for"),
    *(Reg(f"ARG{i}", ARG_BASE + 4 * i, RW, f"run argument {i}, copied to R{8 + i} at each run start")
      for i in range(ARG_COUNT)),
    *(Reg(n, COUNTER_BASE + 8 * i, RO, _COUNTER_DESC[n], size=8, since=COUNTER_SINCE.get(n, 2))
      for i, n in enumerate(COUNTER_NAMES)),
    Reg("TRACE_CTRL", 0x200, RW, "trace control", fields=TRACE_CTRL_FIELDS),
    Reg("TRACE_COUNT", 0x204, RO, "records written since clear (saturates)"),
    Reg("TRACE_DROP", 0x208, RO, "trace lines lost because the capture queue was full"),
    Reg("TRACE_ADDR", 0x20C, RW, "record index to read (mod depth)"),
    Reg("TRACE_LO", 0x210, RO, "record bits 31:0 at TRACE_ADDR"),
    Reg("TRACE_HI", 0x214, ACTION, "record bits 63:32; reading it advances TRACE_ADDR"),
    Reg("I2C_CTRL", I2C_BASE, RW, "open-drain drive, 1 = pull low", fields=I2C_FIELDS[:4]),
    Reg("I2C_IN", I2C_BASE + 4, RO, "pin levels through two synchronizer flops", fields=I2C_FIELDS),
)
BY_NAME: dict[str, Reg] = {r.name: r for r in REGS}
BY_OFFSET: dict[int, Reg] = {r.offset + w: r for r in REGS for w in range(0, r.size, 4)}


def off(name: str) -> int:
    """Byte offset of a control register (a counter's low word)."""
    return BY_NAME[name].offset


def _check_table() -> None:
    seen: dict[int, str] = {}
    for r in REGS:
        if r.offset % 4 or r.size not in (4, 8) or not 0 <= r.offset < CTRL_DECODE:
            raise AssertionError(f"register {r.name}: offset 0x{r.offset:x} size {r.size} is not an aligned word")
        if r.reset >> (8 * r.size):
            raise AssertionError(f"register {r.name}: reset 0x{r.reset:x} does not fit")
        for w in range(0, r.size, 4):
            if r.offset + w in seen:
                raise AssertionError(f"registers {seen[r.offset + w]} and {r.name} overlap at 0x{r.offset + w:x}")
            seen[r.offset + w] = r.name
        used = 0
        for f in r.fields:
            if f.mask & used or f.lsb + f.width > 32:
                raise AssertionError(f"register {r.name}: field {f.name} overlaps or does not fit")
            used |= f.mask
    if len(BY_NAME) != len(REGS):
        raise AssertionError("duplicate register names")


_check_table()

# Named bits, for readable code on both sides of the contract.
CTRL_RUN, CTRL_LOAD, CTRL_CLEAR = (BY_NAME["CTRL"].bit(n) for n in ("RUN", "LOAD", "CLEAR"))
(ST_HALTED, ST_ERROR, ST_LOADING, ST_WR_IDLE, ST_AXI_ERR, ST_CALIB0, ST_CALIB1, ST_RUN,
 ST_WAIT_TO) = (BY_NAME["STATUS"].bit(f.name) for f in STATUS_FIELDS)
ST_CALIB = (ST_CALIB0, ST_CALIB1)
TR_ENABLE, TR_CLEAR, TR_STOP_WHEN_FULL, TR_BUSY = (BY_NAME["TRACE_CTRL"].bit(f.name) for f in TRACE_CTRL_FIELDS)
PQ_WINDOW_LOG2 = 10             # P/Q activity window of 1024 cycles


def counter_names(regmap: int) -> tuple[str, ...]:
    """The free-running counters a bitstream of this register-map version has."""
    return tuple(n for n in COUNTER_NAMES if COUNTER_SINCE.get(n, 2) <= regmap)


def decode_caps(caps: int) -> dict[str, int | bool]:
    """CAPS as a dict: one-bit fields by lower-case name, plus trace_depth and pq_window (0 if absent)."""
    out: dict[str, int | bool] = {f.name.lower(): bool(f.get(caps)) for f in CAPS_FIELDS if f.width == 1}
    reg = BY_NAME["CAPS"]
    for name, fname in (("trace_depth", "TRACE_LOG2"), ("pq_window", "PQ_LOG2")):
        log2 = reg.field(fname).get(caps)
        out[name] = 1 << log2 if log2 else 0
    return out


def encode_caps(**bits: int | bool) -> int:
    """Inverse of decode_caps for the one-bit fields plus trace_depth and pq_window."""
    caps = 0
    reg = BY_NAME["CAPS"]
    for name, value in bits.items():
        if name == "trace_depth":
            caps |= (int(value).bit_length() - 1) << reg.field("TRACE_LOG2").lsb if value else 0
        elif name == "pq_window":
            caps |= (int(value).bit_length() - 1) << reg.field("PQ_LOG2").lsb if value else 0
        elif value:
            caps |= reg.bit(name.upper())
    return caps


def version_word(d: int, mcols: int, lanes: int) -> int: return (d << 16) | (mcols << 8) | lanes


def temp_code_to_c(code: int) -> float: return code * 503.975 / 4096 - 273.15


def temp_c_to_code(c: float) -> int: return max(0, min(0xFFF, round((c + 273.15) * 4096 / 503.975)))


# XDMA engine facts ---------------------------------------------------------------------------

DMA_CHUNK = 8 << 20             # bytes per DMA call the host makes (the driver pins the call's pages)
RUN_H2C = 4096                  # most bytes per host->card call while a program runs
XDMA_LAP_BYTES = 8192           # the H2C read buffer a longer call laps: it lands this far on
DMA_PLACE = 2048                # (host address - card address) mod 4096 that suits reads and writes


def write_placed(host: int, card: int) -> bool:
    """A host->card buffer runs at full rate when (host - card) mod 64 == 0 (else 0.77 vs 1.70 GB/s)."""
    return (host - card) % 64 == 0


def read_placed(host: int, card: int) -> bool:
    """A card->host buffer runs at full rate when (host - card) mod 4096 is in [32, 4064] (else 1.16 vs 1.65)."""
    return 32 <= (host - card) % 4096 <= 4064


# DRAM address map ----------------------------------------------------------------------------

BEAT = 64                       # bytes per DRAM beat (one channel)
CHUNK = 2 * BEAT                # one beat on each channel
CHANNELS = 2
CH_AXI_BASE = (0x0000_0000, 0x8000_0000)    # bit 31 of the AXI address selects the channel
CH_AXI_SPAN = 1 << 31


def axi_address(ch: int, ch_off: int) -> int: return CH_AXI_BASE[ch] + ch_off


def axi_channel(axi: int) -> tuple[int, int]:
    """(channel, offset in the channel) of an AXI address."""
    return axi >> 31, axi & (CH_AXI_SPAN - 1)


def chunk_parity(chunks: np.ndarray) -> np.ndarray:
    """Parity of the popcount of each chunk index (vectorised xor-fold): 1 = its beats are swapped."""
    m = np.asarray(chunks, dtype=np.uint64).copy()
    for shift in (32, 16, 8, 4, 2, 1):
        m ^= m >> np.uint64(shift)
    return (m & np.uint64(1)).astype(bool)


def beat_channel(logical: int, chash: bool) -> tuple[int, int]:
    """(channel, channel offset) holding the logical byte address (its beat)."""
    b = logical // BEAT
    ch = b & 1
    if chash and chunk_parity(np.array([b >> 1]))[0]:
        ch ^= 1
    return ch, (b >> 1) * BEAT + logical % BEAT


def _check_chunks(addr: int, n: int) -> None:
    if addr % CHUNK or n % CHUNK:
        raise ValueError(f"split/join need 128-byte chunk alignment (address 0x{addr:x}, {n} bytes)")


def _rows(buf, n: int) -> np.ndarray:
    """A byte buffer as n rows of eight 64-bit words (one beat each), for vectorised selects."""
    raw = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf.reshape(-1).view(np.uint8)
    return raw[:n * BEAT].view(np.uint64).reshape(n, BEAT // 8)


_TABLE_BITS = 17                                       # one 16 MiB pipeline piece of chunks
_TABLE = chunk_parity(np.arange(1 << _TABLE_BITS)).astype(np.intp)
_TWICE = 2 * np.arange(1 << _TABLE_BITS, dtype=np.intp)


def _parity_run(first: int, n: int) -> np.ndarray:
    """chunk_parity of chunks first..first+n-1 from a table: first = q*K + r, and for r+m < K the
    bits of q*K and r+m do not meet, so parity(first+m) = parity(q) ^ parity(r+m)."""
    k = 1 << _TABLE_BITS
    if n > k:
        return chunk_parity(np.arange(first, first + n)).astype(np.intp)
    q, r = divmod(first, k)
    head = _TABLE[r:min(k, r + n)] ^ int(bin(q).count("1") & 1)
    if r + n <= k:
        return head
    return np.concatenate([head, _TABLE[:r + n - k] ^ int(bin(q + 1).count("1") & 1)])


def logical_beats(ch: int, first: int, stop: int, chash: bool) -> np.ndarray:
    """Logical beat index of channel `ch`'s beats [first, stop) (channel beat m lies in chunk m)."""
    return _relative_beats(ch, first, stop - first, chash) + 2 * first


def _relative_beats(ch: int, first: int, n: int, chash: bool) -> np.ndarray:
    """logical_beats minus 2*first. Cached: consecutive pipeline pieces of one transfer all start
    at the same offset in the parity table, so they share one index array (fresh ones cost page
    faults)."""
    k = 1 << _TABLE_BITS
    q, r = divmod(first, k)
    key = (ch, r, n, chash, bin(q).count("1") & 1, bin(q + 1).count("1") & 1 if r + n > k else 0)
    rows = _ROWS_CACHE.get(key)
    if rows is None:
        base = _TWICE[:n] if n <= _TWICE.size else 2 * np.arange(n, dtype=np.intp)
        rows = base + ((_parity_run(first, n) ^ ch) if chash else ch)
        rows.flags.writeable = False
        if len(_ROWS_CACHE) >= 8:
            _ROWS_CACHE.pop(next(iter(_ROWS_CACHE)))
        _ROWS_CACHE[key] = rows
    return rows


_ROWS_CACHE: dict[tuple, np.ndarray] = {}


def split(addr: int, data, chash: bool, out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Logical bytes at a chunk-aligned address -> the two channels' runs, both at channel offset addr // 2."""
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    _check_chunks(addr, raw.size)
    n = raw.size // CHUNK
    ch0, ch1 = out if out is not None else (np.empty(n * BEAT, np.uint8), np.empty(n * BEAT, np.uint8))
    logical, a0 = _rows(raw, 2 * n), addr // CHUNK
    for ch, dst in enumerate((ch0, ch1)):
        np.take(logical, _relative_beats(ch, a0, n, chash), axis=0, out=_rows(dst, n), mode="clip")   # "clip": no bounds pass, no buffering
    return ch0[:n * BEAT], ch1[:n * BEAT]


def join(addr: int, ch0, ch1, chash: bool, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of split: the channels' runs at channel offset addr // 2 -> logical bytes."""
    n = (ch0.size if isinstance(ch0, np.ndarray) else len(ch0)) // BEAT
    _check_chunks(addr, 2 * n * BEAT)
    res = out.reshape(-1)[:2 * n * BEAT] if out is not None else np.empty(2 * n * BEAT, np.uint8)
    logical, a0 = _rows(res, 2 * n), addr // CHUNK
    for ch, src in enumerate((ch0, ch1)):
        logical[_relative_beats(ch, a0, n, chash)] = _rows(src, n)
    return res


def markdown_table() -> str:
    """The control register map as a Markdown table (docs/card.md embeds it; a test keeps them equal)."""
    lines = ["| offset | name | access | since | meaning | fields |", "|---|---|---|---|---|---|"]
    for r in REGS:
        span = f"0x{r.offset:03X}" + (f"/0x{r.offset + 4:03X}" if r.size == 8 else "")
        fields = ", ".join(f"{f.name} [{f.lsb + f.width - 1}:{f.lsb}]" if f.width > 1 else f"{f.name} [{f.lsb}]"
                           for f in r.fields)
        lines.append(f"| {span} | {r.name} | {r.access.value} | {r.since} | {r.desc} | {fields} |")
    return "\n".join(lines) + "\n"
