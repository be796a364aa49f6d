"""otpu-chat: chat with a model on the card (also `otpu chat`); `models` and `convert` beside it."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import typer

from otpu_core import cliopts
from otpu_core import target as target_mod
from otpu_core.cli import tool_main, version_option
from otpu_core.console import print_json, stderr, stdout
from otpu_core.errors import EXIT_CHECKS_FAILED, UsageError
from otpu_core.llm import convert as convert_mod
from otpu_core.llm.layout import FORMATS
from otpu_core.llm.models import DEFAULT_MODEL, known, open_model
from otpu_core.outpath import check_writable, write_or_show

from .session import ENGINES, Options, Session, logits_array
from .views import StepProgress, stats_line, turn_stats

PROG = "otpu-chat"
HELP = ("Chat with a model on an openTPU card: `-p TEXT` answers once (streamed, then a stats line); "
        "without -p a multi-turn REPL (/reset, /stats, /system, /help; Ctrl-C stops the answer); --tui a "
        "full-screen app. The model is converted to the card's format once (cached). Subcommands: models, "
        "convert, kld. Exit 0 ok, 1 --check found a difference, 2 bad options or model file, 3 card busy or absent.")

app = typer.Typer(name="chat", add_completion=False, rich_markup_mode=None, invoke_without_command=True)


@app.callback(invoke_without_command=True, help=HELP)
def chat(ctx: typer.Context,
         prompt: str = typer.Option(None, "-p", "--prompt", help="Answer this prompt once and exit."),
         model: str = typer.Option(None, "--model", "-m", help=f"Model name or path: a GGUF file or a Hugging "
                                                                f"Face directory (default {DEFAULT_MODEL}, shipped)."),
         dev: cliopts.Dev = None, target: cliopts.TargetName = None,
         fmt: str = typer.Option("int8", "--format", help=f"Card weight format: {', '.join(FORMATS)}."),
         engine: str = typer.Option("card", "--engine", help="card (the compiled program on the card), quant (the "
                                                             "quantised golden) or fp32 (the float64 reference)."),
         max_tokens: int = typer.Option(256, "--max-tokens", "-n", min=1, help="Most tokens to generate per answer."),
         temperature: float = typer.Option(None, "--temperature", help="0 is greedy (default: the model family's)."),
         top_k: int = typer.Option(None, "--top-k", help="Candidates to sample from (0: the card's 64 best)."),
         top_p: float = typer.Option(None, "--top-p", help="Nucleus: keep the smallest head of this probability."),
         repeat_penalty: float = typer.Option(None, "--repeat-penalty", help="Seen tokens: positive logits divided, "
                                                                             "negative multiplied (1: off)."),
         seed: int = typer.Option(0, "--seed", help="Seed of the sampling uniforms."),
         system: str = typer.Option(None, "--system", help="System prompt."),
         ctx_len: int = typer.Option(2048, "--ctx", min=1, help="Context positions (KV cache size)."),
         expert_slots: int = typer.Option(0, "--expert-slots", min=0, help="Mixture of experts: card slots per "
                                          "layer; missing experts are streamed from the host (0: one per expert)."),
         raw: bool = typer.Option(False, "--raw", help="No chat template: the prompt is tokenized as given."),
         json_out: bool = typer.Option(False, "--json", help="With -p: print one JSON document (prompt and "
                                                             "generated ids, text, per-token times, stats)."),
         logits_file: Path = typer.Option(None, "--logits", help="With -p: save float32 [steps, vocab] .npy, the "
                                                                 "logits each generated token was chosen from."),
         check: bool = typer.Option(False, "--check", help="With -p: compare each token's logits with the "
                                                           "quantised golden (teacher-forced); name the first "
                                                           "token whose greedy choice or cosine differs."),
         tui: bool = typer.Option(False, "--tui", help="Full-screen app (conversation, live tok/s, card use)."),
         version: bool = version_option(PROG)) -> None:
    """Chat with a model on the card."""
    if ctx.invoked_subcommand is not None:
        return
    if prompt is not None and not prompt.strip():
        raise UsageError("-p: the prompt is empty", hint="give the text to answer, or leave out -p for the REPL")
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine}: must be one of {', '.join(ENGINES)}")
    if prompt is None and (json_out or logits_file is not None or check):
        raise UsageError("--json, --logits and --check need -p PROMPT")
    if tui and prompt is not None:
        raise UsageError("--tui is interactive: leave out -p")
    if logits_file is not None:
        check_writable(logits_file, "--logits")
    opts = Options(model, dev, target, fmt, engine, ctx_len, max_tokens, temperature, top_k, top_p, repeat_penalty,
                   seed, system, raw, logits=logits_file is not None or check, expert_slots=expert_slots)
    progress = StepProgress(stderr())
    if tui:
        from .tui import run_tui
        run_tui(opts, progress)
        return
    session = Session.open(opts, progress)
    progress.stop()
    try:
        if prompt is None:
            from .repl import run_repl
            run_repl(session)
            return
        _one_shot(session, prompt, json_out, logits_file, check)
    finally:
        session.close()


def _one_shot(session: Session, prompt: str, json_out: bool, logits_file: Path | None, check: bool) -> None:
    from .repl import Interrupt
    out = sys.stdout
    with Interrupt() as stop:
        ex = session.ask(prompt, None if json_out else lambda t: (out.write(t), out.flush()), stop)
    st = turn_stats(ex, session)
    failed = None
    report = None
    if check:
        from .check import teacher_forced
        report = teacher_forced(session, ex)
        failed = report["first_difference"]
    if logits_file is not None:
        arr = logits_array(ex.turn, session.model.config.vocab)
        buf = io.BytesIO()
        np.save(buf, arr)
        write_or_show(logits_file, buf.getvalue(), "--logits")
    if json_out:
        doc = {"tool": "otpu-chat", "model": session.model.name, "format": session.opts.fmt,
               "engine": session.opts.engine, "device": session.device, "prompt": prompt,
               "prompt_ids": ex.prompt_ids, "ids": ex.turn.tokens, "text": ex.text,
               "times_s": [round(t, 4) for t in ex.turn.times], "stats": st}
        if report is not None:
            doc["check"] = report
        print_json(doc)
    else:
        out.write("\n")
        out.flush()
        err = stderr()
        err.print(stats_line(st), style="dim", markup=False, highlight=False)
        if report is not None:
            from .check import report_line
            err.print(report_line(report), markup=False, highlight=False)
    if failed is not None:
        raise typer.Exit(EXIT_CHECKS_FAILED)


@app.command("models")
def models_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the shipped models and the models converted before (with their cached formats)."""
    rows = known()
    if json_out:
        print_json(rows)
        return
    from rich.table import Table
    table = Table(title="otpu-chat models")
    for col in ("name", "kind", "formats cached", "path"):
        table.add_column(col)
    for r in rows:
        fm = ", ".join(f"{f['format']} ({f['bytes'] / 2**20:.1f} MiB)" for f in r["formats"]) or "-"
        table.add_row(r["name"] + (" (default)" if r["name"] == DEFAULT_MODEL else ""), r["kind"], fm, r["path"])
    stdout().print(table)
    if not rows:
        stdout().print("no models: give --model PATH (a GGUF file or a Hugging Face directory)")


@app.command("convert")
def convert_cmd(model: str = typer.Argument(..., help="Model name or path (GGUF file or Hugging Face directory)."),
                fmt: str = typer.Option("int8", "--format", help=f"Card weight format: {', '.join(FORMATS)}."),
                target: cliopts.TargetName = None,
                json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Convert a model to a card format ahead of time (cached; later runs load it at once)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: must be one of {', '.join(FORMATS)}")
    m = open_model(model)
    tgt = target_mod.load(target)
    progress = StepProgress(stderr())
    conv = convert_mod.convert(m.ckpt, fmt, tgt, progress=lambda d, t, w: progress("converting", d, t, w))
    progress.stop()
    doc = {"model": m.name, "format": fmt, "target": tgt.name, "cached": conv.cached, "seconds": round(conv.seconds, 2),
           "bytes": conv.nbytes(), "path": str(conv.path)}
    if json_out:
        print_json(doc)
        return
    what = "already converted" if conv.cached else f"converted in {conv.seconds:.1f} s"
    stdout().print(f"{m.name} {fmt} for {tgt.name}: {what}, {conv.nbytes() / 2**20:.1f} MiB at {conv.path}",
                   markup=False, highlight=False)


@app.command("kld")
def kld_cmd(model: str = typer.Option(None, "--model", "-m", help=f"Model name or path (default {DEFAULT_MODEL})."),
            fmts: list[str] = typer.Option([], "--format", help=f"Card formats to measure, repeated or comma-separated "
                                                                 f"(default int8,fp4,fp4x6; all: {', '.join(FORMATS)})."),
            text: Path = typer.Option(None, "--text", help="UTF-8 text to measure over (default: a built-in "
                                                           "paragraph about Python)."),
            tokens: int = typer.Option(256, "--tokens", "-n", min=1, help="Most positions to measure."),
            target: cliopts.TargetName = None,
            json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """KL divergence of each card format from the fp32 golden, top-1 agreement and perplexity
    (as llama-perplexity --kl-divergence reports them). No card is used."""
    from .kld import measure, parse_formats, read_text, render
    wanted, body = parse_formats(fmts), read_text(text)
    m = open_model(model)
    progress = StepProgress(stderr())
    doc = measure(m, wanted, target_mod.load(target), body, tokens, progress)
    progress.stop()
    if json_out:
        print_json(doc)
    else:
        render(doc, stdout())


def main() -> None:
    tool_main(app, PROG)


if __name__ == "__main__":
    main()
