"""What this host remembers about a Blackhole card between commands: its identity and its stuck tiles.

On hardware a read of a tile whose NoC interface is stuck stalls until the PCIe completion
timeout and leaves a transaction the NoC never gets back; about a hundred of them hang the NoC
itself (luwen apps/drunken-monkey/src/hang/noc.rs). So a tile found stuck is remembered, and
monitors (`core status -l`, `list`, diag) do not read it again until recovery clears it, the
chip reboots, or the user asks for `--reprobe`. The memo also keeps the last telemetry that
says who the card is (serial, board, harvesting), so a card whose NoC is hung or whose link is
lost is still listed and drawn with its bus address, serial and live columns.

One JSON file per PCI address (`<run dir>/tt-<bdf>.memo.json`), read-modify-written under a flock
so several monitors and a recovery can share it. A chip reboot is seen as the firmware's
heartbeat going backwards (it counts from 0 at every boot): stuck marks from before are dropped.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from ..card.runstate import open_shared, run_dir
from . import consts as K

IDENTITY_TAGS = ("BOARD_ID_HIGH", "BOARD_ID_LOW", "ENABLED_TENSIX_COL", "ENABLED_GDDR", "NOC_TRANSLATION",
                 "PCIE_USAGE", "FLASH_BUNDLE_VERSION")


def memo_path(bdf: str) -> Path:
    return run_dir() / f"tt-{bdf.replace(':', '_')}.memo.json"


class CardMemo:
    """The memo of the card at PCI address `bdf`."""

    def __init__(self, bdf: str):
        self.path = memo_path(bdf)

    @contextmanager
    def _edit(self):
        fd = open_shared(self.path.with_suffix(".lock"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self._load()
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                try:
                    tmp.write_text(json.dumps(data))
                    os.replace(tmp, self.path)
                except OSError:
                    pass                     # a memo that cannot be written only costs re-probing
        finally:
            os.close(fd)

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"stuck": {}}
        return data if isinstance(data, dict) and isinstance(data.get("stuck"), dict) else {"stuck": {}}

    # ---- identity ----------------------------------------------------------------------------
    def remember(self, values: dict[int, int]) -> None:
        """Keep the identity tags of a telemetry read; a heartbeat below the last one means the chip
        rebooted since, so earlier stuck marks are dropped."""
        ident = {name: values[K.TAGS[name]] for name in IDENTITY_TAGS if K.TAGS[name] in values}
        heartbeat = values.get(K.TAGS["TIMER_HEARTBEAT"])
        with self._edit() as data:
            data["identity"] = ident
            if heartbeat is not None and data["stuck"]:
                if heartbeat < data.get("heartbeat", 0):
                    data["stuck"] = {}
                data["heartbeat"] = heartbeat

    def identity(self) -> dict[int, int]:
        """The identity tags last seen (tag number -> value), empty if the card was never read."""
        return {K.TAGS[name]: v for name, v in self._load().get("identity", {}).items() if name in K.TAGS}

    # ---- stuck tiles -------------------------------------------------------------------------
    def stuck(self) -> set[tuple[int, int]]:
        return {tuple(int(v) for v in key.split(",")) for key in self._load()["stuck"]}

    def mark_stuck(self, xys, heartbeat: int | None = None) -> None:
        xys = list(xys)
        if not xys:
            return
        with self._edit() as data:
            for x, y in xys:
                data["stuck"].setdefault(f"{x},{y}", time.time())
            if heartbeat is not None:
                data["heartbeat"] = heartbeat

    def clear(self, xys=None) -> None:
        """Forget stuck marks: those of `xys`, or all (after a chip-wide reset)."""
        with self._edit() as data:
            if xys is None:
                data["stuck"] = {}
            else:
                for x, y in xys:
                    data["stuck"].pop(f"{x},{y}", None)
