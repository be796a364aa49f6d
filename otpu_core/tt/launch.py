"""The launch protocol: boot our firmware, place kernel text and arguments, prime the mailbox, GO, wait.

Completion is detected by a value the work itself produces: the result block's completed count
plus the run's nonce. RUN_MSG_DONE alone proves nothing, because a freshly booted mailbox
already reads DONE (0).
"""
from __future__ import annotations

import random
import struct
import time

from ..errors import DeviceError
from . import consts as K
from . import layout as L
from .coords import Tile
from .noc import Noc


class LaunchTimeout(DeviceError):
    """The kernel did not produce its completion in time."""


def signal(noc: Noc, tile: Tile) -> int:
    return noc.read32(tile, L.GO_WORD) >> 24


def set_signal(noc: Noc, tile: Tile, value: int) -> None:
    noc.write32(tile, L.GO_WORD, value << 24)


def firmware_up(noc: Noc, tile: Tile) -> bool:
    return not noc.read32(tile, K.SOFT_RESET_0) & (1 << K.RISC_BITS["brisc"])


def runs_our_firmware(noc: Noc, tile: Tile) -> bool:
    """Does the core's L1 hold our firmware's signature? Only then is its mailbox ours to read or write:
    a core running foreign firmware (tt-metal's) keeps its own data there."""
    return noc.read(tile, L.FW_BASE, len(L.FW_MAGIC)) == L.FW_MAGIC


def boot(noc: Noc, tile: Tile, timeout: float = 2.0) -> None:
    """Hold every RISC, write the firmware, set INIT, release BRISC only, wait for the firmware's DONE."""
    noc.write32(tile, K.SOFT_RESET_0, noc.read32(tile, K.SOFT_RESET_0) | K.RISC_ALL)
    noc.write(tile, L.FW_BASE, L.FW_IMAGE)
    set_signal(noc, tile, K.RUN_MSG_INIT)
    noc.write32(tile, K.SOFT_RESET_0, (noc.read32(tile, K.SOFT_RESET_0) & ~K.RISC_ALL) | K.RISC_ALL_BUT_BRISC)
    deadline = time.monotonic() + timeout
    while signal(noc, tile) != K.RUN_MSG_DONE:
        if time.monotonic() >= deadline:
            raise LaunchTimeout(f"Tensix {tile} firmware did not come up within {timeout:g} s",
                                hint=f"`otpu-tt core probe {tile}`, then `otpu-tt core recover {tile}`")
        time.sleep(0.001)


def launch(noc: Noc, tile: Tile, kind: int, args: bytes, result: int = L.RESULT) -> tuple[int, int]:
    """Start a kernel; returns (nonce, completed count it must reach). Boots the firmware if needed."""
    if not firmware_up(noc, tile):
        boot(noc, tile)
    elif not runs_our_firmware(noc, tile):
        raise DeviceError(f"Tensix {tile} runs firmware that is not ours (no signature at L1 {L.FW_BASE:#x}): "
                          "refusing to write its mailbox",
                          hint="stop the program that loaded it (`otpu-tt smi` lists the processes holding the card)")
    if signal(noc, tile) != K.RUN_MSG_DONE:
        raise DeviceError(f"Tensix {tile} is busy (mailbox signal is not DONE)",
                          hint=f"`otpu-tt core probe {tile}` shows what it runs")
    nonce = random.getrandbits(32) or 1
    done_before = struct.unpack("<I", noc.read(tile, result, 4))[0]
    noc.write(tile, L.KERNEL_TEXT, L.kernel_image(kind))
    noc.write(tile, L.KERNEL_ARGS, args)
    noc.write(tile, L.LAUNCH, L.LAUNCH_FMT.pack(L.LAUNCH_MAGIC, L.KERNEL_TEXT, L.KERNEL_ARGS, nonce, result,
                                                L.ENABLE_BRISC, 0, 0))
    set_signal(noc, tile, K.RUN_MSG_GO)          # written last: the launch message is complete
    return nonce, (done_before + 1) & 0xFFFFFFFF


def wait(noc: Noc, tile: Tile, nonce: int, count: int, result: int = L.RESULT, timeout: float = 2.0) -> tuple[int, int]:
    """Wait for the kernel's own completion record; returns (status, value)."""
    deadline = time.monotonic() + timeout
    while True:
        done, seen, status, value = L.RESULT_FMT.unpack(noc.read(tile, result, L.RESULT_FMT.size))
        if done == count and seen == nonce:
            return status, value
        if time.monotonic() >= deadline:
            raise LaunchTimeout(f"Tensix {tile}: no completion for run {nonce:#010x} within {timeout:g} s "
                                f"(completed count {done}, nonce {seen:#010x})",
                                hint=f"`otpu-tt core probe {tile}`")
        time.sleep(0.0002)


def run_sum(noc: Noc, tile: Tile, words, timeout: float = 2.0) -> int:
    """Sum 32-bit words on a Tensix (a one-shot kernel with a checkable answer)."""
    data = struct.pack(f"<{len(words)}I", *words)
    noc.write(tile, L.USER_BASE, data)
    nonce, count = launch(noc, tile, L.KIND_SUM, L.SUM_ARGS_FMT.pack(L.USER_BASE, len(words)))
    status, value = wait(noc, tile, nonce, count, timeout=timeout)
    if status:
        raise DeviceError(f"Tensix {tile}: sum kernel failed with status {status}")
    return value
