"""Tokenizers through the `tokenizers` library: from tokenizer.json, or built from a GGUF vocabulary.

A GGUF file carries its vocabulary as `tokenizer.ggml.*` keys, rebuilt here the way llama.cpp's
vocabulary code (src/llama-vocab.cpp) reads them, into the `tokenizers` pipeline the model's own
tokenizer.json has:

- `tokenizer.ggml.model = "gpt2"`: a byte-level BPE (tokens, merges, token types) with the
  split regex its `tokenizer.ggml.pre` names (`PRE_TOKENIZERS`: GPT-2's, Llama 3's for Llama 3,
  SmolLM3 (`llama-bpe`) and LFM2 (`lfm2`), Qwen2's for Qwen3 and Qwen3-MoE, Qwen3.5's, SmolLM's
  digits-then-GPT-2, llama.cpp's four-regex default), then the byte-level mapping.
- `tokenizer.ggml.model = "gemma4"`: Gemma 4's SentencePiece-style BPE (tokens spelled with
  U+2581 for a space, `<0xXX>` byte-fallback tokens, merges): spaces become U+2581, merges run
  on the raw UTF-8 text, a character outside the vocabulary falls back to its byte tokens.

Control tokens (type 3) are matched whole and are special (skipped when decoding); user-defined
ones (type 4, e.g. `<think>`, Gemma 4's `<|channel>`) are matched whole and kept in the output,
as llama.cpp renders them. Other vocabulary models and pre-tokenizers are refused by name.

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
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT (a GGUF without tokenizer.ggml.pre): four regexes in turn
DEFAULT_SPLITS = (r"[\p{P}\$\+<=>\^~\|]+", GPT2_SPLIT, r"\p{N}+", r"[0-9][0-9][0-9]")
# tokenizer.ggml.pre -> (split regexes applied in turn, ignore_merges) as llama.cpp's vocabulary code treats them
PRE_TOKENIZERS = {
    "gpt-2": ((GPT2_SPLIT,), False), "default": (DEFAULT_SPLITS, False),
    "llama-bpe": ((LLAMA3_SPLIT,), True), "llama3": ((LLAMA3_SPLIT,), True), "llama-v3": ((LLAMA3_SPLIT,), True),
    "lfm2": ((LLAMA3_SPLIT,), True), "smollm": ((r"\p{N}", GPT2_SPLIT), False),
    "qwen2": ((QWEN2_SPLIT,), False), "qwen35": ((QWEN35_SPLIT,), False)}
MODELS = {"gpt2": "byte-level BPE with merges", "gemma4": "Gemma 4's SentencePiece-style BPE with byte fallback"}
CONTROL, USER_DEFINED = 3, 4        # llama.cpp token types that are matched whole
SPACE = "\u2581"                    # SentencePiece's visible space


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
    model = meta.get("model")
    if model not in MODELS:
        raise ModelError(f"{where}: tokenizer.ggml.model '{model}' is not supported",
                         hint="supported: " + "; ".join(f"{k} ({v})" for k, v in MODELS.items()))
    tokens = list(meta["tokens"])
    tk = _byte_level(meta, tokens, where) if model == "gpt2" else _gemma4(meta, tokens, where)
    _add_whole_tokens(tk, tokens, meta.get("token_type") or [])
    return Tokenizer(tk, add_bos=bool(meta.get("add_bos")), bos_id=bos_id)


def _merges(meta: dict, where: str) -> list[tuple[str, str]]:
    if not meta.get("merges"):
        raise ModelError(f"{where}: missing key 'tokenizer.ggml.merges' (a {meta['model']} tokenizer needs its merges)")
    pairs = []
    for m in meta["merges"]:
        a, sep, b = m.partition(" ")
        if not sep:
            raise ModelError(f"{where}: tokenizer.ggml.merges entry {m!r} is not two tokens separated by a space")
        pairs.append((a, b))
    return pairs


def _byte_level(meta: dict, tokens: list[str], where: str):
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as TK
    pre = meta.get("pre") or "default"
    if pre not in PRE_TOKENIZERS:
        raise ModelError(f"{where}: tokenizer.ggml.pre '{pre}' is not supported",
                         hint=f"supported: {', '.join(PRE_TOKENIZERS)}")
    splits, ignore_merges = PRE_TOKENIZERS[pre]
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = TK(models.BPE(vocab=vocab, merges=_merges(meta, where), ignore_merges=ignore_merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(s), behavior="isolated") for s in splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def _gemma4(meta: dict, tokens: list[str], where: str):
    from tokenizers import decoders, models, normalizers
    from tokenizers import Tokenizer as TK
    missing = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in tokens]
    if missing:
        raise ModelError(f"{where}: tokenizer.ggml.tokens has no byte token {missing[0]} "
                         f"({len(missing)} of 256 missing); a gemma4 vocabulary falls back to bytes")
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = "<unk>" if "<unk>" in vocab else None
    tk = TK(models.BPE(vocab=vocab, merges=_merges(meta, where), byte_fallback=True, fuse_unk=True, unk_token=unk))
    tk.normalizer = normalizers.Replace(" ", SPACE)
    tk.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    return tk


def _add_whole_tokens(tk, tokens: list[str], types) -> None:
    """Control tokens as special tokens, user-defined ones as added tokens kept in the output (a token the
    file lists twice only at the id the vocabulary gave it)."""
    from tokenizers import AddedToken
    vocab = tk.get_vocab()
    control, user = [], []
    for i, t in enumerate(types):
        if int(t) in (CONTROL, USER_DEFINED) and vocab.get(tokens[i]) == i:
            (control if int(t) == CONTROL else user).append(
                AddedToken(tokens[i], special=int(t) == CONTROL, normalized=False))
    if control:
        tk.add_special_tokens(control)
    if user:
        tk.add_tokens(user)
