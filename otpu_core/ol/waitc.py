"""WAITC generation: one wait entry per instruction from the footprints, with an affine abstraction.

An entry (isa.WaitEntry) says, per completion queue q, "wait until at most counts[q] earlier
q-instructions are incomplete", plus a mask of recent queued dispatches whose sources must be
released (write-after-read). For instruction j and an earlier instruction i it conflicts with
(RAW or WAW: i must be complete; WAR: i must have released), the count is the number of
q-instructions dispatched between them. Queues complete in order, so the nearest conflicting i
decides, and a lower bound on the number between is always safe (it only waits longer).

Loops are not unrolled. Footprints are affine in the loop variables, so for a pair (i, j) the
address difference is itself affine: the loop variables they share cancel (same iteration), a
loop wrapped around (i in an earlier iteration) adds -coeff*delta with delta in [1, count-1],
and any other variable ranges over its loop. Bounds of that difference decide overlap exactly
for the usual case (equal variable parts) and conservatively otherwise; run-time and device
terms that do not cancel count as overlapping. Per queue only the 15 nearest instructions can
matter (a count of 15 never waits), so the work per instruction is bounded.
"""
from __future__ import annotations

from .. import isa
from .affine import DevVar, Loop, RunVar
from .ir import Access

WINDOW = isa.WC_ANY          # counts >= this never wait
MASK_BITS = isa.WC_MASK_BITS


class _Acc:
    """A footprint flattened for fast pair tests."""
    __slots__ = ("space", "const", "terms", "n", "lo", "hi")

    def __init__(self, a: Access):
        self.space, self.const, self.n = a.space, a.lo.const, a.n
        self.terms = a.lo.terms
        b = a.lo.bounds()
        self.lo, self.hi = (b[0], b[1] + a.n) if b is not None else (None, None)


def _overlap(ai: _Acc, aj: _Acc, wrap: Loop | None) -> bool:
    """May i's footprint (from an earlier dynamic instance) overlap j's?"""
    if ai.space != aj.space:
        return False
    if ai.lo is not None and aj.lo is not None and (ai.hi <= aj.lo or aj.hi <= ai.lo):
        return False               # hulls over every iteration are disjoint
    dmin = dmax = ai.const - aj.const
    coeffs = dict(ai.terms)
    for v, c in aj.terms.items():
        if wrap is not None and isinstance(v, Loop) and v.depth > wrap.depth and v in ai.terms:
            # inside the wrapped loop the two instances run independent iterations
            span = -c * (v.count - 1)
            dmin, dmax = dmin + min(0, span), dmax + max(0, span)
            continue
        coeffs[v] = coeffs.get(v, 0) - c
    for v, c in coeffs.items():
        if not c:
            continue
        if isinstance(v, (RunVar, DevVar)) or v.rcount:
            return True
        span = c * (v.count - 1)
        dmin, dmax = dmin + min(0, span), dmax + max(0, span)
    if wrap is not None and wrap in ai.terms:      # a device-count loop steps no address: no terms
        c = ai.terms[wrap]
        lo_shift, hi_shift = -c * (wrap.count - 1), -c
        dmin, dmax = dmin + min(lo_shift, hi_shift), dmax + max(lo_shift, hi_shift)
    return dmin < aj.n and dmax > -ai.n


def _conflict(i, j, wrap) -> tuple[bool, bool]:
    """(RAW or WAW, WAR) between earlier instruction i and j."""
    hard = any(_overlap(w, x, wrap) for w in i[1] for x in j[0] + j[1])
    war = not hard and any(_overlap(r, w, wrap) for r in i[0] for w in j[1])
    return hard, war


def generate_waits(low) -> list:
    n = len(low.instrs)
    queue = [isa.queue_of(ins.op) for ins in low.instrs]
    foot = [None] * n
    for k, node in enumerate(low.nodes):
        if node is not None:
            foot[k] = ([_Acc(a) for a in node.reads], [_Acc(a) for a in node.writes])
    # enclosing loops (outer first) of each instruction, as (head, end, Loop)
    encl: list[tuple] = [()] * n
    for head, body, count, loop in sorted(low.loops, key=lambda t: (t[0], -t[1])):
        for k in range(head + 1, head + body + 1):
            encl[k] = encl[k] + ((head, head + body, loop),)
    # queued-instruction order: rank[k] = number of queued instructions before k; per queue lists
    rank, qpos = [0] * n, {q: [] for q in isa.Queue}
    qrank = [0] * n
    seen = 0
    for k in range(n):
        rank[k] = seen
        if queue[k] is not None:
            qrank[k] = len(qpos[queue[k]])
            qpos[queue[k]].append(k)
            seen += 1
    waits = []
    for j in range(n):
        op = low.instrs[j].op
        if op == isa.Op.HALT:
            waits.append(isa.WaitEntry(sync=True))
            continue
        if foot[j] is None:
            waits.append(isa.NO_WAIT)
            continue
        counts = [WINDOW] * isa.NQUEUES
        mask = 0
        for q, plist in qpos.items():
            # same iteration: the q-instructions before j, nearest first
            lo = _bisect(plist, j)
            for idx in range(lo - 1, max(-1, lo - 1 - WINDOW), -1):
                i = plist[idx]
                between = lo - 1 - idx
                if between >= counts[q]:
                    break
                hard, war = _conflict(foot[i], foot[j], None)
                if hard or war:
                    straight = encl[i] == encl[j] and not _loop_between(low, i, j)
                    dist = rank[j] - rank[i] - 1
                    if war and straight and dist < MASK_BITS:
                        mask |= 1 << dist
                    else:
                        counts[q] = min(counts[q], between)
            # earlier iterations of each enclosing loop: any q-instruction of its body, seen from
            # the previous iteration (those after it in the body, then the body's start up to j)
            for head, end, loop in encl[j]:
                if loop.rcount == 0 and loop.count < 2:
                    continue
                wrap = loop
                first, hi = _bisect(plist, head + 1), _bisect(plist, end + 1)
                before_j = lo - first
                for idx in range(hi - 1, max(first - 1, hi - 1 - WINDOW), -1):
                    between = (hi - 1 - idx) + before_j
                    if between >= counts[q]:
                        break
                    hard, war = _conflict(foot[plist[idx]], foot[j], wrap)
                    if hard or war:
                        counts[q] = min(counts[q], between)
        waits.append(isa.WaitEntry(tuple(counts), mask))
    return waits


def _bisect(a: list, x: int) -> int:
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _loop_between(low, i: int, j: int) -> bool:
    return any(i < head < j or i < head + body < j for head, body, _, _ in low.loops)
