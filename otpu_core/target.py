"""Target descriptions: `targets/<name>.toml` read, validated and turned into what each layer needs.

A target has four layers. `arch` changes results (the compiler and the golden simulator read
it as a `Config`), `uarch` changes only timing, `tech` names the cell family, `platform` the
board. `arch_hash()` is a stable 32-bit digest of the arch layer alone; a card exposes it as
CFG_HASH and the host compares it with the target it was asked for.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import TargetError

DEFAULT_TARGET = "ypcb-00338"
TARGETS_DIR = Path(__file__).resolve().parent.parent / "targets"
RTL_DIR = Path(__file__).resolve().parent.parent / "rtl"
# The machine's RTL in build order: the headers its modules include, then the units, then the slice top.
RTL_SOURCES = ("fp/otpu_fp_funcs.svh", "core/otpu_defs.svh", "fp/otpu_fp_add.sv", "fp/otpu_fp_mul.sv", "fp/otpu_fp_i2f.sv",
               "fp/otpu_fp_composite.sv", "core/otpu_tmem.sv", "core/otpu_actram.sv", "core/otpu_seq.sv",
               "core/otpu_dstep_fold.sv", "core/otpu_stream.sv", "core/otpu_dma.sv", "core/otpu_mxu.sv", "core/otpu_qnt.sv",
               "core/otpu_vpu.sv", "core/otpu_coll.sv", "core/otpu_core.sv")
# otpu_core's parameters (rtl/core/otpu_core.sv), all of them in rtl_params()
RTL_CORE_PARAMS = ("D", "MCOLS", "LANES", "ACT_BLOCKS", "ACT_ROWS", "TMEM_WORDS", "IMEM_WORDS", "DSTEP", "STREAM", "PAIR",
                   "SEQ_WC", "WIN", "FIFO_DEPTH", "TMEM_IMPL", "MXU_LATENCY", "COMPOSITE_COLS_PER_CYCLE",
                   "DRAM_BYTES_PER_CYCLE", "VT_APPEND_CYCLES")


def _pow2(lo: int, hi: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: lo <= v <= hi and v & (v - 1) == 0), f"a power of two from {lo} to {hi}"


def _within(lo: int, hi: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: lo <= v <= hi), f"an integer from {lo} to {hi}"


def _oneof(*vals) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in vals), "one of " + ", ".join(repr(v) for v in vals)


def _positive() -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v > 0), "a positive number"


_ANY = (lambda v: True, "any value")

# layer -> key -> (python type, (check, allowed text), required)
SCHEMA: dict[str, dict[str, tuple[type, tuple, bool]]] = {
    "arch": {
        "S": (int, _oneof(1, 2, 4, 8), True),
        "D": (int, _pow2(16, 256), True),
        "MCOLS": (int, _oneof(1, 2, 4, 8), True),
        "LANES": (int, _oneof(4, 8, 16), True),
        "ACT_BLOCKS": (int, _pow2(4, 1024), True),
        "ACT_ROWS": (int, _within(0, 256), True),
        "TMEM_WORDS": (int, _pow2(1024, 1 << 22), True),
        "DRAM_BYTES": (int, _pow2(1 << 16, 1 << 40), True),
        "IMEM_WORDS": (int, _pow2(256, 1 << 20), True),
        "PAIR": (bool, _ANY, True),
        "DSTEP": (bool, _ANY, True),
        "STREAM": (bool, _ANY, True),
        "SEQ_WC": (bool, _ANY, True),
    },
    "uarch": {
        "MXU_IMPL": (int, _oneof(1, 2), True),           # 1 adder tree, 2 systolic
        "TMEM_IMPL": (int, _oneof(1, 2, 3), True),       # 1 six copies, 2 three 1R1W copies, 3 one copy + replay
        "RPB": (int, _within(1, 8), True),               # TMEM read ports per bank
        "WPB": (int, _within(1, 8), True),               # TMEM write ports per bank
        "WIN": (int, _pow2(2, 32), True),                # scoreboard window slots
        "FIFO_DEPTH": (int, _pow2(16, 1 << 16), True),   # MXU chunk prefetch FIFO, in chunks
        "TRACE_DEPTH": (int, _pow2(256, 1 << 20), True),  # hardware trace ring, in 64-bit records
        "CHASH": (bool, _ANY, True),                     # channel hash of odd-parity chunks
        "DRAM_BYTES_PER_CYCLE": (int, _pow2(16, 1024), True),  # DRAM peak per core cycle, all channels
        "DRAM_EFFICIENCY": (float, ((lambda v: 0.1 <= v <= 1.0), "a fraction from 0.1 to 1.0"), True),
        "DRAM_LATENCY": (int, _within(1, 1000), True),   # cycles from request to first beat
        "MXU_LATENCY": (int, _within(1, 1000), True),    # cycles from last chunk to result in TMEM
        "COMPOSITE_COLS_PER_CYCLE": (int, _within(1, 16), True),  # exp2/recip/rsqrt/log2 long lanes
        "VT_APPEND_CYCLES": (int, _within(1, 1000), True),  # one 64-byte read-modify-write per V^T byte
    },
    "tech": {
        "family": (str, _oneof("generic", "xilinx7", "xilinxus", "asic"), True),
        "device": (str, _ANY, False),
        "pdk": (str, _ANY, False),
    },
    "platform": {
        "board": (str, _ANY, True),
        "memory": (str, _oneof("DDR3-1066", "DDR3-1600", "DDR4-2400", "DDR4-3200", "HBM", "SRAM", "none"), True),
        "channels": (int, _within(1, 16), True),
        "channel_bytes": (int, _pow2(1 << 16, 1 << 40), True),
        "host_link": (str, _oneof("pcie-gen2-x8", "pcie-gen3-x16", "pcie-gen3-x8", "none"), True),
        "core_mhz": (float, _positive(), True),
        "pcie_vendor": (int, _within(0, 0xFFFF), False),
        "pcie_device": (int, _within(0, 0xFFFF), False),
        "input_monitor": (str, _ANY, False),            # the board's input power monitor, "bus:addr" (smbus:0x40)
        "input_shunt_mohm": (float, _positive(), False),  # its current-sense shunt
    },
}
TOP_KEYS = {"name": str, "description": str}
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class Config:
    """The arch layer: everything that changes results. Compiler and simulator read only this."""
    S: int
    D: int
    MCOLS: int
    LANES: int
    ACT_BLOCKS: int
    ACT_ROWS: int
    TMEM_WORDS: int
    DRAM_BYTES: int
    IMEM_WORDS: int
    PAIR: bool
    DSTEP: bool
    STREAM: bool
    SEQ_WC: bool

    @property
    def act_rows(self) -> int:
        """ACT RAM rows; ACT_ROWS=0 means MCOLS (more than MCOLS turns on MM replay)."""
        return self.ACT_ROWS or self.MCOLS

    @property
    def max_k(self) -> int: return self.ACT_BLOCKS * self.D

    @property
    def imem_instrs(self) -> int: return self.IMEM_WORDS // 8

    def replace(self, **changes) -> "Config": return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Uarch:
    """The uarch layer: timing only. Two targets that differ here compute the same bits."""
    MXU_IMPL: int
    TMEM_IMPL: int
    RPB: int
    WPB: int
    WIN: int
    FIFO_DEPTH: int
    TRACE_DEPTH: int
    CHASH: bool
    DRAM_BYTES_PER_CYCLE: int
    DRAM_EFFICIENCY: float
    DRAM_LATENCY: int
    MXU_LATENCY: int
    COMPOSITE_COLS_PER_CYCLE: int
    VT_APPEND_CYCLES: int


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    path: Path
    arch: Config
    uarch: Uarch
    tech: dict[str, Any]
    platform: dict[str, Any]

    def config(self) -> Config: return self.arch

    def sim_uarch(self) -> dict[str, Any]:
        """Parameters for a Verilator build: arch and uarch flattened, names as the RTL spells them."""
        return {**dataclasses.asdict(self.arch), **dataclasses.asdict(self.uarch)}

    def rtl_params(self) -> dict[str, Any]:
        """Top-level parameters for an FPGA or ASIC build: sim_uarch plus tech and clock."""
        return {**self.sim_uarch(), "TECH": self.tech["family"], "DEVICE": self.tech.get("device") or self.tech.get("pdk", ""),
                "CORE_MHZ": self.platform["core_mhz"], "CFG_HASH": self.arch_hash()}

    def sources(self) -> list[Path]:
        """The RTL files of this target's machine in build order: headers (included by the modules),
        then modules (the same set for every target today: rtl_params() specialises them)."""
        return [RTL_DIR / f for f in RTL_SOURCES]

    def arch_hash(self) -> int: return arch_hash(self.arch)

    @property
    def stream_subset(self) -> bool:
        """Whether this target's STREAM runs only the hardware subset (`isa.stream_hw_cfg`), as a
        card's stream engine and the RTL's do; a generic (simulation-only) target's runs every
        descriptor, as the golden simulator does."""
        return self.tech["family"] != "generic"

    @property
    def core_hz(self) -> float: return self.platform["core_mhz"] * 1e6

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "path": str(self.path),
                "arch_hash": f"0x{self.arch_hash():08x}", "arch": dataclasses.asdict(self.arch),
                "uarch": dataclasses.asdict(self.uarch), "tech": dict(self.tech), "platform": dict(self.platform)}


def arch_hash(cfg: Config) -> int:
    """32-bit digest of the arch layer only, stable across runs, Python versions and key order."""
    text = ";".join(f"{f.name}={int(getattr(cfg, f.name))}" for f in dataclasses.fields(Config))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def rtl_missing(t: Target) -> list[str]:
    """What of this target's arch the RTL does not implement (empty: it can be built)."""
    a, ua = t.arch, t.uarch
    missing = [name for name, bad in (("S > 1 (collectives across slices)", a.S > 1),
                                      ("general STREAM (a generic target's stream engine runs every descriptor; "
                                       "the RTL's runs the hardware subset, isa.stream_hw_cfg)",
                                       a.STREAM and not t.stream_subset)) if bad]
    if ua.DRAM_BYTES_PER_CYCLE != a.D:
        missing.append(f"DRAM_BYTES_PER_CYCLE = {ua.DRAM_BYTES_PER_CYCLE} different from D = {a.D} "
                       "(the RTL streams one D-byte chunk per DRAM beat)")
    return missing


def check_rtl_buildable(t: Target) -> None:
    """Refuse a target whose arch the RTL does not implement, naming what is missing."""
    missing = rtl_missing(t)
    if missing:
        raise TargetError(f"{t.path}: the RTL cannot be built for target {t.name}: it has no " + "; no ".join(missing),
                          hint="RTL targets: " + ", ".join(n for n in names() if not rtl_missing(load(n))))


def names() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml"))


def resolve(name_or_path: str | os.PathLike | None = None) -> Path:
    """A target name (`ypcb-00338`) or a path to a .toml; None means `$OTPU_TARGET` or the default."""
    spec = str(name_or_path if name_or_path is not None else os.environ.get("OTPU_TARGET") or DEFAULT_TARGET)
    if not spec.strip():
        raise TargetError("empty target name", hint=f"known targets: {', '.join(names())}")
    path = Path(spec)
    if spec.endswith(".toml") or os.sep in spec:
        if path.is_dir():
            raise TargetError(f"target file {spec} is a directory, not a .toml file")
        if not path.is_file():
            raise TargetError(f"target file {spec} does not exist")
        return path
    path = TARGETS_DIR / f"{spec.lower()}.toml"
    if not path.is_file():
        raise TargetError(f"unknown target '{spec}'", hint=f"known targets: {', '.join(names())}")
    return path


def load(name_or_path: str | os.PathLike | None = None) -> Target:
    path = resolve(name_or_path)
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TargetError(f"{path}: not valid TOML: {e}") from None
    except OSError as e:
        raise TargetError(f"{path}: cannot read: {e.strerror}") from None
    return parse(doc, path)


def default() -> Target: return load(None)


def parse(doc: dict[str, Any], path: Path) -> Target:
    """Validate a parsed target document; every error names file, layer, key, value and what is allowed."""
    def fail(layer: str, key: str, value: Any, allowed: str) -> TargetError:
        return TargetError(f"{path}: [{layer}] {key} = {value!r}: must be {allowed}")

    for key, value in doc.items():
        if key in SCHEMA:
            if not isinstance(value, dict):
                raise fail("top", key, value, "a table")
        elif key in TOP_KEYS:
            if not isinstance(value, TOP_KEYS[key]):
                raise fail("top", key, value, "a string")
        else:
            raise TargetError(f"{path}: unknown top-level key '{key}'",
                              hint=f"allowed: {', '.join([*TOP_KEYS, *SCHEMA])}")
    layers: dict[str, dict[str, Any]] = {}
    for layer, schema in SCHEMA.items():
        table = doc.get(layer)
        if table is None:
            raise TargetError(f"{path}: missing layer [{layer}]", hint=f"keys of [{layer}]: {', '.join(schema)}")
        for key in table:
            if key not in schema:
                raise TargetError(f"{path}: [{layer}] unknown key '{key}'", hint=f"allowed keys: {', '.join(schema)}")
        values = {}
        for key, (typ, (check, allowed), required) in schema.items():
            if key not in table:
                if required:
                    raise TargetError(f"{path}: [{layer}] missing key '{key}' ({TYPE_NAMES[typ]}, {allowed})")
                continue
            value = table[key]
            if typ is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if type(value) is not typ:
                raise fail(layer, key, value, f"{TYPE_NAMES[typ]} ({allowed})")
            if not check(value):
                raise fail(layer, key, value, allowed)
            values[key] = value
        layers[layer] = values
    arch, plat = layers["arch"], layers["platform"]
    _check_combinations(path, arch, plat)
    return Target(name=doc.get("name", path.stem), description=doc.get("description", ""), path=path,
                  arch=Config(**arch), uarch=Uarch(**layers["uarch"]), tech=layers["tech"], platform=plat)


def _check_combinations(path: Path, arch: dict[str, Any], plat: dict[str, Any]) -> None:
    """Rules across keys that the seed design states."""
    if arch["LANES"] == 16:
        for feature in ("DSTEP", "STREAM"):
            if arch[feature]:
                raise TargetError(f"{path}: [arch] {feature} = true with LANES = 16: must be false "
                                  "(the 16-lane build has no stream engine)")
    if arch["ACT_ROWS"] and arch["ACT_ROWS"] < arch["MCOLS"]:
        raise TargetError(f"{path}: [arch] ACT_ROWS = {arch['ACT_ROWS']}: must be 0 or at least MCOLS ({arch['MCOLS']})")
    if arch["PAIR"] and arch["D"] % 8:
        raise TargetError(f"{path}: [arch] PAIR = true with D = {arch['D']}: must be false (PAIR needs D divisible by 8)")
    total = plat["channels"] * plat["channel_bytes"]
    if plat["memory"] != "none" and arch["S"] * arch["DRAM_BYTES"] != total:
        raise TargetError(f"{path}: [arch] DRAM_BYTES = {arch['DRAM_BYTES']}: must be "
                          f"channels x channel_bytes / S = {total // arch['S']} (the [platform] memory)")
