"""otpu-lens: per-instruction timing rebuilt from trace records, against a plain reading of the same
records with `tracefmt.unpack` (a second, loop-by-loop implementation written here), on real runs of
the timing model, on ring-wrapped and cut buffers, and across a 32-bit cycle wrap."""
import functools

import numpy as np
import pytest

from otpu_core import tracefmt as tf
from otpu_core.isasim import Machine
from otpu_core.target import load as load_target
from otpu_lens import records, workloads

T = "sim-small"


@functools.lru_cache(maxsize=None)
def _run(name: str, target: str = T):
    t = load_target(target)
    m = Machine(t, trace=True)
    step = next(workloads.get(name).build(workloads.Context(t, {})))
    for addr, data in step.writes:
        m.write_dram(addr, data.view(np.uint8))
    m.load(step.program.instrs, step.args)
    m.run()
    return np.asarray(m.trace_records(0), np.uint64), m.counters(0), step


def _reference(recs) -> list[dict]:
    """One dict per D, filled from the groups that follow it in its slot (unpack skips cut groups)."""
    rows, open_slot = [], {}
    for ev in tf.unpack(recs):
        t = ev["type"]
        if t == "D":
            row = {"pc": ev["pc"], "op": ev["op"], "w": (ev["w1"], ev["w2"], ev["w3"]), "dispatch": ev["cycle"]}
            rows.append(row)
            open_slot[ev["slot"]] = row
        elif t in ("S", "G", "E") and ev["slot"] in open_slot:
            row = open_slot[ev["slot"]]
            key = {"S": "start", "G": "release", "E": "end"}[t]
            row.setdefault(key, ev["cycle"])
            if t == "S":
                row.setdefault("ready", ev["ready"])
                row.setdefault("unit", ev["unit"])
        elif t == "U" and ev["unit"] == 1:
            for row in reversed(rows):
                if row.get("unit") == 1 and row.get("end") == ev["cycle"]:
                    row.update(starve=ev["starve"], bp=ev["bp"], deny=ev["deny"])
                    break
    return rows


def _check_against_reference(dec, ref):
    assert dec.n == len(ref)
    for i, r in enumerate(ref):
        assert (dec.pc[i], dec.op[i], tuple(dec.words[i])) == (r["pc"], r["op"], r["w"]), i
        assert dec.dispatch[i] == r["dispatch"]
        if "end" in r:
            got = (dec.start[i], dec.ready[i], dec.end[i], dec.unit[i])
            assert got == (r["start"], r["ready"], r["end"], r["unit"]), i
            assert dec.release[i] == r.get("release", -1)
            assert (dec.starve[i], dec.bp[i], dec.deny[i]) == (r.get("starve", 0), r.get("bp", 0), r.get("deny", 0))


@pytest.mark.parametrize("name", ["decoder-layer", "attention", "mlp", "matmul-int4", "rope"])
def test_decode_matches_a_plain_reading_of_the_records(name):
    recs, counters, step = _run(name)
    dec = records.decode(recs)
    _check_against_reference(dec, _reference(recs))
    assert dec.orphans == dec.unmatched == dec.cut_groups == 0 and not dec.open.any()
    assert dec.halt + 1 == counters["CYCLES"]
    # the windows cover the run and add up to the counters the timing model kept, to a rounding per window
    assert dec.windows["n"].sum() == counters["CYCLES"]
    assert abs(int(dec.windows["mx"].sum()) - counters["MXU_MAC"]) <= dec.windows["n"].size


def test_a_wrapped_ring_drops_the_orphans_and_keeps_the_rest_exact():
    recs, _, _ = _run("decoder-layer")
    full = records.decode(recs)
    depth = 600
    ring = np.zeros(depth, np.uint64)
    for k, r in enumerate(recs):          # a ring that kept the last `depth` records
        ring[k % depth] = r
    kept = tf.ring_order(ring, recs.size, depth)
    dec = records.decode(kept)
    assert dec.n < full.n and dec.orphans > 0
    tail = full.n - dec.n                  # every D in the kept part: the last dec.n instructions
    assert (dec.pc == full.pc[tail:]).all() and (dec.dispatch == full.dispatch[tail:]).all()
    done = ~dec.open
    assert (dec.end[done] == full.end[tail:][done]).all() and (dec.start[done] == full.start[tail:][done]).all()
    _check_against_reference(dec, _reference(kept))


def test_a_buffer_that_filled_closes_open_instructions_at_the_last_traced_cycle():
    recs, _, _ = _run("decoder-layer")
    cut = recs[:500]
    dec = records.decode(cut)
    assert dec.open.any()
    assert (dec.end[dec.open] == dec.traced_to).all()
    assert dec.traced_to == max(e["cycle"] for e in tf.unpack(cut))
    assert (dec.start <= dec.end).all()


def test_cycles_past_32_bits_are_unwrapped():
    base = (1 << 32) - 10
    recs = []
    for k, (slot, pc) in enumerate(((0, 0), (1, 1), (2, 2))):
        d = base + 8 * k
        recs += tf.dispatch(d & 0xFFFFFFFF, slot, pc, 0x30, 0, 0, 0)
        recs += tf.start((d + 2) & 0xFFFFFFFF, slot, 3, (d + 1) & 0xFFFFFFFF)
        recs += tf.end((d + 6) & 0xFFFFFFFF, slot)
    dec = records.decode(np.array(recs, np.uint64))
    assert dec.dispatch.tolist() == [base, base + 8, base + 16]
    assert dec.end.tolist() == [base + 6, base + 14, base + 22]
    assert dec.ready.tolist() == [base + 1, base + 9, base + 17]


def test_a_long_wait_is_read_from_the_r_record():
    recs = tf.dispatch(5, 3, 7, 0x20, 1, 2, 3) + tf.start(200_005, 3, 1, 10) + tf.end(200_900, 3)
    dec = records.decode(np.array(recs, np.uint64))
    assert (dec.ready[0], dec.start[0], dec.end[0], dec.words[0].tolist()) == (10, 200_005, 200_900, [1, 2, 3])
