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


TEXT_REPORT = """\
Copyright 1986-2022 Xilinx, Inc. All Rights Reserved.
| Design       : otpu_top
| Device       : xc7k325tffg900-2

1. Summary
----------

+--------------------------+--------------+
| Total On-Chip Power (W)  | 6.000        |
| Design Power Budget (W)  | Unspecified* |
| Dynamic (W)              | 2.950        |
| Device Static (W)        | 3.050        |
| Junction Temperature (C) | 36.4         |
| Confidence Level         | Low          |
+--------------------------+--------------+

1.1 On-Chip Components
----------------------

+----------------+-----------+----------+
| On-Chip        | Power (W) | Used     |
+----------------+-----------+----------+
| Clocks         |     0.300 |        5 |
| Slice Logic    |     0.450 |    12345 |
+----------------+-----------+----------+

3.1 By Hierarchy
----------------

+------------------+-----------+
| Name             | Power (W) |
+------------------+-----------+
| otpu_top         |     2.950 |
|   u_mxu          |     0.500 |
|   u_board        |     2.400 |
|     u_mxu        |     1.000 |
|       u_dma      |     0.200 |
|     u_act        |     0.100 |
|     u_dma        |     0.250 |
|     u_vpu        |     0.350 |
|     u_mem        |     0.600 |
|     misc         |     0.100 |
+------------------+-----------+
"""


def _xml_of_text_report() -> str:
    rows = [("otpu_top", "2.950", [("u_mxu", "0.500", []),
                                   ("u_board", "2.400", [("u_mxu", "1.000", [("u_dma", "0.200", [])]),
                                                         ("u_act", "0.100", []), ("u_dma", "0.250", []),
                                                         ("u_vpu", "0.350", []), ("u_mem", "0.600", []),
                                                         ("misc", "0.100", [])])])]

    def tr(name, w, kids):
        return (f'<tablerow><tablecell contents="{name}"/><tablecell contents="{w}"/>'
                + "".join(tr(*k) for k in kids) + "</tablerow>")
    summary = "".join(f'<tablerow><tablecell contents="{k}"/><tablecell contents="{v}"/></tablerow>'
                      for k, v in (("Total On-Chip Power (W)", "6.000"), ("Dynamic (W)", "2.950"),
                                   ("Device Static (W)", "3.050"), ("Confidence Level", "Low")))
    return (f'<RptDoc><section title="Summary"><table>{summary}</table></section>'
            f'<section title="By Hierarchy"><table>{"".join(tr(*r) for r in rows)}</table></section></RptDoc>')


@pytest.mark.parametrize("text", [TEXT_REPORT, _xml_of_text_report()], ids=["text", "xml"])
def test_power_report_units_and_fixed_part(text):
    doc = power.parse_report(text, "report")
    assert doc["total_w"] == 6.0 and doc["dynamic_w"] == 2.95 and doc["confidence"] == "Low"
    # u_dma inside u_mxu counts as MXU; the u_mxu outside u_board is not the card's
    assert doc["units"] == pytest.approx({"MXU": 1.1, "DMA": 0.25, "VPU": 0.35, "DRAM": 0.6})
    assert doc["fixed_w"] == pytest.approx(6.0 - 2.3)
    assert doc["util"]["MXU"] == "MXU_BUSY" and doc["util"]["DRAM"] == "DRAM"
    assert [d for d, name, _ in doc["hierarchy"]][:4] == [0, 1, 1, 2]
    if not text.startswith("<"):
        assert doc["components"] == {"Clocks": 0.3, "Slice Logic": 0.45}


def test_power_report_cli_round_trip(tmp_path):
    rpt = tmp_path / "power.rpt"
    rpt.write_text(TEXT_REPORT)
    out = tmp_path / "power.json"
    assert power.main([str(rpt), "-o", str(out)]) == 0
    m = power.load(out)
    assert m.max_w == 6.0 and m.fixed_w == pytest.approx(3.7)
    assert m.estimate({"MXU_BUSY": 0.5, "DMA_BUSY": 0, "VPU_BUSY": 0, "DRAM": 0}).w == pytest.approx(3.7 + 0.55)
    rpt.write_text("hello\n")
    assert power.main([str(rpt)]) == 2
    with pytest.raises(ValueError, match="not a Vivado power report"):
        power.parse_report("hello")
