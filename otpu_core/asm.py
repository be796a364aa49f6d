"""openTPU assembly text: `assemble(text)` and `disassemble(instrs)`, which round-trip exactly.

One instruction per line: a mnemonic (`vop.<func>` for VOPs), then `name=value` fields and bare
flag names in any order; `#` starts a comment; `name:` defines a label for the next instruction.
Register-relative fields are written `rN+imm`, `rN-imm`, `rN` or `imm`; register operands `rN`;
enums by name; integers in decimal, hex (0x), binary (0b) or negative decimal for full-word
fields. A VOP scalar immediate may be a float literal (`1.5`, `-0.0`, `inf`, `1e-45`): it is
rounded to fp32; the disassembler prints a float only when it reads back to the same bits.
LOOP's body may be `@label`, the label on the first instruction after the body. An optional
WAITC wait entry follows `!`: queue counts (`ld=0 mxu=2`), `mask=0x3` and `sync`.
Field names and the bit layouts behind them are in docs/isa.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from . import isa
from .errors import UsageError
from .isa import BMode, Field, Instr, Layout, Op, VFunc, WaitEntry

_REL = re.compile(r"^r(\d+)(?:([+-])(.+))?$", re.IGNORECASE)
_LABEL = re.compile(r"^[A-Za-z_.$][\w.$]*$")
_QUEUE_NAMES = {q.name.lower(): q for q in isa.Queue}


class AsmError(UsageError):
    """An assembly line that cannot be assembled; the message names the line number and text."""


@dataclass(frozen=True)
class Program:
    """An assembled program: instructions, per-instruction wait entries (None when the text has
    none) and the labels, as instruction indices."""
    instrs: list[Instr]
    waits: list[WaitEntry] | None
    labels: dict[str, int]


# --- values -------------------------------------------------------------------------------------
def _fmt_int(v: int) -> str:
    return str(v) if v < 0x10000 else f"0x{v:x}"


def _fmt_sint(v: int) -> str:
    return str(v - (1 << 32)) if v >= 0xFFFF0000 else _fmt_int(v)


def _fmt_f32(bits: int) -> str:
    """The shortest float text that reads back to these bits, else the bits in hex (NaN payloads)."""
    text = str(np.uint32(bits).view(np.float32))    # numpy prints the shortest round-trip digits
    return text if _is_float(text) and isa.f32_bits(float(text)) == bits else f"0x{bits:08x}"


def _is_float(text: str) -> bool:
    t = text.lower().lstrip("+-")
    return t in ("inf", "nan", "infinity") or (not t.startswith("0x") and ("." in t or "e" in t))


def _parse_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise AsmError(f"{text!r} is not an integer (decimal, 0x hex, 0b binary)") from None


def _fmt_value(instr: Instr, f: Field, v: int) -> str:
    if f.kind == "enum":
        return next(k for k, n in f.names.items() if n == v)
    if f.kind == "sint":
        return _fmt_sint(v)
    if f.kind == "fp32":
        if instr.bmode == BMode.SCALAR and instr.func not in (VFunc.OUTER, VFunc.ARGMAX) and not instr.rd:
            return _fmt_f32(v)
        return _fmt_sint(v) if instr.func == VFunc.ARGMAX else _fmt_int(v)
    return _fmt_int(v)


def _parse_value(f: Field, text: str) -> int | float | str:
    if f.kind == "enum":
        return text if not text[:1].isdigit() else _parse_int(text)
    if f.kind == "fp32" and _is_float(text):
        return float(text)
    if f.kind == "reg":
        return text
    return _parse_int(text)


# --- disassembly --------------------------------------------------------------------------------
def _mnemonic(instr: Instr) -> str:
    return f"vop.{instr.func.name.lower()}" if instr.op == Op.VOP else instr.layout.mnemonic


def _operands(instr: Instr, label_of=None) -> list[str]:
    lay = instr.layout
    out, flags = [], []
    for f in lay.fields:
        v = instr.fields[f.name]
        if f.kind == "flag":
            if v:
                flags.append(f.name)
            continue
        if f is isa._VFUNC:
            continue
        reg = instr.reg(f.reg) if f.reg else 0
        if f.kind == "reg":
            if v:
                out.append(f"{f.name}=r{v}")
            continue
        if v == f.default and not reg:
            continue
        if f.kind == "body" and label_of is not None and label_of(v) is not None:
            out.append(f"{f.name}=@{label_of(v)}")
            continue
        text = _fmt_value(instr, f, v)
        if reg:
            text = f"r{reg}" if v == 0 else (f"r{reg}{text}" if text.startswith("-") else f"r{reg}+{text}")
        out.append(f"{f.name}={text}")
    return out + flags


def _fmt_wait(w: WaitEntry) -> str:
    parts = [f"{q.name.lower()}={c}" for q, c in zip(isa.Queue, w.counts) if c != isa.WC_ANY]
    if w.mask:
        parts.append(f"mask=0x{w.mask:x}")
    if w.sync:
        parts.append("sync")
    return " ".join(["!"] + parts)


def disasm_one(instr: Instr) -> str:
    """One instruction as an assembly line (numeric LOOP body), for messages and listings."""
    return " ".join([_mnemonic(instr)] + _operands(instr))


def disassemble(instrs: list[Instr], waits: list[WaitEntry] | None = None, pcs: bool = False) -> str:
    """A program as assembly text that `assemble` turns back into the same words (and waits).

    LOOP bodies ending inside the program get labels `L<pc>` on the instruction after the body;
    `pcs` appends a `# pc N` comment to each line (simulator messages name the pc).
    """
    n = len(instrs)
    if waits is not None and len(waits) != n:
        raise UsageError(f"{len(waits)} wait entries for {n} instructions")
    targets = {pc + 1 + i["body"] for pc, i in enumerate(instrs) if i.op == Op.LOOP and pc + 1 + i["body"] <= n}
    lines = []
    for pc, instr in enumerate(instrs):
        if pc in targets:
            lines.append(f"L{pc}:")

        def label_of(body: int, pc=pc) -> str | None:
            return f"L{pc + 1 + body}" if pc + 1 + body in targets else None
        text = " ".join([_mnemonic(instr)] + _operands(instr, label_of))
        if waits is not None and waits[pc].waits:
            text += " " + _fmt_wait(waits[pc])
        lines.append(f"{text:<72} # pc {pc}" if pcs else text)
    if n in targets:
        lines.append(f"L{n}:")
    return "\n".join(lines) + "\n"


# --- assembly -----------------------------------------------------------------------------------
def _layout_of(mnemonic: str) -> tuple[Layout, dict]:
    m = mnemonic.lower()
    if m.startswith("vop."):
        func = m[4:]
        if func.upper() not in VFunc.__members__:
            raise AsmError(f"unknown VOP function {func!r}; functions: "
                           + ", ".join(f.name.lower() for f in VFunc))
        return isa.LAYOUTS[Op.VOP], {"func": func}
    if m == "vop":
        raise AsmError("write the VOP function in the mnemonic, e.g. vop.add")
    if m not in isa.MNEMONICS:
        raise AsmError(f"unknown mnemonic {mnemonic!r}; mnemonics: "
                       + ", ".join(sorted(k for k in isa.MNEMONICS if k != "vop")) + ", vop.<func>")
    return isa.LAYOUTS[isa.MNEMONICS[m]], {}


def _parse_wait(tokens: list[str]) -> WaitEntry:
    counts, mask, sync = [isa.WC_ANY] * isa.NQUEUES, 0, False
    for tok in tokens:
        name, eq, text = tok.partition("=")
        name = name.lower()
        if name == "sync" and not eq:
            sync = True
        elif name == "mask" and eq:
            mask = _parse_int(text)
        elif name in _QUEUE_NAMES and eq:
            counts[_QUEUE_NAMES[name]] = _parse_int(text)
        else:
            raise AsmError(f"bad wait entry item {tok!r}; items: "
                           + ", ".join(f"{q}=N" for q in _QUEUE_NAMES) + ", mask=M, sync")
    try:
        return WaitEntry(tuple(counts), mask, sync)
    except isa.IsaError as e:
        raise AsmError(e.message) from None


def _parse_instr(tokens: list[str], pc: int, labels: dict[str, int], fixups: list) -> Instr:
    lay, kwargs = _layout_of(tokens[0])
    slots: dict[str, tuple[str, int]] = {}     # register slot -> (field that named it, register)
    seen: set[str] = set()
    for tok in tokens[1:]:
        name, eq, text = tok.partition("=")
        name = name.lower()
        f = lay.by_name.get(name)
        if f is None or f is isa._VFUNC:
            raise AsmError(f"{lay.mnemonic.upper()} has no field or flag {name!r}; it has: "
                           + (", ".join(x.name for x in lay.fields if x is not isa._VFUNC) or "nothing"))
        if name in seen:
            raise AsmError(f"field {name!r} given twice")
        seen.add(name)
        if f.kind == "flag":
            kwargs[name] = _parse_int(text) if eq else 1
            continue
        if not eq or not text:
            raise AsmError(f"field {name!r} needs a value: {name}=...")
        if f.kind == "body" and text.startswith("@"):
            fixups.append((pc, name, text[1:]))
            kwargs[name] = 0
            continue
        if f.reg:
            m = _REL.match(text)
            reg, imm = (int(m.group(1)), (m.group(2) + m.group(3)) if m.group(2) else "0") if m else (0, text)
            if reg >= isa.NREGS:
                raise AsmError(f"{text!r}: registers are r0..r15")
            other = slots.get(f.reg)
            if other and other[1] != reg:
                raise AsmError(f"fields {other[0]!r} and {name!r} both add register slot {f.reg}: "
                               f"write the same register on both (r{other[1]} vs r{reg})")
            slots[f.reg] = (name, reg)
            if reg:
                kwargs[f.reg] = reg
            text = imm
        kwargs[name] = _parse_value(f, text)
    try:
        return Instr.make(lay.op, **kwargs)
    except isa.IsaError as e:
        raise AsmError(e.message) from None


def _split_line(raw: str) -> tuple[list[str], list[str], list[str] | None]:
    code = raw.split("#", 1)[0]
    body, bang, wait = code.partition("!")
    tokens = body.split()
    labels = []
    while tokens and tokens[0].endswith(":"):
        labels.append(tokens.pop(0)[:-1])
    return labels, tokens, (wait.split() if bang else None)


def parse(text: str) -> Program:
    """Assemble text into a Program; AsmError names the line number, the line and the problem."""
    instrs: list[Instr] = []
    waits: list[WaitEntry | None] = []
    labels: dict[str, int] = {}
    fixups: list[tuple[int, str, str, int, str]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        where = f"line {lineno}: {raw.strip()!r}: "
        try:
            names, tokens, wait = _split_line(raw)
            for name in names:
                if not _LABEL.match(name):
                    raise AsmError(f"{name!r} is not a label name (letters, digits, _ . $)")
                if name in labels:
                    raise AsmError(f"label {name!r} is already defined (instruction {labels[name]})")
                labels[name] = len(instrs)
            if not tokens:
                if wait is not None:
                    raise AsmError("a wait entry ('!') needs an instruction before it")
                continue
            pending: list = []
            instrs.append(_parse_instr(tokens, len(instrs), labels, pending))
            fixups += [(pc, field, label, lineno, raw) for pc, field, label in pending]
            waits.append(_parse_wait(wait) if wait is not None else None)
        except UsageError as e:
            raise AsmError(where + e.message) from None
    for pc, field, label, lineno, raw in fixups:
        if label not in labels:
            raise AsmError(f"line {lineno}: {raw.strip()!r}: undefined label {label!r}")
        body = labels[label] - pc - 1
        if body < 0:
            raise AsmError(f"line {lineno}: {raw.strip()!r}: label {label!r} is before the loop body")
        instrs[pc] = instrs[pc].with_fields(**{field: body})
    has_waits = any(w is not None for w in waits)
    return Program(instrs, [w or isa.NO_WAIT for w in waits] if has_waits else None, labels)


def assemble(text: str) -> list[Instr]:
    """Assembly text -> instructions (wait entries, if any, are in `parse(text).waits`)."""
    return parse(text).instrs
