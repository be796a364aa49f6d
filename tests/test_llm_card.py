"""A model's programs on the golden simulator (IsaBackend), against themselves and the references.

Bit-exact properties (logits compared as uint32, KV pages as bytes): a prefill of many rows
equals feeding the prompt one token at a time; the generate loop equals host-driven steps, also
when it chains across a KV page (HALT CHAIN through the WAITW mailbox); a batched step of two
sequences equals two separate steps. Against the references, teacher-forced on the card's
tokens: the quantised golden (cosine > 0.9995) and the fp32 golden (cosine > 0.998), max-abs and
top-1 reported; a wrong RoPE theta, norm epsilon or KV layout in the card's program turns that
comparison red. Sampling on the card draws what the host sampler draws from the same logits
and uniforms. Tiny random models on sim-small (D=32); the slow cases use the chat target.
"""
import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.board import IsaBackend
from otpu_core.kernels import reference as R
from otpu_core import isa
from otpu_core.llm import checkpoint, convert, engine, layout, programs, reference
from otpu_core.llm.sampling import Sampling, choose, penalised
from otpu_core.target import load as load_target

T = "sim-small"
GREEDY = Sampling(temperature=0)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return {"qwen3": llmtiny.write(d, llmtiny.config("qwen3", D=32), "hf")[0],
            "llama": llmtiny.write(d, llmtiny.config("llama", D=32, d=128, ffn=256), "gguf",
                                   rope_scaling=llmtiny.LLAMA3_SCALING)[0]}


def make(path, fmt="int8", target=T, page=32, ring=True, rows=4, cfg=None, cache=True, slots=1):
    t = load_target(target)
    ck = checkpoint.open_checkpoint(path)
    conv = convert.convert(ck, fmt, t)
    opts = layout.ImageOptions(fmt=fmt, page=page, ctx=4 * page, pages=4 * slots, ring=ring, rows=rows, slots=slots)
    be = IsaBackend(t, timing=False)
    return engine.Engine(conv, cfg or ck.config, be, t, opts, program_cache=cache), ck, conv, be


def goldens(ck, conv, eng):
    numerics = reference.CardNumerics(eng.plan.D, eng.opts.page, eng.opts.fmt in ("int8x", "fp4x6"))
    return (reference.Golden(ck.config, reference.CardWeights(conv, eng.plan.embed_kind), numerics,
                             positions=eng.opts.ctx),
            reference.Golden(ck.config, reference.SourceWeights(ck), positions=eng.opts.ctx))


def u32(x): return np.asarray(x, np.float32).view(np.uint32)


def kv_bytes(eng, be):
    L = eng.plan.layer
    return np.concatenate([be.read(L.at(i).kv.k.const, eng.opts.pages * L.page_stride) for i in range(eng.cfg.layers)])


def _against_references(prompt, turn, ck, conv, eng, what):
    quant, fp = goldens(ck, conv, eng)
    fed = prompt + turn.tokens[:-1]
    got = np.stack(turn.logits)
    for name, g, bound in (("quantised", quant, 0.9995), ("fp32", fp, 0.998)):
        ref = g.forward(fed)[len(prompt) - 1:]
        cos = min(R.cosine(a, b) for a, b in zip(got, ref))
        err = R.max_abs(got, ref)
        top1 = float(np.mean(np.argmax(got, 1) == np.argmax(ref, 1)))
        assert cos > bound, f"{what} vs {name} golden: min cosine {cos:.6f}, max-abs {err:.4f}, top-1 {top1:.2f}"


def test_qwen3_generate_loop_prefill_rows_and_references(models):
    """28 prompt tokens, then 8 generated across the 32-token page: the generate loop (4-row prefill)
    against host-driven steps on a second card (prefill one row at a time), bit for bit; then the
    loop's logits against the references, teacher-forced."""
    prompt = llmtiny.prompts(1, 384, length=28)[0]
    eng, ck, conv, be = make(models["qwen3"])
    assert eng.plan.embed_kind == "f32"                                  # a small table: one LD per token
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    turn = eng.generate(seq, GREEDY, 8, want_logits=True)
    assert len(turn.tokens) == 8 and turn.end == "max_tokens" and turn.decode.runs == 1   # one device run ...
    assert len(seq.pages) == 2 and seq.kv_len == 28 + 7                                    # ... over two pages
    assert turn.prefill.runs == 7                                # 27 prompt rows: 6 runs of 4, then 3
    steps, *_, be2 = make(models["qwen3"], rows=1)
    s2 = steps.new_sequence()
    steps.submit(s2, prompt)
    for i in range(8):
        lg = steps.logits(s2)
        assert np.array_equal(u32(lg), u32(turn.logits[i])), f"logits of token {i}"
        assert int(np.argmax(lg)) == turn.tokens[i], f"token {i}"
        steps.submit(s2, turn.tokens[i:i + 1])
    assert s2.kv_len == seq.kv_len and s2.pages == seq.pages
    assert np.array_equal(kv_bytes(steps, be2), kv_bytes(eng, be)), "KV pages"
    _against_references(prompt, turn, ck, conv, eng, "qwen3 (safetensors)")


def test_two_sequences_in_one_step_equal_two_steps(models, monkeypatch):
    monkeypatch.setattr("otpu_core.llm.layout.EMBED_F32_BYTES", 0)      # embeddings from the tied int8 head
    pa, pb = llmtiny.prompts(2, 384, length=3)
    eng, *_ = make(models["qwen3"], slots=2)
    assert eng.plan.embed_kind == "head"
    a, b = eng.new_sequence(), eng.new_sequence()
    eng.submit(a, pa), eng.submit(b, pb)
    both = eng.logits([a, b])
    one, *_ = make(models["qwen3"], slots=2)
    for p, got in ((pa, both[0]), (pb, both[1])):
        s = one.new_sequence()
        one.submit(s, p)
        assert np.array_equal(u32(one.logits(s)), u32(got))
        assert a.pages != b.pages and s.pages == [0]
        one.release(s)


def test_llama_against_the_references_teacher_forced(models, monkeypatch):
    monkeypatch.setattr("otpu_core.llm.layout.EMBED_F32_BYTES", 0)      # its own int8 table, gathered by the MXU
    eng, ck, conv, be = make(models["llama"])
    assert eng.plan.embed_kind == "int8"
    prompt = llmtiny.prompts(1, ck.config.vocab, length=12)[0]
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    _against_references(prompt, eng.generate(seq, GREEDY, 6, want_logits=True), ck, conv, eng,
                        "llama (GGUF, llama3 scaling)")


def _min_cosine_vs_quant(eng, ck, conv, prompt, n=6):
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    turn = eng.generate(seq, GREEDY, n, want_logits=True)
    quant, _ = goldens(ck, conv, eng)
    ref = quant.forward(prompt + turn.tokens[:-1])[len(prompt) - 1:]
    return min(R.cosine(a, b) for a, b in zip(turn.logits, ref)), R.max_abs(np.stack(turn.logits), ref)


def _v_token_major(kv, pos, v, half=False):
    """A KV layout mistake: V written token-major like K (element stride 1 instead of the page width)."""
    from otpu_core.ol import ops
    ops.kv_append_v(kv, pos, v, half)
    b = ops.current()
    b.blocks[-1][-1].imm["es"] = 1


@pytest.mark.parametrize("mutation", [pytest.param("rope theta", marks=pytest.mark.slow),
                                      pytest.param("norm epsilon", marks=pytest.mark.slow), "KV layout"])
def test_a_wrong_kernel_detail_turns_the_comparison_red(models, mutation, monkeypatch, tmp_path):
    monkeypatch.setenv("OTPU_CACHE", str(tmp_path / "fresh"))
    ck = checkpoint.open_checkpoint(models["qwen3"])
    cfg = ck.config
    if mutation == "rope theta":
        cfg = cfg.with_(rope_theta=cfg.rope_theta * 1.5)
    elif mutation == "norm epsilon":
        cfg = cfg.with_(norm_eps=1e-3)
    else:
        monkeypatch.setattr("otpu_core.ol.kv_append_v", _v_token_major)
    eng, ck, conv, be = make(models["qwen3"], cfg=cfg, cache=False)
    cos, err = _min_cosine_vs_quant(eng, ck, conv, llmtiny.prompts(1, cfg.vocab, length=16)[0], n=4)
    assert cos < 0.9995, f"{mutation}: still cosine {cos:.6f} (max-abs {err:.4f}) against the quantised golden"


def test_sampling_on_the_card_draws_what_the_host_sampler_draws(models):
    eng, ck, *_ = make(models["qwen3"])
    prompt = llmtiny.prompts(1, ck.config.vocab, length=9, seed=3)[0]
    s = Sampling(temperature=0.9, top_k=8, top_p=0.9, repeat_penalty=1.3, seed=7)
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    turn = eng.generate(seq, s, 10, want_logits=True)
    u = np.random.default_rng(7).random(10)
    seen = np.zeros(ck.config.vocab, bool)
    seen[prompt] = True
    host = []
    for i, lg in enumerate(turn.logits):
        host.append(choose(lg, s, float(u[i]), seen))
        seen[turn.tokens[i]] = True
    assert host == turn.tokens
    assert len(set(turn.tokens)) > 3                      # it sampled, not one repeated argmax


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits():
    """llama.cpp's and transformers' rule, written out: a seen token's logit l becomes l / p if l > 0,
    else l * p; unseen ones are untouched (so a seen token never gains probability)."""
    logits = np.array([2.0, -2.0, 1.0, -0.5, 0.0])
    seen = np.array([True, True, False, False, True])
    want = np.array([2.0 / 1.5, -2.0 * 1.5, 1.0, -0.5, 0.0])
    got = penalised(logits, seen, 1.5)
    assert np.abs(got - want).max() == 0.0, (got, want)


def test_stop_tokens_and_the_stop_request(models):
    eng, ck, *_ = make(models["qwen3"])
    prompt = llmtiny.prompts(1, ck.config.vocab, length=3)[0]
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    first = eng.generate(seq, GREEDY, 4).tokens
    eng.reset(seq)
    eng.submit(seq, prompt)
    turn = eng.generate(seq, GREEDY, 4, stop_ids=(first[2],))
    assert turn.tokens == first[:3] and turn.end == "eos" and seq.kv_len == len(prompt) + 2
    eng.reset(seq)
    eng.submit(seq, prompt)
    polls = iter(range(10 ** 6))
    turn = eng.generate(seq, GREEDY, 30, stop=lambda: next(polls) >= 2)
    assert turn.end == "stopped" and 1 <= len(turn.tokens) < 30
    assert seq.kv_len == len(seq.tokens) - 1                 # the cache holds everything but the last token


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["fp4", "int8x", "fp4x6"])
def test_other_formats_against_the_quantised_golden(models, fmt):
    eng, ck, conv, be = make(models["llama"], fmt=fmt)
    cos, err = _min_cosine_vs_quant(eng, ck, conv, llmtiny.prompts(1, ck.config.vocab, length=20)[0], n=8)
    assert cos > 0.9995, f"{fmt}: min cosine {cos:.6f}, max-abs {err:.4f}"


@pytest.mark.parametrize("target,seq_wc", [("nangate45-small", True), (T, False)])
def test_the_engine_hands_a_seq_wc_target_each_programs_wait_table(models, target, seq_wc):
    """On a SEQ_WC target a step program runs with its compiled WAITC table (the simulator schedules by
    it and checks it against the program's dependencies), as a chained image does; elsewhere without."""
    t = load_target(target)
    assert bool(t.config().SEQ_WC) == seq_wc
    ck = checkpoint.open_checkpoint(models["qwen3"])
    be = IsaBackend(t)                                     # the timing model on: the entries schedule the run
    eng = engine.Engine(convert.convert(ck, "int8", t), ck.config, be, t,
                        layout.ImageOptions(fmt="int8", page=32, ctx=128, pages=4))
    seq = eng.new_sequence()
    eng.submit(seq, [5, 17, 42])
    assert np.isfinite(eng.logits(seq)).all()
    spec = programs.StepSpec((engine.rows_group(seq, 2, 1, 32),), logits=True)   # the decode step's program
    compiled = programs.compile_program(eng.plan, spec, t)
    loaded = be.machine.slices[0].waits
    if seq_wc:
        assert loaded == [w or isa.NO_WAIT for w in compiled.waits]
        assert sum(w.waits for w in loaded) > 10, "entries that wait for something"
    else:
        assert loaded is None


@pytest.mark.parametrize("fmt", ["fp4", "int8"])
def test_a_4bit_down_projection_runs_paired_whatever_the_mlp_width(fmt):
    """MM PAIR needs a weight's scale rows a multiple of 8 bytes apart (isa.md 3.5: even block counts).
    An MLP of 84 blocks (LFM2-2.6B's 10752 at D=128) splits best into chunks of 7 blocks, so a 4-bit
    model takes chunks of 6 and every 4-bit MM of its decode step runs paired on a PAIR target (at twice
    the unpaired rate); int8 keeps the largest chunk."""
    t = load_target("bcu1525")
    D = t.config().D
    cfg = llmtiny.config("llama", D=D, ffn=84 * D)
    plan = layout.plan(cfg, t.config(), layout.ImageOptions(fmt=fmt, page=256, ctx=256, pages=1))
    spec = programs.StepSpec((programs.Group(0, 1, (0,)),), logits=True)
    mms = [i for i in programs.compile_program(plan, spec, t, cache=False).instrs if i.op == isa.Op.MM]
    four_bit = [i for i in mms if i.wf in isa.WF_4BIT]
    if fmt == "int8":
        assert not four_bit and not any(i.has(isa.F_PAIR) for i in mms) and plan.f_chunk == 7 * D
        return
    assert any(i.fields["n"] == cfg.d and i.fields["kb"] == 6 for i in four_bit), "a down part's MM"
    unpaired = [(i.fields["n"], i.fields["kb"]) for i in four_bit if not i.has(isa.F_PAIR)]
    assert not unpaired, f"4-bit MMs without PAIR (n, kb): {unpaired}"
    assert plan.f_chunk == 6 * D


def test_a_last_page_s_first_half_alone_leaves_the_whole_page_s_bits(models, monkeypatch):
    """Pages of 64 (two D-block pairs on sim-small): rows whose positions lie in the first half of
    their last page attend over that half alone. A 97-token prompt in 4-row runs (runs before and
    past the half of page 0, page 1's first half, then a last row on the half's first column) and
    6 generated tokens give the whole-page program's logits and KV pages bit for bit."""
    prompt = llmtiny.prompts(1, 384, length=97)[0]

    def turn():
        eng, ck, conv, be = make(models["qwen3"], page=64, cache=False)
        seq = eng.new_sequence()
        eng.submit(seq, prompt)
        return eng.generate(seq, GREEDY, 6, want_logits=True), kv_bytes(eng, be)
    halves, kv = turn()
    monkeypatch.setattr(programs, "_page_halves", lambda *a: None)
    whole, kv_whole = turn()
    assert halves.tokens == whole.tokens
    assert np.array_equal(u32(halves.logits), u32(whole.logits)) and np.array_equal(kv, kv_whole)
