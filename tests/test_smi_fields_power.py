"""smi field catalogue and CSV text, and the utilisation power model (host.md 5.4 arithmetic)."""
from __future__ import annotations

import json

import pytest

from otpu_core import power, smi_fields
from otpu_core.errors import UsageError
from otpu_core.smi_fields import Field


def test_board_model_totals_and_idle_busy():
    m = power.board_model()
    assert m.fixed_w == pytest.approx(3.05)
    assert sum(m.units.values()) == pytest.approx(2.95)
    assert m.max_w == pytest.approx(6.0)
    idle = m.estimate({k: 0.0 for k in ("RUNNING", "MXU_BUSY", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY", "DRAM")})
    busy = m.estimate({k: 1.0 for k in ("RUNNING", "MXU_BUSY", "VPU_BUSY", "QNT_BUSY", "DMA_BUSY", "DRAM")})
    assert idle.w == pytest.approx(3.05) and busy.w == pytest.approx(6.0)


def test_estimate_by_hand():
    # fixed 1 W; MXU 2 W at 50 %; VPU 1 W at 150 % clamps to 1; DRAM 0.5 W with no counter counts as busy.
    m = power.PowerModel(1.0, {"MXU": 2.0, "VPU": 1.0, "DRAM": 0.5}, 4.5, "test")
    e = m.estimate({"MXU_BUSY": 0.5, "VPU_BUSY": 1.5})
    assert e.w == pytest.approx(1.0 + 1.0 + 1.0 + 0.5)
    assert e.units == pytest.approx({"MXU": 1.0, "VPU": 1.0, "DRAM": 0.5})
    assert m.estimate({"MXU_BUSY": -1, "VPU_BUSY": 0, "DRAM": 0}).w == pytest.approx(1.0)


def test_power_json(tmp_path):
    p = tmp_path / "power.json"
    p.write_text(json.dumps({"format": "openTPU-power", "version": 1, "total_w": 6.0,
                             "units": {"MXU": 2.0, "DMA": 0.95}}))
    m = power.load(p)
    assert m.fixed_w == pytest.approx(3.05) and m.max_w == 6.0
    assert power.load(tmp_path / "missing.json") is None
    assert power.model(tmp_path / "missing.json").source.startswith("board figures")
    p.write_text("{}")
    with pytest.raises(UsageError, match="not an openTPU-power"):
        power.load(p)


def test_field_text_and_csv():
    f = {"name": Field("name", "ypcb-00338"), "power.draw": Field("power.draw", 4.6312, "W", "estimate"),
         "utilization.mxu": Field("utilization.mxu", 50, "%"), "temperature.board": Field("temperature.board", None, "C")}
    names = ["name", "power.draw", "utilization.mxu", "temperature.board", "process.pid"]
    assert smi_fields.csv_header(names) == "name, power.draw [W], utilization.mxu [%], temperature.board [C], process.pid"
    assert smi_fields.csv_header(names, units=False) == "name, power.draw, utilization.mxu, temperature.board, process.pid"
    assert smi_fields.csv_row(f, names) == "ypcb-00338, 4.63 W, 50 %, [N/A], [N/A]"
    assert smi_fields.csv_row(f, names, units=False) == "ypcb-00338, 4.63, 50, [N/A], [N/A]"


def test_query_parse_and_merge():
    assert smi_fields.parse_query("name, power.draw") == ["name", "power.draw"]
    with pytest.raises(smi_fields.QueryError, match="unknown field power.drwa"):
        smi_fields.parse_query("name,power.drwa")
    own = [Field("power.draw", 4.0, "W", "estimate"), Field("name", "x")]
    merged = smi_fields.merge(own, [None, [Field("power.draw", 21.5, "W", "measured")]])
    assert merged["power.draw"].source == "measured" and merged["power.draw"].value == 21.5
    assert merged["name"].value == "x"
    text = smi_fields.help_text()
    for name in ("temperature.die", "power.draw", "utilization.mxu", "memory.total"):
        assert name in text
