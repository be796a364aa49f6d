"""The shipped default model file keeps its contract: a Qwen3 GGUF v3 in llama.cpp's layout with a
byte-level BPE vocabulary that round-trips text and a ChatML template (tools/train_shipped_model.py
writes it; docs/shipped-model.md describes it)."""
from pathlib import Path

import gguf
import jinja2
import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SHIPPED = Path(__file__).resolve().parent.parent / "otpu_core" / "llm" / "shipped" / "qwen3-pydoc.gguf"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
A = "qwen3."


@pytest.fixture(scope="module")
def reader():
    return gguf.GGUFReader(str(SHIPPED))


@pytest.fixture(scope="module")
def meta(reader):
    return {f.name: f.contents() for f in reader.fields.values()}


@pytest.fixture(scope="module")
def tokenizer(meta):
    tokens, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.merges"]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                               merges=[tuple(m.split(" ")) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    return tok


def test_file_is_small_gguf_v3_qwen3(reader, meta):
    assert SHIPPED.stat().st_size <= 16 * 10**6
    assert meta["GGUF.version"] == 3
    assert meta["general.architecture"] == "qwen3"
    assert meta["general.name"] == "qwen3-pydoc"
    assert meta["general.file_type"] == gguf.LlamaFileType.MOSTLY_F16


def test_hyperparameters_fit_the_card(meta):
    hidden, ffn = meta[A + "embedding_length"], meta[A + "feed_forward_length"]
    heads, kv = meta[A + "attention.head_count"], meta[A + "attention.head_count_kv"]
    assert meta[A + "attention.key_length"] == meta[A + "attention.value_length"] == 128
    assert hidden % 128 == 0 and ffn % 128 == 0 and heads % kv == 0
    assert meta[A + "block_count"] >= 1 and meta[A + "context_length"] >= 512
    assert meta[A + "rope.freq_base"] > 0 and 0 < meta[A + "attention.layer_norm_rms_epsilon"] < 1e-3


def test_tensors_have_llama_cpp_names_shapes_and_types(reader, meta):
    hidden, ffn = meta[A + "embedding_length"], meta[A + "feed_forward_length"]
    q, kv = 128 * meta[A + "attention.head_count"], 128 * meta[A + "attention.head_count_kv"]
    vocab = len(meta["tokenizer.ggml.tokens"])
    # [out, in] as numpy sees it; ggml's shape (ne) is the reverse.
    want = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,)}
    for i in range(meta[A + "block_count"]):
        want |= {f"blk.{i}.{n}.weight": s for n, s in [
            ("attn_norm", (hidden,)), ("attn_q", (q, hidden)), ("attn_k", (kv, hidden)),
            ("attn_v", (kv, hidden)), ("attn_q_norm", (128,)), ("attn_k_norm", (128,)),
            ("attn_output", (hidden, q)), ("ffn_norm", (hidden,)), ("ffn_gate", (ffn, hidden)),
            ("ffn_up", (ffn, hidden)), ("ffn_down", (hidden, ffn))]}
    got = {t.name: t for t in reader.tensors}
    assert set(got) == set(want)  # tied head: no output.weight
    params = 0
    for name, shape in want.items():
        t = got[name]
        assert tuple(int(n) for n in t.shape) == shape[::-1], name
        assert t.data.shape == shape, name
        assert t.tensor_type == (gguf.GGMLQuantizationType.F16 if len(shape) == 2 else gguf.GGMLQuantizationType.F32), name
        assert np.isfinite(t.data).all(), name
        params += t.n_elements
    assert 1_000_000 <= params <= 10_000_000


def test_vocabulary_metadata(meta):
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert len(types) == len(tokens) == len(set(tokens))
    control = {t for t, ty in zip(tokens, types) if ty == gguf.TokenType.CONTROL}
    assert control == set(SPECIAL)
    assert set(types) == {gguf.TokenType.NORMAL, gguf.TokenType.CONTROL}
    assert tokens[meta["tokenizer.ggml.bos_token_id"]] == "<|endoftext|>"
    assert tokens[meta["tokenizer.ggml.eos_token_id"]] == "<|im_end|>"
    assert tokens[meta["tokenizer.ggml.padding_token_id"]] == "<|endoftext|>"
    assert meta["tokenizer.ggml.add_bos_token"] is False
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= set(tokens)  # every byte is encodable


TEXTS = [
    'Assert statements are a convenient way to insert debugging assertions:\n\n   assert_stmt ::= "assert" expression',
    "  leading spaces, tabs\tand trailing newlines\n\n\n",
    "Unicode: naïve café, 東京, emoji 🐍, ∑ x² ≠ ∞",
    "def f(*args, **kwargs):\n    return {k: v for k, v in kwargs.items() if v is not None}",
]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_from_tokens_and_merges_round_trips(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert tokenizer.decode(ids) == text


def test_merges_are_used_and_special_tokens_are_single_ids(tokenizer, meta):
    text = TEXTS[0]
    assert len(tokenizer.encode(text).ids) < len(text.encode()) / 2.5  # a byte fallback would not compress
    tokens = meta["tokenizer.ggml.tokens"]
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>").ids
    assert ids[0] == tokens.index("<|im_start|>") and ids[-1] == tokens.index("<|im_end|>")


def test_chat_template_renders_chatml(meta):
    template = jinja2.Environment().from_string(meta["tokenizer.chat_template"])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is pass?"},
                {"role": "assistant", "content": "A null operation."}, {"role": "user", "content": "More."}]
    text = template.render(messages=messages, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is pass?<|im_end|>\n"
                    "<|im_start|>assistant\nA null operation.<|im_end|>\n<|im_start|>user\nMore.<|im_end|>\n"
                    "<|im_start|>assistant\n")
    assert template.render(messages=messages[1:2], add_generation_prompt=False) == \
        "<|im_start|>user\nWhat is pass?<|im_end|>\n"
