"""One decode token of a tiny random Qwen3 model (GGUF, int8) on the RTL (nangate45-small, D=32)
against the golden simulator: the same converted model and the same compiled step programs through
an Engine on RtlBackend and on IsaBackend (on this SEQ_WC target the Engine hands each program its
compiled wait table); after the prefill and after the decode step, TMEM, the ACT RAM and the model's
DRAM image (weights, KV cache, ids, state, logits) are equal bit for bit, and so are the logits as
32-bit words. The decode step's program then runs once more through rtlcheck.compare_run, which gives
its cycles against the timing model; the Engine's decode run took the same RTL cycles."""
import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.board import IsaBackend
from otpu_core.llm import checkpoint, convert, engine, layout, programs
from otpu_core.rtlcheck import compare_run, reset_state
from rtl_support import TARGET, rtl_backend  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

PROMPT = [5, 17, 42]          # two prefill positions, then the decode token at position 2


def _state(be) -> dict[str, np.ndarray]:
    """TMEM and the ACT RAM of a backend: the RTL's arrays, or the golden Machine's slice."""
    if hasattr(be, "machine"):
        sl = be.machine.slice
        return {"tmem": sl.tmem.t, "act q": sl.act.q, "act scale": sl.act.scale, "act sub": sl.act.sub}
    return {"tmem": be.tmem, "act q": be.act_q, "act scale": be.act_scale, "act sub": be.act_sub}


def _differences(rtl_eng, gold_eng) -> dict[str, int]:
    plan = gold_eng.plan
    a = rtl_eng.backend.read(layout.BASE, plan.end - layout.BASE)
    b = gold_eng.backend.read(layout.BASE, plan.end - layout.BASE)
    out = {"dram bytes": int(np.count_nonzero(a != b))}
    ra, rb = _state(rtl_eng.backend), _state(gold_eng.backend)
    for k in ra:
        out[k] = int(np.count_nonzero(np.asarray(ra[k]).view(np.uint8) != np.asarray(rb[k]).view(np.uint8)))
    return {k: v for k, v in out.items() if v}


def test_a_decode_token_of_a_tiny_qwen3_is_bit_exact_on_the_rtl(tmp_path, rtl_backend, capsys):
    rtl = rtl_backend
    t = rtl.target
    cfg = llmtiny.config("qwen3", D=t.config().D)
    ck = checkpoint.open_checkpoint(llmtiny.write(tmp_path, cfg, "gguf")[0])
    conv = convert.convert(ck, "int8", t)
    opts = layout.ImageOptions(fmt="int8", pages=1, page=64, ctx=64, rows=4)
    reset_state(rtl)
    engines = [engine.Engine(conv, ck.config, be, t, opts) for be in (rtl, IsaBackend(t, timing=False))]
    seqs = [eng.new_sequence() for eng in engines]
    for eng, seq in zip(engines, seqs):
        eng.submit(seq, PROMPT)
        eng.prefill(seq)
    assert _differences(*engines) == {}, "after the prefill"
    before = rtl.counters()["CYCLES"]
    logits = [eng.logits(seq) for eng, seq in zip(engines, seqs)]
    decode_cycles = rtl.counters()["CYCLES"] - before
    assert _differences(*engines) == {}, "after the decode step"
    a, b = (x.view(np.uint32) for x in logits)
    assert a.shape == (cfg.vocab,) and np.array_equal(a, b), f"{np.count_nonzero(a != b)} logits differ"
    assert np.isfinite(logits[0]).all() and np.ptp(logits[0]) > 0       # a real distribution, not zeros
    assert np.count_nonzero(rtl.tmem) > 1000                             # the comparison saw a live TMEM

    # the decode program again with its compiled wait table, from the state the decode left (RTL and a
    # golden Machine holding a copy of it), for its cycles against the timing model
    spec = programs.StepSpec((programs.Group(seqs[0].slot, 1, tuple(seqs[0].pages)),), logits=True)
    prog = programs.compile_program(engines[0].plan, spec, t)
    r = compare_run(rtl, prog)
    assert r.ok, r.message()
    assert abs(r.ratio - 1) <= 0.05, r.message()
    assert decode_cycles == r.rtl_cycles, "the Engine ran the decode step with the same wait table"
    with capsys.disabled():
        print(f"\ntiny Qwen3 decode token on {TARGET}: {len(prog.instrs)} instructions; RTL {r.rtl_cycles} cycles "
              f"(the Engine's run: {decode_cycles}), model {r.model_cycles} (ratio {r.ratio:.3f})")
