"""What otpu-memcal knows about a card between runs: `<run dir>/<card>.memcal.json`.

Per channel the last calibration result (by the host or, read from its mailbox, by the core's
CPU; a failure is kept with its error), and while a host calibration runs, a marker naming the
process (pid and its start time, so a recycled pid is not mistaken for it) and the channels:
a calibration killed midway leaves the marker behind, which `status` reports as interrupted.
Written atomically; a file that is not valid JSON is reported, never trusted, and replaced at
the next calibration.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from otpu_core.card import litedram_map as M
from otpu_core.card.runstate import owner_alive, process_command, process_start, run_dir

VERSION = 1


def running_settings(result: dict | None) -> dict | None:
    """The settings a result left in the PHY, or None if it does not say (or failed)."""
    if not result or result.get("failed"):
        return None
    if "dqs_steps" not in result or len(result.get("read") or []) != M.LANES or len(result.get("write_latency") or []) != M.LANES:
        return None
    if any(w < 0 for w in result["write_latency"]):
        return None
    return result


def path_for(devname: str | None) -> Path:
    return run_dir() / f"{devname or 'card'}.memcal.json"


class Results:
    """The results file of one card (loaded on construction; `save()` writes it back)."""

    def __init__(self, devname: str | None):
        self.path = path_for(devname)
        self.problem: str | None = None
        self.doc: dict[str, Any] = {"version": VERSION, "channels": {}}
        try:
            doc = json.loads(self.path.read_text())
            if not isinstance(doc, dict) or not isinstance(doc.get("channels", {}), dict):
                raise ValueError("not an otpu-memcal results document")
            self.doc.update(doc)
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            self.problem = f"{self.path} cannot be read ({e}); it is ignored and replaced at the next calibration"

    def channel(self, ch: int) -> dict | None:
        r = self.doc["channels"].get(str(ch))
        return r if isinstance(r, dict) else None

    def set_channel(self, ch: int, result: dict) -> None:
        self.doc["channels"][str(ch)] = result

    # ---- the in-progress marker ------------------------------------------------------------------

    def begin(self, channels: list[int], what: str) -> None:
        self.doc["in_progress"] = {"pid": os.getpid(), "start": process_start(os.getpid()) or 0,
                                   "cmd": process_command(os.getpid()), "channels": channels, "what": what,
                                   "time": time.time()}
        self.save()

    def end(self) -> None:
        self.doc.pop("in_progress", None)
        self.save()

    def in_progress(self) -> dict | None:
        """The marker, with `alive` saying whether its process still runs."""
        mark = self.doc.get("in_progress")
        if not isinstance(mark, dict) or not isinstance(mark.get("pid"), int):
            return None
        return {**mark, "alive": owner_alive(mark["pid"], int(mark.get("start") or 0))}

    def save(self) -> bool:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self.doc, indent=1))
            os.replace(tmp, self.path)
            return True
        except OSError as e:
            print(f"otpu-memcal: cannot write {self.path}: {e.strerror or e} (the result is not kept)", file=sys.stderr)
            try:
                tmp.unlink()
            except OSError:
                pass
            return False
