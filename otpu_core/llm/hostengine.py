"""The references as engines: a `Golden` driven like the card's `Engine`, sampling on the host.

`HostEngine(golden)` has the card engine's sequence API (`new_sequence`, `submit`, `reset`,
`generate` returning a `Turn`), so the chat runs the same prompt through the card, the
quantised golden or the float64 reference (`--engine card|quant|fp32`). Draws use
`sampling.choose` with the same uniforms the card would read, so the first token where the
engines part shows where their logits disagree. Turns carry no card costs.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .engine import Sequence, Turn, room_for
from .reference import Golden
from .sampling import Sampling, choose


class HostEngine:
    def __init__(self, golden: Golden, limit: int):
        self.golden, self.limit = golden, limit
        self._seq: Sequence | None = None

    def new_sequence(self) -> Sequence:
        self._seq = Sequence(0)
        self.golden.reset()
        return self._seq

    def submit(self, seq: Sequence, tokens) -> None:
        seq.tokens += [int(t) for t in tokens]

    def reset(self, seq: Sequence) -> None:
        seq.tokens, seq.kv_len = [], 0
        self.golden.reset()

    def release(self, seq: Sequence) -> None: self.reset(seq)

    def generate(self, seq: Sequence, s: Sampling, max_tokens: int, stop_ids: tuple[int, ...] = (),
                 on_token: Callable[[int], None] | None = None, stop: Callable[[], bool] | None = None,
                 want_logits: bool = False, uniforms: np.ndarray | None = None) -> Turn:
        t0 = time.monotonic()
        turn = Turn(prompt_tokens=len(seq.tokens) - seq.kv_len)
        last = len(seq.tokens) - 1
        max_new = room_for(seq, self.limit, max_tokens)
        u = uniforms if uniforms is not None else np.random.default_rng(s.seed).random(max_new)
        for t in seq.tokens[seq.kv_len:last]:
            self.golden.step(t)
        seq.kv_len = last
        seen = np.zeros(self.golden.cfg.vocab, bool)
        seen[np.asarray(seq.tokens, np.int64)] = True
        tok = seq.tokens[last]
        turn.end = "max_tokens" if max_new == max_tokens else "context"
        for i in range(max_new):
            if stop is not None and stop():
                turn.end = "stopped"
                break
            logits = self.golden.step(tok)
            seq.kv_len += 1
            if want_logits:
                turn.logits.append(logits.astype(np.float32))
            tok = choose(logits, s, float(u[i]), seen if s.penalty else None)
            seen[tok] = True
            turn.tokens.append(tok)
            turn.times.append(time.monotonic() - t0)
            if on_token is not None:
                on_token(tok)
            if tok in stop_ids:
                turn.end = "eos"
                break
        seq.tokens += turn.tokens
        turn.seconds = time.monotonic() - t0
        turn.context = len(seq.tokens)
        return turn
