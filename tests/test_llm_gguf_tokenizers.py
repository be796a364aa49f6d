"""GGUF vocabularies of every family rebuilt as tokenizers (otpu_core/llm/tokenizer.py), against llama.cpp's
split regexes (its src/llama-vocab.cpp patterns, copied here as written there) and against the tokenizer the
family's files carry; transformers' own GGUF tokenizer converter is the reference in
test_llm_gguf_tokenizers_transformers.py."""
import pytest

import llmtiny
from famtok import CORPUS, FAMILIES, family_model, spelled

from otpu_core.llm import checkpoint, synthetic
from otpu_core.llm.errors import ModelError
from otpu_core.llm.tokenizer import PRE_TOKENIZERS, from_gguf, load

# llama.cpp's regex for each pre-tokenizer family, as src/llama-vocab.cpp writes it (its case-insensitive
# contractions spelled out, GPT-2's without the trailing \s+ alternative)
LLAMA_CPP = {
    "gpt-2": [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
    "llama-bpe": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen35": [r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
               r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "smollm": [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
                r"\p{N}+", r"[0-9][0-9][0-9]"],
}
# llama.cpp's names for each (llama_vocab::impl::load): LFM2 and Llama 3 read as LLAMA3 (merges ignored)
ALIASES = {"llama-bpe": ("llama-bpe", "llama3", "llama-v3", "lfm2")}


def _cut(patterns):
    """llama.cpp's cut: each regex in turn, matches and the text between them kept (unicode_regex_split), then
    the byte-level spelling."""
    from tokenizers import Regex, pre_tokenizers
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns]
                                   + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


@pytest.mark.parametrize("base", sorted(LLAMA_CPP))
def test_split_regexes_cut_text_as_llama_cpp_does(base):
    meta = {"model": "gpt2", "tokens": ["a", "b", "ab"], "merges": ["a b"]}
    want = _cut(LLAMA_CPP[base])
    for pre in ALIASES.get(base, (base,)):
        tk = from_gguf({**meta, "pre": pre}, "x.gguf").tk
        for text in CORPUS:
            assert tk.pre_tokenizer.pre_tokenize_str(text) == want.pre_tokenize_str(text), (pre, text)
        assert PRE_TOKENIZERS[pre][1] == (base == "llama-bpe"), pre     # ignore_merges: llama.cpp's LLAMA3 only


@pytest.fixture(scope="module")
def family_files(tmp_path_factory):
    """Per family a GGUF with its real tokenizer keys and the tokenizer.json of the same vocabulary."""
    d = tmp_path_factory.mktemp("famtok")
    out = {}
    for fam in FAMILIES + ["gemma4"]:
        cfg, tk, kw = family_model(fam)
        out[fam] = synthetic.write_gguf(d / f"{fam}.gguf", cfg, synthetic.random_weights(cfg, 0), tk, **kw), tk
    return out


@pytest.mark.parametrize("fam", FAMILIES + ["gemma4"])
def test_each_familys_gguf_tokenizes_like_its_tokenizer_json(family_files, fam):
    path, tk = family_files[fam]
    ck = checkpoint.open_checkpoint(path)
    tok = load(ck.tokenizer, str(path), ck.config.bos_id)
    want_pre = synthetic.FAMILY_PRE.get(fam)
    keys = (ck.tokenizer.gguf["model"], ck.tokenizer.gguf["pre"])
    assert keys == (("gpt2", want_pre) if want_pre else ("gemma4", None))
    assert tok.vocab_size == tk.get_vocab_size() == ck.config.vocab
    for text in CORPUS:
        ids = tk.encode(text, add_special_tokens=False).ids
        assert tok.encode(text) == ids, (fam, text)
        assert tok.decode(ids, skip_special=False) == spelled(fam, text), (fam, text)


def test_gemma4_vocabulary_falls_back_to_bytes_and_keeps_visible_tokens(family_files):
    path, tk = family_files["gemma4"]
    ck = checkpoint.open_checkpoint(path)
    tok = load(ck.tokenizer, str(path), ck.config.bos_id)
    ids = tok.encode("\u0f00 a")                      # a Tibetan letter the vocabulary never saw: its UTF-8 bytes
    assert [tok.tk.id_to_token(i) for i in ids[:3]] == ["<0xE0>", "<0xBC>", "<0x80>"] and tok.decode(ids) == "\u0f00 a"
    turn, channel = tok.token_id("<|turn>"), tok.token_id("<|channel>")
    assert tok.encode("x<|turn>y")[1] == turn and tok.encode("x<|channel>y")[1] == channel
    assert tok.decode([turn, channel]) == "<|channel>"          # control skipped, user-defined rendered
    assert tok.encode("hi", add_special=True)[0] == ck.config.bos_id          # the file's add_bos_token
    s = tok.stream()
    text = "café \u0f00\u0f01 東京 😀 ok"
    pieces = [s.push(i) for i in tok.encode(text)]
    assert "".join(pieces) == text and all("\ufffd" not in p for p in pieces)


def test_gemma4_prompt_is_the_same_from_its_gguf_and_its_hf_directory(tmp_path, family_files):
    """The chat template rendered with `<bos>` and tokenized: one id sequence whether the vocabulary comes from
    the GGUF keys or from tokenizer.json and tokenizer_config.json; `<turn|>` ends a turn in both."""
    from otpu_core.llm import models
    path, tk = family_files["gemma4"]
    cfg = checkpoint.open_checkpoint(path).config
    hf = synthetic.write_hf(tmp_path / "g", cfg, synthetic.random_weights(cfg, 0), tk,
                            template=synthetic.GEMMA4_TEMPLATE)
    a, b = models.open_model(str(path)), models.open_model(str(hf))
    text = "Tell me about tuples, naïve 東京 \u0f00"
    want = tk.encode(f"<bos><|turn>user\n{text}<turn|>\n<|turn>model\n", add_special_tokens=False).ids
    assert a.prompt_ids(text) == b.prompt_ids(text) == want
    assert tk.token_to_id("<turn|>") in a.stop_ids() and tk.token_to_id("<turn|>") in b.stop_ids()


def test_unsupported_vocabularies_are_refused_by_name():
    with pytest.raises(ModelError, match="tokenizer.ggml.model 'llama' is not supported") as e:
        from_gguf({"model": "llama", "tokens": ["a"]}, "x.gguf")
    assert "gpt2" in e.value.hint and "gemma4" in e.value.hint
    with pytest.raises(ModelError, match="x.gguf: tokenizer.ggml.pre 'tekken' is not supported") as e:
        from_gguf({"model": "gpt2", "pre": "tekken", "tokens": ["a"], "merges": ["a a"]}, "x.gguf")
    assert all(p in e.value.hint for p in ("lfm2", "llama-bpe", "qwen2", "qwen35", "smollm"))
    with pytest.raises(ModelError, match=r"x.gguf: tokenizer.ggml.tokens has no byte token <0x00>"):
        from_gguf({"model": "gemma4", "tokens": ["a", "b", "ab"], "merges": ["a b"]}, "x.gguf")
    with pytest.raises(ModelError, match="missing key 'tokenizer.ggml.merges'"):
        from_gguf({"model": "gpt2", "pre": "qwen2", "tokens": ["a"]}, "x.gguf")


@pytest.mark.slow          # ~20 s: the D=128 programs are compiled
def test_otpu_chat_answers_on_a_gemma4_gguf_with_its_own_vocabulary(tmp_path, monkeypatch, capsys):
    """otpu-chat --model on a Gemma 4 GGUF whose vocabulary is Gemma 4's kind (gemma4 keys, its chat template
    with `<bos>`, `<|turn>` and `<turn|>`): the prompt rendered and tokenized as Gemma's, the answer checked
    against the quantised golden on the simulated card."""
    import json

    from otpu_chat import cli as chat_cli

    from otpu_core.cli import run_app
    from otpu_core.llm import models
    monkeypatch.setenv("OTPU_TARGET", "ypcb-00338")
    tk = synthetic.gemma4_tokenizer(384)
    v = tk.get_vocab()
    cfg = llmtiny.config("gemma4", D=128, sliding_window=256, vocab=384, eos_ids=(v["<turn|>"],), bos_id=v["<bos>"],
                         name="chat-gemma4-vocab")
    path = synthetic.write_gguf(tmp_path / "chat-gemma4-vocab.gguf", cfg, synthetic.random_weights(cfg, 0, gain=1.0),
                                tk, template=synthetic.GEMMA4_TEMPLATE)
    m = models.open_model(str(path))
    ids = m.prompt_ids("Tell me about tuples")
    want = tk.encode("<bos><|turn>user\nTell me about tuples<turn|>\n<|turn>model\n", add_special_tokens=False).ids
    assert ids == want and ids[:2] == [v["<bos>"], v["<|turn>"]], (ids, want)
    assert v["<turn|>"] in m.stop_ids()
    assert run_app(chat_cli.app, "otpu-chat", ["-p", "Tell me about tuples", "--model", str(path), "-n", "6", "--json",
                                               "--check", "--dev", "sim:gemma4vocab"]) == 0
    doc = json.loads(capsys.readouterr().out)
    chk = doc["check"]
    print(f"otpu-chat gemma4 (gemma4 vocabulary) --check: min cosine {chk['min_cosine']}, "
          f"top-1 {chk['top1_agreement']}")
    assert doc["model"] == "chat-gemma4-vocab" and len(doc["ids"]) == doc["stats"]["tokens"] == 6
    assert chk["steps"] == 6 and chk["first_difference"] is None and chk["top1_agreement"] == 1.0
    assert doc["text"] == tk.decode(doc["ids"], skip_special_tokens=True)
