"""Tokenizers through the `tokenizers` library: from tokenizer.json, or built from a GGUF vocabulary.

A GGUF file with `tokenizer.ggml.model = "gpt2"` carries a byte-level BPE: tokens, merges and
token types. It is rebuilt as a `tokenizers` BPE with the pre-tokenizer its
`tokenizer.ggml.pre` names (the GPT-2, Llama 3, Qwen2 or Qwen3.5 split regex, then the byte-level
mapping) and its control and user-defined tokens as special tokens, so the chat template's
`<|im_start|>` is one token as in the original. Other vocabulary models are refused by name.

`encode(text, add_special=)` follows the two conventions users know: a rendered chat template
is tokenized without adding anything (`apply_chat_template` does the same), a raw prompt gets
the model's own BOS when the tokenizer adds one. `Stream` turns ids into text as they arrive,
holding back a partial UTF-8 character until it is complete.
"""
from __future__ import annotations

from .checkpoint import TokenizerSource
from .errors import ModelError

GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
# Qwen3.5's: Qwen2's with combining marks (\p{M}) kept in words and out of punctuation runs
QWEN35_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
                r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# tokenizer.ggml.pre -> (split regex, ignore_merges) as llama.cpp's vocabulary code treats them
PRE_TOKENIZERS = {"gpt-2": (GPT2_SPLIT, False), "default": (GPT2_SPLIT, False), "llama-bpe": (LLAMA3_SPLIT, True),
                  "llama3": (LLAMA3_SPLIT, True), "smollm": (LLAMA3_SPLIT, True), "qwen2": (QWEN2_SPLIT, False),
                  "qwen35": (QWEN35_SPLIT, False)}
CONTROL, USER_DEFINED = 3, 4        # llama.cpp token types that are matched whole


class Tokenizer:
    def __init__(self, tk, add_bos: bool = False, bos_id: int | None = None):
        self.tk = tk
        self.add_bos = add_bos
        self.bos_id = bos_id

    @property
    def vocab_size(self) -> int: return self.tk.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special: bool = False) -> list[int]:
        ids = self.tk.encode(text, add_special_tokens=add_special).ids
        if add_special and self.add_bos and self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.tk.decode(list(ids), skip_special_tokens=skip_special)

    def token_id(self, token: str) -> int | None: return self.tk.token_to_id(token)

    def stream(self) -> "Stream": return Stream(self)


class Stream:
    """Incremental detokenization: `push(id)` returns the new text ('' while a character is incomplete)."""

    def __init__(self, tok: Tokenizer):
        from tokenizers.decoders import DecodeStream
        self.tok = tok
        self._ds = DecodeStream(skip_special_tokens=True)

    def push(self, token: int) -> str:
        return self._ds.step(self.tok.tk, int(token)) or ""


def load(src: TokenizerSource, where: str, bos_id: int | None = None) -> Tokenizer:
    if src.json_path is not None:
        from tokenizers import Tokenizer as TK
        try:
            return Tokenizer(TK.from_file(str(src.json_path)), bos_id=bos_id)
        except Exception as e:      # the Rust parser's error type is not exported
            raise ModelError(f"{src.json_path}: not a tokenizers tokenizer.json: {e}") from None
    if src.gguf is not None:
        return from_gguf(src.gguf, where, bos_id)
    raise ModelError(f"{where}: no tokenizer (tokenizer.json, or the GGUF tokenizer.ggml.* keys)",
                     hint="a model directory needs tokenizer.json")


def from_gguf(meta: dict, where: str, bos_id: int | None = None) -> Tokenizer:
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as TK
    model = meta.get("model")
    if model != "gpt2":
        raise ModelError(f"{where}: tokenizer.ggml.model '{model}' is not supported",
                         hint="supported: gpt2 (byte-level BPE with merges)")
    pre = meta.get("pre") or "default"
    if pre not in PRE_TOKENIZERS:
        raise ModelError(f"{where}: tokenizer.ggml.pre '{pre}' is not supported",
                         hint=f"supported: {', '.join(PRE_TOKENIZERS)}")
    tokens, merges = list(meta["tokens"]), meta.get("merges")
    if not merges:
        raise ModelError(f"{where}: missing key 'tokenizer.ggml.merges' (a gpt2 tokenizer needs its merges)")
    split, ignore_merges = PRE_TOKENIZERS[pre]
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep:
            raise ModelError(f"{where}: tokenizer.ggml.merges entry {m!r} is not two tokens separated by a space")
        pairs.append((a, b))
    tk = TK(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
    if split == GPT2_SPLIT:
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    types = meta.get("token_type") or []
    specials = [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types)
                if int(t) in (CONTROL, USER_DEFINED)]
    if specials:
        tk.add_special_tokens(specials)
    return Tokenizer(tk, add_bos=bool(meta.get("add_bos")), bos_id=bos_id)
