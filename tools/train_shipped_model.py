#!/usr/bin/env python3
"""Train the shipped default model, qwen3-pydoc, and write it as a GGUF file.

A small Qwen3-architecture decoder (RMSNorm, GQA with per-head q/k norms, NeoX-style RoPE,
SwiGLU, tied LM head) trained from scratch on the Python language reference topics that
every CPython install ships (`pydoc_data.topics`, PSF licence). The data is chat-formatted
question/answer pairs built from those topics plus the raw topic text; a deterministic part
of the paragraphs and one question phrasing are held out for the perplexity.

The export follows llama.cpp's Qwen3 layout (tensor names, [out, in] weights, no q/k
permutation, tied head, F16 matrices and F32 norms, a gpt2-style byte-level BPE vocabulary
with merges and a ChatML template). At the end the script reads its own file back with
`gguf.GGUFReader`, runs a float64 numpy forward of the read-back weights and compares the
logits with torch's.

    pip install -e '.[train]'
    python tools/train_shipped_model.py --out otpu_core/llm/shipped/qwen3-pydoc.gguf

Needs torch (the `train` extra); nothing else in the project does.
"""
from __future__ import annotations

import argparse
import dataclasses
import keyword
import math
import random
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SYSTEM_PROMPT = "You are a helpful assistant that answers questions about the Python language."

# Phrasings of a question about a subject; HELD_OUT_PHRASING is never trained on.
PHRASINGS = [
    "What is {s}?",
    "What does {s} do?",
    "Explain {s}.",
    "Tell me about {s}.",
    "Can you explain {s}?",
    "How does {s} work?",
    "Describe {s}.",
    "What should I know about {s}?",
    "Give me an overview of {s}.",
    "I have a question about {s}. What is it?",
    "Please explain {s} in Python.",
    "What is {s} in Python?",
]
HELD_OUT_PHRASING = "Could you tell me what {s} means?"
FOLLOW_UPS = ["Tell me more.", "Go on.", "What else?", "Can you continue?"]
HELD_OUT_EVERY = 20  # about one paragraph in 20 is held out (chosen by CRC32, not by position)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 4096
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 128
    ffn: int = 768
    context: int = 512
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6


# ---------------------------------------------------------------- data from pydoc_data.topics

def _unwrap(paragraph: str) -> str:
    """Join a prose paragraph's hard-wrapped lines; indented blocks (grammar, code) stay as they are."""
    if paragraph.startswith(" "):
        return paragraph
    return " ".join(line.strip() for line in paragraph.split("\n"))


def _subject(title: str) -> str:
    """'The "assert" statement' -> 'the assert statement' (how a user would name it)."""
    words = title.replace('"', "").split()
    if all(w[:1].isupper() for w in words):  # Title Case -> lower case
        words = [w.lower() if not w[1:2].isupper() else w for w in words]
    elif words[0][:1].isupper() and not words[0][1:2].isupper():
        words[0] = words[0].lower()
    return " ".join(words)


@dataclasses.dataclass
class Section:
    topic: str
    title: str
    paragraphs: list[str]  # trained paragraphs (held-out ones removed)


def parse_topics(topics: dict[str, str]) -> tuple[list[Section], list[str]]:
    """Split every topic into titled sections of paragraphs; return them and the held-out paragraphs."""
    sections: list[Section] = []
    held_out: list[str] = []
    for key in sorted(topics):
        lines = topics[key].split("\n")
        title, buf, body = None, [], []

        def flush():
            if buf:
                body.append("\n".join(buf).rstrip())
                buf.clear()

        def close_section():
            flush()
            if title is not None and body:
                kept = []
                for i, para in enumerate(body):
                    if i > 0 and zlib.crc32(f"{key}/{title}/{i}".encode()) % HELD_OUT_EVERY == 0:
                        held_out.append(para)
                    else:
                        kept.append(para)
                sections.append(Section(key, title, kept))
            body.clear()

        i = 0
        while i < len(lines):
            line = lines[i]
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if line.strip() and nxt and set(nxt) <= set("*=-~^") and len(nxt) == len(line):
                close_section()
                title = line.strip()
                i += 2
                continue
            if line.startswith("-[ ") and line.endswith(" ]-"):  # footnote marker: a new block
                flush()
                buf.append(line)
                flush()
            elif line.strip():
                buf.append(line)
            else:
                flush()
            i += 1
        close_section()
    for s in sections:
        s.paragraphs = [_unwrap(p) for p in s.paragraphs]
    return sections, [_unwrap(p) for p in held_out]


def subjects_for(section: Section, first_of_topic: bool) -> list[str]:
    """Names a user might give the section's subject."""
    names = [_subject(section.title)]
    if first_of_topic and keyword.iskeyword(section.topic) and section.topic.isalpha():
        names += [f"the {section.topic} statement", f"the {section.topic} keyword", f'"{section.topic}"']
    return list(dict.fromkeys(names))


def answer_chunks(paragraphs: list[str], count_tokens, budget: int) -> list[str]:
    """Cut a section's paragraphs into answers of about `budget` tokens, at paragraph boundaries."""
    chunks, cur, n = [], [], 0
    for para in paragraphs:
        t = count_tokens(para)
        if cur and n + t > budget:
            chunks.append("\n\n".join(cur))
            cur, n = [], 0
        if t > budget * 1.5:  # one very long paragraph: cut at a sentence end
            sentences = re.split(r"(?<=[.:;])\s+", para)
            part = ""
            for sent in sentences:
                if part and count_tokens(part + " " + sent) > budget:
                    chunks.append(part)
                    part = sent
                else:
                    part = f"{part} {sent}".strip()
            cur, n = ([part], count_tokens(part)) if part else ([], 0)
            continue
        cur.append(para)
        n += t
    if cur:
        chunks.append("\n\n".join(cur))
    return chunks


def chat(messages: list[tuple[str, str]]) -> str:
    """ChatML rendering, the same text CHAT_TEMPLATE produces."""
    return "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in messages)


@dataclasses.dataclass
class Corpus:
    sections: list[Section]
    held_out: list[str]
    tokenizer_text: list[str]


def build_corpus() -> Corpus:
    from pydoc_data.topics import topics
    sections, held_out = parse_topics(topics)
    tok_text = ["\n\n".join(s.paragraphs) for s in sections]
    tok_text += [p.format(s=_subject(s.title)) for s in sections for p in PHRASINGS] + FOLLOW_UPS
    tok_text += [chat([("system", SYSTEM_PROMPT), ("user", "x"), ("assistant", "y")])]
    return Corpus(sections, held_out, tok_text)


class SampleStream:
    """Endless, seeded stream of training documents (token id lists, each ending in <|endoftext|>)."""

    def __init__(self, corpus: Corpus, encode, rng: random.Random, answer_budget: int = 160,
                 opening: tuple[int, float] = (0, 1.0)):
        self.encode, self.rng = encode, rng
        self.opening_tokens, self.opening_weight = opening
        count = lambda s: len(encode(s))
        self.raw = []      # whole sections as plain text
        self.qa = []       # (subjects, [answer chunks])
        seen_topics = set()
        for s in corpus.sections:
            if not s.paragraphs:
                continue
            first = s.topic not in seen_topics
            seen_topics.add(s.topic)
            self.raw.append(f"{s.title}\n\n" + "\n\n".join(s.paragraphs))
            self.qa.append((subjects_for(s, first), answer_chunks(s.paragraphs, count, answer_budget)))
        self.eot = encode("<|endoftext|>")

    def document(self) -> list[int]:
        return self.weighted_document()[0]

    def weighted_document(self) -> tuple[list[int], list[float]]:
        """A document and the loss weight of each token: the opening tokens of a chat's first answer
        (where the model must name the question's subject) weigh `opening_weight`, the rest 1."""
        r = self.rng
        if r.random() < 0.2:
            ids = self.encode(r.choice(self.raw)) + self.eot
            return ids, [1.0] * len(ids)
        subjects, chunks = r.choice(self.qa)
        q = r.choice(PHRASINGS).format(s=r.choice(subjects))
        if r.random() < 0.15:
            q = q[0].lower() + q[1:]
        msgs = [("system", SYSTEM_PROMPT)] if r.random() < 0.2 else []
        msgs += [("user", q)]
        answer_at = len(self.encode(chat(msgs) + "<|im_start|>assistant\n"))
        msgs += [("assistant", chunks[0])]
        if len(chunks) > 1 and r.random() < 0.3:  # a follow-up turn continues the section
            k = r.randrange(1, len(chunks))
            msgs += [("user", r.choice(FOLLOW_UPS)), ("assistant", chunks[k])]
        ids = self.encode(chat(msgs)) + self.eot
        weights = [1.0] * len(ids)
        for i in range(answer_at, min(answer_at + self.opening_tokens, len(ids))):
            weights[i] = self.opening_weight
        return ids, weights

    def batch(self, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
        """Pack documents into `batch` rows of seq+1 tokens (inputs and shifted targets), with the
        loss weight of each token."""
        rows, row_weights = [], []
        for _ in range(batch):
            row: list[int] = []
            weights: list[float] = []
            while len(row) < seq + 1:
                ids, w = self.weighted_document()
                row += ids
                weights += w
            rows.append(row[: seq + 1])
            row_weights.append(weights[: seq + 1])
        return np.array(rows, dtype=np.int64), np.array(row_weights, dtype=np.float32)


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=2)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def tokenizer_vocab(tok) -> tuple[list[str], list[str]]:
    """Tokens in id order and merges as 'a b' strings, from the trained tokenizer."""
    import json
    model = json.loads(tok.to_str())["model"]
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


# ---------------------------------------------------------------- the model (torch)

def torch_model(cfg: ModelConfig):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def rope(x, cos, sin):  # NeoX halves: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            H, D = cfg.hidden, cfg.head_dim
            self.attn_norm = nn.Parameter(torch.ones(H))
            self.q = nn.Linear(H, cfg.heads * D, bias=False)
            self.k = nn.Linear(H, cfg.kv_heads * D, bias=False)
            self.v = nn.Linear(H, cfg.kv_heads * D, bias=False)
            self.q_norm = nn.Parameter(torch.ones(D))
            self.k_norm = nn.Parameter(torch.ones(D))
            self.o = nn.Linear(cfg.heads * D, H, bias=False)
            self.ffn_norm = nn.Parameter(torch.ones(H))
            self.gate = nn.Linear(H, cfg.ffn, bias=False)
            self.up = nn.Linear(H, cfg.ffn, bias=False)
            self.down = nn.Linear(cfg.ffn, H, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            D, eps = cfg.head_dim, cfg.rms_eps
            a = F.rms_norm(x, (cfg.hidden,), self.attn_norm, eps)
            q = self.q(a).view(B, T, cfg.heads, D)
            k = self.k(a).view(B, T, cfg.kv_heads, D)
            v = self.v(a).view(B, T, cfg.kv_heads, D)
            q = rope(F.rms_norm(q, (D,), self.q_norm, eps), cos, sin).transpose(1, 2)
            k = rope(F.rms_norm(k, (D,), self.k_norm, eps), cos, sin).transpose(1, 2)
            v = v.transpose(1, 2)
            rep = cfg.heads // cfg.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(y.transpose(1, 2).reshape(B, T, cfg.heads * D))
            a = F.rms_norm(x, (cfg.hidden,), self.ffn_norm, eps)
            return x + self.down(F.silu(self.gate(a)) * self.up(a))

    class Qwen3(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.out_norm = nn.Parameter(torch.ones(cfg.hidden))
            inv = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)
            ang = torch.arange(cfg.context, dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", torch.cos(ang).float()[:, None, :], persistent=False)
            self.register_buffer("sin", torch.sin(ang).float()[:, None, :], persistent=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("o.weight", "down.weight")) else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x, self.cos[:T], self.sin[:T])
            x = F.rms_norm(x, (cfg.hidden,), self.out_norm, cfg.rms_eps)
            return x @ self.embed.weight.T  # tied head

    return Qwen3()


def gguf_tensors(model, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """llama.cpp names and [out, in] orientation; 2-D weights F16, norms F32."""
    f16 = lambda t: t.detach().cpu().numpy().astype(np.float16)
    f32 = lambda t: t.detach().cpu().numpy().astype(np.float32)
    out = {"token_embd.weight": f16(model.embed.weight)}
    for i, b in enumerate(model.blocks):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = f32(b.attn_norm)
        out[p + "attn_q.weight"] = f16(b.q.weight)
        out[p + "attn_k.weight"] = f16(b.k.weight)
        out[p + "attn_v.weight"] = f16(b.v.weight)
        out[p + "attn_q_norm.weight"] = f32(b.q_norm)
        out[p + "attn_k_norm.weight"] = f32(b.k_norm)
        out[p + "attn_output.weight"] = f16(b.o.weight)
        out[p + "ffn_norm.weight"] = f32(b.ffn_norm)
        out[p + "ffn_gate.weight"] = f16(b.gate.weight)
        out[p + "ffn_up.weight"] = f16(b.up.weight)
        out[p + "ffn_down.weight"] = f16(b.down.weight)
    out["output_norm.weight"] = f32(model.out_norm)
    return out


# ---------------------------------------------------------------- GGUF export and its check

def write_gguf(path: Path, cfg: ModelConfig, tensors: dict[str, np.ndarray], tokens, merges,
               description: str) -> None:
    import gguf
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name("qwen3-pydoc")
    w.add_description(description)
    w.add_context_length(cfg.context)
    w.add_embedding_length(cfg.hidden)
    w.add_block_count(cfg.layers)
    w.add_feed_forward_length(cfg.ffn)
    w.add_head_count(cfg.heads)
    w.add_head_count_kv(cfg.kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_back(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Metadata scalars and float64 tensors ([out, in], as llama.cpp's shape reversed) from the file."""
    import gguf
    r = gguf.GGUFReader(str(path))
    meta = {}
    for f in r.fields.values():
        if f.types and f.types[0] != gguf.GGUFValueType.ARRAY:
            meta[f.name] = f.contents()
    tensors = {}
    for t in r.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))
        tensors[t.name] = np.asarray(t.data, dtype=np.float64).reshape(shape)
    return meta, tensors


def numpy_forward(meta: dict, w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """Float64 Qwen3 forward written from the GGUF metadata alone; logits [T, vocab]."""
    a = "qwen3."
    L, nh, nkv = meta[a + "block_count"], meta[a + "attention.head_count"], meta[a + "attention.head_count_kv"]
    D, eps, theta = meta[a + "attention.key_length"], meta[a + "attention.layer_norm_rms_epsilon"], meta[a + "rope.freq_base"]
    T = len(ids)

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g

    pos = np.arange(T, dtype=np.float64)[:, None]
    ang = pos * theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # x [T, heads, D], NeoX pairing (i, i + D/2)
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    x = w["token_embd.weight"][ids]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        p = f"blk.{i}."
        h = rms(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, nh, D)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, nkv, D)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, nkv, D)
        q = rope(rms(q, w[p + "attn_q_norm.weight"]))
        k = rope(rms(k, w[p + "attn_k_norm.weight"]))
        heads = []
        for hq in range(nh):
            hk = hq // (nh // nkv)
            s = q[:, hq] @ k[:, hk].T / math.sqrt(D) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            heads.append((s / s.sum(axis=-1, keepdims=True)) @ v[:, hk])
        x = x + np.concatenate(heads, axis=-1) @ w[p + "attn_output.weight"].T
        h = rms(x, w[p + "ffn_norm.weight"])
        g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    return rms(x, w["output_norm.weight"]) @ w["token_embd.weight"].T


def compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(np.max(np.abs(a - b))), float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------- training and evaluation

def eval_nll(model, docs: list[list[int]], score_from: list[int] | None = None) -> tuple[float, int]:
    """Mean next-token NLL over documents (each scored from token score_from[i] on) and the token count."""
    import torch
    import torch.nn.functional as F
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i, doc in enumerate(docs):
            ids = torch.tensor([doc])
            logits = model(ids[:, :-1])[0]
            nll = F.cross_entropy(logits, ids[0, 1:], reduction="none")
            start = max((score_from[i] if score_from else 1) - 1, 0)
            total += float(nll[start:].sum())
            count += nll.shape[0] - start
    model.train()
    return total / count, count


def save_state(model, path: Path) -> None:
    import torch
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)


def train_phase(model, stream, args, lrs: list[float], log, label: str, log_every, checkpoint) -> list[float]:
    """Optimizer steps at the given learning rates; returns the losses. checkpoint=(held_docs, total)
    evaluates the held-out paragraphs and saves --state every 60 steps."""
    import torch
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    vocab = model.embed.weight.shape[0]
    losses, t0 = [], time.time()
    for step, lr in enumerate(lrs):
        for g in opt.param_groups:
            g["lr"] = lr
        ids, weights = stream.batch(args.batch, args.seq)
        b, w = torch.from_numpy(ids), torch.from_numpy(weights[:, 1:]).reshape(-1)
        logits = model(b[:, :-1])
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), b[:, 1:].reshape(-1), reduction="none")
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if log_every(step):
            el = time.time() - t0
            tps = (step + 1) * args.batch * args.seq / el
            eta = (len(lrs) - step - 1) * el / (step + 1)
            log(f"step {step + 1}{label} loss {np.mean(losses[-10:]):.4f} lr {lr:.2e} "
                f"{tps:.0f} tok/s eta {eta / 60:.1f} min")
        if checkpoint and (step + 1) % 60 == 0 and step + 1 < checkpoint[1]:
            nll, _ = eval_nll(model, checkpoint[0])
            log(f"held-out paragraph perplexity {math.exp(nll):.2f}")
            if args.state:  # a checkpoint, so a stopped run still leaves weights to export
                save_state(model, args.state)
    return losses


def generate(model, tok, question: str, max_new: int = 160, system: str | None = None) -> str:
    import torch
    msgs = ([("system", system)] if system else []) + [("user", question)]
    ids = tok.encode(chat(msgs) + "<|im_start|>assistant\n").ids
    end = tok.token_to_id("<|im_end|>")
    out = []
    model.eval()
    with torch.no_grad():
        for _ in range(max_new):
            ctx = (ids + out)[-model.cos.shape[0]:]
            nxt = int(model(torch.tensor([ctx]))[0, -1].argmax())
            if nxt == end:
                break
            out.append(nxt)
    model.train()
    return tok.decode(out)


SAMPLE_QUESTIONS = [
    "What does the assert statement do?",
    "Explain the while statement.",
    "Tell me about the import statement.",
]
# "Explain the {k} statement." for each: does the greedy answer's opening name k?
SUBJECT_PROBES = ["assert", "while", "import", "for", "return", "if", "try", "pass", "global", "del", "lambda", "yield"]


def names_subject(answer: str, keyword: str) -> bool:
    """The answer opens on the keyword: quoted in its first 80 characters (the reference writes
    'The "while" statement'), or as its first word ("Assert statements ...")."""
    return f'"{keyword}"' in answer[:80] or answer.lower().startswith(keyword)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="GGUF file to write")
    ap.add_argument("--steps", type=int, default=720, help="steps the learning-rate schedule spans (default 720)")
    ap.add_argument("--stop-after", type=int, default=240, help="end the schedule after this step (default 240; 0: run all --steps)")
    ap.add_argument("--batch", type=int, default=8, help="rows per step (default 8)")
    ap.add_argument("--seq", type=int, default=512, help="tokens per row (default 512, the context)")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--opening-tokens", type=int, default=16, help="the first N tokens of each chat's first answer ... (default 16)")
    ap.add_argument("--opening-weight", type=float, default=4.0, help="... weigh this much in the loss (default 4)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    ap.add_argument("--state", type=Path, help="save the trained torch weights here (or load them with --skip-training)")
    ap.add_argument("--cooldown", type=int, default=80, help="after --stop-after: this many more steps with a fresh optimizer, learning rate falling linearly to 0 (default 80)")
    ap.add_argument("--resume", type=Path, help="weights saved by a run with the same --steps/--stop-after: skip those steps, go on with --cooldown")
    ap.add_argument("--skip-training", action="store_true", help="load --state instead of training, then export")
    args = ap.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("error: torch is needed to train: pip install -e '.[train]'", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = ModelConfig(context=args.seq)
    t_start = time.time()
    log = lambda msg: print(f"[{time.time() - t_start:7.1f}s] {msg}", flush=True)

    corpus = build_corpus()
    tok = train_tokenizer(corpus.tokenizer_text, cfg.vocab_size)
    tokens, merges = tokenizer_vocab(tok)
    assert len(tokens) == cfg.vocab_size, f"tokenizer has {len(tokens)} tokens, wanted {cfg.vocab_size}"
    encode = lambda s: tok.encode(s).ids
    stream = SampleStream(corpus, encode, random.Random(args.seed), opening=(args.opening_tokens, args.opening_weight))
    raw_tokens = sum(len(encode(r)) for r in stream.raw)
    log(f"data: {len(corpus.sections)} sections, {raw_tokens} raw tokens, {len(stream.qa)} Q&A subjects, "
        f"{len(corpus.held_out)} held-out paragraphs; vocab {len(tokens)}, {len(merges)} merges")

    # Held-out sets: unseen paragraphs (plain text) and the unseen question phrasing (answer tokens only).
    eot = encode("<|endoftext|>")
    held_docs = [eot + encode(p)[: cfg.context] for p in corpus.held_out]
    qa_docs, qa_from = [], []
    for subjects, chunks in stream.qa[::3]:
        prompt = encode(chat([("user", HELD_OUT_PHRASING.format(s=subjects[0]))]) + "<|im_start|>assistant\n")
        doc = (prompt + encode(chunks[0] + "<|im_end|>"))[: cfg.context + 1]
        qa_docs.append(doc)
        qa_from.append(len(prompt))

    model = torch_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: qwen3 {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} q / {cfg.kv_heads} kv heads of "
        f"{cfg.head_dim}, ffn {cfg.ffn}, vocab {cfg.vocab_size}, context {cfg.context}: {n_params:,} parameters")

    final_loss = float("nan")
    trained_steps = min(args.steps, args.stop_after or args.steps)
    warm = max(args.steps // 20, 1)
    sched = lambda s: (s + 1) / warm if s < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(args.steps - warm, 1)))
    if args.skip_training or args.resume:
        path = args.resume or args.state
        if not path:
            print("error: --skip-training needs --state FILE", file=sys.stderr)
            return 2
        model.load_state_dict(torch.load(path))
        log(f"loaded weights from {path}")
    if args.resume:  # the data stream goes on where the run that saved the weights stopped
        for _ in range(trained_steps):
            stream.batch(args.batch, args.seq)
        log(f"resumed after step {trained_steps}")
    if not args.skip_training:
        losses = []
        log_every = lambda step: (step + 1) % 10 == 0 or step == 0
        if not args.resume:
            lrs = [args.lr * sched(step) for step in range(trained_steps)]
            losses += train_phase(model, stream, args, lrs, log, f"/{args.steps}", log_every, checkpoint=(held_docs, args.steps))
        if args.cooldown:  # a fresh optimizer, learning rate from where the schedule stopped down to 0
            lr0 = args.lr * sched(trained_steps - 1)
            lrs = [lr0 * (1 - (k + 1) / (args.cooldown + 1)) for k in range(args.cooldown)]
            losses += train_phase(model, stream, args, lrs, log, f"/{args.cooldown} (cooldown)", log_every, checkpoint=None)
        final_loss = float(np.mean(losses[-min(50, len(losses)):]))
        if args.state:
            save_state(model, args.state)
            log(f"saved torch weights to {args.state}")
    train_minutes = (time.time() - t_start) / 60

    nll_p, n_p = eval_nll(model, held_docs)
    nll_q, n_q = eval_nll(model, qa_docs, qa_from)
    train_docs = [stream.document()[: cfg.context + 1] for _ in range(64)]
    nll_t, n_t = eval_nll(model, train_docs)
    log(f"held-out paragraphs: perplexity {math.exp(nll_p):.2f} over {n_p} tokens ({len(held_docs)} paragraphs)")
    log(f"held-out phrasing answers: perplexity {math.exp(nll_q):.2f} over {n_q} tokens ({len(qa_docs)} questions)")
    log(f"training documents: perplexity {math.exp(nll_t):.2f} over {n_t} tokens (64 sampled)")

    for q in SAMPLE_QUESTIONS:
        log(f"Q: {q}\nA: {generate(model, tok, q)}\n")
    on_subject = [k for k in SUBJECT_PROBES if names_subject(generate(model, tok, f"Explain the {k} statement.", max_new=24), k)]
    log(f"greedy answers naming their subject in the opening: {len(on_subject)} of {len(SUBJECT_PROBES)} "
        f"({', '.join(on_subject) or 'none'})")

    desc = (f"Qwen3-architecture model trained from scratch by tools/train_shipped_model.py on the Python "
            f"{sys.version_info.major}.{sys.version_info.minor} pydoc_data.topics (PSF licence), "
            f"{trained_steps} of {args.steps} scheduled steps + {args.cooldown} cooldown steps x {args.batch} x {args.seq} tokens, seed {args.seed}")
    tensors = gguf_tensors(model, cfg)
    write_gguf(args.out, cfg, tensors, tokens, merges, desc)
    size = args.out.stat().st_size
    log(f"wrote {args.out}: {size:,} bytes ({size / 2**20:.2f} MiB)")

    # Verify the export: float64 numpy forward of the read-back weights against torch.
    meta, back = read_back(args.out)
    assert meta["general.architecture"] == "qwen3" and set(back) == set(tensors), "read-back mismatch"
    rounded = torch_model(cfg)
    rounded.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in rounded.parameters():
            if p.dim() == 2:
                p.copy_(p.half().float())
    rounded.eval()
    model.eval()
    worst = {"f16": (0.0, 1.0), "trained": (0.0, 1.0)}
    checks = [encode(chat([("user", q)]) + "<|im_start|>assistant\n") for q in SAMPLE_QUESTIONS[:3]]
    checks.append(held_docs[0][:cfg.context])
    for ids in checks:
        ref = numpy_forward(meta, back, ids)
        with torch.no_grad():
            for key, m in (("f16", rounded), ("trained", model)):
                mx, cs = compare(ref, m(torch.tensor([ids]))[0].double().numpy())
                worst[key] = (max(worst[key][0], mx), min(worst[key][1], cs))
    log(f"export check ({len(checks)} sequences): numpy float64 of the GGUF vs torch with F16-rounded weights: "
        f"max-abs {worst['f16'][0]:.3e}, cosine {worst['f16'][1]:.8f}; vs the trained fp32 torch model: "
        f"max-abs {worst['trained'][0]:.3e}, cosine {worst['trained'][1]:.8f}")
    ok = worst["f16"][1] > 0.99999 and worst["trained"][1] > 0.999
    log(f"final training loss {final_loss:.4f} (mean of the last 50 steps); held-out paragraph perplexity "
        f"{math.exp(nll_p):.2f}; held-out phrasing answer perplexity {math.exp(nll_q):.2f}; "
        f"{n_params:,} parameters; {size / 2**20:.2f} MiB; {train_minutes:.1f} min")
    if not ok:
        print("error: the exported GGUF does not reproduce the torch model", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
