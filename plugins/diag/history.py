"""otpu-diag's results history: one JSON line per run in `<run dir>/diag-history.jsonl`.

Each record: time, device, target, level, the counts per status, the failed rows (name and
message), the diagnosis and the exit code. `otpu-diag --history` shows them, newest last. A
line that is not JSON (a file cut short by a full disk) is skipped and counted, never fatal.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from otpu_core.card.runstate import run_dir
from otpu_core.checks import Row, Status

FILE_NAME = "diag-history.jsonl"
KEEP = 1000          # records kept; older ones are dropped when the file is rewritten


def path() -> Path:
    return run_dir() / FILE_NAME


def record(device: str, target: str | None, level: int, rows: list[Row], hints: list[str], code: int) -> dict:
    counts = {s.value: sum(r.status == s for r in rows) for s in Status}
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "device": device, "target": target, "level": level,
            "counts": counts, "failed": [{"name": r.name, "message": r.message} for r in rows if r.status == Status.FAIL],
            "hints": hints, "exit_code": code}


def append(entry: dict) -> str | None:
    """Add a record; returns why it could not be kept (None when it was)."""
    p = path()
    try:
        with p.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        if p.stat().st_size > KEEP * 4096:
            kept, _ = read()
            p.write_text("".join(json.dumps(e) + "\n" for e in kept[-KEEP:]))
    except OSError as e:
        return f"{p}: {e.strerror or e}"
    return None


def read(device: str | None = None) -> tuple[list[dict], int]:
    """(records, lines that could not be read), oldest first, only `device`'s when given."""
    try:
        lines = path().read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return [], 0
    out, bad = [], 0
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(entry, dict) and (device is None or entry.get("device") == device):
            out.append(entry)
    return out, bad
