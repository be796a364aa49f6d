"""otpu-smi --prometheus: every smi field as a Prometheus metric with card labels (dcgm-exporter's way),
read back with prometheus-client's own text parser, and the command serving it over HTTP."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otpu_core.cli import run_app
from otpu_smi import cli as smi_cli
from otpu_smi.exporter import CardCollector, metric_name
from otpu_smi.sample import Sampler


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_numeric_field_is_a_labelled_gauge(capsys):
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim:ex0", "--dev", "sim:ex1", "--json"]) == 0
    smi = json.loads(capsys.readouterr().out)
    samplers = [Sampler("sim:ex0", None), Sampler("sim:ex1", None)]
    try:
        reg = CollectorRegistry()
        reg.register(CardCollector(samplers, [{"device": "/dev/xdma9", "ok": False, "error": "absent"}]))
        fams = _families(generate_latest(reg).decode())
    finally:
        for s in samplers:
            s.close()
    up = {s.labels["device"]: s.value for s in fams["otpu_card_up"].samples}
    assert up == {"sim:ex0": 1.0, "sim:ex1": 1.0, "/dev/xdma9": 0.0}
    for card in smi:
        f = card["fields"]
        for name, unit, value in (("memory.total", "MiB", f["memory.total"]), ("clocks.core", "MHz", f["clocks.core"]),
                                  ("cfg_hash.match", "", 1.0)):
            fam = fams[metric_name(name, unit)]
            got = [s for s in fam.samples if s.labels["device"] == card["device"]]
            assert len(got) == 1 and got[0].value == float(value), (name, got)
            assert got[0].labels["model_name"] == card["name"] and got[0].labels["card"] in ("0", "1")
        temp = [s.value for s in fams["otpu_temperature_die_celsius"].samples if s.labels["device"] == card["device"]]
        assert abs(temp[0] - f["temperature.die"]) < 5          # a live sensor, read a moment apart
    info = [s for s in fams["otpu_card_info"].samples if s.labels["device"] == "sim:ex0"][0]
    assert info.labels["target"] == "ypcb-00338" and info.labels["link"] == "ok" and info.value == 1
    assert metric_name("sample.ms", "ms") == "otpu_sample_milliseconds"
    assert metric_name("temperature.die", "C") == "otpu_temperature_die_celsius"


def test_the_exporter_command_serves_metrics_until_interrupted(tmp_path):
    p = subprocess.Popen([str(Path(sys.executable).parent / "otpu-smi"), "--prometheus", "--port", "0", "--host",
                          "127.0.0.1", "--dev", "sim:exp"], stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        port = int(re.search(r":(\d+)/metrics", line).group(1))
        fams = _families(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
        assert [s.labels["device"] for s in fams["otpu_card_up"].samples] == ["sim:exp"]
        assert "otpu_utilization_mxu_percent" in fams
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0
        p.stderr.close()


def test_prometheus_option_errors(capsys):
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim", "--prometheus", "--json"]) == 2
    assert "--prometheus" in capsys.readouterr().err
    assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim", "--prometheus", "--port", "70000"]) == 2
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        assert run_app(smi_cli.app, "otpu-smi", ["--dev", "sim", "--prometheus", "--host", "127.0.0.1",
                                                 "--port", str(port)]) == 2
        assert "already in use" in capsys.readouterr().err
    finally:
        s.close()
