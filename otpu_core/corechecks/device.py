"""The card as the core checks see it: one open Board per run, what its registers say, raw channels.

A check never opens a card itself: `transport(ctx)` opens it once per run (taking the device
lock), `board(ctx)` puts an unchecked Board on it (so a wrong configuration becomes a failing
row, not an exception) once the ID register has been read; both are cached in the run's
context and `close(ctx)` ends the run. `info(ctx)` is what the card said when the Board opened.
"""
from __future__ import annotations

import numpy as np

from ..checks import CheckContext
from ..target import Target
from ..target import load as load_target

CARD_KINDS = {"otpu": "openTPU", "tt": "Tenstorrent Blackhole"}


def target(ctx: CheckContext) -> Target:
    if "target" not in ctx.cache:
        ctx.cache["target"] = load_target(ctx.options.get("target"))
    return ctx.cache["target"]


def transport(ctx: CheckContext):
    """The card's transport, opened (and the device lock taken) on first use."""
    if "transport" not in ctx.cache:
        from ..devspec import open_transport
        ctx.cache["transport"] = open_transport(ctx.dev, target=ctx.options.get("target"),
                                                faults=ctx.options.get("fault"))
    return ctx.cache["transport"]


def board(ctx: CheckContext):
    """A Board over the same transport, unchecked: a wrong configuration is the config row's finding."""
    if "board" not in ctx.cache:
        from ..board import Board
        ctx.cache["board"] = Board(transport(ctx), target=target(ctx), check=False)
    return ctx.cache["board"]


def close(ctx: CheckContext) -> None:
    """End the run: the Board (and its transport), and whatever other plugins' checks opened."""
    b = ctx.cache.pop("board", None)
    t = ctx.cache.pop("transport", None)
    if b is not None:
        b.close()
    elif t is not None:
        t.close()
    for key in [k for k, v in ctx.cache.items() if callable(getattr(v, "close", None))]:
        ctx.cache.pop(key).close()


def begin(ctx: CheckContext) -> str:
    """Open an openTPU card (taking its lock) before anything prints; returns what the run is on.

    Other kinds of card (`tt:...`) are opened by their own plugin's checks."""
    if ctx.device_kind != "otpu":
        return ctx.dev
    ctx.dev = transport(ctx).dev
    return f"{ctx.dev} (target {target(ctx).name})"


def fault_note(ctx: CheckContext) -> str:
    """The card's own sentence on its injected faults and how to clear them ("" when none), for
    the header of every tool that opens it: a later plain run must never fail without saying why."""
    t = ctx.cache.get("transport")
    return t.fault_note() if t is not None else ""


def card_kind(ctx: CheckContext) -> str:
    """What kind of card the run is on, as the tools' headers name it."""
    return CARD_KINDS.get(ctx.device_kind, ctx.device_kind)


def target_name(ctx: CheckContext) -> str | None:
    return target(ctx).name if ctx.device_kind == "otpu" else None


def info(ctx: CheckContext):
    """What the card says about itself (`board.CardInfo`)."""
    return board(ctx).info


def snapshot(ctx: CheckContext) -> dict[str, int]:
    """Latch the free-running counters (SNAP) and read them (None on a register map 1 card)."""
    return board(ctx).snapshot()


class ChannelView:
    """The card's DRAM channels at raw offsets (memtest's ChannelMemory) through the Board."""

    def __init__(self, b):
        self.board = b
        self.channels, self.channel_bytes = b.t.channels, b.t.channel_bytes

    def write_channel(self, ch: int, offset: int, data: np.ndarray) -> None:
        self.board.write_channel(ch, offset, np.ascontiguousarray(data, np.uint8))

    def read_channel(self, ch: int, offset: int, nbytes: int) -> np.ndarray:
        return self.board.read_channel(ch, offset, nbytes)


def channels(ctx: CheckContext) -> ChannelView:
    return ChannelView(board(ctx))
