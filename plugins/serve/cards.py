"""The model and the cards it is served on: `open_cards(opts)` converts the model once and writes it
to every `--dev` card, each with `max_batch` sequence slots and its own pool of KV pages.

Pages are 256 positions, as otpu-chat's (a page is also the attention block, so the same page
size keeps every answer bit for bit the one otpu-chat gives); a shared prompt prefix is reused
in whole pages. The pool defaults to a full context for every slot.
A card that cannot be opened closes the ones opened before it.
"""
from __future__ import annotations

from dataclasses import dataclass

from otpu_core import target as target_mod
from otpu_core.errors import UsageError
from otpu_core.llm import convert
from otpu_core.llm.layout import FORMATS, ImageOptions, sequence_options
from otpu_core.llm.models import Model, open_model

PAGE = 256


@dataclass
class ServeOptions:
    devs: list[str]
    model: str | None = None
    target: str | None = None
    fmt: str = "int8"
    ctx: int | None = None
    max_batch: int = 8
    kv_pages: int | None = None


@dataclass
class Card:
    device: str
    board: object
    engine: object

    @property
    def core_hz(self) -> float: return self.engine.core_hz


def check(opts: ServeOptions) -> None:
    if opts.fmt not in FORMATS:
        raise UsageError(f"--format {opts.fmt}: must be one of {', '.join(FORMATS)}")
    for name, v, low in (("--max-batch", opts.max_batch, 1), ("--ctx", opts.ctx, 1), ("--kv-pages", opts.kv_pages, 1)):
        if v is not None and v < low:
            raise UsageError(f"{name} {v}: must be at least {low}")
    if len(set(opts.devs)) != len(opts.devs):
        raise UsageError(f"--dev {', '.join(opts.devs)}: a card is named twice")


def image_options(opts: ServeOptions, model: Model, tgt, f_chunk: int) -> ImageOptions:
    return sequence_options(model.config, tgt.config(), opts.fmt, opts.ctx, f_chunk, slots=opts.max_batch,
                            pages=opts.kv_pages, page=PAGE)


def open_cards(opts: ServeOptions, progress=None) -> tuple[Model, list[Card]]:
    from otpu_core.board import Board, BoardBackend
    from otpu_core.llm.engine import Engine
    check(opts)
    model = open_model(opts.model)
    tgt = target_mod.load(opts.target)
    conv = convert.convert(model.ckpt, opts.fmt, tgt, progress=progress)
    cards: list[Card] = []
    try:
        for dev in opts.devs:
            board = Board.open(dev, opts.target)
            try:
                core_hz = board.info.core_khz * 1000 if board.info.core_khz else None
                engine = Engine(conv, model.config, BoardBackend(board), tgt,
                                image_options(opts, model, tgt, conv.f_chunk), core_hz=core_hz)
            except BaseException:
                board.close()
                raise
            cards.append(Card(board.t.dev, board, engine))
    except BaseException:
        close_cards(cards)
        raise
    return model, cards


def close_cards(cards: list[Card]) -> None:
    for c in cards:
        c.board.close()
