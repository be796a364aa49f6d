"""Model checks: `--check` (the card's logits against the quantised golden) and the selftest/diag model row.

`teacher_forced(session, ex)` feeds the prompt and the generated tokens through the quantised
golden and compares, token by token, the logits each generated token was chosen from: cosine,
max-abs error and whether the greedy choice agrees, naming the first token that differs
(greedy choice, or cosine below `COSINE_MIN`).

`model_row(ctx)` is the `model` stage of otpu-selftest and the `model` section of otpu-diag: the
model (`--model`, e.g. the shipped one) decodes `--tokens` greedy tokens on the card under test
and on the golden simulator (IsaBackend) from the same image, and the two must agree bit for
bit: the same tokens, every logit equal as a 32-bit word, the KV pages equal.
"""
from __future__ import annotations

import numpy as np

from otpu_core.checks import CheckContext, Result, Status
from otpu_core.kernels import reference as R

from .session import image_options

COSINE_MIN = 0.9995
CHECK_PROMPT = "What is a Python list?"


def quantised_golden(model, fmt: str, tgt, ctx: int | None, ring: bool = False, progress=None):
    """The quantised golden of `model` converted to `fmt` for target `tgt`, with the attention page
    and positions the card's image would have."""
    from otpu_core.llm import convert
    from otpu_core.llm.layout import FORMATS, sequence_options
    from otpu_core.llm.layout import plan as plan_image
    from otpu_core.llm.reference import CardNumerics, CardWeights, Golden
    conv = convert.convert(model.ckpt, fmt, tgt, progress=progress)
    opts = sequence_options(model.config, tgt.config(), fmt, ctx, conv.f_chunk, ring=ring)
    plan = plan_image(model.config, tgt.config(), opts)
    numerics = CardNumerics(conv.D, plan.opts.page, FORMATS[fmt].layer_wf >= 3)
    return Golden(plan.cfg, CardWeights(conv, plan.embed_kind), numerics, positions=plan.opts.ctx)


def _golden(session):
    from otpu_core import target as target_mod
    o = session.opts
    return quantised_golden(session.model, o.fmt, target_mod.load(o.target), o.ctx, ring=o.logits)


def teacher_forced(session, ex) -> dict:
    got = ex.turn.logits
    golden = _golden(session)
    seq = list(ex.prompt_ids) + list(ex.turn.tokens)
    n0 = len(ex.prompt_ids) - 1
    ref = golden.forward(seq[:n0 + len(got)])[n0:]
    rows, first = [], None
    for i, (a, b) in enumerate(zip(got, ref)):
        cos, err = R.cosine(a, b), R.max_abs(a, b)
        same = int(np.argmax(a)) == int(np.argmax(b))
        rows.append({"step": i, "token": int(ex.turn.tokens[i]), "cosine": round(cos, 7), "max_abs": round(err, 5),
                     "greedy_agrees": same})
        if first is None and (not same or cos < COSINE_MIN):
            first = i
    agree = sum(r["greedy_agrees"] for r in rows)
    return {"reference": "quantised golden", "steps": len(rows), "first_difference": first,
            "min_cosine": min((r["cosine"] for r in rows), default=None),
            "max_abs": max((r["max_abs"] for r in rows), default=None),
            "top1_agreement": round(agree / len(rows), 4) if rows else None, "per_step": rows}


def report_line(rep: dict) -> str:
    if not rep["steps"]:
        return "check: no generated tokens to compare"
    head = (f"check vs {rep['reference']}: {rep['steps']} steps, min cosine {rep['min_cosine']:.6f}, "
            f"max |logit diff| {rep['max_abs']:.4g}, top-1 agreement {100 * rep['top1_agreement']:.1f}%")
    if rep["first_difference"] is None:
        return head + ": every step agrees"
    r = rep["per_step"][rep["first_difference"]]
    why = "greedy choice differs" if not r["greedy_agrees"] else f"cosine {r['cosine']:.6f} < {COSINE_MIN}"
    return head + f"; first difference at generated token {r['step']} (id {r['token']}): {why}"


# -- the selftest / diag model row ------------------------------------------------------------------------

def _run(engine_cls, conv, cfg, backend, tgt, opts, prompt_ids, tokens):
    from otpu_core.llm.sampling import Sampling
    eng = engine_cls(conv, cfg, backend, tgt, opts)
    seq = eng.new_sequence()
    eng.submit(seq, prompt_ids)
    turn = eng.generate(seq, Sampling(temperature=0), tokens, want_logits=True)
    first = eng.plan.layer or next(b for b in eng.plan.gemma.layers if b.kv is not None)   # the first KV page
    kv = backend.read(first.kv.k.const, first.page_stride)
    return turn, kv


def prepare_model(ctx: CheckContext) -> None:
    """Open --model before the run: a wrong name or a bad file is a usage error (exit 2), not a FAIL row."""
    from otpu_core.llm.models import open_model
    ctx.cache["model.checkpoint"] = open_model(ctx.options.get("model"))


def model_row(ctx: CheckContext) -> Result:
    from otpu_core.board import BoardBackend, IsaBackend
    from otpu_core.corechecks import device
    from otpu_core.llm import convert
    from otpu_core.llm.engine import Engine
    from otpu_core.llm.layout import ImageOptions, prefill_rows
    if "model.checkpoint" not in ctx.cache:
        prepare_model(ctx)
    model = ctx.cache["model.checkpoint"]
    tokens = int(ctx.options.get("tokens") or 8)
    tgt = device.target(ctx)
    fmt = "int8"
    conv = convert.convert(model.ckpt, fmt, tgt)
    tok = model.tokenizer
    if model.template is not None:
        prompt_ids = tok.encode(model.template.render([{"role": "user", "content": CHECK_PROMPT}]))
    else:
        prompt_ids = tok.encode(CHECK_PROMPT, add_special=True)
    page = 256
    ctx_len = -(-(len(prompt_ids) + tokens + 1) // page) * page
    opts = ImageOptions(fmt=fmt, pages=ctx_len // page, page=page, ctx=ctx_len, ring=True,
                        rows=prefill_rows(model.config, tgt.config()), f_chunk=conv.f_chunk)
    board = device.board(ctx)
    ctx.cache.pop("opcheck_image", None)          # the model image overwrites the op-check area
    card_turn, card_kv = _run(Engine, conv, model.config, BoardBackend(board), tgt, opts, prompt_ids, tokens)
    gold_turn, gold_kv = _run(Engine, conv, model.config, IsaBackend(tgt, timing=False), tgt, opts, prompt_ids, tokens)
    return compare(f"{model.name} {fmt}", card_turn, card_kv, gold_turn, gold_kv)


def compare(name: str, card_turn, card_kv, gold_turn, gold_kv) -> Result:
    """The model row's verdict: tokens, then every logit as a 32-bit word, then the KV bytes."""
    data = {"tokens": card_turn.tokens, "golden_tokens": gold_turn.tokens, "cycles": card_turn.decode.cycles}
    if card_turn.tokens != gold_turn.tokens:
        i = next(i for i, (a, b) in enumerate(zip(card_turn.tokens + [-1], gold_turn.tokens + [-1])) if a != b)
        got = card_turn.tokens[i] if i < len(card_turn.tokens) else "none"
        want = gold_turn.tokens[i] if i < len(gold_turn.tokens) else "none"
        return Result(Status.FAIL, f"{name}: token {i} is {got} on the card, {want} on the golden simulator", data,
                      hint="otpu-diag names the op-check groups that break; compare with `otpu-chat --check`")
    for i, (a, b) in enumerate(zip(card_turn.logits, gold_turn.logits)):
        bad = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
        if bad.size:
            return Result(Status.FAIL, f"{name}: the tokens agree but {bad.size} logits of token {i} differ from "
                                       f"the golden simulator's (first at vocabulary index {int(bad[0])})", data,
                          hint="a rounding difference in the VPU or MXU: run otpu-diag's isa section")
    if not np.array_equal(card_kv, gold_kv):
        n = int(np.count_nonzero(card_kv != gold_kv))
        return Result(Status.FAIL, f"{name}: tokens and logits agree but {n} bytes of layer 0's KV cache differ",
                      data, hint="the quantiser's stores (QST): run otpu-diag's isa section")
    return Result(Status.PASS, f"{name}: {len(card_turn.tokens)} greedy tokens on the card equal the golden "
                               "simulator's, logits and KV cache bit for bit", data)
