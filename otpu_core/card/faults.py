"""Fault injection for the simulated card: the spec language and the memory-fault behaviour.

A spec is tokens joined by `;`, each `kind` or `kind:key=val,key=val`, for example
`stuck_dq:ch=1,bit=44,val=0;hot:c=95`. `parse(spec)` validates every token against `KINDS` and
returns a `FaultSet`; `str(FaultSet)` writes the canonical spec back, so a set survives a trip
through an environment variable or a file. `from_env()` reads `OTPU_SIM_FAULTS`.

The memory faults act on what passes through a DRAM channel's data pins and address lines:
`apply_stuck_dq` forces stuck bits, `garble_write`/`garble_read` model byte lanes outside their
PHY window, `alias_segments`/`alias_class` map channel addresses to the cells that hold them.
The simulated card applies them when data is stored (host DMA and engine stores alike) and
again on host reads. Everything is vectorised with numpy.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from ..errors import UsageError

ENV_VAR = "OTPU_SIM_FAULTS"
BUS_BYTES = 8          # one DDR3 bus word: 64 data bits (byte lanes 0..7) plus the ECC lane
DQ_BITS = 72           # 8 data byte lanes and the ECC byte lane
DATA_BITS = 64         # the data lanes; a simulated card has no ECC lane
ALIAS_MIN_BIT = 3      # address lines below the bus word select a byte, not a cell


@dataclass(frozen=True)
class KeySpec:
    """One key of a fault kind: its type, the range it may take and what it means."""
    typ: type
    lo: float
    hi: float
    meaning: str

    def convert(self, text: str) -> int | float:
        try:
            value = int(text, 0) if self.typ is int else float(text)
        except ValueError:
            raise ValueError(f"'{text}' is not {'an integer' if self.typ is int else 'a number'}") from None
        if not self.lo <= value <= self.hi:
            raise ValueError(f"{text} is outside {self.lo:g}..{self.hi:g}")
        return value


@dataclass(frozen=True)
class KindSpec:
    meaning: str
    keys: dict[str, KeySpec] = field(default_factory=dict)


_CH = KeySpec(int, 0, 15, "DRAM channel")
KINDS: dict[str, KindSpec] = {
    "link_down": KindSpec("the PCIe link is down: every BAR0 read returns 0xFFFFFFFF"),
    "stuck_dq": KindSpec("one DQ pin of a channel is stuck at a level", {
        "ch": _CH, "bit": KeySpec(int, 0, DQ_BITS - 1, "DQ bit (0..63 data, 64..71 ECC lane)"),
        "val": KeySpec(int, 0, 1, "level the pin is stuck at")}),
    "addr_alias": KindSpec("one address line of a channel is stuck low, so two addresses share cells", {
        "ch": _CH, "bit": KeySpec(int, ALIAS_MIN_BIT, 40, "channel byte-address bit")}),
    "no_calib": KindSpec("a channel's PHY has no read or write window: it never calibrates", {"ch": _CH}),
    "hang": KindSpec("the sequencer never halts"),
    "vpu_lane": KindSpec("one VPU lane flips a bit of every result it writes", {
        "lane": KeySpec(int, 0, 1023, "VPU lane"), "bit": KeySpec(int, 0, 31, "bit of the fp32 result")}),
    "hot": KindSpec("the die runs hot: its temperature never reads below C", {
        "c": KeySpec(float, -40, 200, "degrees Celsius")}),
    "dq_slip": KindSpec("one DQ bit's ISERDES frames its word OFF bit times off the rest of its byte lane, so "
                        "that bit reads right only at its own read bitslip", {
        "ch": _CH, "bit": KeySpec(int, 0, DQ_BITS - 1, "DQ bit (0..63 data, 64..71 ECC lane)"),
        "off": KeySpec(int, -2, 2, "bit times (+2 or -2 is what a per-bit read bitslip offset corrects)")}),
    "i2c_stuck": KindSpec("one line of an I2C bus is shorted to ground", {
        "bus": KeySpec(int, 0, 1, "I2C bus (0 sensor, 1 smbus)"), "line": KeySpec(int, 0, 1, "0 SCL, 1 SDA")}),
    "i2c_pullup": KindSpec("an I2C bus has no pull-ups: a released line never rises", {
        "bus": KeySpec(int, 0, 1, "I2C bus (0 sensor, 1 smbus)")}),
    "i2c_nack": KindSpec("the device at an I2C address does not answer (absent or dead)", {
        "bus": KeySpec(int, 0, 1, "I2C bus (0 sensor, 1 smbus)"), "addr": KeySpec(int, 0, 0x7F, "7-bit address")}),
}


def _known_kinds() -> str:
    return ", ".join(KINDS)


@dataclass(frozen=True)
class Fault:
    kind: str
    params: Mapping[str, int | float] = field(default_factory=dict)

    def __getitem__(self, key: str) -> int | float: return self.params[key]

    def __str__(self) -> str:
        if not self.params:
            return self.kind
        order = KINDS[self.kind].keys if self.kind in KINDS else self.params
        return self.kind + ":" + ",".join(f"{k}={_fmt(self.params[k])}" for k in order if k in self.params)

    def __hash__(self) -> int: return hash(str(self))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fault) and str(self) == str(other)


def _fmt(value: int | float) -> str:
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


class FaultSet:
    """The faults of one card, in spec order; empty means a healthy card."""

    def __init__(self, faults: tuple[Fault, ...] | list[Fault] = ()):
        self.faults = tuple(faults)

    def get(self, kind: str) -> list[Fault]:
        if kind not in KINDS:
            raise KeyError(f"unknown fault kind '{kind}' (known: {_known_kinds()})")
        return [f for f in self.faults if f.kind == kind]

    def has(self, kind: str) -> bool: return bool(self.get(kind))

    def on_channel(self, kind: str, ch: int) -> list[Fault]:
        return [f for f in self.get(kind) if f.params["ch"] == ch]

    def validate(self, target) -> "FaultSet":
        """Check the channel and address-bit keys against a target's memory; returns self."""
        channels = target.platform["channels"]
        chan_bits = int(target.platform["channel_bytes"]).bit_length() - 1
        for f in self.faults:
            if f.kind == "stuck_dq" and f.params["bit"] >= DATA_BITS:
                raise UsageError(f"fault '{f}': DQ bit {f.params['bit']} is on the ECC byte lane (bits "
                                 f"{DATA_BITS}..{DQ_BITS - 1}), and the simulated {target.name} card has no ECC "
                                 "lane: it stores data bits only",
                                 hint=f"stick a data bit: bit=0..{DATA_BITS - 1}")
            if "ch" in f.params and f.params["ch"] >= channels:
                raise UsageError(f"fault '{f}': ch={f.params['ch']} but target {target.name} has "
                                 f"{channels} channels (0..{channels - 1})")
            if f.kind == "addr_alias" and f.params["bit"] >= chan_bits:
                raise UsageError(f"fault '{f}': bit={f.params['bit']} is not an address line of a "
                                 f"{target.platform['channel_bytes']}-byte channel (bits {ALIAS_MIN_BIT}.."
                                 f"{chan_bits - 1})")
        return self

    def __iter__(self) -> Iterator[Fault]: return iter(self.faults)

    def __len__(self) -> int: return len(self.faults)

    def __bool__(self) -> bool: return bool(self.faults)

    def __str__(self) -> str: return ";".join(str(f) for f in self.faults)

    def __repr__(self) -> str: return f"FaultSet({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FaultSet) and self.faults == other.faults

    def __hash__(self) -> int: return hash(self.faults)


NO_FAULTS = FaultSet()


def _parse_token(token: str) -> Fault:
    kind, sep, rest = token.partition(":")
    kind = kind.strip()
    spec = KINDS.get(kind)
    if spec is None:
        raise UsageError(f"unknown fault kind '{kind}'", hint=f"known kinds: {_known_kinds()}")
    allowed = ", ".join(spec.keys) or "none"
    if not spec.keys:
        if sep and rest.strip():
            raise UsageError(f"fault '{kind}' takes no keys, got '{rest.strip()}'")
        return Fault(kind, {})
    params: dict[str, Any] = {}
    for item in (p.strip() for p in rest.split(",")) if rest.strip() else ():
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"fault '{kind}': '{item}' is not key=value", hint=f"keys of {kind}: {allowed}")
        if key not in spec.keys:
            raise UsageError(f"fault '{kind}': unknown key '{key}'", hint=f"keys of {kind}: {allowed}")
        if key in params:
            raise UsageError(f"fault '{kind}': key '{key}' given twice")
        try:
            params[key] = spec.keys[key].convert(text.strip())
        except ValueError as e:
            raise UsageError(f"fault '{kind}': {key}={text.strip()}: {e} ({spec.keys[key].meaning})") from None
    missing = [k for k in spec.keys if k not in params]
    if missing:
        raise UsageError(f"fault '{kind}': missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                         hint=f"write it as {kind}:" + ",".join(f"{k}=..." for k in spec.keys))
    return Fault(kind, {k: params[k] for k in spec.keys})


def parse(spec: str | None) -> FaultSet:
    """Parse a fault spec; empty tokens (a trailing `;`) are ignored. Errors are `UsageError`s."""
    if not spec:
        return NO_FAULTS
    faults = [_parse_token(tok.strip()) for tok in spec.split(";") if tok.strip()]
    seen = set()
    for f in faults:
        if str(f) in seen:
            raise UsageError(f"fault '{f}' given twice")
        seen.add(str(f))
    return FaultSet(faults)


def from_env(environ: Mapping[str, str] | None = None) -> FaultSet:
    env = os.environ if environ is None else environ
    try:
        return parse(env.get(ENV_VAR, ""))
    except UsageError as e:
        raise UsageError(f"{ENV_VAR}: {e.message}", hint=e.hint) from None


# ---- memory-fault behaviour -------------------------------------------------------------------

def apply_stuck_dq(faults: FaultSet, ch: int, addr, data: np.ndarray) -> np.ndarray:
    """Force stuck DQ bits in `data` (uint8 bytes at channel byte address `addr`, or at the
    per-byte addresses of an array `addr`), in place.

    DQ bit b sits in byte lane b // 8, so it touches every byte whose channel address is
    congruent to b // 8 modulo the 8-byte bus word. ECC-lane bits (64..71) carry no data.
    """
    for f in faults.on_channel("stuck_dq", ch):
        lane, bit = divmod(int(f.params["bit"]), 8)
        if lane >= BUS_BYTES or data.size == 0:
            continue
        on_lane = (addr % BUS_BYTES == lane) if isinstance(addr, np.ndarray) else slice((lane - addr) % BUS_BYTES, None, BUS_BYTES)
        if f.params["val"]:
            data[on_lane] |= np.uint8(1 << bit)
        else:
            data[on_lane] &= np.uint8(0xFF ^ (1 << bit))
    return data


def alias_address(faults: FaultSet, ch: int, addr: int) -> int:
    """The cell address a channel byte address really reaches with its aliased lines stuck low."""
    for f in faults.on_channel("addr_alias", ch):
        addr &= ~(1 << int(f.params["bit"]))
    return addr


def alias_segments(faults: FaultSet, ch: int, addr: int, n: int) -> list[tuple[int, int, int]]:
    """Split the range [addr, addr+n) into (offset in range, cell address, length) pieces.

    Without an alias fault on the channel this is one piece; with one, the range is cut where
    an aliased address bit changes, and each piece is moved to the cells it really reaches.
    """
    bits = sorted(int(f.params["bit"]) for f in faults.on_channel("addr_alias", ch))
    if not bits or n <= 0:
        return [(0, addr, n)] if n > 0 else []
    step = 1 << bits[0]
    pieces, pos = [], addr
    end = addr + n
    while pos < end:
        stop = min(end, (pos // step + 1) * step)
        pieces.append((pos - addr, alias_address(faults, ch, pos), stop - pos))
        pos = stop
    return pieces


def alias_mask(faults: FaultSet, ch: int) -> int:
    """The channel's aliased address lines as one bit mask (0: none)."""
    mask = 0
    for f in faults.on_channel("addr_alias", ch):
        mask |= 1 << int(f.params["bit"])
    return mask


def alias_class(mask: int) -> list[int]:
    """Every combination of the aliased lines: the addresses `cell | s` that share one cell."""
    bits = [1 << b for b in range(mask.bit_length()) if mask >> b & 1]
    return [sum(b for i, b in enumerate(bits) if k >> i & 1) for k in range(1 << len(bits))]


# ---- a byte lane sampled outside its window -----------------------------------------------------

def lane_salt(serial: int, write: bool) -> int:
    """Noise seed of a card's garbled reads or writes (two cards garble differently)."""
    return 2 * serial + int(write)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised (the noise of a wrong sample)."""
    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _lane_noise(pos: np.ndarray, salt: int) -> np.ndarray:
    """Deterministic noise byte for each channel byte address in `pos`."""
    return (mix64(pos.astype(np.uint64) ^ np.uint64(salt & 0x7FFFFFFF)) & np.uint64(0xFF)).astype(np.uint8)


def _lane_select(data: np.ndarray, addr, lanes) -> tuple[np.ndarray, np.ndarray] | None:
    """(addresses, mask) of the bytes of `data` on `lanes`; `addr` is the first byte's channel
    address or every byte's (an array)."""
    lanes = [l for l in lanes if l < BUS_BYTES]
    if not lanes or data.size == 0:
        return None
    pos = addr if isinstance(addr, np.ndarray) else np.arange(addr, addr + data.size, dtype=np.int64)
    sel = np.isin(pos % BUS_BYTES, lanes)
    return pos[sel], sel


def garble_read(data: np.ndarray, addr, lanes, salt: int) -> np.ndarray:
    """Bytes read from channel address `addr` on byte lanes `lanes` come back wrong (in place):
    each differs from what the cells hold. Returns `data`."""
    picked = _lane_select(data, addr, lanes)
    if picked is not None:
        pos, sel = picked
        data[sel] ^= _lane_noise(pos, salt) | np.uint8(1)
    return data


def garble_write(data: np.ndarray, addr, lanes, salt: int) -> np.ndarray:
    """Bytes written at channel address `addr` on byte lanes `lanes` land as noise that depends
    only on the address (in place), so garbling stored data again changes nothing. Returns `data`."""
    picked = _lane_select(data, addr, lanes)
    if picked is not None:
        pos, sel = picked
        data[sel] = _lane_noise(pos, salt)
    return data
