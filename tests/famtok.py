"""Tiny models whose vocabulary is each family's kind (the GGUF tokenizer keys its real files carry), and the
text the tokenizer tests encode with them."""
import llmtiny

from otpu_core.llm import synthetic

# text a tokenizer gets wrong first: scripts, combining marks, emoji (a ZWJ sequence), code, runs of spaces,
# tabs and newlines, digits, contractions, special tokens inside words
CORPUS = ["Hello world, the quick brown fox!", "def f(x):\n    return x + 1  # comment\n\n\n",
          "<|im_start|>user\nWhat is a list?<|im_end|>\n<|im_start|>assistant\n", "naïve café 東京 \t\n\n  spaces   ",
          "It's 2024; DON'T panic... 12345 + 67.89 = 1234567890", "Привет, мир! Ελληνικά. عربي. हिन्दी. ภาษาไทย",
          "cafe\u0301 ne\u0301e \U0001F600 \U0001F468\u200D\U0001F469\u200D\U0001F467 \u2581x \u00a0nbsp",
          "  leading spaces\r\nwindows line\ttab\t\tend ", "<|im_end|><|im_end|>x<|endoftext|>", "",
          "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }\n", "😀😀😀 ZWJ‍ 한국어 텍스트 日本語のテキスト"]

FAMILIES = sorted(synthetic.FAMILY_PRE)


def family_model(fam: str, D: int = 32, **over):
    """(config, tokenizer, write_gguf keywords) of a tiny `fam` model whose vocabulary is the family's kind, 1536
    tokens learned from the standard library's text and this corpus (so digit runs, contractions, accents and
    scripts have merges for the splits to differ on)."""
    text = synthetic.corpus(100_000) + "\n".join(CORPUS * 3)
    if fam == "gemma4":
        tk = synthetic.gemma4_tokenizer(1536, alphabet=200, text=text)
        v = tk.get_vocab()
        cfg = llmtiny.config(fam, D=D, vocab=tk.get_vocab_size(), eos_ids=(v["<turn|>"],), bos_id=v["<bos>"], **over)
        return cfg, tk, {"template": synthetic.GEMMA4_TEMPLATE}
    pre = synthetic.FAMILY_PRE[fam]
    tk = synthetic.tokenizer(1536, pre, text)
    return llmtiny.config(fam, D=D, vocab=tk.get_vocab_size(), **over), tk, {"pre": pre, "template": synthetic.CHATML}


def spelled(fam: str, text: str) -> str:
    """The text a decode gives back: SentencePiece's U+2581 is a space to Gemma (its own tokenizer too)."""
    return text.replace("\u2581", " ") if fam == "gemma4" else text
