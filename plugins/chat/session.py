"""A chat session: the model, the engine that runs it (card, quantised golden or float64), the conversation.

`Session.open(opts)` opens the model, resolves the sampling (the family's defaults, each flag
overriding one), and builds the engine: `card` converts the model (cached) and writes it to
the card `--dev` names through a BoardBackend; `quant` and `fp32` run the references on the
host. `ask(text)` renders the conversation with the model's chat template and feeds only what
the template appended since the last turn (the KV cache stays on the card across turns; if the
template rewrote history the sequence is reset and fed again), then streams the answer. A
message that no longer fits the context is refused before anything is fed. On a card the
session keeps the card's status file current (model, tokens, tok/s, DRAM use), so `otpu-smi`
in another terminal names what runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from otpu_core import target as target_mod
from otpu_core.errors import UsageError
from otpu_core.llm import convert
from otpu_core.llm.engine import Turn
from otpu_core.llm.errors import ModelError
from otpu_core.llm.layout import FORMATS, ImageOptions, sequence_options
from otpu_core.llm.models import Model, open_model
from otpu_core.llm.sampling import Sampling

ENGINES = ("card", "quant", "fp32")


@dataclass
class Options:
    model: str | None = None
    dev: str | None = None
    target: str | None = None
    fmt: str = "int8"
    engine: str = "card"
    ctx: int = 2048
    max_tokens: int = 256
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    seed: int = 0
    system: str | None = None
    raw: bool = False
    logits: bool = False           # keep each generated token's logits (--logits, --check)
    expert_slots: int = 0          # a mixture of experts: card slots per layer (0: one for every expert)

    def check(self) -> "Options":
        if self.engine not in ENGINES:
            raise UsageError(f"--engine {self.engine}: must be one of {', '.join(ENGINES)}")
        if self.fmt not in FORMATS:
            raise UsageError(f"--format {self.fmt}: must be one of {', '.join(FORMATS)}")
        if self.max_tokens < 1:
            raise UsageError(f"--max-tokens {self.max_tokens}: must be at least 1")
        if self.ctx < 1:
            raise UsageError(f"--ctx {self.ctx}: must be at least 1")
        if self.expert_slots < 0:
            raise UsageError(f"--expert-slots {self.expert_slots}: must be at least 0 (0: a slot for every expert)")
        return self


@dataclass
class Exchange:
    """One question and its answer, with what it cost."""
    prompt: str
    prompt_ids: list[int]
    turn: Turn
    text: str


@dataclass
class Session:
    opts: Options
    model: Model
    sampling: Sampling
    engine: object
    seq: object
    device: str
    board: object | None = None
    image_bytes: int = 0
    messages: list[dict] = field(default_factory=list)
    history: list[Exchange] = field(default_factory=list)
    fed_text: str = ""
    tokens_out: int = 0

    # -- opening -----------------------------------------------------------------------------------------
    @classmethod
    def open(cls, opts: Options, progress: Callable[[str, int, int, str], None] | None = None) -> "Session":
        opts.check()
        model = open_model(opts.model)
        fam = model.config.spec.sampling
        s = Sampling(opts.temperature if opts.temperature is not None else fam.temperature,
                     opts.top_k if opts.top_k is not None else fam.top_k,
                     opts.top_p if opts.top_p is not None else fam.top_p,
                     opts.repeat_penalty if opts.repeat_penalty is not None else fam.repeat_penalty,
                     opts.seed).check()
        tgt = target_mod.load(opts.target)
        limit = min(opts.ctx, model.config.context)
        board, image_bytes = None, 0
        if opts.engine == "fp32":
            from otpu_core.llm.hostengine import HostEngine
            from otpu_core.llm.reference import Golden, SourceWeights
            engine = HostEngine(Golden(model.config, SourceWeights(model.ckpt), positions=limit), limit)
            device = "host (float64 reference)"
        else:
            conv = convert.convert(model.ckpt, opts.fmt, tgt,
                                   progress=(lambda d, t, w: progress("converting", d, t, w)) if progress else None)
            if opts.engine == "quant":
                from otpu_core.llm.hostengine import HostEngine
                from otpu_core.llm.layout import plan as plan_image
                from otpu_core.llm.reference import CardNumerics, CardWeights, Golden
                plan = plan_image(model.config, tgt.config(), image_options(opts, model, tgt, conv.f_chunk))
                numerics = CardNumerics(conv.D, plan.opts.page, FORMATS[opts.fmt].layer_wf >= 3)
                engine = HostEngine(Golden(plan.cfg, CardWeights(conv, plan.embed_kind), numerics,
                                           positions=limit), limit)
                device = "host (quantised golden)"
            else:
                engine, board, device = _card_engine(opts, model, tgt, conv, progress)
                image_bytes = engine.plan.end
        sess = cls(opts, model, s, engine, engine.new_sequence(), device, board, image_bytes)
        if opts.system:
            sess.messages.append({"role": "system", "content": opts.system})
        sess._status(0, None)
        return sess

    def close(self) -> None:
        if self.board is not None:
            self._status(self.tokens_out, None, done=True)
            self.board.close()
            self.board = None

    # -- conversation ------------------------------------------------------------------------------------
    @property
    def templated(self) -> bool: return not self.opts.raw and self.model.template is not None

    def reset(self) -> None:
        self.engine.reset(self.seq)
        self.messages = [m for m in self.messages if m["role"] == "system"]
        self.fed_text = ""

    def set_system(self, text: str | None) -> None:
        self.opts = replace(self.opts, system=text or None)
        self.reset()
        self.messages = [{"role": "system", "content": text}] if text else []

    def _plan_turn(self, text: str) -> tuple[list[int], list[int], bool, str]:
        """(tokens to submit, the whole prompt's ids, whether the sequence must restart, the new
        fed text) for a new user message; changes nothing."""
        tok = self.model.tokenizer
        if not self.templated:
            ids = tok.encode(text, add_special=not self.seq.tokens)
            return ids, self.seq.tokens + ids, False, ""
        rendered = self.model.render_chat(self.messages + [{"role": "user", "content": text}])
        if self.seq.tokens and rendered.startswith(self.fed_text):
            new = tok.encode(rendered[len(self.fed_text):])
            return new, self.seq.tokens + new, False, rendered
        new = tok.encode(rendered)
        return new, new, bool(self.seq.tokens), rendered

    def ask(self, text: str, on_text: Callable[[str], None] | None = None,
            stop: Callable[[], bool] | None = None) -> Exchange:
        tok = self.model.tokenizer
        new, prompt_ids, restart, rendered = self._plan_turn(text)
        limit = min(self.opts.ctx, self.model.config.context)
        if len(prompt_ids) >= limit:
            raise ModelError(f"context full: this message makes {len(prompt_ids)} tokens, the context holds {limit}",
                             hint="/reset starts a new conversation; --ctx gives more positions")
        if restart:
            self.engine.reset(self.seq)
        self.fed_text = rendered
        self.engine.submit(self.seq, new)
        stream = tok.stream()
        stops = self.model.stop_ids()

        def on_token(t: int) -> None:
            if on_text is not None and t not in stops:
                piece = stream.push(t)
                if piece:
                    on_text(piece)

        # --ctx holds exactly: a card image rounds its context up to whole KV pages
        max_new = min(self.opts.max_tokens, limit - len(prompt_ids))
        turn = self.engine.generate(self.seq, self.sampling, max_new, stops, on_token, stop,
                                    want_logits=self.opts.logits)
        if max_new < self.opts.max_tokens and turn.end == "max_tokens":
            turn.end = "context"
        body = turn.tokens[:-1] if turn.tokens and turn.tokens[-1] in stops else turn.tokens
        reply = tok.decode(body)
        if self.templated:
            self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]
            self.fed_text += tok.decode(turn.tokens, skip_special=False)
        ex = Exchange(text, prompt_ids, turn, reply)
        self.history.append(ex)
        self.tokens_out += len(turn.tokens)
        self._status(self.tokens_out, turn)
        return ex

    # -- the card's status file (otpu-smi shows it) -----------------------------------------------------
    def _status(self, tokens: int, turn: Turn | None, done: bool = False) -> None:
        if self.board is None or self.board.t.devname is None:
            return
        from otpu_core.card.runstate import update_status
        total = self.board.dram_bytes
        fields = {"model": None if done else self.model.name, "tokens": tokens,
                  "dram": {"total": total, "free": total - self.image_bytes} if not done else None}
        if turn is not None and turn.host_tok_s:
            fields["tok_s_wall"] = round(turn.host_tok_s, 2)
        update_status(self.board.t.devname, **fields)


def image_options(opts: Options, model: Model, tgt, f_chunk: int) -> ImageOptions:
    return sequence_options(model.config, tgt.config(), opts.fmt, opts.ctx, f_chunk, ring=opts.logits,
                            expert_slots=opts.expert_slots)


def _card_engine(opts: Options, model: Model, tgt, conv, progress):
    from otpu_core.board import Board, BoardBackend
    from otpu_core.llm.engine import Engine
    board = Board.open(opts.dev, opts.target)
    try:
        backend = BoardBackend(board)
        core_hz = board.info.core_khz * 1000 if board.info.core_khz else None
        engine = Engine(conv, model.config, backend, tgt, image_options(opts, model, tgt, conv.f_chunk),
                        progress=(lambda d, t, w: progress("loading", d, t, w)) if progress else None, core_hz=core_hz)
    except BaseException:
        board.close()
        raise
    return engine, board, board.t.dev


def logits_array(turn: Turn, vocab: int) -> np.ndarray:
    return np.stack(turn.logits).astype(np.float32) if turn.logits else np.zeros((0, vocab), np.float32)
