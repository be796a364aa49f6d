"""The calibration field otpu-smi shows (`memory.calibration`), from the registers and the results file only.

A monitor must not disturb the card: this reads STATUS, the CPU's state and the controllers'
DFII mode, and what otpu-memcal saved, and writes nothing (the CPU's mailbox is not read).
"""
from __future__ import annotations

from otpu_core.smi_fields import Field

from .ensure import has_hostcal
from .status import gather


def _channel_text(c, cpu) -> str:
    if c.state == "calibrating":
        return f"ch{c.ch} calibrating"
    if not c.calibrated:
        return f"ch{c.ch} NOT calibrated" + (" (interrupted)" if c.state == "interrupted" else "")
    r = c.result or {}
    by = {"host": "host", "selfcal": "CPU"}.get(r.get("by"), None)
    if by is None and cpu is not None and cpu.present and cpu.done and cpu.channel(c.ch)["state"] == "ok":
        by = "CPU"                                   # its report not read yet, but its state says it did
    detail = " ".join(x for x in (by, f"{r['window_ps']} ps" if r.get("window_ps") and not r.get("failed") else None) if x)
    return f"ch{c.ch} ok" + (f" ({detail})" if detail else "")


def fields(board) -> list[Field] | None:
    if not has_hostcal(board):
        return None
    st = gather(board, with_report=False)
    return [Field("memory.calibration", " ".join(_channel_text(c, st.cpu) for c in st.channels), source="memcal")]
