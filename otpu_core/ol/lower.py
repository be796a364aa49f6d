"""Lowering: register allocation for affine addresses, loop flattening, and instruction encoding.

Addresses: an address with no variable part uses R0 and its constant as the immediate. A
run-time-only address uses an argument register holding that combination (the host computes
it; run-time combination k lives in R(15-k) = ARG(7-k)). A device-only address uses the
register its RLD wrote. Every address with loop terms gets an address register per distinct
variable part (`Affine.key`), live only while its innermost loop runs: it is initialised just
before that loop, from its parent (the same terms without the innermost loop: a register an
enclosing loop keeps) or, with one loop term, from zero or the argument or device register;
it is stepped by ADDI at the end of the loop body. So a layer loop keeps one register for all
of its `l * stride` addresses, and each inner loop only adds registers while it runs. A
zero-started register is reset by ADDI after its loop (it is zero again for the next user).

Rules of the allocator (each has a test that fails without it):
1. Live-loop rule: an address register is live from the LOOP of the loop it is stepped by to
   that loop's end, not from its first use. A register freed while a loop runs is therefore
   never handed to an address of that loop (whose value must survive every iteration).
2. Initial-value rule: a register is taken as already zero (its LI skipped) only if it is a
   fresh R1..R7 or its previous address started from zero (the reset brings it back); after an
   address that started from a run-time, device or parent value, or anything a loop body
   dirties, the head of the new address clears it.
3. Inheritance rule: an address started from a device value whose last use is that start takes
   over the value's register (no copy), unless the value is also the loop's count; a value read
   again later keeps its register.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import isa
from .affine import Affine, DevVar, Loop
from .errors import CompileError
from .ir import LoopBlock, Node

REG_FIELDS = {
    "LD": {"dram": "ra", "tmem": "rb"}, "ST": {"dram": "ra", "tmem": "rb"},
    "MM": {"sa": "ra", "ssa": "rb", "out": "rc"}, "QACT": {"src": "ra"},
    "QST": {"src": "ra", "dst": "rb", "sdst": "rc"}, "VOP": {"dst": "ra", "a": "rb", "b": "rc", "imm": "rd"},
    "RLD": {"addr": "ra"}, "WAITW": {"addr": "ra", "dst": "rb", "ref": "rc"},
    "DSTEP": {"state": "ra", "qk": "rb", "v": "rc"},
    "STREAM": {"src": "ra", "dst": "ra", "vec": "rb", "x": "rc", "k": "rd"},
}
ARG_REGS = tuple(range(15, 7, -1))          # run-time combination k -> R(15 - k)
FRESH_ZERO = frozenset(range(1, 8))         # R1..R7 are zero when a run starts; R8..R15 hold ARG words
REG_PREFERENCE = tuple(range(1, 16))


@dataclass(eq=False)
class Key:
    """One address register's value: its variable part, how it starts, and its live interval."""
    terms: frozenset
    loops: list
    init: str                 # "zero", "arg", "dev" or "parent"
    source: object = None     # the run-time combination key, the DevVar or the parent Key
    outer: LoopBlock | None = None     # the loop it is initialised before and stepped by (its innermost)
    first_use: int = 0
    start: int = 0
    end: int = 0
    reg: int = 0


@dataclass(eq=False)
class DevInfo:
    var: DevVar
    start: int = 0
    end: int = 0
    reg: int = 0


@dataclass
class Lowered:
    instrs: list
    run_args: list            # run-time combinations in argument order (each a frozenset of (RunVar, coeff))
    nodes: list               # the Node behind each instruction (None for sequencer glue)
    loops: list = field(default_factory=list)   # (LOOP index, body length, count or None, Loop) per loop
    chains: list = field(default_factory=list)  # per instruction: source frames (a loop's glue: its range line)


class _Pos:
    """Program positions of nodes and loop blocks, and the loops enclosing each position."""

    def __init__(self, root: list):
        self.n = 0
        self.span: dict[int, tuple[int, int]] = {}      # id(LoopBlock) -> (start, end)
        self.block_of: dict[Loop, LoopBlock] = {}
        self.where: dict[int, tuple[int, tuple]] = {}  # id(Node) -> (position, enclosing blocks)
        self._walk(root, ())

    def _walk(self, items, stack):
        for it in items:
            if isinstance(it, LoopBlock):
                start = self.n
                self.n += 1
                self.block_of[it.loop] = it
                self._walk(it.body, stack + (it,))
                self.span[id(it)] = (start, self.n)
                self.n += 1
            elif not it.dead:
                self.where[id(it)] = (self.n, stack)
                self.n += 1


def _classify(aff: Affine):
    loops, runtime, devs = aff.loops(), aff.runtime(), aff.devs()
    if runtime and devs:
        raise CompileError(f"address {aff} mixes run-time and device values; compute one of them on the host")
    if devs and (len(devs) > 1 or next(iter(devs.values())) != 1):
        raise CompileError(f"address {aff}: a device value may appear only once with coefficient 1 "
                           f"(scale it with rld(..., scale=))")
    if not loops:
        if runtime:
            return "arg", frozenset(runtime.items())
        return "dev", next(iter(devs))
    if runtime:
        return "loop-arg", frozenset(runtime.items())
    if devs:
        return "loop-dev", next(iter(devs))
    return "loop", None


def key_interval_start(key: Key, pos: _Pos) -> int:
    """Rule 1 (live-loop): the register is live from the LOOP instruction of the loop it steps with."""
    return pos.span[id(key.outer)][0]


def initially_clear(reg: int) -> bool:
    """Rule 2 (initial value): only fresh R1..R7 start at zero; argument registers hold ARG words."""
    return reg in FRESH_ZERO


def clear_after(key: Key) -> bool:
    """Rule 2 (initial value): after its loops' resets a register holds its initial value again,
    which is zero only for an address that started from zero."""
    return key.init == "zero"


def lower(root: list, cfg, halt_chain: tuple[DevVar, DevVar] | None = None) -> Lowered:
    """`halt_chain`: (address, length) device values the final HALT chains to (ol.halt_chain)."""
    pos = _Pos(root)
    keys: dict[frozenset, Key] = {}
    devs: dict[DevVar, DevInfo] = {}
    run_args: list[frozenset] = []

    def dev_use(v: DevVar, p: int, stack: tuple):
        info = devs.get(v)
        if info is None:
            raise CompileError(f"device value {v.name} used before the rld that computes it")
        end = p
        for blk in stack:            # outermost first: a use repeats with every loop not containing the def
            s, e = pos.span[id(blk)]
            if not s < info.start < e:
                end = e
                break
        info.end = max(info.end, end)

    def arg_of(combo: frozenset) -> int:
        if combo not in run_args:
            if len(run_args) == len(ARG_REGS):
                raise CompileError(f"more than {len(ARG_REGS)} run-time values; the card has 8 argument registers")
            run_args.append(combo)
        return ARG_REGS[run_args.index(combo)]

    def key_of(terms: dict, p: int, stack: tuple) -> Key:
        """The Key for these terms (and, recursively, its parents), created at first use p."""
        fk = frozenset(terms.items())
        k = keys.get(fk)
        if k is not None:
            return k
        loops = sorted((v for v in terms if isinstance(v, Loop)), key=lambda lp: lp.depth)
        inner = pos.block_of[loops[-1]]
        outside = stack[:stack.index(inner)]           # the loops enclosing the init point
        if len(loops) > 1:
            parent = key_of({v: c for v, c in terms.items() if v is not loops[-1]}, p, stack)
            k = Key(fk, loops, "parent", parent, inner, first_use=p)
        else:
            kind, src = _classify(Affine(0, terms))
            init = {"loop": "zero", "loop-arg": "arg", "loop-dev": "dev"}[kind]
            k = Key(fk, loops, init, src, inner, first_use=p)
            if init == "arg":
                arg_of(src)
            elif init == "dev":
                at = pos.span[id(inner)][0]
                if src in devs and devs[src].start > at:
                    # the register is set from the device value before the loop's first iteration
                    raise CompileError(f"address {Affine(0, terms)} steps with a loop and adds a device value "
                                       f"that rld computes inside that loop; compute the device value before "
                                       "the loop, or address the data with one device value")
                dev_use(src, at, outside)
        keys[fk] = k
        return k

    # -- pass 1: collect keys, device values and argument combinations -------------------------
    def collect(items, stack):
        for it in items:
            if isinstance(it, LoopBlock):
                cv = getattr(it.loop, "count_var", None)
                if cv is not None:
                    dev_use(cv, pos.span[id(it)][0], stack)
                collect(it.body, stack + (it,))
                continue
            if it.dead:
                continue
            p, st = pos.where[id(it)]
            for name, aff in it.addrs.items():
                if aff.is_static():
                    continue
                kind, src = _classify(aff)
                if kind == "arg":
                    arg_of(src)
                elif kind == "dev":
                    dev_use(src, p, st)
                else:
                    k = key_of(aff.terms, p, st)
                    if any(lp.rcount for lp in k.loops):
                        raise CompileError("a loop with a device-computed count cannot step address registers; "
                                           "address its data with a device value instead")
            if it.op == "RLD":
                v = it.imm["var"]
                devs[v] = DevInfo(v, p, p)

    collect(root, ())
    for v in halt_chain or ():
        dev_use(v, pos.n, ())
    for k in keys.values():
        k.start = key_interval_start(k, pos)
        k.end = pos.span[id(k.outer)][1]

    # -- pass 2: interval allocation -------------------------------------------------------------
    pinned = {ARG_REGS[i] for i in range(len(run_args))}
    values = sorted(list(keys.values()) + list(devs.values()), key=lambda v: (v.start, v.end))
    active: list = []
    free = [r for r in REG_PREFERENCE if r not in pinned]
    counts = {id(blk): getattr(blk.loop, "count_var", None) for blk in pos.block_of.values()}
    for v in values:
        for a in [a for a in active if a.end < v.start]:
            active.remove(a)
            free.append(a.reg)
        heir = _inherited(v, active, devs, counts)
        if heir is not None:
            active.remove(heir)
            v.reg = heir.reg
            active.append(v)
            continue
        if not free:
            raise CompileError(f"out of registers: {len(active)} addresses and device values are live at once "
                               f"(plus {len(pinned)} run-time arguments)",
                               hint="use fewer distinct address patterns inside one loop nest")
        free.sort(key=REG_PREFERENCE.index)
        v.reg = free.pop(0)
        active.append(v)

    # -- pass 3: emission ------------------------------------------------------------------------
    out: list = []
    nodes: list = []
    chains: list = []
    loops_info: list = []
    clear = {r: initially_clear(r) for r in range(16)}
    by_outer: dict[int, list[Key]] = {}
    for k in keys.values():
        by_outer.setdefault(id(k.outer), []).append(k)
    dirtied = _dirtied_by_block(root, keys, devs)

    def reg_of_aff(aff: Affine) -> tuple[int, int]:
        if aff.is_static():
            return 0, aff.const
        kind, src = _classify(aff)
        if kind == "arg":
            return ARG_REGS[run_args.index(src)], aff.const
        if kind == "dev":
            return devs[src].reg, aff.const
        return keys[aff.key].reg, aff.const

    def put(instr, node=None, chain=()):
        out.append(instr)
        nodes.append(node)
        chains.append(node.chain if node is not None else chain)

    def emit_items(items) -> bool:
        """Emit items; True when the last one was a loop whose body end is the last instruction."""
        flush = False
        for it in items:
            if isinstance(it, LoopBlock):
                flush = emit_loop(it)
            elif not it.dead:
                put(_encode(it, reg_of_aff, devs), it)
                if it.op == "RLD":
                    clear[devs[it.imm["var"]].reg] = False
                flush = False
        return flush

    def emit_loop(blk: LoopBlock) -> bool:
        for k in by_outer.get(id(blk), []):
            if k.init == "zero":
                if not clear[k.reg]:
                    put(isa.li(rd=k.reg, imm=0), chain=blk.chain)
            else:
                src = {"arg": lambda: ARG_REGS[run_args.index(k.source)], "dev": lambda: devs[k.source].reg,
                       "parent": lambda: k.source.reg}[k.init]()
                if src != k.reg:             # else (rule 3) the register holds its device value already
                    put(isa.addi(rd=k.reg, ra=src, imm=0), chain=blk.chain)
            clear[k.reg] = False
        for r in dirtied.get(id(blk), ()):
            clear[r] = False
        loop = blk.loop
        steps = by_outer.get(id(blk), [])
        head = len(out)
        cv = getattr(loop, "count_var", None)
        put(None, chain=blk.chain)
        inner_flush = emit_items(blk.body)
        for k in steps:
            put(isa.addi(rd=k.reg, ra=k.reg, imm=dict(k.terms)[loop] & isa.MASK32), chain=blk.chain)
        if len(out) == head + 1 or (inner_flush and not steps):
            put(isa.nop(), chain=blk.chain)      # two loop bodies must not end on the same instruction
        body = len(out) - head - 1
        out[head] = isa.loop(body=body, count=loop.count, ra=devs[cv].reg if cv is not None else 0)
        loops_info.append((head, body, loop.count if cv is None else None, loop))
        resets = [k for k in steps if k.init == "zero"]     # the others die with the loop
        for k in resets:
            put(isa.addi(rd=k.reg, ra=k.reg, imm=(-dict(k.terms)[loop] * loop.count) & isa.MASK32), chain=blk.chain)
        for k in steps:
            clear[k.reg] = clear_after(k)
        return not resets

    emit_items(root)
    put(isa.halt(chain=True, ra=devs[halt_chain[0]].reg, rb=devs[halt_chain[1]].reg) if halt_chain else isa.halt())
    return Lowered(out, run_args, nodes, loops_info, chains)


def _inherited(v, active: list, devs: dict, counts: dict):
    """Rule 3 (inheritance): a loop address started from a device value whose last use is that start
    takes over the value's register (its initialising ADDI would copy the register onto itself), unless
    the value is also the loop's count."""
    if not isinstance(v, Key) or v.init != "dev":
        return None
    d = devs[v.source]
    if d in active and d.end == v.start and counts.get(id(v.outer)) is not d.var:
        return d
    return None


def _dirtied_by_block(root, keys: dict, devs: dict) -> dict[int, set]:
    """Per loop block: registers something inside it leaves non-zero (device values, non-zero inits)."""
    result: dict[int, set] = {}
    nonzero = {}
    for k in keys.values():
        if k.init != "zero":
            nonzero.setdefault(id(k.outer), set()).add(k.reg)

    def visit(items) -> set:
        regs = set()
        for it in items:
            if isinstance(it, LoopBlock):
                inner = visit(it.body) | nonzero.get(id(it), set())
                regs |= inner
            elif not it.dead and it.op == "RLD":
                regs.add(devs[it.imm["var"]].reg)
        return regs

    def assign(items):
        for it in items:
            if isinstance(it, LoopBlock):
                result[id(it)] = visit(it.body)
                assign(it.body)

    assign(root)
    return result


def _encode(node: Node, reg_of_aff, devs) -> isa.Instr:
    fields = dict(node.imm)
    slots = REG_FIELDS[node.op]
    for name, aff in node.addrs.items():
        reg, const = reg_of_aff(aff)
        fields[name] = const & isa.MASK32
        if reg:
            fields[slots[name]] = reg
    if node.op == "VOP":
        return isa.vop(fields.pop("func"), **fields)
    if node.op == "RLD":
        var, scale = fields.pop("var"), fields.pop("scale")
        if scale != 1:
            fields["mul"], fields["factor"] = True, scale & isa.MASK32
        return isa.rld(rd=devs[var].reg, **fields)
    return isa.Instr.make(node.op.lower(), **fields)
