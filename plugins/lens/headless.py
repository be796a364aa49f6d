"""Debian's Chromium driven headless by Playwright, for the page's tests and benchmark.

Playwright never downloads a browser here: it launches `/usr/bin/chromium` (`OTPU_CHROMIUM`
overrides) with a fresh user-data directory and the flags a closed network needs (no
background networking, component updates, sync or QUIC). `browser_missing()` says why the
browser cannot run (None when it can); `launch(user_dir)` returns a Playwright context manager
and a browser context; `wait_until(page, expr)` polls an expression (the page's
Content-Security-Policy forbids the eval Playwright's `wait_for_function` needs).
"""
from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium_path() -> str:
    return os.environ.get("OTPU_CHROMIUM", "/usr/bin/chromium")


def browser_missing() -> str | None:
    path = chromium_path()
    if not (Path(path).is_file() or shutil.which(path)):
        return f"no Chromium at {path} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


@contextmanager
def launch(user_dir: Path, width: int = 1400, height: int = 900):
    """A headless browser context with a fresh profile in `user_dir`, closed on exit."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(str(user_dir), executable_path=chromium_path(), headless=True,
                                                    args=list(ARGS), viewport={"width": width, "height": height})
        try:
            yield ctx
        finally:
            ctx.close()


def wait_until(page, expr: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not page.evaluate(expr):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {expr}")
        time.sleep(0.05)
