"""Continuous batching: one scheduler, a worker thread per card, requests joining and leaving at token boundaries.

`Scheduler.submit(job)` queues a `Job` (prompt ids, sampling, token budget); each `CardWorker`
loops over its card:

1. drops cancelled sequences (a client gone) and returns their KV pages at once;
2. admits queued jobs, oldest first, while it has a free slot and its `PagePool` can lease every
   page the job may reach (a shared prompt prefix already cached is reused, not prefilled);
3. runs one prefill run (up to `rows` prompt tokens) for each sequence still being prefilled,
   so a long prompt never stalls the others for more than one run per token;
4. decodes every prefilled sequence one token: their last tokens go through the card together,
   `group` sequences per step program (as many row groups as the kernels fit), and each
   sequence's token is drawn on the host from its logits row with `sampling.choose` and the same
   uniforms the card's own generate loop reads (`default_rng(seed)`), so an answer does not
   depend on its batch mates and a greedy answer is the one otpu-chat gives.

Tokens go back to the request's asyncio queue (`Job.events`) through its event loop. A card that
fails (the link lost, the device gone) fails its sequences with 503 and stops taking work; the
others go on. Metrics (`ServeMetrics`) are updated as things happen.
"""
from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from otpu_core.errors import DeviceError, OtpuError
from otpu_core.llm.engine import RunCost
from otpu_core.llm.sampling import Sampling, choose
from otpu_core.ol.errors import CompileError

from .pages import Lease, PagePool

_ids = itertools.count(1)


class QueueFull(Exception):
    pass


class NoCard(Exception):
    pass


class TooLarge(Exception):
    pass


@dataclass
class Job:
    prompt: list[int]
    sampling: Sampling
    max_new: int
    stop_ids: tuple[int, ...]
    logprobs: int | None = None            # None: none; n >= 0: the chosen token's plus the n most likely
    loop: asyncio.AbstractEventLoop | None = None
    events: asyncio.Queue | None = None
    id: int = field(default_factory=lambda: next(_ids))
    cancelled: bool = False
    submitted: float = field(default_factory=time.monotonic)
    reused: int = 0                          # prompt tokens whose KV pages came from the prefix cache
    card: str = ""

    def emit(self, *event) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)


@dataclass
class Active:
    job: Job
    seq: object
    lease: Lease
    uniforms: np.ndarray
    seen: np.ndarray | None
    prefilled: bool = False
    out: int = 0
    windows: dict | None = None            # sliding rings: page index -> the window before its end


def logprob_rows(logits: np.ndarray, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    x = np.asarray(logits, np.float64)
    lp = x - x.max()
    lp -= np.log(np.exp(lp).sum())
    best = np.argsort(-lp, kind="stable")[:top] if top else []
    return float(lp[token]), [(int(i), float(lp[i])) for i in best]


class CardWorker(threading.Thread):
    def __init__(self, sched: "Scheduler", card, max_batch: int):
        super().__init__(name=f"otpu-serve {card.device}", daemon=True)
        self.sched, self.card, self.engine = sched, card, card.engine
        self.pool = PagePool(self.engine.kv, self.engine.opts.page, sharing=self.engine.prefix_reuse)
        self.max_batch = min(max_batch, self.engine.opts.slots)
        # sequences per step program: at most the image's logits rows, narrowed on the first step that does not compile
        self.group = min(self.max_batch, self.engine.plan.logits.rows)
        self.running: list[Active] = []
        self.alive, self.error = True, None
        self.prefill_cost, self.decode_cost = RunCost(), RunCost()    # what the card's runs cost (counters)
        self.card_s = self.host_s = 0.0       # wall time in card runs / in the scheduler's own work around them

    # -- admission --------------------------------------------------------------------------------------
    def _admit(self) -> list[Active]:
        new = []
        q = self.sched.waiting
        while q and len(self.running) + len(new) < self.max_batch:
            job = q[0]
            if job.cancelled:
                q.popleft()
                continue
            lease = self.pool.lease(job.prompt, len(job.prompt) + job.max_new)
            if lease is None:
                break
            q.popleft()
            job.card = self.card.device
            seq = self.engine.new_sequence()
            seq.pages, seq.tokens = lease.pages, list(job.prompt)
            seq.kv_len = job.reused = len(lease.shared) * self.pool.page
            if lease.window is not None:      # the sliding layers' window into the slot's own ring
                self.engine.write_window(seq, seq.kv_len, lease.window)
            seen = None
            if job.sampling.penalty:
                seen = np.zeros(self.engine.cfg.vocab, bool)
                seen[np.asarray(job.prompt, np.int64)] = True
            u = np.random.default_rng(job.sampling.seed).random(job.max_new)
            new.append(Active(job, seq, lease, u, seen, windows={} if self.engine.windowed else None))
            self.sched.metrics.admitted(job, self.card.device)
        return new

    def _finish(self, a: Active, reason: str | None) -> None:
        self.running.remove(a)
        self.pool.release(a.lease)
        a.seq.pages = []
        self.engine.release(a.seq)
        if reason is not None:
            a.job.emit("end", reason)
            self.sched.metrics.finished(a.job, time.monotonic())

    # -- the loop ---------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while True:
                with self.sched.cond:
                    while True:
                        if self.sched.closing:
                            return
                        for a in [a for a in self.running if a.job.cancelled]:
                            self._finish(a, None)
                        self.running += self._admit()
                        if self.running:
                            break
                        self.sched.cond.wait()
                self._iterate()
        except (DeviceError, OSError, OtpuError) as e:
            self._lost(e)
        except Exception as e:          # a bug: still fail the requests rather than hang them
            self._lost(e)

    def _lost(self, e: Exception) -> None:
        with self.sched.cond:
            self.alive, self.error = False, f"{self.card.device}: {e}"
            for a in list(self.running):
                self.running.remove(a)
                a.job.emit("error", 503, f"the card {self.card.device} failed: {e}")
            self.sched.card_lost()

    def _iterate(self) -> None:
        eng = self.engine
        t_start, card_s = time.monotonic(), 0.0
        for a in self.running:
            if not a.prefilled:
                seq = a.seq
                end = len(seq.tokens) - 1
                if seq.kv_len < end:
                    t = time.monotonic()
                    before = seq.kv_len
                    eng.prefill(seq, self.prefill_cost, upto=min(end, seq.kv_len + eng.opts.rows))
                    boundary = seq.kv_len // eng.opts.page * eng.opts.page
                    if a.windows is not None and before < boundary:     # (a run feeds at most a page)
                        a.windows[boundary // eng.opts.page - 1] = eng.read_window(seq, boundary)
                    card_s += time.monotonic() - t
                if seq.kv_len >= end:
                    a.prefilled = True
                    with self.sched.cond:
                        self.pool.register(a.lease, seq.tokens, seq.kv_len, a.windows)
                    a.windows = None              # the pool holds those it cached
        ready = [a for a in self.running if a.prefilled and not a.job.cancelled]
        t0 = time.monotonic()
        i = 0
        while i < len(ready):
            batch = ready[i:i + self.group]
            try:
                t = time.monotonic()
                rows = eng.logits([a.seq for a in batch], self.decode_cost)
                card_s += time.monotonic() - t
            except CompileError:
                if len(batch) == 1:
                    raise
                self.group = len(batch) - 1
                continue
            self.sched.metrics.step(len(batch))
            for a, row in zip(batch, rows):
                self._token(a, row)
            i += len(batch)
        now = time.monotonic()
        if ready:
            self.sched.metrics.step_time(now - t0)
        self.card_s += card_s
        self.host_s += now - t_start - card_s

    def _token(self, a: Active, row: np.ndarray) -> None:
        job = a.job
        tok = choose(row, job.sampling, float(a.uniforms[a.out]), a.seen)
        if a.seen is not None:
            a.seen[tok] = True
        lp = logprob_rows(row, tok, job.logprobs) if job.logprobs is not None else None
        a.out += 1
        job.emit("token", tok, lp)
        self.sched.metrics.token(job, a.out == 1, time.monotonic())
        if tok in job.stop_ids:
            reason = "stop"
        elif a.out >= job.max_new:
            reason = "length"
        else:
            self.engine.submit(a.seq, [tok])
            return
        with self.sched.cond:
            self._finish(a, reason)


class Scheduler:
    def __init__(self, cards, max_batch: int, queue: int, metrics):
        self.cond = threading.Condition()
        self.waiting: deque[Job] = deque()
        self.queue_limit = queue
        self.metrics = metrics
        self.closing = False
        self.workers = [CardWorker(self, c, max_batch) for c in cards]
        metrics.bind(self)

    def start(self) -> None:
        for w in self.workers:
            w.start()

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        for w in self.workers:
            if w.is_alive():
                w.join(timeout=30)

    @property
    def ready(self) -> bool: return any(w.alive for w in self.workers) and not self.closing

    def submit(self, job: Job) -> None:
        with self.cond:
            if not self.ready:
                raise NoCard("; ".join(w.error or "closing" for w in self.workers if not w.alive) or "shutting down")
            pages = [w.pool.pages_for(len(job.prompt) + job.max_new) for w in self.workers if w.alive]
            if all(p > w.pool.total for p, w in zip(pages, [w for w in self.workers if w.alive])):
                raise TooLarge(f"{len(job.prompt)} prompt tokens and max_tokens {job.max_new} need {pages[0]} KV pages; "
                               f"a card holds {max(w.pool.total for w in self.workers)} (--kv-pages)")
            free = sum(w.max_batch - len(w.running) for w in self.workers if w.alive)
            if len(self.waiting) >= self.queue_limit + free:
                raise QueueFull(f"every slot is busy and {len(self.waiting)} requests are already waiting "
                                f"(--queue {self.queue_limit})")
            self.waiting.append(job)
            self.cond.notify_all()

    def cancel(self, job: Job) -> None:
        """The client is gone: the sequence's pages go back at the next token boundary (or now, if queued)."""
        with self.cond:
            job.cancelled = True
            if job in self.waiting:
                self.waiting.remove(job)
            self.cond.notify_all()

    def card_lost(self) -> None:
        """Called with the lock held: with no card left, the queued requests fail too."""
        if not any(w.alive for w in self.workers):
            while self.waiting:
                self.waiting.popleft().emit("error", 503, "no card is left to serve the request")
        self.cond.notify_all()
