"""`otpu-smi --prometheus`: every smi field of every card as a Prometheus metric, the way dcgm-exporter
serves GPUs, through `prometheus-client`.

Each scrape samples every card (the counters since the previous scrape, so utilisation and
bandwidth cover the scrape interval, as dcgm-exporter's do). A numeric field becomes a gauge
`otpu_<field>_<unit>` (`temperature.die` in C is `otpu_temperature_die_celsius`), a yes/no field
a 0/1 gauge, and the text fields the labels of `otpu_card_info`. Every sample carries the card's
labels: `card` (its index), `device` (the --dev spec), `model_name` (the board) and `hostname`.
`otpu_card_up` is 0 for a card that cannot be read (its fields are then absent).
"""
from __future__ import annotations

import errno
import re
import socket
import threading
import time

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily

from otpu_core import smi_fields
from otpu_core.errors import UsageError

DEFAULT_PORT = 9402
UNIT_SUFFIX = {"C": "celsius", "W": "watts", "MiB": "mebibytes", "GB/s": "gigabytes_per_second", "%": "percent",
               "ms": "milliseconds", "MHz": "megahertz", "tok/s": "tokens_per_second"}
LABELS = ["card", "device", "model_name", "hostname"]
SKIP = {"index", "timestamp", "device", "name"}      # the labels themselves


def metric_name(field: str, unit: str) -> str:
    """`otpu_` + the field in snake case + its unit spelled out (a field named after its unit, like
    `sample.ms`, drops the abbreviation)."""
    parts = re.sub(r"[^a-z0-9]+", "_", field.lower()).strip("_").split("_")
    if parts[-1] == unit.lower():
        parts.pop()
    suffix = UNIT_SUFFIX.get(unit)
    return "_".join(["otpu"] + parts + ([suffix] if suffix else []))


class CardCollector:
    def __init__(self, samplers, errors: list[dict]):
        self.samplers, self.errors = samplers, errors
        self.host = socket.gethostname()
        self.lock = threading.Lock()

    def collect(self):
        with self.lock:
            reports = [s.sample(0) for s in self.samplers] + self.errors
        up = GaugeMetricFamily("otpu_card_up", "1 when the card answers, 0 when it cannot be read.", labels=LABELS)
        info_labels = [f for f, spec in smi_fields.CATALOGUE.items() if f not in SKIP]
        families: dict[str, GaugeMetricFamily] = {}
        infos = []
        for i, r in enumerate(reports):
            fields = r.get("fields", {})
            name = fields["name"].value if "name" in fields else ""
            base = [str(i), r["device"], name or "", self.host]
            up.add_metric(base, 1 if r.get("ok") else 0)
            if not r.get("ok"):
                continue
            text = {}
            for f in fields.values():
                if f.name in SKIP or f.value is None:
                    continue
                if isinstance(f.value, bool):
                    value = float(f.value)
                elif isinstance(f.value, (int, float)):
                    value = float(f.value)
                else:
                    text[f.name] = str(f.value)
                    continue
                spec = smi_fields.CATALOGUE.get(f.name)
                unit = spec.unit if spec else f.unit
                mname = metric_name(f.name, unit)
                fam = families.get(mname)
                if fam is None:
                    fam = families[mname] = GaugeMetricFamily(mname, spec.help if spec else f.name, labels=LABELS)
                fam.add_metric(base, value)
            infos.append((base, text))
        yield up
        yield from families.values()
        keys = sorted({k for _, t in infos for k in t} & set(info_labels))
        info = GaugeMetricFamily("otpu_card_info", "The card's identity and state as text labels (value 1).",
                                 labels=LABELS + [re.sub(r"[^a-z0-9]+", "_", k) for k in keys])
        for base, t in infos:
            info.add_metric(base + [t.get(k, "") for k in keys], 1)
        yield info


def serve(samplers, errors: list[dict], host: str, port: int, on_ready=None) -> None:
    """Serve /metrics until Ctrl-C."""
    registry = CollectorRegistry()
    registry.register(CardCollector(samplers, errors))
    try:
        httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: {host or '*'}:{port} is already in use",
                             hint="another exporter listens there; pick another --port") from None
        raise UsageError(f"--port {port}: cannot listen on {host or '*'}:{port}: {e.strerror}") from None
    if on_ready is not None:
        on_ready(httpd.server_address[1])
    try:
        while thread.is_alive():
            time.sleep(0.5)
    finally:
        httpd.shutdown()
        httpd.server_close()
