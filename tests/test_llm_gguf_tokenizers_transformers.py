"""Every family's GGUF vocabulary rebuilt by otpu_core/llm/tokenizer.py against transformers' own GGUF
tokenizer converter (`AutoTokenizer.from_pretrained(dir, gguf_file=)`, transformers/integrations/gguf), the
independent reading of the same `tokenizer.ggml.*` keys: identical ids over a multilingual, code, emoji,
whitespace and special-token corpus, and both decoding back to the text.

transformers comes from the `reference` extra (`pip install -e '.[reference]'`); without it the tests skip,
and under CI (OTPU_CI=1) they fail. (SmolLM's `smollm` split is not compared: transformers' converter has no
entry for it and splits GPT-2's way, where llama.cpp cuts digits one by one first, as SmolLM's tokenizer.json
does; test_llm_gguf_tokenizers.py holds it to llama.cpp's regexes.)
"""
import pytest
from famtok import CORPUS, FAMILIES, family_model, spelled

import llmtiny
from otpu_core.llm import checkpoint, synthetic
from otpu_core.llm.tokenizer import load

pytestmark = pytest.mark.slow


def _auto_tokenizer():
    return llmtiny.reference_modules("transformers")[0].AutoTokenizer


# SmolLM3's file carries Llama 3's keys (llama-bpe; the llama case), LFM2-MoE's LFM2's (the lfm2 case), and
# transformers reads no smollm3 or lfm2moe GGUF
@pytest.mark.parametrize("fam", [f for f in FAMILIES if f not in ("smollm3", "lfm2moe")] + ["gemma4"])
def test_gguf_tokenizer_matches_transformers_gguf_converter(tmp_path, fam):
    AutoTokenizer = _auto_tokenizer()
    # transformers' GGUF config reader takes one feed-forward width, so Gemma's file here has one for all layers
    cfg, tk, kw = family_model(fam, **({"layer_ffn": ()} if fam == "gemma4" else {}))
    path = synthetic.write_gguf(tmp_path / f"{fam}.gguf", cfg, synthetic.random_weights(cfg, 0), tk, **kw)
    ck = checkpoint.open_checkpoint(path)
    ours = load(ck.tokenizer, str(path), ck.config.bos_id)
    ref = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    assert len(ref) == ours.vocab_size == cfg.vocab
    words = 0
    for text in CORPUS + ["\n".join(CORPUS)]:
        ids = ref.encode(text, add_special_tokens=False)
        assert ours.encode(text) == ids, (fam, text, ours.encode(text), ids)
        assert ours.decode(ids, skip_special=False) == ref.decode(ids) == spelled(fam, text), (fam, text)
        words += len(ids)
    print(f"{fam} ({ck.tokenizer.gguf['model']}, pre {ck.tokenizer.gguf['pre']}): {len(CORPUS) + 1} texts, "
          f"{words} ids identical to transformers' GGUF tokenizer")
