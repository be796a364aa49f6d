"""The measured fields otpu-i2c gives otpu-smi: board power, board temperature, rail voltages and currents.

They replace smi's `~ estimate` of `power.draw` (and its `[N/A]` board temperature). None when
the card has no I2C pins or another process holds the I2C lock (smi then keeps its estimate
for that sample rather than wait).
"""
from __future__ import annotations

from otpu_core.smi_fields import Field

from .discovery import measured


def fields(board) -> list[Field] | None:
    m = measured(board)
    if m is None:
        return None
    out = []
    if m["w"] is not None:
        out += [Field("power.draw", round(m["w"], 2), "W", "measured"), Field("power.source", f"measured ({m['how']})",
                                                                              source="measured")]
    if m["board_temp_c"] is not None:
        out.append(Field("temperature.board", round(m["board_temp_c"], 2), "C", "measured"))
    inputs = [r for r in m["rails"] if r["input"]]
    cores = [r for r in m["rails"] if r["kind"] == "PMBus"]
    if inputs and inputs[0]["v"] is not None:
        out.append(Field("voltage.input", inputs[0]["v"], "V", "measured"))
        if inputs[0]["a"] is not None:
            out.append(Field("current.input", inputs[0]["a"], "A", "measured"))
    if cores:
        out.append(Field("voltage.core", cores[0]["v"], "V", "measured"))
        if cores[0]["a"] is not None:
            out.append(Field("current.core", cores[0]["a"], "A", "measured"))
        out.append(Field("power.core", round(sum(r["w"] for r in cores), 2), "W", "measured"))
    return out
