"""The precision ledger: which tile format and layout each tensor is converted to, and its gate.

A ledger is a TOML file (docs/tenstorrent.md, "Weights"):

    [gate]                          # optional: the least PCC a format must reach, per format
    bfp4 = 0.985

    [[tensor]]                      # rules, tried in order; the first whose glob matches wins
    match = "blk.*.ffn_down.weight" # fnmatch glob over GGUF tensor names
    format = "bfp8"                 # fp32 | bf16 | bfp8 | bfp4 (or Float32, Float16_b, Bfp8_b, Bfp4_b)
    layout = "nmajor"               # optional: source | nmajor (default: source for *embd.weight)
    min_pcc = 0.9999                # optional: this tensor's gate
    max_abs = 0.05                  # optional: largest error allowed

A tensor no rule matches gets the `--default` format. 1-D tensors stay untiled fp32 whatever a
rule says (the hardware broadcasts them); their gate is exactness. Every mistake in the file is a
UsageError naming the file, the rule, the key, the value and what is allowed.
"""
from __future__ import annotations

import fnmatch
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from . import bfp

SOURCE, NMAJOR = "source", "nmajor"
LAYOUT_NAMES = {"source": SOURCE, "nmajor": NMAJOR, "matmul_nmajor": NMAJOR}
SOURCE_BY_DEFAULT = "*embd.weight"        # tables indexed by row: token and position embeddings

# The least PCC each format must reach against the fp32 source unless the ledger says otherwise:
# Gaussian weights land near 1 - 1e-6 (bf16), 0.99996 (bfp8) and 0.990 (bfp4).
DEFAULT_MIN_PCC = {"fp32": 1.0, "bf16": 0.9999, "bfp8": 0.999, "bfp4": 0.98}
RULE_KEYS = ("match", "format", "layout", "min_pcc", "max_abs")
FORMAT_CHOICES = ", ".join(f.short for f in bfp.FORMATS) + " (or " + ", ".join(f.name for f in bfp.FORMATS) + ")"


@dataclass(frozen=True)
class Choice:
    """What the converter does with one 2-D (or stacked) tensor."""
    fmt: bfp.TileFormat
    layout: str
    min_pcc: float
    max_abs: float                        # math.inf: no limit
    rule: int | None                      # index of the ledger rule that chose it (None: defaults)


@dataclass(frozen=True)
class Rule:
    match: str
    fmt: bfp.TileFormat | None
    layout: str | None
    min_pcc: float | None
    max_abs: float | None


class Ledger:
    def __init__(self, rules: list[Rule] = (), gate: dict[str, float] | None = None, path: Path | None = None):
        self.rules, self.path = list(rules), path
        self.gate = {**DEFAULT_MIN_PCC, **(gate or {})}
        self.used: set[int] = set()

    @classmethod
    def load(cls, path: Path | str) -> "Ledger":
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise UsageError(f"--ledger {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--ledger {path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"{path}: not valid TOML: {e}") from None
        for key in data:
            if key not in ("gate", "tensor"):
                raise UsageError(f"{path}: unknown key '{key}'; a ledger has [gate] and [[tensor]] rules")
        gate = {}
        for name, value in _table(path, data, "gate").items():
            fmt = bfp.format_named(name)
            if fmt is None:
                raise UsageError(f"{path}: [gate] key '{name}' is not a format; formats are {FORMAT_CHOICES}")
            gate[fmt.short] = _pcc(path, "[gate]", name, value)
        rules_data = data.get("tensor", [])
        if not isinstance(rules_data, list):
            raise UsageError(f"{path}: 'tensor' must be an array of tables ([[tensor]] rules)")
        return cls([_rule(path, i, r) for i, r in enumerate(rules_data, 1)], gate, path)

    def choose(self, name: str, default: bfp.TileFormat) -> Choice:
        """The format, layout and gate of tensor `name` (first matching rule, then the defaults)."""
        for i, rule in enumerate(self.rules, 1):
            if fnmatch.fnmatchcase(name, rule.match):
                self.used.add(i)
                fmt = rule.fmt or default
                layout = rule.layout or default_layout(name)
                min_pcc = rule.min_pcc if rule.min_pcc is not None else self.gate[fmt.short]
                max_abs = rule.max_abs if rule.max_abs is not None else default_max_abs(fmt)
                return Choice(fmt, layout, min_pcc, max_abs, i)
        return Choice(default, default_layout(name), self.gate[default.short], default_max_abs(default), None)

    def unused(self) -> list[tuple[int, str]]:
        """(index, glob) of rules that matched no tensor: most likely a typo in the glob."""
        return [(i, r.match) for i, r in enumerate(self.rules, 1) if i not in self.used]


def default_layout(name: str) -> str:
    return SOURCE if fnmatch.fnmatchcase(name, SOURCE_BY_DEFAULT) else NMAJOR


def default_max_abs(fmt: bfp.TileFormat) -> float:
    return 0.0 if fmt is bfp.FLOAT32 else math.inf


def _table(path: Path, data: dict, key: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise UsageError(f"{path}: '{key}' must be a table ([{key}])")
    return value


def _pcc(path: Path, where: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= value <= 1.0:
        raise UsageError(f"{path}: {where} {key} = {value!r}: a PCC threshold is a number from -1 to 1")
    return float(value)


def _rule(path: Path, i: int, r) -> Rule:
    if not isinstance(r, dict):
        raise UsageError(f"{path}: tensor rule {i} must be a table")
    where = f"tensor rule {i}" + (f" (match '{r['match']}')" if isinstance(r.get("match"), str) else "")
    for key in r:
        if key not in RULE_KEYS:
            raise UsageError(f"{path}: {where}: unknown key '{key}'; allowed: {', '.join(RULE_KEYS)}")
    match = r.get("match")
    if not isinstance(match, str) or not match:
        raise UsageError(f"{path}: {where}: needs match = \"<glob over tensor names>\"")
    fmt = None
    if "format" in r:
        fmt = bfp.format_named(str(r["format"]))
        if fmt is None or not isinstance(r["format"], str):
            raise UsageError(f"{path}: {where}: format = {r['format']!r} is not one of {FORMAT_CHOICES}")
    layout = None
    if "layout" in r:
        layout = LAYOUT_NAMES.get(str(r["layout"]).lower())
        if layout is None or not isinstance(r["layout"], str):
            raise UsageError(f"{path}: {where}: layout = {r['layout']!r} is not one of source, nmajor")
    min_pcc = _pcc(path, where, "min_pcc", r["min_pcc"]) if "min_pcc" in r else None
    max_abs = None
    if "max_abs" in r:
        v = r["max_abs"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise UsageError(f"{path}: {where}: max_abs = {v!r}: the largest error allowed is a number >= 0")
        max_abs = float(v)
    return Rule(match, fmt, layout, min_pcc, max_abs)
