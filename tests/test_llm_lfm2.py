"""LFM2 (convolution and attention layers in the config's order) from real files to the card.

Loaders: tiny random models written as GGUF (llama.cpp's `lfm2` layout: per-layer KV head
counts with 0 for a convolution layer, `shortconv.l_cache`, `token_embd_norm` as the final norm)
and as a Hugging Face directory (`Lfm2ForCausalLM`, `layer_types`, nn.Conv1d's [d, 1, taps])
read back tensor for tensor, and bad input refused by file, key and value. References: the fp32
golden (token by token) against a whole-sequence float64 formula written here (causal mask,
the convolution as a sum of shifted sequences), and the card's zero-padded heads against the
unpadded model. Card: 32 greedy tokens from the generate loop, bit for bit the logits of
host-driven one-row steps on a second card (KV pages and conv rings byte-equal too) and token
for token the quantised golden's own greedy run; the fp32 golden's cosine, max-abs and top-1
reported; the V^T appends of the padded heads write only the real half. Tiny models on sim-small
(D=32; heads of 16 padded to 32).
"""
import functools
import json

import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.board import IsaBackend
from otpu_core.kernels import conv as conv_kernel
from otpu_core.kernels import reference as R
from otpu_core.llm import checkpoint, config, convert, engine, layout, reference, synthetic
from otpu_core.llm.errors import ModelError
from otpu_core.llm.sampling import Sampling
from otpu_core.target import load as load_target

T = "sim-small"
GREEDY = Sampling(temperature=0)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("lfm2")
    cfg = llmtiny.config("lfm2", D=32)
    gguf, w = llmtiny.write(d, cfg, "gguf")
    hf_cfg = llmtiny.config("lfm2", D=32, head_dim=32, name="tiny-lfm2-hf")     # heads a whole block: no padding
    hf, hw = llmtiny.write(d, hf_cfg, "hf", dtype="BF16")
    return {"gguf": (gguf, cfg, w), "hf": (hf, hf_cfg, hw), "dir": d}


make = functools.partial(llmtiny.card_engine, target=T)


def state_bytes(eng, be):
    """Every layer's KV pages and the live rows of every convolution layer's ring (conv.live_rows)."""
    p, cfg = eng.plan, eng.plan.cfg
    out = [be.read(p.layer.at(i).kv.k.const, eng.opts.pages * p.layer.page_stride)
           for i in range(len(cfg.kind_layers("attention")))]
    rb, live = 4 * cfg.d, conv_kernel.live_rows(cfg.conv_taps)
    for i in range(len(cfg.kind_layers("conv"))):
        for slot in range(eng.opts.slots):
            base = p.conv.at(i).ring_of(slot).base.const
            out.append(be.read(base + live.start * rb, (live.stop - live.start) * rb))
    return np.concatenate(out)


# -- files ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gguf", "hf"])
def test_lfm2_files_read_back_as_written(models, kind):
    path, cfg, w = models[kind]
    ck = checkpoint.open_checkpoint(path)
    c = ck.config
    assert c.family == "lfm2" and c.kinds == ("conv", "attention", "conv", "attention", "conv") and c.conv_taps == 3
    assert (c.d, c.heads, c.kv_heads, c.head_dim, c.ffn, c.tied) == (cfg.d, cfg.heads, cfg.kv_heads, cfg.head_dim,
                                                                    cfg.ffn, True)
    assert set(c.tensor_shapes()) == set(cfg.tensor_shapes()) and "cin.0" in c.tensor_shapes() and "wq.0" not in \
        c.tensor_shapes()
    tol = 2 ** -7 if kind == "hf" else 2 ** -10          # BF16 / F16 matrices (norms and taps F32 in GGUF)
    for name in cfg.tensor_shapes():
        got = ck.get(name)
        assert got.shape == w[name].shape, name
        assert np.abs(got - w[name]).max() <= tol * np.abs(w[name]).max(), name


@pytest.mark.parametrize("edit,message", [
    (lambda js: js["layer_types"].__setitem__(2, "sliding_attention"),
     "layer_types[2] = 'sliding_attention' is not supported"),
    (lambda js: js.__setitem__("layer_types", ["conv"] * 4), "layer_types has 4 entries for 5 layers"),
    (lambda js: js.__setitem__("conv_bias", True), "conv_bias = true"),
    (lambda js: js.pop("conv_L_cache"), "missing key 'conv_L_cache'"),
    (lambda js: js.__setitem__("conv_L_cache", 4), "tensor 'model.layers.0.conv.conv.weight' has shape [64, 3] but "
                                                   "the config needs [64, 4]"),
])
def test_bad_hf_configs_are_refused_by_key_and_value(models, edit, message):
    d = llmtiny.edited_hf_dir(models, f"bad-{abs(hash(message))}", edit)
    llmtiny.assert_refused(d, message)


@pytest.mark.parametrize("d,block_ff_dim,published", [(1024, 6656, 4608), (2048, 12288, 8192)])
def test_auto_adjusted_mlp_width_is_the_published_one(models, d, block_ff_dim, published):
    """LFM2-350M's and LFM2-1.2B's config.json MLP keys give the width their GGUFs record as
    `lfm2.feed_forward_length` (llama.cpp's converter: 2/3, the multiplier, up to a multiple of 256)."""
    js = json.loads((models["hf"][0] / "config.json").read_text())
    js.update(hidden_size=d, block_ff_dim=block_ff_dim, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0,
              block_multiple_of=256)
    assert config.from_hf(js, "config.json").ffn == published

def test_bad_gguf_is_refused_by_tensor_name(models):
    _, cfg, w = models["gguf"]
    bad = synthetic.write_gguf(models["dir"] / "taps.gguf", cfg.with_(conv_taps=4), w, llmtiny.tokenizer())
    with pytest.raises(ModelError) as e:
        checkpoint.open_checkpoint(bad)
    assert "tensor 'blk.0.shortconv.conv.weight' has shape [64, 3] but the config needs [64, 4]" in e.value.message


# -- references ---------------------------------------------------------------------------------------------

def test_fp32_golden_equals_the_whole_sequence_formula(models):
    path, _, _ = models["gguf"]
    ck = checkpoint.open_checkpoint(path)
    W = {n: ck.get(n).astype(np.float64) for n in ck.config.tensor_shapes()}
    tokens = llmtiny.prompts(1, ck.config.vocab, length=12)[0]
    got = reference.Golden(ck.config, reference.SourceWeights(ck), positions=64).forward(tokens)
    ref = llmtiny.whole_sequence(ck.config, W, tokens)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err < 1e-9 and cos > 1 - 1e-12, (err, cos)


def test_padded_heads_compute_the_unpadded_model(models):
    """The card's heads (16 real dims padded to 32, norms rescaled) give the model's logits in float64."""
    path, _, _ = models["gguf"]
    ck = checkpoint.open_checkpoint(path)
    card = layout.card_config(ck.config, 32)
    assert (card.head_dim, card.real_head_dim) == (32, 16)
    src = reference.SourceWeights(ck)

    class Padded:
        def get(self, name):
            kind = name.split(".")[0]
            w = src.get(name)
            return convert.pad_heads(kind, w, card) if kind in convert.HEAD_TENSORS else w
        embed, down_parts = src.embed, src.down_parts
    tokens = llmtiny.prompts(1, ck.config.vocab, length=10)[0]
    got = reference.Golden(card, Padded(), positions=64).forward(tokens)
    ref = reference.Golden(ck.config, src, positions=64).forward(tokens)
    err, cos = R.max_abs(got, ref), R.cosine(got, ref)
    assert err < 1e-9 and cos > 1 - 1e-12, (err, cos)


# -- the card -------------------------------------------------------------------------------------------------

def test_lfm2_gguf_32_greedy_tokens_on_the_card(models):
    """20 prompt tokens (prefill runs of 4 rows), then 32 generated across the 32-token page: the
    loop's logits bit for bit those of one-row host-driven steps on a second card, its tokens the
    quantised golden's greedy run; the fp32 golden's distance reported."""
    path, _, _ = models["gguf"]
    prompt = llmtiny.prompts(1, 384, length=20)[0]
    eng, ck, conv, be = make(path)
    assert eng.plan.mixed and eng.plan.lead_convs == 1 and layout.conv_runs(eng.plan.cfg)[1] == [(1, 1), (2, 1)]
    seq, turn = llmtiny.greedy_loop(eng, prompt)
    assert len(turn.tokens) == 32 and turn.decode.runs == 1 and len(seq.pages) == 2
    steps, be2 = llmtiny.steps_match_the_loop(make, path, prompt, turn)
    assert np.array_equal(state_bytes(steps, be2), state_bytes(eng, be)), "KV pages and conv rings"
    quant = llmtiny.goldens_greedy_tokens(eng, conv, prompt, turn)
    llmtiny.against_goldens("lfm2", turn, prompt, quant, ck, eng.opts.ctx, fp32_bound=0.995)


def test_vt_appends_write_only_the_real_half(models):
    """A padded head's V holds its real dims first (convert.pad_heads), so every V^T append (prefill
    runs and decode steps) writes only the first half's rows of V^T: a sentinel written into the
    other half of every page stays, byte for byte, while the real rows fill."""
    path, _, _ = models["gguf"]
    eng, _, conv, be = make(path)
    plan, cfg, P = eng.plan, eng.plan.cfg, eng.opts.page
    r, hd = cfg.real_head_dim, cfg.head_dim
    assert 2 * r == hd
    wv = conv.tensors["wv.1"].dequantize().reshape(cfg.kv_heads, hd, cfg.d)
    assert not wv[:, r:].any() and wv[:, :r].any(), "V's padding is its second half"
    vts = [plan.layer.at(i).page(p, g).vt.const for i in range(len(cfg.kind_layers("attention")))
           for p in range(eng.opts.pages) for g in range(cfg.kv_heads)]
    sentinel = np.full((hd - r) * P, 0x5A, np.uint8)
    for vt in vts:
        be.write(vt + r * P, sentinel)
    seq = eng.new_sequence()
    eng.submit(seq, llmtiny.prompts(1, 384, length=6)[0])          # a prefill run of 4 rows and one of 2
    eng.logits(seq)
    eng.submit(seq, [1])                                          # a decode step
    eng.logits(seq)
    for vt in vts:
        assert np.array_equal(be.read(vt + r * P, (hd - r) * P), sentinel), f"V^T pad rows at 0x{vt:x} written"
    used = {plan.layer.at(i).page(seq.pages[0], g).vt.const for i in range(len(cfg.kind_layers("attention")))
            for g in range(cfg.kv_heads)}
    for vt in used:
        real = be.read(vt, r * P).reshape(r, P)
        assert real[:, :7].any(axis=0).all() and not real[:, 7:].any(), f"V^T real rows at 0x{vt:x}"


def test_lfm2_safetensors_two_sequences_in_one_step(models):
    """The HF directory (unpadded heads): two slots batched in one step equal each alone, and the
    logits match the quantised golden."""
    path, _, _ = models["hf"]
    pa, pb = llmtiny.prompts(2, 384, length=5)
    eng, ck, conv, _ = make(path, slots=2)
    assert eng.plan.cfg.real_head_dim == 0
    llmtiny.batched_equals_alone(make, path, (pa, pb), eng, conv)


def test_lfm2_on_a_seq_wc_target(models):
    """nangate45-small schedules by the compiled WAITC tables, which the simulator checks against
    the program's dependencies (the ring's run-time addresses included)."""
    path, _, _ = models["gguf"]
    t = load_target("nangate45-small")
    ck = checkpoint.open_checkpoint(path)
    conv = convert.convert(ck, "int8", t)
    eng = engine.Engine(conv, ck.config, IsaBackend(t), t, layout.ImageOptions(fmt="int8", page=32, ctx=64, pages=2))
    prompt = llmtiny.prompts(1, 384, length=6)[0]
    seq = eng.new_sequence()
    eng.submit(seq, prompt)
    got = eng.logits(seq)
    ref = llmtiny.quant_golden(eng, conv).forward(prompt)[-1]
    assert R.cosine(got, ref) > 0.99999, (R.cosine(got, ref), R.max_abs(got, ref))


def test_card_formats_against_the_fp32_golden(models, capsys):
    """int8, the public 4-bit E2M1 (int8 head) and the seed fp4x6 (int8x head) on the tiny LFM2, teacher-forced
    over 48 tokens: KL divergence from the fp32 golden and top-1 agreement, through the quantised golden
    (which the card matches: 6 steps per format checked here on the card too)."""
    path, _, _ = models["gguf"]
    rows = llmtiny.formats_against_fp32("lfm2", path, make, capsys)
    assert rows["int8"][0] < min(rows["fp4"][0], rows["fp4x6"][0]), rows
    assert rows["int8"][0] < 1e-3 and rows["int8"][1] >= 0.85, rows        # the random model's logits are flat:
    assert max(r[0] for r in rows.values()) < 0.05, rows                    # top-1 is noisy, KL is the measure
