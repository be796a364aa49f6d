"""One otpu-serve process: the listening socket, the cards, the scheduler and uvicorn around the app.

`Server(opts)` binds the socket first (a port in use is a usage error before any card is
touched), then opens the model and every card; `serve()` runs uvicorn until it is stopped
(SIGINT/SIGTERM in the main thread, or `stop()` from another) and then closes the scheduler
and the cards, so each card is left as it was found: no sequence running, its lock released.
"""
from __future__ import annotations

import contextlib
import errno
import signal
import socket
import threading
import time
from dataclasses import dataclass

from otpu_core.errors import UsageError

from .app import ServeState, build_app
from .cards import ServeOptions, close_cards, open_cards
from .metrics import ServeMetrics
from .scheduler import Scheduler


@dataclass
class HttpOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    queue: int = 64
    max_tokens: int = 256
    access_log: bool = False


def bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: must be 0..65535 (0: any free port)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UsageError(f"--host {host}: cannot be resolved ({e.strerror})") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: {host}:{port} is already in use",
                             hint="another server listens there; pick another --port (0: any free port)") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise UsageError(f"--port {port}: not allowed to listen on {host}:{port} (ports below 1024 need root)") \
                from None
        raise UsageError(f"--host {host} --port {port}: cannot listen: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _uvicorn_server(config):
    """uvicorn's Server, except that SIGINT/SIGTERM end `serve()` normally: uvicorn re-raises the signal after
    its graceful shutdown, which would kill the process before the cards are closed."""
    import uvicorn

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)

    return Quiet(config)


class Server:
    def __init__(self, card_opts: ServeOptions, http: HttpOptions, progress=None):
        import uvicorn
        if http.queue < 0:
            raise UsageError(f"--queue {http.queue}: must be at least 0")
        if http.max_tokens < 1:
            raise UsageError(f"--max-tokens {http.max_tokens}: must be at least 1")
        self.http = http
        self.sock = bind(http.host, http.port)
        try:
            self.model, self.cards = open_cards(card_opts, progress)
        except BaseException:
            self.sock.close()
            raise
        self.metrics = ServeMetrics()
        self.sched = Scheduler(self.cards, card_opts.max_batch, http.queue, self.metrics)
        limit = min(c.engine.limit for c in self.cards)
        self.state = ServeState(self.model, self.sched, self.metrics, http.api_key, limit, http.max_tokens,
                                int(time.time()))
        self.app = build_app(self.state)
        self.uv = _uvicorn_server(uvicorn.Config(self.app, log_level="warning", access_log=http.access_log,
                                                timeout_graceful_shutdown=5, lifespan="off"))

    @property
    def port(self) -> int: return self.sock.getsockname()[1]

    @property
    def url(self) -> str:
        host = self.http.host if ":" not in self.http.host else f"[{self.http.host}]"
        return f"http://{host}:{self.port}"

    def serve(self) -> None:
        self.sched.start()
        try:
            self.uv.run(sockets=[self.sock])
        finally:
            self.close()

    def stop(self) -> None:
        self.uv.should_exit = True

    def close(self) -> None:
        self.sched.close()
        close_cards(self.cards)
        self.cards = []
        self.sock.close()
