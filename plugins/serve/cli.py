"""otpu-serve: serve a model on openTPU cards over OpenAI's HTTP API (also `otpu serve`).

Like llama-server: one process, one model, `--dev` repeated for several cards behind one
scheduler; `/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/health`, `/ready`,
`/metrics`. Exit codes: 0 stopped cleanly (Ctrl-C / SIGTERM), 2 bad options (a port in use, a bad
--model), 3 a card busy or absent.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer

from otpu_core import cliopts
from otpu_core.cli import tool_main, version_option
from otpu_core.llm.layout import FORMATS
from otpu_core.llm.models import DEFAULT_MODEL

from .cards import ServeOptions
from .server import HttpOptions, Server

HELP = ("Serve a model on openTPU cards with OpenAI's API: /v1/chat/completions and /v1/completions (streamed "
        "as server-sent events or not), /v1/models, /health, /ready, /metrics (Prometheus). Requests join and "
        "leave the running batch at token boundaries; a shared prompt prefix reuses its KV pages. Exit 0 "
        "stopped, 2 bad options, 3 card busy or absent.")

app = typer.Typer(name="serve", add_completion=False, rich_markup_mode=None)


def _log(line: str) -> None:
    print(f"otpu-serve: {line}", file=sys.stderr, flush=True)


@app.command(help=HELP)
def serve(dev: Optional[list[str]] = typer.Option(None, "--dev", envvar="OTPU_DEV", show_envvar=True, metavar="DEV",
                                                  help="Card to serve on (repeat for several): /dev/xdmaN, sim or "
                                                       "sim:NAME. Default: the first /dev/xdma*_user, else sim."),
          model: str = typer.Option(None, "--model", "-m", help=f"Model name or path: a GGUF file or a Hugging Face "
                                                                 f"directory (default {DEFAULT_MODEL}, shipped)."),
          target: cliopts.TargetName = None,
          fmt: str = typer.Option("int8", "--format", help=f"Card weight format: {', '.join(FORMATS)}."),
          host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
          port: int = typer.Option(8080, "--port", help="TCP port to listen on (0: any free port, printed)."),
          api_key: str = typer.Option(None, "--api-key", envvar="OTPU_API_KEY", show_envvar=True,
                                      help="Require 'Authorization: Bearer KEY' on /v1 routes."),
          max_batch: int = typer.Option(8, "--max-batch", help="Sequences each card decodes together."),
          queue: int = typer.Option(64, "--queue", help="Requests that may wait for a slot; more get 429."),
          ctx_len: int = typer.Option(None, "--ctx", help="Positions per sequence (default: the model's context)."),
          kv_pages: int = typer.Option(None, "--kv-pages", help="KV pages per card (default: a full context for "
                                                                 "every slot); requests wait for free pages."),
          max_tokens: int = typer.Option(256, "--max-tokens", "-n", help="Tokens to generate when a request gives "
                                                                          "no max_tokens."),
          access_log: bool = typer.Option(False, "--access-log", help="Log every request on stderr."),
          version: bool = version_option("otpu-serve")) -> None:
    """Serve a model on openTPU cards."""
    server = Server(ServeOptions(list(dev or []) or [None], model, target, fmt, ctx_len, max_batch, kv_pages),
                    HttpOptions(host, port, api_key, queue, max_tokens, access_log))
    cards = ", ".join(c.device for c in server.cards)
    _log(f"{server.model.name} on {cards}: {server.cards[0].engine.opts.slots} slots and "
         f"{server.cards[0].engine.opts.pages} KV pages of {server.cards[0].engine.opts.page} per card, "
         f"context {server.state.limit}")
    _log(f"listening on {server.url} (Ctrl-C stops)")
    try:
        server.serve()
    except KeyboardInterrupt:
        pass
    _log("stopped")


def main() -> None:
    tool_main(app, "otpu-serve")
