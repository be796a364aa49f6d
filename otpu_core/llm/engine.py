"""A model running on a card through any Backend: its image, its programs, its sequences.

`Engine(plan_inputs..., backend)` writes the converted model into the backend's DRAM and then
serves sequences. A `Sequence` lives in a slot (its state block, ids, uniforms, seen mask) and
owns KV pages taken from the `KVStore`, the pool every slot shares; an outside scheduler may
hold the store and hand pages to sequences itself. Per turn:

- `prefill(seq)`: the tokens not yet in the cache, all but the last, in runs of up to
  `opts.rows` rows that never cross a page (one step program per bucket and row count); a run
  whose program does not fit the card (IMEM, TMEM, registers: a wide Gemma 4, a scattered page
  list) goes as two runs of half its rows, which leave the same bits;
- `generate(seq, ...)`: the generate loop for the last fed token onwards: the host writes the
  state block and the uniforms, starts bucket b's program and, while the card runs, watches
  the state and ids (streaming tokens as they land), compiles and writes bucket b+1's program
  into its chain slot and posts its length in the mailbox, and raises the stop word when asked
  to stop (Ctrl-C: the card ends the reply within a token and the cache stays consistent);
- `logits(seq)`: one step whose logits the host reads (teacher-forced checks, host sampling).

Gemma 4's sliding layers keep their K/V in a ring of pages per slot (gemma_layout.ring_pages): a sequence
resuming after pages another one wrote (otpu-serve's shared prefixes) also needs the window before
them, which `read_window` takes from the writer's ring and `write_window` puts into its own.

A model with a table kept on the host (Gemma 4's per-layer embeddings) has a `RowServer`
(llm/offload.py) that answers the card's mailbox while every run goes on; `rows.stats` counts it.

Programs are compiled on first use (`programs.compile_program`, disk-cached) and kept. Every run's
counters are collected into the turn's `RunCost`, from which the stats line comes: cycles at
the card's core clock, DRAM beats, unit busy cycles (counters on a card, the timing model on
the simulated card and on IsaBackend).

A mixture of experts starts with every expert absent: `experts` (llm/offload.py `ExpertServer`)
answers the card's mailbox requests while any program runs, copying each missing expert's blob
(its converted tensors) into its layer's least recently requested slot; `experts.stats` counts
the requests and the bytes streamed.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..board import Prepared
from ..ol import CompileError
from ..target import Target
from . import image, layout, programs
from .convert import Converted
from .errors import ModelError
from .layout import (MAX_STOP_IDS, S_ALIVE, S_LEFT, S_PEN_A, S_PEN_B, S_POS, S_STOP, S_STOP_IDS, S_TINV, S_TOPP,
                     STATE_WORDS, ImageOptions, ImagePlan)
from .offload import ExpertServer, RowServer
from .sampling import Sampling

LOG2E = 1.4426950408889634
POLL_MIN_S, POLL_MAX_S = 0.005, 0.2   # host polls of a running card: a quarter of the time a token takes
SERVE_BUDGET = 4096                   # simulator instructions between two looks at the host's mailboxes
UTIL_COUNTERS = ("MXU_BUSY", "VPU_BUSY", "DMA_BUSY", "QNT_BUSY")


class KVStore:
    """The pool of KV pages. A page holds `page` positions of one sequence in every layer and KV head."""

    def __init__(self, pages: int):
        self.pages = pages
        self.free = list(range(pages))

    def take(self, n: int) -> list[int]:
        if n > len(self.free):
            raise ModelError(f"the KV pool has {len(self.free)} free pages of {self.pages}; {n} more are needed",
                             hint="start a new conversation (/reset) or give a longer --ctx")
        out, self.free = self.free[:n], self.free[n:]
        return out

    def give(self, pages: list[int]) -> None:
        self.free = sorted(self.free + list(pages))


@dataclass
class Sequence:
    slot: int
    pages: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)    # every token; the first kv_len are in the cache
    kv_len: int = 0


@dataclass
class RunCost:
    """What a set of card runs cost, from their counters."""
    runs: int = 0
    tokens: int = 0
    cycles: int = 0
    beats: int = 0              # 64-byte DRAM beats read and written
    wall: float = 0.0
    busy: dict = field(default_factory=dict)

    def add(self, stats, before: dict | None, after: dict | None, tokens: int) -> None:
        self.runs += 1
        self.tokens += tokens
        self.cycles += stats.cycles
        self.beats += stats.b_reads + stats.b_writes + stats.a_reads + stats.a_writes
        self.wall += stats.seconds
        if before and after:
            for k in UTIL_COUNTERS + ("RUNNING",):
                if k in before and k in after:
                    self.busy[k] = self.busy.get(k, 0) + after[k] - before[k]

    def device_s(self, core_hz: float) -> float: return self.cycles / core_hz if core_hz else 0.0

    def tok_s(self, core_hz: float) -> float | None:
        s = self.device_s(core_hz)
        return self.tokens / s if s > 0 and self.tokens else None

    def dram_gbs(self, core_hz: float) -> float | None:
        s = self.device_s(core_hz)
        return self.beats * 64 / s / 1e9 if s > 0 else None

    def util(self) -> dict[str, float]:
        run = self.busy.get("RUNNING") or self.cycles
        return {k: self.busy[k] / run for k in UTIL_COUNTERS if k in self.busy and run}


@dataclass
class Turn:
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)      # seconds from submit to the host seeing each token
    end: str = ""
    seconds: float = 0.0
    prefill: RunCost = field(default_factory=RunCost)
    decode: RunCost = field(default_factory=RunCost)
    core_hz: float = 0.0
    logits: list = field(default_factory=list)            # per generated token, when asked for
    context: int = 0
    experts: object = None       # a mixture of experts: the turn's offload.Stats (requests, experts, bytes)

    @property
    def ttft(self) -> float | None: return self.times[0] if self.times else None

    @property
    def host_tok_s(self) -> float | None:
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return None
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def _fp32(words) -> np.ndarray: return np.asarray(words, np.float32)


def room_for(seq: Sequence, limit: int, max_tokens: int) -> int:
    """How many tokens may follow the sequence's last one within `limit` positions (refused when none)."""
    last = len(seq.tokens) - 1
    if limit - 1 - last < 1:
        raise ModelError(f"context full: {last + 1} tokens leave no room in the {limit} positions",
                         hint="/reset starts a new conversation; --ctx gives more positions")
    return min(max_tokens, limit - 1 - last)


def state_block(pos: int, left: int = 0, s: Sampling | None = None, stop_ids: tuple[int, ...] = ()) -> np.ndarray:
    """A slot's state block (fp32 words the programs read) for a run starting at position `pos`."""
    st = np.zeros(STATE_WORDS, np.float32)
    st[S_POS], st[S_LEFT], st[S_ALIVE] = pos, left, 1.0
    if s is not None:
        st[S_TINV] = LOG2E / s.temperature if s.temperature > 0 else 0.0
        st[S_TOPP] = s.top_p
        st[S_PEN_A], st[S_PEN_B] = 1.0 / s.repeat_penalty - 1.0, s.repeat_penalty - 1.0
    st[S_STOP_IDS:] = -1.0
    st[S_STOP_IDS:S_STOP_IDS + len(stop_ids)] = stop_ids
    return st


def prefill_runs(start: int, end: int, page: int, rows: int):
    """(first position, rows) of the step runs that feed positions [start, end): up to `rows`
    rows each, never crossing a page."""
    p = start
    while p < end:
        n = min(rows, end - p, page - p % page)
        yield p, n
        p += n


def rows_group(seq: Sequence, pos: int, n: int, page: int) -> programs.Group:
    """The row group of `n` positions of `seq` from `pos` (its pages up to the one `pos` lies in)."""
    return programs.Group(seq.slot, n, tuple(seq.pages[:pos // page + 1]))


class Engine:
    def __init__(self, conv: Converted, cfg, backend, target: Target, opts: ImageOptions = ImageOptions(),
                 progress: Callable[[int, int, str], None] | None = None, core_hz: float | None = None,
                 program_cache: bool = True):
        self.cfg, self.backend, self.target, self.opts = cfg, backend, target, opts
        tcfg = target.config()
        if conv.fmt.name != opts.fmt or conv.D != tcfg.D:
            raise ModelError(f"the converted model is {conv.fmt.name} for D={conv.D}, the image wants {opts.fmt} "
                             f"for D={tcfg.D}")
        self.plan: ImagePlan = layout.plan(cfg, tcfg, layout.ImageOptions(**{**opts.__dict__, "f_chunk": conv.f_chunk}))
        backend.attach(tcfg)
        self.seq_wc = bool(tcfg.SEQ_WC)
        image.write_model(backend, self.plan, conv, self.seq_wc, progress)
        self.experts: ExpertServer | None = None
        if self.plan.offload is not None:
            blob, T, moe = self.plan.offload.blob, conv.tensors, self.plan.cfg.moe_layers   # offload layer -> layer
            self.experts = ExpertServer(backend, self.plan.offload, lambda l, e: blob.from_packed(
                T[f"eg.{moe[l]}.{e}"], T[f"eu.{moe[l]}.{e}"], T[f"ed.{moe[l]}.{e}"]))
            self.experts.reset()
        self.kv = KVStore(opts.pages)
        self.core_hz = core_hz or target.core_hz
        self._programs: dict = {}
        self._unfit: set = set()            # prefill specs whose program does not fit the card
        self.program_cache = program_cache
        self._free_slots = list(range(opts.slots))
        self.rows: RowServer | None = None
        G = self.plan.gemma
        if G is not None and G.mailbox is not None:     # the per-layer table stays on the host
            self.rows = RowServer(backend, G.mailbox, G.landing.base.const, conv.tensors["ple"])
            self.rows.reset()
        self.servers = [x for x in (self.experts, self.rows) if x is not None]   # the host's mailbox ends

    @property
    def prefix_reuse(self) -> bool:
        """Whether KV pages resume a sequence (not with convolution or DeltaNet layers: their state is the
        slot's ring and recurrent state). Gemma 4's sliding layers need their window beside the pages
        (`windowed`: `read_window` / `write_window`)."""
        return self.plan.other is None

    @property
    def windowed(self) -> bool:
        """Whether sliding layers keep their window in each slot's ring of pages (Gemma 4)."""
        return self.plan.gemma is not None and "sliding" in self.cfg.kinds

    def _window_pages(self, seq: Sequence, boundary: int):
        """(layer block, sequence page index, its ring page) of the window before position `boundary`
        (a page boundary): the W/P pages before it in every sliding layer with K/V of its own."""
        G, P, cfg = self.plan.gemma, self.opts.page, self.cfg
        if boundary % P:
            raise ModelError(f"a sliding window is kept at page boundaries; position {boundary} is not one")
        first = max(0, boundary // P - cfg.sliding_window // P)
        return [(L, i, G.kv_page("sliding", seq.slot, i, 0)) for L, kind in zip(G.layers, cfg.kinds)
                if kind == "sliding" and L.kv is not None for i in range(first, boundary // P)]

    def read_window(self, seq: Sequence, boundary: int) -> list[np.ndarray]:
        """The sliding layers' window before `boundary` from the sequence's ring: what a sequence resuming
        at `boundary` from pages shared with this one needs beside them. Valid until this sequence writes
        the page after the one `boundary` starts (it overwrites the window's first page)."""
        if not boundary <= seq.kv_len <= boundary + self.opts.page:
            raise ModelError(f"the window before position {boundary} is not in the ring of a sequence at "
                             f"{seq.kv_len}")
        return [self.backend.read(L.kv.k.const + r * L.page_stride, L.page_stride).copy()
                for L, _, r in self._window_pages(seq, boundary)]

    def write_window(self, seq: Sequence, boundary: int, window: list[np.ndarray]) -> None:
        """Put a window `read_window` took into the sequence's ring, so it resumes at `boundary`."""
        for (L, _, r), data in zip(self._window_pages(seq, boundary), window, strict=True):
            self.backend.write(L.kv.k.const + r * L.page_stride, data)

    # -- programs ---------------------------------------------------------------------------------------
    def program(self, spec) -> Prepared:
        prog = self._programs.get(spec)
        if prog is None:
            p = programs.compile_program(self.plan, spec, self.target, cache=self.program_cache)
            prog = self._programs[spec] = (self.backend.prepare(p.instrs, p.waits if self.seq_wc else None),
                                           p.image(with_waits=self.seq_wc))
        return prog[0]

    def _chain_image(self, spec) -> bytes:
        self.program(spec)
        return self._programs[spec][1]

    # -- sequences ----------------------------------------------------------------------------------------
    def new_sequence(self) -> Sequence:
        if not self._free_slots:
            raise ModelError(f"all {self.opts.slots} sequence slots are in use")
        return Sequence(self._free_slots.pop(0))

    def release(self, seq: Sequence) -> None:
        self.kv.give(seq.pages)
        seq.pages, seq.tokens, seq.kv_len = [], [], 0
        self._free_slots = sorted(self._free_slots + [seq.slot])

    def reset(self, seq: Sequence) -> None:
        """Forget the conversation; the slot and its KV pages return to the pool."""
        self.kv.give(seq.pages)
        seq.pages, seq.tokens, seq.kv_len = [], [], 0

    @property
    def limit(self) -> int:
        """Positions a sequence may use (the image's context and the model's)."""
        return min(self.opts.ctx, self.cfg.context)

    def _ensure_pages(self, seq: Sequence, last_pos: int) -> None:
        need = last_pos // self.opts.page + 1
        if need > len(seq.pages):
            seq.pages += self.kv.take(need - len(seq.pages))

    def _io(self, seq: Sequence, name: str) -> int: return self.plan.io(seq.slot)[name].base.const

    def _write_state(self, seq: Sequence, pos: int, left: int = 0, s: Sampling | None = None,
                     stop_ids: tuple[int, ...] = ()) -> None:
        self.backend.write(self._io(seq, "state"), state_block(pos, left, s, stop_ids))

    def _read_state(self, seq: Sequence) -> np.ndarray:
        return self.backend.read(self._io(seq, "state"), 4 * (S_ALIVE + 1)).view(np.float32)

    def _write_ids(self, seq: Sequence, start: int, tokens) -> None:
        if tokens:
            self.backend.write(self._io(seq, "ids") + 4 * start, _fp32(tokens))

    def _read_ids(self, seq: Sequence, start: int, n: int) -> list[int]:
        if n <= 0:
            return []
        return [int(x) for x in self.backend.read(self._io(seq, "ids") + 4 * start, 4 * n).view(np.float32)]

    def _run(self, prog: Prepared, cost: RunCost, tokens: int):
        before = self.backend.counters()
        if not self.servers:
            stats = self.backend.run(prog)
        else:                              # serve the host's mailboxes until the program halts
            self.backend.start(prog)
            while self.backend.poll(SERVE_BUDGET):
                for server in self.servers:
                    server.poll()
            stats = self.backend.wait()
        cost.add(stats, before, self.backend.counters(), tokens)
        return stats

    # -- prefill and host-read steps ----------------------------------------------------------------------
    def submit(self, seq: Sequence, tokens) -> None:
        """Append tokens to the sequence (they are fed by the next prefill / generate)."""
        seq.tokens += [int(t) for t in tokens]
        for t in tokens:
            if not 0 <= int(t) < self.cfg.vocab:
                raise ModelError(f"token id {t} is outside the vocabulary of {self.cfg.vocab}")

    def _check_room(self, seq: Sequence) -> None:
        if len(seq.tokens) > self.limit:
            raise ModelError(f"context full: {len(seq.tokens)} tokens do not fit the {self.limit} positions",
                             hint="/reset starts a new conversation; --ctx gives more positions")

    def prefill(self, seq: Sequence, cost: RunCost | None = None, upto: int | None = None) -> None:
        """Feed seq.tokens[kv_len:upto] (default: all but the last) through step programs."""
        end = len(seq.tokens) - 1 if upto is None else upto
        if end <= seq.kv_len:
            return
        self._check_room(seq)
        self._ensure_pages(seq, end - 1)
        self._write_ids(seq, seq.kv_len, seq.tokens[seq.kv_len:end])
        cost = cost if cost is not None else RunCost()
        for p, n in prefill_runs(seq.kv_len, end, self.opts.page, self.opts.rows):
            self._prefill_run(seq, p, n, cost)

    def _prefill_run(self, seq: Sequence, p: int, n: int, cost: RunCost) -> None:
        spec = programs.StepSpec((rows_group(seq, p, n, self.opts.page),))
        if n > 1 and spec not in self._unfit:
            try:
                self.program(spec)
            except CompileError:
                self._unfit.add(spec)
        if n > 1 and spec in self._unfit:
            self._prefill_run(seq, p, n // 2, cost)
            self._prefill_run(seq, p + n // 2, n - n // 2, cost)
            return
        self._write_state(seq, p)
        self._run(self.program(spec), cost, n)
        seq.kv_len = p + n

    def logits(self, seqs, cost: RunCost | None = None):
        """Feed every token not yet in the cache and return the logits after each sequence's last one
        (float32 [vocab]; a list for a list of sequences). The sequences' last tokens go through one
        run together, one row group per sequence (batched decode)."""
        many = isinstance(seqs, (list, tuple))
        seqs = list(seqs) if many else [seqs]
        if len({s.slot for s in seqs}) != len(seqs):
            raise ModelError("two of the sequences share a slot")
        if len(seqs) > self.plan.logits.rows:
            raise ModelError(f"{len(seqs)} sequences in one step; the image has {self.plan.logits.rows} logits rows")
        cost = cost if cost is not None else RunCost()
        groups = []
        for seq in seqs:
            if seq.kv_len >= len(seq.tokens):
                raise ModelError("no token to feed: submit() one first")
            self.prefill(seq, cost)
            p = seq.kv_len
            self._ensure_pages(seq, p)
            self._write_ids(seq, p, seq.tokens[p:p + 1])
            self._write_state(seq, p)
            groups.append(rows_group(seq, p, 1, self.opts.page))
        self._run(self.program(programs.StepSpec(tuple(groups), logits=True)), cost, len(seqs))
        V = self.cfg.vocab
        rows = self.backend.read(self.plan.logits.base.const, 4 * V * len(seqs)).view(np.float32).reshape(-1, V)
        for seq in seqs:
            seq.kv_len += 1
        out = [r.copy() for r in rows]
        return out if many else out[0]

    # -- the generate loop -------------------------------------------------------------------------------
    def generate(self, seq: Sequence, s: Sampling, max_tokens: int, stop_ids: tuple[int, ...] = (),
                 on_token: Callable[[int], None] | None = None, stop: Callable[[], bool] | None = None,
                 want_logits: bool = False, uniforms: np.ndarray | None = None) -> Turn:
        """Generate up to max_tokens after the submitted tokens; streams each to on_token."""
        t0 = time.monotonic()
        P, cfg = self.opts.page, self.cfg
        turn = Turn(prompt_tokens=len(seq.tokens) - seq.kv_len, core_hz=self.core_hz)
        streamed_before = dataclasses.replace(self.experts.stats) if self.experts is not None else None
        if turn.prompt_tokens < 1:
            raise ModelError("nothing to answer: submit() the prompt tokens first")
        if len(stop_ids) > MAX_STOP_IDS:
            raise ModelError(f"at most {MAX_STOP_IDS} stop tokens, got {len(stop_ids)}")
        if want_logits and not self.opts.ring:
            raise ModelError("this engine keeps no logits ring: build it with ImageOptions(ring=True)")
        last = len(seq.tokens) - 1
        max_new = room_for(seq, self.limit, max_tokens)
        clamped = max_new < max_tokens
        self._ensure_pages(seq, last + max_new - 1)
        self.prefill(seq, turn.prefill)
        self._write_ids(seq, last, seq.tokens[last:])
        if s.penalty:
            seen = np.zeros(cfg.vocab, np.float32)
            seen[np.asarray(seq.tokens, np.int64)] = 1.0
            self.backend.write(self._io(seq, "seen"), seen)
        u = uniforms if uniforms is not None else np.random.default_rng(s.seed).random(max_new)
        self.backend.write(self._io(seq, "uniforms") + 4 * last, _fp32(u[:max_new]))
        self._write_state(seq, last, max_new, s, tuple(stop_ids))
        self.backend.write(self.plan.mailbox.base.const, np.zeros(self.plan.mailbox.cols, np.uint32))

        def spec_for(bucket: int) -> programs.GenSpec:
            return programs.GenSpec(seq.slot, tuple(seq.pages[:bucket + 1]), k=s.card_k(cfg.vocab),
                                    sample=not s.greedy, penalty=s.penalty, stop_ids=len(stop_ids), ring=want_logits)

        b = last // P
        first = self.program(spec_for(b))
        end_pos = last + max_new             # the card stops after processing end_pos - 1
        nb = b + 1                           # the next bucket whose program is not posted yet
        before = self.backend.counters()
        self.backend.start(first)
        seen_pos, stopping, board = last, False, not hasattr(self.backend, "machine")
        sleep, last_seen = 2 * POLL_MIN_S, time.monotonic()
        while True:
            running = self.backend.poll()
            served = any([server.poll() for server in self.servers])    # every mailbox looked at
            pos_now = int(self._read_state(seq)[S_POS])
            if pos_now > seen_pos:
                new = self._read_ids(seq, seen_pos + 1, pos_now - seen_pos)
                if want_logits:
                    turn.logits += self._ring_rows(seq, seen_pos, pos_now)
                now_abs = time.monotonic()
                now = now_abs - t0
                sleep = min(POLL_MAX_S, max(POLL_MIN_S, 0.25 * (now_abs - last_seen) / len(new)))
                last_seen = now_abs
                for tok in new:
                    turn.tokens.append(tok)
                    turn.times.append(now)
                    if on_token is not None:
                        on_token(tok)
                seen_pos = pos_now
            if nb * P < end_pos and (nb == b + 1 or pos_now >= (nb - 1) * P):
                img = self._chain_image(spec_for(nb))
                self.backend.write(self.plan.prog_slots[nb % 2], np.frombuffer(img, np.uint8))
                self.backend.write(self.plan.mailbox.base.const + 4 * nb,
                                   np.array([len(img) // (32 + (8 if self.seq_wc else 0))], np.uint32))
                nb += 1
            if not stopping and stop is not None and stop():
                self.backend.write(self._io(seq, "state") + 4 * S_STOP, _fp32([1.0]))
                stopping = True
            if not running:
                break
            if board and not served:       # a card waiting on the host: look again soon
                time.sleep(sleep if not self.servers else POLL_MIN_S)
        stats = self.backend.wait()
        turn.decode.add(stats, before, self.backend.counters(), len(turn.tokens))
        st = self._read_state(seq)
        seq.tokens += turn.tokens
        seq.kv_len = int(st[S_POS])
        if turn.tokens and turn.tokens[-1] in stop_ids:
            turn.end = "eos"
        elif stopping and st[S_ALIVE] == 0:
            turn.end = "stopped"
        else:
            turn.end = "context" if clamped else "max_tokens"
        turn.seconds = time.monotonic() - t0
        turn.context = len(seq.tokens)
        if streamed_before is not None:
            turn.experts = self.experts.stats.since(streamed_before)
        return turn

    def _ring_rows(self, seq: Sequence, p0: int, p1: int) -> list[np.ndarray]:
        """Logits rows of positions [p0, p1) from the slot's ring (row: position mod 2 pages)."""
        ring, V, P = self.plan.io(seq.slot)["ring"], self.cfg.vocab, self.opts.page
        out = []
        for p in range(p0, p1):
            row = p % (2 * P)
            out.append(self.backend.read(ring.base.const + 4 * V * row, 4 * V).view(np.float32).copy())
        return out
