"""An otpu-serve running in a thread of the test process, on a loopback port, with simulated cards.

`running(tmp, devs=..., **http)` starts it (its cards live in their own run directory) and stops
it on leaving; `idle(server)` waits until it holds no request; `client(server)` is the official `openai` client pointed at it (no retries, so a
429 reaches the test). Module fixtures share one program cache (see llmtiny.shared_cache).
"""
from __future__ import annotations

import contextlib
import re
import threading
import time

import httpx
import pytest

from otpu_serve.cards import ServeOptions
from otpu_serve.server import HttpOptions, Server


@contextlib.contextmanager
def running(tmp, devs=("sim",), max_batch: int = 4, kv_pages: int | None = None, model: str | None = None,
            target: str | None = None, **http):
    with pytest.MonkeyPatch.context() as mp:
        run = tmp / "run"
        run.mkdir(exist_ok=True)
        mp.setenv("OTPU_RUN_DIR", str(run))
        server = Server(ServeOptions(list(devs), model=model, target=target, max_batch=max_batch, kv_pages=kv_pages),
                        HttpOptions(port=0, **http))
    t = threading.Thread(target=server.serve, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("otpu-serve did not come up")
        time.sleep(0.05)
    try:
        yield server
    finally:
        server.stop()
        t.join(timeout=30)


def client(server, key: str = "none", timeout: float = 300, **kw):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=timeout, **kw)


def idle(server, timeout: float = 120) -> None:
    """Wait until the server holds no request (a closed stream is reaped at the card's next step)."""
    deadline = time.monotonic() + timeout
    while metric(server, "otpu_serve_queue_waiting") or metric(server, "otpu_serve_requests_running"):
        if time.monotonic() > deadline:
            raise AssertionError(f"otpu-serve still holds requests after {timeout} s")
        time.sleep(0.05)


def metric(server, name: str, **labels) -> float:
    """One sample of the server's /metrics (0 when absent)."""
    text = httpx.get(server.url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pat = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
    for m in pat.finditer(text):
        if all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()) or not want:
            return float(m.group(2))
    return 0.0
