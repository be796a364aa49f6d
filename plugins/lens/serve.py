"""`otpu-lens open`: a small HTTP server on 127.0.0.1 for the page and its profiles, nothing else.

GET `/` (or `/index.html`) is the page, GET `/profile/N` the bytes of the N-th file as given
(gzip or plain JSON: the page inflates gzip itself); every other path, and every other method,
is 404 / 405. Every answer has Content-Length and `Cache-Control: no-store`, so a reloaded page
always shows the file as it is now. The socket binds 127.0.0.1 only (port 0: an ephemeral
port); request logging is off. `serve(...)` returns the server; `serve_forever` runs it until
Ctrl-C.
"""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import page

HOST = "127.0.0.1"


def make_handler(html: bytes, files: list[Path]):
    class Handler(BaseHTTPRequestHandler):
        server_version = "otpu-lens"
        sys_version = ""

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].split("#", 1)[0]
            if path in ("/", "/index.html"):
                return self._send(200, html, "text/html; charset=utf-8")
            if path.startswith("/profile/"):
                tail = path[len("/profile/"):]
                if tail.isdigit() and int(tail) < len(files):
                    try:
                        body = files[int(tail)].read_bytes()
                    except OSError as e:
                        return self._send(410, f"{files[int(tail)]}: {e.strerror}".encode(), "text/plain")
                    return self._send(200, body, "application/octet-stream")
            self._send(404, b"not found", "text/plain")

        do_HEAD = do_GET

        def _refuse(self) -> None:
            self._send(405, b"method not allowed", "text/plain")

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

        def log_message(self, *args) -> None:       # quiet: the terminal shows only our own lines
            pass

    return Handler


def serve(files: list[Path], port: int = 0, title: str = "otpu-lens") -> ThreadingHTTPServer:
    html = page.render(title, urls=[f"/profile/{i}" for i in range(len(files))]).encode()
    server = ThreadingHTTPServer((HOST, port), make_handler(html, files))
    server.daemon_threads = True
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    return f"http://{HOST}:{server.server_address[1]}/"


def in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    """Serve on a daemon thread (tests, benchmarks); `server.shutdown()` stops it."""
    t = threading.Thread(target=server.serve_forever, name="otpu-lens-http", daemon=True)
    t.start()
    return t
