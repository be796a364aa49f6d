"""A fleet on one machine (slow): two otpu-serve processes, each on its own simulated card, behind Debian's
nginx on loopback; one is stopped and restarted while the openai client keeps getting answers through
the proxy; Debian's Prometheus scrapes both servers and an `otpu-smi --prometheus` exporter, and a metric
is read back through Prometheus' HTTP query API. Without nginx or prometheus the tests skip, except
under CI (OTPU_CI=1), where a missing binary fails them."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from servetest import client

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def need(binary: str) -> str:
    path = shutil.which(binary) or next((p for p in (f"/usr/sbin/{binary}", f"/usr/bin/{binary}")
                                         if os.access(p, os.X_OK)), None)
    if path is None:
        msg = f"{binary} is not installed (Debian package '{binary}'; .ci/run installs it)"
        if os.environ.get("OTPU_CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, status: int = 200, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == status:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {status} within {timeout} s")


class Proc:
    def __init__(self, args, log: Path, env=None):
        self.args, self.log, self.env = args, log, env
        self.p = None

    def start(self):
        self.fh = open(self.log, "ab")
        self.p = subprocess.Popen(self.args, stdout=self.fh, stderr=subprocess.STDOUT, env=self.env)
        return self

    def stop(self, sig=signal.SIGTERM) -> int | None:
        if self.p is None:
            return None
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.fh.close()
        rc, self.p = self.p.returncode, None
        return rc


def serve_proc(name: str, port: int, tmp: Path, env) -> Proc:
    return Proc([str(BIN / "otpu-serve"), "--dev", f"sim:{name}", "--port", str(port), "--max-batch", "2",
                 "--max-tokens", "4"], tmp / f"{name}.log", env)


NGINX_CONF = """
{user}
worker_processes 1;
error_log {tmp}/nginx-error.log warn;
pid {tmp}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
    uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
    upstream otpu {{
        server 127.0.0.1:{a} max_fails=1 fail_timeout=2s;
        server 127.0.0.1:{b} max_fails=1 fail_timeout=2s;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://otpu;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 120s;
            proxy_connect_timeout 2s;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_next_upstream_tries 2;
        }}
    }}
}}
"""


@pytest.fixture
def env():
    return dict(os.environ)         # the test's own run directory and cache (conftest), for every process


def test_nginx_routes_around_a_stopped_server_and_prometheus_scrapes_the_fleet(tmp_path, env):
    nginx, prometheus = need("nginx"), need("prometheus")
    pa, pb, px, pn, pp = (free_port() for _ in range(5))
    a, b = serve_proc("fleetA", pa, tmp_path, env).start(), serve_proc("fleetB", pb, tmp_path, env).start()
    exp = Proc([str(BIN / "otpu-smi"), "--prometheus", "--host", "127.0.0.1", "--port", str(px), "--dev",
                "sim:fleetA", "--dev", "sim:fleetB"], tmp_path / "exporter.log", env)
    (tmp_path / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp_path, a=pa, b=pb, port=pn,
                                                           user="user root;" if os.geteuid() == 0 else ""))
    ngx = Proc([nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
               tmp_path / "nginx.log")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
        f"  - job_name: otpu-serve\n    static_configs: [{{targets: ['127.0.0.1:{pa}', '127.0.0.1:{pb}']}}]\n"
        f"  - job_name: otpu-smi\n    static_configs: [{{targets: ['127.0.0.1:{px}']}}]\n")
    prom = Proc([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{pp}"],
                tmp_path / "prometheus.log")
    procs = [a, b, exp, ngx, prom]
    try:
        wait_http(f"http://127.0.0.1:{pa}/ready")
        wait_http(f"http://127.0.0.1:{pb}/ready")
        exp.start(), ngx.start(), prom.start()
        wait_http(f"http://127.0.0.1:{pn}/ready")
        oa = client(type("S", (), {"url": f"http://127.0.0.1:{pn}"})())

        def ask(i: int) -> str:
            r = oa.chat.completions.create(model="qwen3-pydoc", messages=[{"role": "user", "content": f"Q{i}"}],
                                           temperature=0, max_tokens=2)
            assert r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens >= 1
            return r.choices[0].message.content

        for i in range(4):
            ask(i)
        assert a.stop() == 0                                   # a clean stop: SIGTERM, exit 0
        for i in range(4):                                     # every request still answered, by B
            ask(10 + i)
        a = serve_proc("fleetA", pa, tmp_path, env).start()
        procs[0] = a
        wait_http(f"http://127.0.0.1:{pa}/ready")
        served_a = 0.0
        for i in range(8):                                     # A back in the rotation
            ask(20 + i)
            m = re.search(r'^otpu_serve_requests_total\{code="200",endpoint="/v1/chat/completions"\} (\S+)$',
                          httpx.get(f"http://127.0.0.1:{pa}/metrics").text, re.M)
            served_a = float(m.group(1)) if m else 0.0
            if served_a:
                break
        assert served_a >= 1, "nginx never sent a request to the restarted server"

        def query(q: str) -> list:
            r = httpx.get(f"http://127.0.0.1:{pp}/api/v1/query", params={"query": q}, timeout=10).json()
            assert r["status"] == "success", r
            return r["data"]["result"]

        deadline, gen, up = time.monotonic() + 60, [], []
        while time.monotonic() < deadline:
            gen = query('otpu_serve_generation_tokens_total{job="otpu-serve"}')
            up = query('otpu_card_up{job="otpu-smi"}')
            if len(gen) == 2 and len(up) == 2 and all(float(g["value"][1]) > 0 for g in gen):
                break
            time.sleep(1)
        assert sorted(g["metric"]["instance"] for g in gen) == sorted([f"127.0.0.1:{pa}", f"127.0.0.1:{pb}"]), gen
        assert all(float(g["value"][1]) > 0 for g in gen), gen
        assert sorted(u["metric"]["device"] for u in up) == ["sim:fleetA", "sim:fleetB"]
        assert all(u["value"][1] == "1" for u in up), up
    finally:
        for p in reversed(procs):
            p.stop()
