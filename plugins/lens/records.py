"""Per-instruction timing rebuilt from a slice's 64-bit trace records, vectorised with numpy.

The records are the card's (host.md 1.4, `otpu_core/tracefmt.py`), from a card's trace buffer
or the timing model: D + 2 O at dispatch, S (+ R) at the unit start, G when an MM releases the
MXU, E at completion, U + V with the unit's counters, P/Q + V activity windows, H + V at HALT.
`decode` turns them into one row per dispatched instruction, in dispatch order, in a fraction
of a second for millions of records:

- a group whose followers are missing or cut (the ring's start or the buffer's end) is skipped,
  as `tracefmt.unpack` does;
- 32-bit cycles are unwrapped (records are in cycle order);
- S, G and E carry only a 4-bit window slot: each belongs to the latest D of its slot. After a
  ring wrap the D of the oldest in-flight slots is gone; their S/G/E are `orphans`, dropped;
- U records carry a unit and a cycle: they belong to the instruction of that unit ending then;
- an instruction still open where the trace ends (a keep-first buffer that filled) is closed at
  the last traced cycle and counted in `open_at_end`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from otpu_core import tracefmt as tf
from otpu_core.isa import UNIT_OF, Op

M32, M52, M60 = (1 << 32) - 1, (1 << 52) - 1, (1 << 60) - 1
HEADS = (tf.D, tf.S, tf.G, tf.E, tf.U, tf.P, tf.Q, tf.H)
IS_HEAD = np.zeros(16, bool)
IS_HEAD[list(HEADS)] = True
IS_SLOTTED = np.zeros(16, bool)
IS_SLOTTED[[tf.D, tf.S, tf.G, tf.E]] = True
SLOTS = 16                        # the records' slot field is 4 bits wide
UNIT_BY_OP = np.full(256, -1, np.int8)
for _op, _unit in UNIT_OF.items():
    UNIT_BY_OP[int(_op)] = int(_unit) if _unit.name != "SEQ" else -1


@dataclass
class Decoded:
    """One slice's trace, as arrays (one entry per dispatched instruction unless noted)."""
    pc: np.ndarray
    op: np.ndarray
    words: np.ndarray              # [n, 3]: resolved w1, w2, w3
    unit: np.ndarray               # from S (or the opcode when the S record is missing)
    dispatch: np.ndarray
    ready: np.ndarray
    start: np.ndarray
    release: np.ndarray            # -1 unless an MM (G record)
    end: np.ndarray
    starve: np.ndarray             # U record: MXU starve, DRAM wait (bp), TMEM deny
    bp: np.ndarray
    deny: np.ndarray
    open: np.ndarray               # bool: closed by us at `traced_to`
    windows: dict = field(default_factory=dict)   # "cycle", "n" and every P/Q field, one entry per window
    halt: int | None = None        # cycle of the H record
    ports: dict = field(default_factory=dict)     # H record: port beats
    orphans: int = 0               # S/G/E records whose D is not in the trace
    unmatched: int = 0             # S/G/E records beyond the first of their instruction, U with no instruction
    cut_groups: int = 0            # groups skipped because followers were missing
    records: int = 0
    traced_to: int = 0             # last cycle any record names

    @property
    def n(self) -> int: return int(self.pc.size)


FOLLOWER = np.full(16, tf.V, np.uint8)             # the follower type each head takes
FOLLOWER[tf.D], FOLLOWER[tf.S] = tf.O, tf.R
NEED = np.zeros(16, np.int8)                        # followers a head needs (S: only past a 16-bit delay)
NEED[tf.D], NEED[tf.P], NEED[tf.Q], NEED[tf.H] = 2, len(tf.P_FIELDS), len(tf.Q_FIELDS), len(tf.H_FIELDS)
U_NEED = np.zeros(16, np.int8)
for _uid, _names in tf.U_FIELDS.items():
    U_NEED[_uid] = len(_names)
TOP_BYTE = 7 if np.little_endian else 0             # the byte of a uint64 that holds bits 63..56


def _group_len(kind: np.ndarray, pay: np.ndarray) -> np.ndarray:
    n = NEED[kind]
    s = np.flatnonzero(kind == tf.S)
    n[s[((pay[s] >> 32) & 0xFFFF) == 0xFFFF]] = 1
    u = np.flatnonzero(kind == tf.U)
    n[u] = U_NEED[(pay[u] >> 48) & 15]
    return n


def _unwrap(raw: np.ndarray) -> np.ndarray:
    """32-bit cycles in record order, made 64-bit: a drop by more than half the range is a wrap."""
    raw = raw.astype(np.int64, copy=False)
    back = np.flatnonzero(np.diff(raw) < -(1 << 31))
    if not back.size:
        return raw
    wraps = np.zeros(raw.size, np.int64)
    wraps[back + 1] = 1
    return raw + (np.cumsum(wraps) << 32)


def _first_per(owner: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(owners, at[first event of each owner]) over the events whose owner is not -1, events of
    one owner adjacent (they are, in slot order); and how many events were extra."""
    ok = owner >= 0
    own, at = owner[ok], at[ok]
    first = np.ones(own.size, bool)
    first[1:] = own[1:] != own[:-1]
    return own[first], at[first], int(own.size - np.count_nonzero(first))


def decode(records) -> Decoded:
    recs = np.ascontiguousarray(np.asarray(records, dtype=np.uint64))
    # a million instructions are ~9 M records: full-length arrays stay one byte wide, and only the
    # heads' payloads (and the followers actually read) are widened
    kind_all = recs.view(np.uint8)[TOP_BYTE::8] >> 4
    is_head = IS_HEAD[kind_all]
    head_idx = np.flatnonzero(is_head)
    kind = kind_all[head_idx]
    pay = recs[head_idx]
    pay &= np.uint64(M60)
    pay = pay.view(np.int64)                                     # 60 bits fit int64
    need = _group_len(kind, pay)
    # every record that is not a head follows the nearest head before it; a group is complete when
    # at least `need` records follow its head and they are all of the follower type its head takes
    follows = np.empty(head_idx.size, np.int64)                 # records from each head to the next
    np.subtract(head_idx[1:], head_idx[:-1], out=follows[:-1])
    if head_idx.size:
        follows[-1] = recs.size - head_idx[-1]
        h0 = int(head_idx[0])
        wrong = kind_all[h0:] != np.repeat(FOLLOWER[kind], follows)
        wrong &= ~is_head[h0:]
        wrong = np.flatnonzero(wrong) + h0
    follows -= 1
    ok = follows >= need
    if head_idx.size:
        ok[np.searchsorted(head_idx, wrong, side="right") - 1] = False
    del follows, need, is_head
    d_rows = np.flatnonzero(kind == tf.D)
    for k in (1, 2):                # the two O halves of a D are told apart by their bit 52
        at = head_idx[d_rows] + k
        inside = at < recs.size
        half_ok = np.zeros(d_rows.size, bool)
        half_ok[inside] = ((recs[at[inside]] >> np.uint64(52)) & np.uint64(1)) == k - 1
        ok[d_rows] &= half_ok
    cut = int(ok.size - np.count_nonzero(ok))
    if cut:
        head_idx, kind, pay = head_idx[ok], kind[ok], pay[ok]
    cycle = _unwrap(pay & M32)
    traced_to = int(cycle.max()) if cycle.size else 0

    def follow(at: np.ndarray, k: int) -> np.ndarray:
        return (recs[at + k] & np.uint64(M60)).view(np.int64)

    # -- dispatches ------------------------------------------------------------------------------
    is_d = kind == tf.D
    d_at = head_idx[is_d]
    o1, o2 = follow(d_at, 1), follow(d_at, 2)
    n = int(is_d.sum())
    pc = ((pay[is_d] >> 32) & 0xFFFF).astype(np.int64)
    op = ((o2 >> 44) & 0xFF).astype(np.int64)
    words = np.stack([o1 & M32, ((o1 >> 32) & 0xFFFFF) | ((o2 & 0xFFF) << 20), (o2 >> 12) & M32], axis=1) \
        if n else np.zeros((0, 3), np.int64)
    dispatch = cycle[is_d]

    # -- S, G, E: the latest D of the same slot ----------------------------------------------------
    # In each slot's records (record order), a D sets the owner of what follows to its instruction
    # index: a running maximum of key = slot * (n + 1) + instruction (D) or slot * (n + 1) - 1
    # (others), which never carries a value across slots since every key of slot s exceeds those
    # before it; key - slot * (n + 1) is then the owner, -1 where the slot has no D yet (an orphan).
    sl_pos = np.flatnonzero(IS_SLOTTED[kind])
    kind_sl = kind[sl_pos]
    base = ((pay[sl_pos] >> 52) & 15).astype(np.uint8)
    order = np.argsort(base, kind="stable")               # a radix sort for one-byte keys
    base = base.astype(np.int64)
    base *= n + 1
    key = base - 1
    d_sl = kind_sl == tf.D
    key[d_sl] += np.arange(1, n + 1)
    sp, kind_sp = sl_pos[order], kind_sl[order]
    owner = np.maximum.accumulate(key[order])
    owner -= base[order]
    del key, base, d_sl, kind_sl, sl_pos, order
    orphans = int(np.count_nonzero(owner < 0))            # D records always own themselves
    unmatched = 0

    def first_of(kk: int) -> tuple[np.ndarray, np.ndarray]:
        """(instruction, head index) of each instruction's first record of kind kk."""
        nonlocal unmatched
        m = kind_sp == kk
        who, at, extra = _first_per(owner[m], sp[m])
        unmatched += extra
        return who, at

    def column(who: np.ndarray, values: np.ndarray) -> np.ndarray:
        out = np.full(n, -1, np.int64)
        out[who] = values
        return out

    who, at = first_of(tf.S)
    s_cycle, delay = cycle[at], (pay[at] >> 32) & 0xFFFF
    ready_s = s_cycle - delay
    long_wait = np.flatnonzero(delay == 0xFFFF)
    if long_wait.size:
        r32 = follow(head_idx[at[long_wait]], 1) & M32
        ready_s[long_wait] = s_cycle[long_wait] - (((s_cycle[long_wait] & M32) - r32) & M32)
    start, ready, unit = column(who, s_cycle), column(who, ready_s), column(who, (pay[at] >> 48) & 15)
    who, at = first_of(tf.G)
    release = column(who, cycle[at])
    who, at = first_of(tf.E)
    end = column(who, cycle[at])
    no_s = unit < 0
    unit[no_s] = UNIT_BY_OP[op[no_s]]

    # -- instructions still open where the trace ends ------------------------------------------
    is_open = end < 0
    end[is_open] = traced_to
    start[start < 0] = traced_to
    missing_ready = ready < 0
    ready[missing_ready] = np.minimum(traced_to, start[missing_ready])

    # -- U: the instruction of that unit that ends in that cycle -----------------------------------
    starve, bp, deny = (np.zeros(n, np.int64) for _ in range(3))
    is_u = kind == tf.U
    if is_u.any():
        u_unit, u_cycle = (pay[is_u] >> 48) & 15, cycle[is_u]
        mxu = u_unit == 1
        rows = np.nonzero(unit == 1)[0]
        ends = end[rows]
        order_e = np.argsort(ends, kind="stable")
        at = np.searchsorted(ends[order_e], u_cycle[mxu])
        at_ok = at < ends.size
        hit = np.zeros(at.size, bool)
        hit[at_ok] = ends[order_e][at[at_ok]] == u_cycle[mxu][at_ok]
        target = rows[order_e][at[hit]]
        u_at = head_idx[is_u][mxu][hit]
        for name, arr in (("starve", starve), ("bp", bp), ("deny", deny)):
            arr[target] = follow(u_at, tf.U_FIELDS[1].index(name) + 1) & M32
        unmatched += int((~hit).sum())

    # -- activity windows and HALT ---------------------------------------------------------------
    windows: dict = {}
    is_p, is_q = kind == tf.P, kind == tf.Q
    if is_p.sum() == is_q.sum():
        windows["cycle"] = cycle[is_p] + 1                # a window's record names its last cycle
        windows["n"] = (pay[is_p] >> 32) & 0xFFFFFF
        for mask, names in ((is_p, tf.P_FIELDS), (is_q, tf.Q_FIELDS)):
            at = head_idx[mask]
            for k, name in enumerate(names, 1):
                windows[name] = follow(at, k) & M32
    halt, ports = None, {}
    is_h = np.nonzero(kind == tf.H)[0]
    if is_h.size:
        h = is_h[-1]
        halt = int(cycle[h])
        ports = {name: int(follow(head_idx[h:h + 1], k)[0] & M32) for k, name in enumerate(tf.H_FIELDS, 1)}
    return Decoded(pc, op, words, unit.astype(np.int64), dispatch, ready, start, release, end, starve, bp, deny,
                   is_open, windows, halt, ports, orphans, unmatched, cut, int(recs.size), traced_to)


def op_name(op: int) -> str:
    return Op(op).name if op in Op._value2member_map_ else f"op 0x{op:02x}"
