"""`otpu-chat kld`: how far each card weight format moves a model's next-token distribution from
the fp32 golden, reported as llama.cpp's `llama-perplexity --kl-divergence` reports it.

A text is tokenized and fed once through the fp32 golden (the checkpoint's own weights, float64)
and once through the quantised golden of each format (what the card computes, up to its fp32
rounding). At every position the two next-token distributions give KL(fp32 || format) and
whether their top-1 tokens agree; the table has mean (with its standard error), median, 99th
percentile and maximum KL divergence, top-1 agreement, and the text's perplexity under each.
No card is used: the quantised golden is the card's arithmetic by construction, and the
model checks (`--check`, the `model` row of selftest/diag) hold the card to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from otpu_core import formats
from otpu_core.errors import UsageError
from otpu_core.llm.layout import FORMATS

DEFAULT_FORMATS = ("int8", "fp4", "fp4x6")
# the default text: prose in the shipped model's domain (Python's documentation), written for this tool
DEFAULT_TEXT = (
    "A list is a mutable sequence. Items are added with append or extend and removed with pop or remove; "
    "slicing returns a new list. A tuple is like a list but cannot be changed after it is made, so it can "
    "be used as a dictionary key. When a function is called, the arguments are bound to its parameters, "
    "and a default value is evaluated once, when the function is defined. An exception that is not caught "
    "ends the program with a traceback; a try statement with an except clause handles it, and a finally "
    "clause runs whether or not an exception was raised.")


@dataclass(frozen=True)
class FormatKld:
    fmt: str
    kld: np.ndarray          # float64 [positions]: KL(fp32 || format) in nats
    top1: np.ndarray         # bool [positions]: the two argmaxes agree
    nll: float               # mean -log p(next token) under the format
    base_nll: float          # the same under the fp32 golden

    def summary(self) -> dict:
        k, n = self.kld, self.kld.size
        agree = float(self.top1.mean())
        return {"format": self.fmt, "positions": n, "mean_kld": float(k.mean()),
                "mean_kld_stderr": float(k.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
                "median_kld": float(np.median(k)), "p99_kld": float(np.percentile(k, 99)), "max_kld": float(k.max()),
                "top1_agreement": agree,
                "top1_agreement_stderr": float(np.sqrt(agree * (1 - agree) / n)),
                "ppl": float(np.exp(self.nll)), "ppl_fp32": float(np.exp(self.base_nll))}


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def kl_divergence(base_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(p || q) per row, in nats, of the softmaxes of two [rows, vocab] logit arrays."""
    lp, lq = log_softmax(base_logits), log_softmax(logits)
    return np.maximum((np.exp(lp) * (lp - lq)).sum(axis=-1), 0.0)


def compare(base_logits: np.ndarray, logits: np.ndarray, tokens: list[int], fmt: str) -> FormatKld:
    """`*_logits[i]` predicts `tokens[i + 1]`."""
    nxt = np.asarray(tokens[1:len(base_logits) + 1])
    rows = np.arange(nxt.size)
    return FormatKld(fmt, kl_divergence(base_logits, logits),
                     np.argmax(base_logits, axis=-1) == np.argmax(logits, axis=-1),
                     -float(log_softmax(logits)[rows, nxt].mean()), -float(log_softmax(base_logits)[rows, nxt].mean()))


def parse_formats(spec: list[str]) -> list[str]:
    """Repeated or comma-separated --format values, each a card format."""
    out = [f.strip() for s in spec for f in s.split(",")] if spec else list(DEFAULT_FORMATS)
    for f in out:
        if f not in FORMATS:
            raise UsageError(f"--format {f}: unknown card format", hint=f"formats: {', '.join(FORMATS)}")
    return list(dict.fromkeys(out))


def read_text(path: Path | None) -> str:
    if path is None:
        return DEFAULT_TEXT
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--text {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--text {path}: is a directory, not a text file") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--text {path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UsageError(f"--text {path}: cannot be read ({e.strerror})") from None
    if not text.strip():
        raise UsageError(f"--text {path}: the file is empty", hint="give a file of running text")
    return text


def measure(model, fmts: list[str], tgt, text: str, tokens: int, progress) -> dict:
    """Every format's FormatKld summary over the first `tokens` + 1 tokens of `text`."""
    from otpu_core.llm.reference import Golden, SourceWeights

    from .check import quantised_golden
    ids = model.tokenizer.encode(text, add_special=True)[:tokens + 1]
    if len(ids) < 2:
        raise UsageError(f"the text is {len(ids)} token long; kld needs at least 2",
                         hint="give a longer --text file")
    n = len(ids) - 1

    def run(golden, step: str) -> np.ndarray:
        golden.reset()
        out = []
        for i, t in enumerate(ids[:-1]):
            out.append(golden.step(int(t)))
            progress(step, i + 1, n, "tokens")
        return np.stack(out)

    base = run(Golden(model.config, SourceWeights(model.ckpt), positions=n), "fp32 golden")
    rows = []
    for fmt in fmts:
        conv_progress = lambda d, t, w, fmt=fmt: progress(f"converting to {fmt}", d, t, w)  # noqa: E731
        golden = quantised_golden(model, fmt, tgt, n, progress=conv_progress)
        bits = formats.bits_per_weight(FORMATS[fmt].layer_wf, golden.card.D, model.config.d)
        rows.append(compare(base, run(golden, f"{fmt} golden"), ids, fmt).summary() | {"layer_bits_per_weight": bits})
    return {"tool": "otpu-chat kld", "model": model.name, "target": tgt.name, "positions": n,
            "reference": "fp32 golden", "formats": rows}


def render(doc: dict, console) -> None:
    from rich.table import Table
    table = Table(title=f"{doc['model']}: KL divergence from the fp32 golden over {doc['positions']} positions "
                        f"({doc['target']})")
    for col in ("format", "bits/weight (layers)", "mean KLD", "median", "99%", "max", "same top-1", "PPL", "PPL fp32"):
        table.add_column(col, justify="left" if col == "format" else "right")
    for r in doc["formats"]:
        table.add_row(r["format"], f"{r['layer_bits_per_weight']:.2f}", f"{r['mean_kld']:.6f} ± {r['mean_kld_stderr']:.6f}",
                      f"{r['median_kld']:.6f}", f"{r['p99_kld']:.6f}", f"{r['max_kld']:.6f}",
                      f"{100 * r['top1_agreement']:.2f}% ± {100 * r['top1_agreement_stderr']:.2f}",
                      f"{r['ppl']:.4f}", f"{r['ppl_fp32']:.4f}")
    console.print(table)
