"""What /metrics says: requests, tokens, queue, batch and KV pages, through `prometheus-client`.

Counters and histograms are updated by the app and the card workers as things happen; the
per-card gauges (sequences running, KV pages free / cached / used, card up) and the queue are
read from the scheduler at each scrape by a collector, so they are never stale. Every server has
its own registry (two servers in one test process do not mix).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Live:
    """Gauges read from the scheduler when Prometheus scrapes."""

    def __init__(self, metrics: "ServeMetrics"):
        self.m = metrics

    def collect(self):
        s = self.m.sched
        if s is None:
            return
        yield GaugeMetricFamily("otpu_serve_ready", "1 when a card is open and the model loaded.", value=int(s.ready))
        yield GaugeMetricFamily("otpu_serve_queue_waiting", "Requests queued, not yet admitted to a batch.",
                                value=len(s.waiting))
        up = GaugeMetricFamily("otpu_serve_card_up", "1 while the card serves.", labels=["card"])
        run = GaugeMetricFamily("otpu_serve_requests_running", "Sequences in the card's running batch.", labels=["card"])
        pages = GaugeMetricFamily("otpu_serve_kv_pages", "KV pages of the card by state (free, cached: a reusable "
                                  "prompt prefix, used: held by a running sequence only).", labels=["card", "state"])
        cycles = CounterMetricFamily("otpu_serve_card_cycles", "Core cycles of the card's runs (its counters), by "
                                     "phase.", labels=["card", "phase"])
        for w in s.workers:
            dev = w.card.device
            cycles.add_metric([dev, "prefill"], w.prefill_cost.cycles)
            cycles.add_metric([dev, "decode"], w.decode_cost.cycles)
            up.add_metric([dev], int(w.alive))
            run.add_metric([dev], len(w.running))
            pool = w.pool
            pages.add_metric([dev, "free"], pool.free)
            pages.add_metric([dev, "cached"], pool.cached)
            pages.add_metric([dev, "used"], pool.total - pool.free - pool.cached)
        yield from (up, run, pages, cycles)


class ServeMetrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.sched = None
        self.requests = Counter("otpu_serve_requests", "HTTP requests answered, by endpoint and status code.",
                                ["endpoint", "code"], registry=r)
        self.prompt_tokens = Counter("otpu_serve_prompt_tokens", "Prompt tokens admitted.", registry=r)
        self.reused_tokens = Counter("otpu_serve_prompt_tokens_reused", "Prompt tokens whose KV pages were "
                                     "reused from the prefix cache instead of prefilled.", registry=r)
        self.generated = Counter("otpu_serve_generation_tokens", "Tokens generated.", registry=r)
        self.card_requests = Counter("otpu_serve_card_requests", "Requests admitted to a card's batch.", ["card"],
                                     registry=r)
        self.batch = Histogram("otpu_serve_batch_size", "Sequences decoded together in one step program.",
                               buckets=(1, 2, 3, 4, 6, 8, 12, 16), registry=r)
        self.iteration = Histogram("otpu_serve_decode_iteration_seconds", "Wall time of one token boundary: every "
                                   "running sequence decoded one token.", registry=r)
        self.ttft = Histogram("otpu_serve_time_to_first_token_seconds", "From a request's arrival to its first "
                              "token.", registry=r)
        self.latency = Histogram("otpu_serve_request_seconds", "From a request's arrival to its last token.",
                                 registry=r)
        r.register(_Live(self))

    def bind(self, sched) -> None: self.sched = sched

    def admitted(self, job, card: str) -> None:
        self.card_requests.labels(card).inc()
        self.prompt_tokens.inc(len(job.prompt))
        self.reused_tokens.inc(job.reused)

    def token(self, job, first: bool, now: float) -> None:
        self.generated.inc()
        if first:
            self.ttft.observe(now - job.submitted)

    def finished(self, job, now: float) -> None: self.latency.observe(now - job.submitted)

    def step(self, rows: int) -> None: self.batch.observe(rows)

    def step_time(self, seconds: float) -> None: self.iteration.observe(seconds)

    def text(self) -> bytes: return generate_latest(self.registry)
