"""Sampling parameters, and the host's sampler: the card's draw (kernels/sampling.py) in float64.

`Sampling` is what a user sets (temperature, top-k, top-p, repetition penalty, seed); `card_k`
is the number of candidates the card keeps (top-k, at most `KMAX`; 0 means all, which the card
takes as its `KMAX` best). `choose(logits, s, u, seen)` makes the same decision the card makes
from the same uniform u: penalty, top-k (ties to the lower index), p_i = exp((v_i - v_0)/T),
cumulative sums, the top-p cut, the first kept candidate whose cumulative sum reaches u * Z. The
quant and fp32 engines draw with it, so a prompt run through the card and the references meets
the same uniforms and a divergence shows where the logits part.
"""
from __future__ import annotations

import math

from dataclasses import dataclass

import numpy as np

from .errors import ModelError

KMAX = 64                         # the largest top-k the card samples from (layout.KMAX)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    repeat_penalty: float = 1.0
    seed: int = 0

    def check(self) -> "Sampling":
        t, r = self.temperature, self.repeat_penalty
        for name, v, ok, allowed in (("--temperature", t, 0 <= t < math.inf, ">= 0 and finite"),
                                     ("--top-k", self.top_k, self.top_k >= 0, ">= 0 (0: all)"),
                                     ("--top-p", self.top_p, 0 < self.top_p <= 1, "in (0, 1]"),
                                     ("--repeat-penalty", r, 0 < r < math.inf, "> 0 and finite"),
                                     ("--seed", self.seed, 0 <= self.seed < 2 ** 64, "in 0 .. 2^64-1")):
            if not ok:
                raise ModelError(f"{name} {v}: must be {allowed}")
        return self

    @property
    def greedy(self) -> bool: return self.temperature == 0

    @property
    def penalty(self) -> bool: return self.repeat_penalty != 1.0

    def card_k(self, vocab: int) -> int:
        return 1 if self.greedy else min(self.top_k or KMAX, KMAX, vocab)


def penalised(logits: np.ndarray, seen: np.ndarray | None, p: float) -> np.ndarray:
    x = np.asarray(logits, np.float64)
    if seen is None or p == 1.0:
        return x
    return np.where(seen & (x > 0), x / p, np.where(seen, x * p, x))


def choose(logits: np.ndarray, s: Sampling, u: float, seen: np.ndarray | None = None) -> int:
    x = penalised(logits, seen, s.repeat_penalty)
    if s.greedy:
        return int(np.argmax(x))
    k = s.card_k(x.size)
    idx = np.lexsort((np.arange(x.size), -x))[:k]
    v = x[idx]
    p = np.exp((v - v[0]) / s.temperature)
    cum = np.cumsum(p)
    keep = np.ones(k, bool)
    keep[1:] = cum[:-1] < s.top_p * cum[-1]
    t = u * float((p * keep).sum())
    return int(idx[int((keep & (cum < t)).sum())])
