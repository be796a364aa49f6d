"""Gemma 4 (sliding and full attention, KV sharing, per-layer embeddings) from real files to the references.

Loaders: tiny random models written as GGUF (llama.cpp's `gemma4` layout: key_length the full
layers' heads and key_length_swa the sliding ones', sliding_window_pattern, shared_kv_layers,
embedding_length_per_layer_input, per-layer feed_forward_length, rope_freqs with 1e30 for the
unturned pairs of proportional RoPE) and as a Hugging Face directory (`Gemma4ForCausalLM`,
`layer_types`, `rope_parameters` per layer type, and the multimodal wrapper's text_config with
its model.language_model. names) read back tensor for tensor; bad input refused by file, key
and value. Reference: the fp32 golden (token by token, its KV cache and window) against a
whole-sequence float64 formula written here (causal and sliding masks, the shared layers reading
the earlier layer's K and V, every norm, PLE, the layer scalar and the soft cap). Card: 32 greedy
tokens from the generate loop, bit for bit the logits of host-driven one-row steps on a second card
(KV pages byte-equal too) and token for token the quantised golden's greedy run, each token's
per-layer embedding row served by the host through the WAITW mailbox; the fp32 golden's cosine,
max-abs and top-1 reported; prefill runs of several rows (the per-row work a hardware loop) leave
the KV pages and logits of one-row runs bit for bit. Tiny models on sim-small (D=32).
"""
import functools
import json

import llmtiny
import numpy as np
import pytest
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)

from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, engine, layout, reference, synthetic
from otpu_core.llm.errors import ModelError
from otpu_core.llm.sampling import Sampling
from otpu_core.target import load as load_target

KINDS = ("sliding", "sliding", "attention") * 2


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma4")
    cfg = llmtiny.config("gemma4", D=32)
    gguf, w = llmtiny.write(d, cfg, "gguf")
    hf, hw = llmtiny.write(d, cfg.with_(name="tiny-gemma4-hf"), "hf", dtype="BF16")
    return {"gguf": (gguf, cfg, w), "hf": (hf, cfg, hw), "dir": d}


# -- files ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gguf", "hf"])
def test_gemma4_files_read_back_as_written(models, kind):
    path, cfg, w = models[kind]
    ck = checkpoint.open_checkpoint(path)
    c = ck.config
    assert c.family == "gemma4" and c.kinds == KINDS and c.tied
    assert (c.head_dim, c.global_head_dim, c.global_rope_pairs) == (32, 64, 8)
    assert (c.global_rope_theta, c.rope_theta) == (1e6, 1e4)
    assert (c.sliding_window, c.kv_shared, c.ple_dim, c.logit_softcap) == (32, 3, 32, 30.0)
    assert c.layer_ffn == (128,) * 3 + (256,) * 3
    assert [c.kv_source(i) for i in range(6)] == [0, 1, 2, 1, 1, 2]
    shapes = c.tensor_shapes()
    assert set(shapes) == set(cfg.tensor_shapes())
    assert "wk.3" not in shapes and "wq.3" in shapes and shapes["wq.2"] == (4 * 64, 64) and shapes["wg.5"] == (256, 64)
    assert shapes["ple"] == (c.vocab, 6 * 32) and shapes["ls.0"] == (1,)
    tol = 2 ** -7 if kind == "hf" else 2 ** -10          # BF16 / F16 matrices (norms F32 in GGUF)
    for name in cfg.tensor_shapes():
        got = ck.get(name)
        assert got.shape == w[name].shape, name
        assert np.abs(got - w[name]).max() <= tol * np.abs(w[name]).max(), name


def test_the_multimodal_wrapper_reads_its_text_decoder(models):
    """Gemma4ForConditionalGeneration: the text config nested, the weights under model.language_model."""
    _, cfg, w = models["hf"]
    d = models["dir"] / "wrapped"
    d.mkdir()
    names = synthetic._file_names(cfg, gguf=False)
    synthetic._safetensors(d / "model.safetensors",
                           {n.replace("model.", "model.language_model.", 1): w[k] for k, n in names.items()}, "F32")
    text = synthetic.hf_config(cfg)
    (d / "config.json").write_text(json.dumps({"architectures": ["Gemma4ForConditionalGeneration"],
                                               "model_type": "gemma4", "text_config": text,
                                               "tie_word_embeddings": True, "eos_token_id": [1, 3]}))
    ck = checkpoint.open_checkpoint(d)
    assert ck.config.kinds == KINDS and ck.config.eos_ids == (1, 3)
    assert np.array_equal(ck.get("ple"), w["ple"]) and np.array_equal(ck.get("pg.5"), w["pg.5"])


@pytest.mark.parametrize("edit,message", [
    (lambda js: js["layer_types"].__setitem__(1, "chunked_attention"),
     "layer_types[1] = 'chunked_attention' is not supported"),
    (lambda js: js.__setitem__("attention_k_eq_v", True), "attention_k_eq_v = True"),
    (lambda js: js.__setitem__("enable_moe_block", True), "enable_moe_block = True"),
    (lambda js: js.__setitem__("hidden_activation", "silu"), "hidden_activation = 'silu'"),
    (lambda js: js["rope_parameters"]["full_attention"].__setitem__("rope_type", "yarn"),
     "rope_parameters['full_attention']"),
    (lambda js: js.__setitem__("vocab_size_per_layer_input", 128), "vocab_size_per_layer_input = 128"),
    (lambda js: js.__setitem__("num_kv_shared_layers", 6), "num_kv_shared_layers = 6"),
    (lambda js: js.__setitem__("global_head_dim", 96), "tensor 'model.layers.2.self_attn.q_proj.weight' has shape "
                                                       "[256, 64] but the config needs [384, 64]"),
    (lambda js: js.__setitem__("per_layer_config", {"2": {"head_dim": 64, "num_key_value_heads": 1}}),
     "per_layer_config['2']"),
    (lambda js: js.__setitem__("hidden_size_per_layer_input", 0), None),
])
def test_bad_hf_configs_are_refused_by_key_and_value(models, edit, message):
    d = llmtiny.edited_hf_dir(models, f"bad-{abs(hash(str(message)))}", edit)
    if message is None:               # no PLE in the config while the file has its tensors: opens, without PLE
        assert checkpoint.open_checkpoint(d).config.ple_dim == 0
        return
    llmtiny.assert_refused(d, message)


def test_bad_gguf_is_refused_by_key_and_tensor(models):
    _, cfg, w = models["gguf"]
    bad = synthetic.write_gguf(models["dir"] / "ple.gguf", cfg.with_(ple_dim=16), w, llmtiny.tokenizer())
    with pytest.raises(ModelError) as e:
        checkpoint.open_checkpoint(bad)
    assert "tensor 'per_layer_token_embd.weight' has shape [384, 192] but the config needs [384, 96]" in e.value.message


# -- the reference against a whole-sequence formula ------------------------------------------------------------

def _whole_sequence(cfg, W, tokens, window):
    """float64 logits of every position at once, written from the Gemma 4 definition."""
    n, d, L, ple = len(tokens), cfg.d, cfg.layers, cfg.ple_dim
    pos = np.arange(n, dtype=np.float64)

    def norm(x, w=None, eps=cfg.norm_eps):
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        return y if w is None else y * w

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    def rot(x, full):                                     # [n, heads, hd], rotate-half, per-kind frequencies
        hd = x.shape[-1]
        theta = 1e6 if full else 1e4
        turned = 8 if full else hd // 2                   # proportional: the first quarter of the pairs
        f = np.array([theta ** (-2 * j / hd) if j < turned else 0.0 for j in range(hd // 2)])
        c, s = np.cos(np.outer(pos, f))[:, None, :], np.sin(np.outer(pos, f))[:, None, :]
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s], -1)

    causal = np.tril(np.ones((n, n), bool))
    local = causal & (np.arange(n)[None, :] > np.arange(n)[:, None] - window)
    h = W["embed"][tokens].astype(np.float64) * np.float32(np.sqrt(d))
    proj = norm((h @ W["plp"].T / np.sqrt(d)).reshape(n, L, ple), W["pln"])
    per = (proj + W["ple"][tokens].reshape(n, L, ple) * np.sqrt(ple)) / np.sqrt(2)
    kv = {}
    for i, kind in enumerate(cfg.kinds):
        full = kind == "attention"
        hd = 64 if full else 32
        x = norm(h, W[f"ln1.{i}"])
        q = rot(norm((x @ W[f"wq.{i}"].T).reshape(n, cfg.heads, hd), W[f"qn.{i}"]), full)
        if i < 3:
            k = rot(norm((x @ W[f"wk.{i}"].T).reshape(n, cfg.kv_heads, hd), W[f"kn.{i}"]), full)
            v = norm((x @ W[f"wv.{i}"].T).reshape(n, cfg.kv_heads, hd))
            kv[kind] = (k, v)                              # the last of its kind before the shared layers wins
        k, v = (np.repeat(a, cfg.group, 1) for a in kv[kind])
        s = np.where((causal if full else local)[None], np.einsum("thd,uhd->htu", q, k), -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        att = np.einsum("htu,uhd->thd", p / p.sum(-1, keepdims=True), v).reshape(n, -1)
        h = h + norm(att @ W[f"wo.{i}"].T, W[f"an.{i}"])
        x = norm(h, W[f"ln2.{i}"])
        h = h + norm((gelu(x @ W[f"wg.{i}"].T) * (x @ W[f"wu.{i}"].T)) @ W[f"wd.{i}"].T, W[f"fn.{i}"])
        h = h + norm((gelu(h @ W[f"pg.{i}"].T) * per[:, i]) @ W[f"pp.{i}"].T, W[f"pn.{i}"])
        h = h * W[f"ls.{i}"][0]
    z = norm(h, W["final_norm"]) @ W["embed"].T
    return cfg.logit_softcap * np.tanh(z / cfg.logit_softcap)


@pytest.mark.parametrize("kind", ["gguf", "hf"])
def test_fp32_golden_equals_the_whole_sequence_formula(models, kind):
    """A window of 5 over 14 tokens (the sliding layers drop keys, the shared ones read layers 1 and
    2) and a soft cap of 1 (it bends these logits): the token-by-token golden is the formula."""
    path, _, _ = models[kind]
    ck = checkpoint.open_checkpoint(path)
    cfg = ck.config.with_(sliding_window=5, logit_softcap=1.0)
    W = {n: ck.get(n).astype(np.float64) for n in cfg.tensor_shapes()}
    tokens = llmtiny.prompts(1, cfg.vocab, length=14)[0]
    got = reference.Golden(cfg, reference.SourceWeights(ck), positions=64).forward(tokens)
    ref = _whole_sequence(cfg, W, tokens, window=5)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    print(f"gemma4 {kind} golden vs formula: max-abs {err:.3g}, cosine {cos:.15f}")
    assert err < 1e-9 and cos > 1 - 1e-12, (err, cos)
    unshared = _whole_sequence(cfg, W, tokens, window=64)     # the window matters: without it the logits move
    assert R.max_abs(unshared, ref) > 1e-3


# -- the card -------------------------------------------------------------------------------------------------

T = "sim-small"
GREEDY = Sampling(temperature=0)


make = functools.partial(llmtiny.card_engine, target=T, rows=1)


def kv_bytes(eng, be):
    """Every KV pool (the layers that keep one: 0, 1 and 2; the sliding ones every slot's ring)."""
    return np.concatenate([be.read(L.kv.k.const, L.pool_pages * L.page_stride)
                           for L in eng.plan.gemma.layers if L.kv is not None])


def test_gemma4_gguf_32_greedy_tokens_on_the_card(models):
    """20 prompt tokens (prefill runs of 4 rows), then 32 generated across the
    32-token page (so the sliding layers drop the first page, the shared layers read layers 1 and 2 over two
    pages, and the runs of layers 0-1 and 3-4 are hardware loops):
    the loop's logits bit for bit those of one-row host-driven steps on a second card, its tokens
    the quantised golden's greedy run, every token's per-layer row served by the host through the
    mailbox; the fp32 golden's distance reported."""
    path, _, _ = models["gguf"]
    prompt = llmtiny.prompts(1, 384, length=20)[0]
    eng, ck, conv, be = make(path, rows=4)
    seq, turn = llmtiny.greedy_loop(eng, prompt)
    assert len(turn.tokens) == 32 and turn.decode.runs == 1 and len(seq.pages) == 2
    assert eng.rows.stats.requests == 20 + 31 and eng.rows.stats.bytes == 51 * 4 * 6 * 32
    steps, be2 = llmtiny.steps_match_the_loop(make, path, prompt, turn)
    assert np.array_equal(kv_bytes(steps, be2), kv_bytes(eng, be)), "KV pages"
    quant = llmtiny.goldens_greedy_tokens(eng, conv, prompt, turn)
    got = np.stack(turn.logits)
    fed = prompt + turn.tokens[:-1]
    # vs the quantised golden most positions agree to fp32 rounding; where an activation lands on an int8
    # rounding boundary the card's fp32 value and the golden's float64 one round to neighbouring codes and that
    # position's logits move by ~0.01 (the next position is back: the KV cache got the same codes)
    for name, g, bound, close in (("quantised", quant, 0.9995, 0.9),
                                  ("fp32", reference.Golden(ck.config, reference.SourceWeights(ck),
                                                            positions=eng.opts.ctx), 0.995, 0.0)):
        g.reset()
        d = llmtiny.distances(f"gemma4 card vs {name} golden", got, g.forward(fed)[len(prompt) - 1:])
        exact = float(np.mean(d.each > 1 - 1e-7))
        print(f"  positions within 1e-7 {exact:.3f}; PLE rows served {eng.rows.stats.requests}, "
              f"{eng.rows.stats.bytes} bytes")
        assert d.min > bound and exact >= close, (d, exact)


def test_multi_row_prefill_leaves_the_bits_of_one_row_runs(models, monkeypatch):
    """39 prompt tokens in runs of 4 rows and of 3 (the last of a page shorter, the second page's rows past the
    sliding window's first page), and in runs of 4 whose programs are made not to fit past 2 rows (the engine
    splits such a run in halves), against runs of one row: every layer's KV pages byte for byte and the next
    logits bit for bit, every row's per-layer embeddings asked of the host once; the runs of several rows are a
    hardware loop over the rows (the 4-row program not much longer than the one-row one)."""
    from otpu_core.llm import programs
    from otpu_core.ol import CompileError
    path, _, _ = models["gguf"]
    prompt = llmtiny.prompts(1, 384, length=40, seed=7)[0]
    compile_program, refused = programs.compile_program, []

    def at_most_2_rows(plan, spec, target, cache=True):
        if spec.groups[0].n > 2:
            refused.append(spec)
            raise CompileError("the program has 5000 instructions; IMEM holds 4096")
        return compile_program(plan, spec, target, cache)
    got, sizes = {}, {}
    for rows, split in ((4, False), (3, False), (4, True), (1, False)):
        if split:
            monkeypatch.setattr(programs, "compile_program", at_most_2_rows)
        eng, _, _, be = make(path, rows=rows)
        seq = eng.new_sequence()
        eng.submit(seq, prompt)
        cost = engine.RunCost()
        eng.prefill(seq, cost)
        runs = 16 + 4 if split else -(-32 // rows) + -(-7 // rows)      # split: 4 -> 2 + 2 and 3 -> 1 + 2
        assert cost.runs == runs and eng.rows.stats.requests == 39, (rows, split, cost.runs)
        got[rows, split] = (kv_bytes(eng, be), eng.logits(seq))
        monkeypatch.setattr(programs, "compile_program", compile_program)
        spec = programs.StepSpec((engine.rows_group(seq, 32, rows, 32),))
        sizes[rows] = len(programs.compile_program(eng.plan, spec, eng.target).instrs)
    assert sorted((s.groups[0].bucket, s.groups[0].n) for s in refused) == [(0, 4), (1, 3), (1, 4)], refused
    for key in ((4, False), (3, False), (4, True)):
        assert np.array_equal(got[key][0], got[1, False][0]), f"KV pages after runs of {key}"
        assert np.array_equal(llmtiny.u32(got[key][1]), llmtiny.u32(got[1, False][1])), \
            f"logits after runs of {key}"
    print(f"gemma4 prefill step programs: {sizes[1]} / {sizes[3]} / {sizes[4]} instructions for 1 / 3 / 4 rows")
    assert sizes[4] < 1.5 * sizes[1], sizes


def test_gemma4_safetensors_two_sequences_in_one_step(models):
    """The HF directory (BF16): two sequences in one step (a row group each, its K row, K scale and V scale
    offsets counted on the card in the runs' layer loops) equal each alone on a second card bit for bit, their
    logits the quantised golden's and their greedy tokens its tokens. (Three do not fit sim-small's IMEM.)"""
    path, _, _ = models["hf"]
    eng, ck, conv, _ = make(path, slots=2, rows=2)
    llmtiny.batched_equals_alone(make, path, llmtiny.prompts(2, 384, length=5), eng, conv, tokens=True)


def _e2b_step(target: str, n: int):
    """Gemma 4 E2B's shape (the bench's) in fp4: the step of n sequences, a row group each, on `target`."""
    import sys
    from pathlib import Path

    from otpu_core.llm import programs
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_llm import GEMMA4_E2B
    t = load_target(target)
    plan = layout.plan(GEMMA4_E2B, t.config(), layout.ImageOptions(fmt="fp4", slots=n, pages=3 * n, ctx=768, rows=4))
    spec = programs.StepSpec(tuple(programs.Group(s, 1, (3 * s, 3 * s + 1, 3 * s + 2)) for s in range(n)),
                             logits=True)
    return programs.compile_program(plan, spec, t, cache=False)


def _registers(prog) -> set[int]:
    return {(i.words[0] >> s) & 15 for i in prog.instrs for s in (8, 12, 16, 20)} - {0}


def test_e2b_shaped_two_sequence_step_fits_the_address_registers():
    """E2B's two-sequence step at position 512 on bcu1525 (8192-instruction IMEM): its layer-run loops count each
    group's K row, K scale and V scale offsets on the card, so it compiles (it ran out of the 15 address registers
    when each was a loop-stepped register) and fits IMEM; on ypcb-00338 the registers fit but 4096 instructions
    do not hold it (the engine's caller then steps one sequence a program)."""
    from otpu_core.ol import CompileError
    prog = _e2b_step("bcu1525", 2)
    regs = _registers(prog)
    print(f"\ngemma-4-e2b shape, 2 sequences a step on bcu1525: {len(prog.instrs)} instructions, {len(regs)} registers")
    assert len(prog.instrs) > len(_e2b_step("bcu1525", 1).instrs)
    with pytest.raises(CompileError, match="IMEM holds 4096"):
        _e2b_step("ypcb-00338", 2)


@pytest.mark.slow          # ~6 s: two more E2B-shaped compiles
def test_e2b_shaped_steps_of_three_and_four_sequences_fit_bcu1525():
    for n in (3, 4):
        prog = _e2b_step("bcu1525", n)
        regs = _registers(prog)
        print(f"\ngemma-4-e2b shape, {n} sequences a step on bcu1525: {len(prog.instrs)} instructions, "
              f"{len(regs)} registers")
        assert len(regs) <= 15


# -- otpu-chat --------------------------------------------------------------------------------------------------

@pytest.mark.slow          # ~20 s: the D=128 programs are compiled
def test_otpu_chat_runs_a_gemma4_file(tmp_path, monkeypatch, capsys):
    """otpu-chat --model on a Gemma 4 GGUF (D=128 on the chat target's card: its 4096-instruction IMEM holds the
    layers with the sampler), sampled with the family's defaults, --check against the quantised golden."""
    from otpu_chat import cli as chat_cli

    from otpu_core.cli import run_app
    monkeypatch.setenv("OTPU_TARGET", "ypcb-00338")
    path, _ = llmtiny.write(tmp_path, llmtiny.config("gemma4", D=128, sliding_window=256, name="chat-gemma4"), "gguf")
    assert run_app(chat_cli.app, "otpu-chat", ["-p", "Tell me about tuples", "--model", str(path), "-n", "6", "--json",
                                               "--check", "--dev", "sim:gemma4chat"]) == 0
    doc = json.loads(capsys.readouterr().out)
    chk = doc["check"]
    print(f"otpu-chat gemma4 --check: min cosine {chk['min_cosine']}, max-abs {chk['max_abs']}, "
          f"top-1 {chk['top1_agreement']}")
    assert doc["model"] == "chat-gemma4" and len(doc["ids"]) == doc["stats"]["tokens"] == 6
    assert chk["steps"] == 6 and chk["first_difference"] is None and chk["top1_agreement"] == 1.0
    assert doc["stats"]["card"]["decode_tok_s"] > 0
    # the min cosine (~0.9998 here) is the quantised golden's own floor: perturbing its embedding rows by
    # 3e-7 (fp32 rounding) moves it against itself by as much, as activations cross int8 rounding boundaries


def test_a_window_that_is_not_whole_pages_is_refused(models):
    _, cfg, _ = models["gguf"]
    with pytest.raises(ModelError) as e:
        layout.plan(cfg, load_target(T).config(), layout.ImageOptions(page=64, ctx=128, pages=2))
    assert "sliding window of 32 positions is not whole KV pages of 64" in e.value.message


@pytest.mark.slow          # the simulated card's Board path: ~30 s
def test_diag_model_section_runs_gemma4(tmp_path):
    """otpu-diag's model row on a Gemma 4 file: the card (the Board on a simulated card, its PLE rows served
    through the mailbox by the same engine) bit for bit the golden simulator."""
    from otpu_diag import cli as diag_cli

    from otpu_core.cli import run_app
    out = tmp_path / "d.json"
    path, _ = llmtiny.write(tmp_path, llmtiny.config("gemma4", D=32, sliding_window=256), "gguf")  # its 256-token pages
    assert run_app(diag_cli.app, "otpu-diag", ["--dev", "sim:g4diag", "--target", "sim-small", "--only", "model",
                                                "--model", str(path), "--tokens", "2", "--json", str(out)]) == 0
    rows = [r for r in json.loads(out.read_text())["rows"] if r["section"] == "model"]
    assert [r["status"] for r in rows] == ["PASS"], rows


@pytest.mark.slow          # ~13 s: three conversions and images
def test_card_formats_against_the_fp32_golden(models, capsys):
    """int8, the public 4-bit E2M1 (int8 head) and the seed fp4x6 (int8x head) on the tiny Gemma 4, teacher-forced
    over 48 tokens: KL from the fp32 golden and top-1 agreement, through the quantised golden (which the card
    matches: 6 steps per format checked on the card too)."""
    path, _, _ = models["gguf"]
    rows = llmtiny.formats_against_fp32("gemma4", path, make, capsys, card_bound=0.9999)
    assert rows["int8"][0] < min(rows["fp4"][0], rows["fp4x6"][0]), rows
    assert rows["int8"][0] < 2e-3 and max(r[0] for r in rows.values()) < 0.1, rows
