"""Gemma 4's sliding layers keep their K/V in a ring of pages per sequence slot (gemma_layout.ring_pages).

A tiny random Gemma 4 (GGUF, `s s A s s A`, the last three sharing layers 1, 1 and 2's KV) with a
window of 64 positions over 32-token pages: a sliding layer's ring is 3 pages, so a context of 212
positions (7 pages) wraps it twice. References: the quantised golden (no pages: its own KV cache
and window), host-driven one-row runs on a second card (the generate loop's logits and every KV
pool bit for bit), each sequence alone (a batched step: a three-layer `s s A` model, which fits
sim-small's IMEM with three row groups past page 0), the fp32 golden (reported). The plan's
DRAM: a sliding layer's pool is every slot's ring, whatever the context.
"""
import functools

import llmtiny
import numpy as np
import pytest
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)

from otpu_core.llm import engine, gemma_layout, layout, reference
from otpu_core.target import load as load_target

WINDOW, PAGE, CTX = 64, 32, 256


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    cfg = llmtiny.config("gemma4", D=32, sliding_window=WINDOW, name="tiny-gemma4-ring")
    path, _ = llmtiny.write(tmp_path_factory.mktemp("gemma4ring"), cfg, "gguf")
    return path


@pytest.fixture(scope="module")
def three_layers(tmp_path_factory):
    """`s s A` with K/V of their own: a step of several row groups past page 0 fits sim-small's IMEM."""
    cfg = llmtiny.config("gemma4", D=32, sliding_window=WINDOW, name="tiny-gemma4-ring3", layers=3,
                         layer_kinds=("sliding", "sliding", "attention"), kv_shared=0, layer_ffn=(128,) * 3)
    path, _ = llmtiny.write(tmp_path_factory.mktemp("gemma4ring3"), cfg, "gguf")
    return path


make = functools.partial(llmtiny.card_engine, target="sim-small", rows=1, ctx=CTX)


def pools(eng, be):
    """Every KV pool: the full layers' pages, the sliding layers' rings of every slot."""
    return np.concatenate([be.read(L.kv.k.const, L.pool_pages * L.page_stride)
                           for L in eng.plan.gemma.layers if L.kv is not None])


def test_the_ring_is_the_window_and_a_page_whatever_the_context(model):
    eng, ck, _, _ = make(model, slots=2)
    G = eng.plan.gemma
    assert G.ring_pages == WINDOW // PAGE + 1 == 3
    for L, kind in zip(G.layers, ck.config.kinds):
        if L.kv is not None:
            assert L.pool_pages == (2 * 3 if kind == "sliding" else CTX // PAGE * 2), (kind, L.pool_pages)
    assert [G.kv_page("sliding", 1, i, 40 + i) for i in range(7)] == [3, 4, 5, 3, 4, 5, 3]
    assert [G.kv_page("attention", 1, i, 40 + i) for i in range(3)] == [40, 41, 42]
    t = load_target("sim-small").config()
    cfg = eng.plan.cfg

    def kv(ctx, kind):
        plan = layout.plan(cfg, t, layout.ImageOptions(page=PAGE, ctx=ctx, pages=ctx // PAGE))
        return sum(L.pool_pages * L.page_stride for L, k in zip(plan.gemma.layers, cfg.kinds) if k == kind), plan
    (s1, p1), (s4, p4) = kv(256, "sliding"), kv(1024, "sliding")
    (f1, _), (f4, _) = kv(256, "attention"), kv(1024, "attention")
    assert s1 == s4 > 0 and f4 == 4 * f1 > 0
    assert p1.kv_bytes() == s1 + f1 and p4.kv_bytes() == s4 + f4
    # a context shorter than the window and a page: the ring is the context's pages
    assert gemma_layout.ring_pages(cfg, layout.ImageOptions(page=PAGE, ctx=64)) == 2


@pytest.mark.slow          # ~35 s: 180 prompt tokens and 32 greedy ones on two cards, the golden's 212 steps
def test_32_greedy_tokens_over_a_ring_that_wraps_twice(model):
    """180 prompt tokens in runs of 4 rows (pages 3-5 written over ring pages 0-2), then 32 greedy tokens
    from the generate loop across the page-6 boundary (the ring's second wrap): the loop's logits bit for
    bit those of one-row host-driven steps on a second card, both cards' KV pools byte-equal, the tokens
    the quantised golden's greedy run; the fp32 golden's distance reported."""
    # seed 2: seeds 1 and 4 meet a greedy choice at a gap of ~6e-4 where the card's fp32 and the golden's
    # float64 round an activation apart (the same bits with full-length pages: not the ring)
    prompt = llmtiny.prompts(1, 384, length=180, seed=2)[0]
    eng, ck, conv, be = make(model, rows=4)
    seq, turn = llmtiny.greedy_loop(eng, prompt)
    assert len(turn.tokens) == 32 and len(seq.pages) == 7 and seq.kv_len == 211
    steps, be2 = llmtiny.steps_match_the_loop(make, model, prompt, turn)
    assert np.array_equal(pools(steps, be2), pools(eng, be)), "KV pools"
    quant = llmtiny.goldens_greedy_tokens(eng, conv, prompt, turn)
    got, fed = np.stack(turn.logits), prompt + turn.tokens[:-1]
    for name, g, bound, close in (("quantised", quant, 0.9995, 0.9),
                                  ("fp32", reference.Golden(ck.config, reference.SourceWeights(ck), positions=CTX),
                                   0.99, 0.0)):
        g.reset()
        d = llmtiny.distances(f"gemma4 ring card vs {name} golden", got, g.forward(fed)[len(prompt) - 1:])
        exact = float(np.mean(d.each > 1 - 1e-7))
        print(f"  positions within 1e-7 {exact:.3f}")
        assert d.min > bound and exact >= close, (name, d, exact)


def test_multi_row_runs_over_wrapped_ring_pages_leave_the_bits_of_one_row_runs(model):
    """110 prompt tokens in runs of 3 rows (runs ending short at each page's end, pages 3 written over ring
    page 0) against runs of one row: every KV pool byte for byte and the next logits bit for bit."""
    prompt = llmtiny.prompts(1, 384, length=111, seed=9)[0]
    got = {}
    for rows in (3, 1):
        eng, _, _, be = make(model, rows=rows)
        seq = eng.new_sequence()
        eng.submit(seq, prompt)
        cost = engine.RunCost()
        eng.prefill(seq, cost)
        assert cost.runs == (110 if rows == 1 else 3 * 11 + 5), cost.runs
        got[rows] = (pools(eng, be), eng.logits(seq))
    assert np.array_equal(got[3][0], got[1][0]), "KV pools"
    assert np.array_equal(llmtiny.u32(got[3][1]), llmtiny.u32(got[1][1])), "logits"


def test_three_sequences_at_different_positions_in_one_step(three_layers):
    """A sequence past the ring's second wrap (140 tokens: page 4 over ring page 1), one inside its first
    wrap (70) and one inside its first page (9), a row group each in one step: each alone on a second card
    (all in slot 0, its ring reused) bit for bit, and the quantised golden's greedy token (cosine above
    0.9995: the 9-token prompt meets an activation on a rounding tie, 0.99993)."""
    eng, _, conv, _ = make(three_layers, slots=3, rows=4)
    prompts = [llmtiny.prompts(1, 384, length=n, seed=n)[0] for n in (140, 70, 9)]
    seqs = [eng.new_sequence() for _ in prompts]
    for s, p in zip(seqs, prompts):
        eng.submit(s, p)
    batched = eng.logits(seqs)
    alone, *_ = make(three_layers, slots=3, rows=4)
    for p, got in zip(prompts, batched):
        s = alone.new_sequence()
        alone.submit(s, p)
        assert s.slot == 0 and np.array_equal(llmtiny.u32(alone.logits(s)), llmtiny.u32(got)), len(p)
        alone.release(s)
        d = llmtiny.distances(f"{len(p)} tokens, batched vs quantised golden", [got],
                              [llmtiny.quant_golden(eng, conv).forward(p)[-1]])
        assert d.min > 0.9995 and d.top1 == 1.0, d


def test_a_window_is_read_only_at_a_page_boundary_the_ring_still_holds(three_layers):
    from otpu_core.llm.errors import ModelError
    eng, *_ = make(three_layers, slots=2, rows=4)
    seq = eng.new_sequence()
    eng.submit(seq, llmtiny.prompts(1, 384, length=71, seed=1)[0])
    eng.prefill(seq)
    assert seq.kv_len == 70 and len(eng.read_window(seq, 64)) == 2 * 2        # 2 sliding layers x pages 0, 1
    for boundary, message in ((40, "position 40 is not one"), (32, "not in the ring of a sequence at 70")):
        with pytest.raises(ModelError, match=message):
            eng.read_window(seq, boundary)
    other = eng.new_sequence()
    eng.write_window(other, 64, eng.read_window(seq, 64))
    G = eng.plan.gemma
    for L in (G.layers[0], G.layers[1]):
        for i in (0, 1):
            mine, theirs = (eng.backend.read(L.kv.k.const + G.kv_page("sliding", s.slot, i, 0) * L.page_stride,
                                             L.page_stride) for s in (seq, other))
            assert np.array_equal(mine, theirs) and mine.any()


@pytest.mark.slow          # ~30 s: a 110-token prefill and 36 decode steps through the scheduler
def test_serve_resumes_a_shared_prefix_with_a_private_copy_of_its_window(three_layers):
    """otpu-serve's scheduler on the card (two slots): a request with a 110-token prompt caches its three whole
    prompt pages with the window before each page's end (read from its ring as prefill passes the page); a
    second request with the same prompt, admitted once the first has written page 4 (over the window's first
    ring page), leases the three pages, gets the window written into its own slot's ring and prefills only
    the 13 tokens after them: both greedy answers the quantised golden's."""
    from otpu_serve.cards import Card
    from otpu_serve.metrics import ServeMetrics
    from otpu_serve.scheduler import Job, Scheduler

    from otpu_core.llm.sampling import Sampling
    eng, _, conv, _ = make(three_layers, slots=2, rows=4)
    assert eng.prefix_reuse and eng.windowed
    sched = Scheduler([Card("sim", None, eng)], max_batch=2, queue=2, metrics=ServeMetrics())
    worker = sched.workers[0]
    prompt = llmtiny.prompts(1, 384, length=110, seed=4)[0]
    jobs, out = [], {}
    for n in (30, 6):
        job = Job(list(prompt), Sampling(temperature=0), n, ())
        out[job.id] = []
        job.emit = lambda *e, i=job.id: out[i].append(e)
        jobs.append(job)
    sched.submit(jobs[0])
    worker.running += worker._admit()
    first = worker.running[0].seq
    while first.kv_len <= 4 * PAGE:
        worker._iterate()
    assert worker.pool.cached == 3
    sched.submit(jobs[1])
    worker.running += worker._admit()
    second = worker.running[1].seq
    assert jobs[1].reused == 3 * PAGE and second.kv_len == 96 and second.slot != first.slot
    cost = worker.prefill_cost.runs
    while worker.running:
        worker._iterate()
    assert worker.prefill_cost.runs - cost == 4           # 96..108 in runs of 4 rows
    answers = [[e[1] for e in out[j.id] if e[0] == "token"] for j in jobs]
    gold = llmtiny.greedy(llmtiny.quant_golden(eng, conv), prompt, 30)
    assert answers[0] == gold and answers[1] == gold[:6], (answers, gold)
    assert worker.pool.free + worker.pool.cached == worker.pool.total
