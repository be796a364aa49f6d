"""The `model-token` workload: decode tokens of a model, the programs otpu-chat runs, one profile each.

The model is any `otpu-chat --model` accepts (default: the shipped model), converted to int8
and laid out as otpu-chat lays it out for one sequence (`layout.sequence_options`, context up
to 2048 positions); the models layer writes the image (`image.write_model`, collected here as
the first step's DRAM writes) and compiles the programs (`programs.compile_program`). The
prompt (`--prompt`, rendered through the model's chat template as a first message) is fed by
untraced step programs of up to MCOLS rows; then each of `--tokens` positions is one traced
run of the step program that writes the last row's logits (the host-read step of
`Engine.logits`), after which the host reads the logits through `ctx.read` and feeds the argmax
as the next token (greedy, as `otpu-chat --temperature 0` picks). Each profile's source lines
are the `ol` lines of the model's programs and kernels.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from otpu_core.errors import UsageError
from otpu_core.llm import convert, image, layout, programs
from otpu_core.llm.engine import Sequence, prefill_runs, rows_group, state_block
from otpu_core.llm.models import open_model

from .workloads import Context, Step, workload

NAME = "model-token"
FORMAT = "int8"
CONTEXT = 2048                  # otpu-chat's default --ctx
PROMPT = "What is a Python list?"


class _Writes:
    """A Backend's `write` that keeps the writes for a step to make."""

    def __init__(self):
        self.writes: list[tuple[int, np.ndarray]] = []

    def write(self, addr: int, data) -> None:
        self.writes.append((addr, np.ascontiguousarray(data).reshape(-1).view(np.uint8)))

    def take(self) -> list[tuple[int, np.ndarray]]:
        out, self.writes = self.writes, []
        return out


@workload(NAME, "decode tokens of a model (--model, default the shipped one; --prompt; --tokens, "
          "default 1): the step program otpu-chat runs, one profile per token", takes=("model", "prompt", "tokens"))
def _model_token(ctx: Context) -> Iterator[Step]:
    prompt, tokens = ctx.option("prompt", PROMPT), ctx.option("tokens", 1)
    model = open_model(ctx.option("model"))            # a ModelError names the model and what is wrong (exit 2)
    cfg, tcfg = model.config, ctx.cfg
    ids = model.prompt_ids(prompt)
    if not ids:                                         # refused before the model is converted
        raise UsageError(f"--prompt {prompt!r}: the prompt makes no tokens")
    conv = convert.convert(model.ckpt, FORMAT, ctx.target)
    plan = layout.plan(cfg, tcfg, layout.sequence_options(cfg, tcfg, FORMAT, CONTEXT, conv.f_chunk))
    limit = min(plan.opts.ctx, cfg.context)
    if len(ids) + tokens > limit:
        raise UsageError(f"--prompt of {len(ids)} tokens and --tokens {tokens}: {model.name} holds {limit} positions "
                         "in the image")
    out = _Writes()
    image.write_model(out, plan, conv, bool(tcfg.SEQ_WC))
    io, P, V = plan.io(0), plan.opts.page, cfg.vocab
    ids_at, state_at = io["ids"].base.const, io["state"].base.const
    seq = Sequence(0, list(range(plan.opts.pages)), list(ids))
    out.write(ids_at, np.asarray(ids, np.float32))

    def run(spec) -> tuple:
        p = programs.compile_program(plan, spec, ctx.target)
        return p, p.arg_words()

    for p, n in prefill_runs(0, len(ids) - 1, P, plan.opts.rows):
        out.write(state_at, state_block(p))
        prog, args = run(programs.StepSpec((rows_group(seq, p, n, P),)))
        yield Step(f"{model.name} prompt positions {p}..{p + n - 1}", prog, args, out.take(), traced=False)
    for _ in range(tokens):
        pos = len(seq.tokens) - 1
        out.write(ids_at + 4 * pos, np.asarray(seq.tokens[pos:], np.float32))
        out.write(state_at, state_block(pos))
        prog, args = run(programs.StepSpec((rows_group(seq, pos, 1, P),), logits=True))
        yield Step(f"{model.name} token at pos {pos}", prog, args, out.take())
        logits = ctx.read(plan.logits.base.const, 4 * V).view(np.float32)
        seq.tokens.append(int(np.argmax(logits)))
