"""WorkProgress: plain progress lines on stderr when it is not a terminal, throttled, one at every new stage."""
from __future__ import annotations

import io

from rich.console import Console

from otpu_core.console import WorkProgress


def test_plain_lines_are_throttled_and_follow_the_stage():
    out = io.StringIO()
    now = [0.0]
    with WorkProgress("otpu-x", every=2.0, console=Console(file=out, force_terminal=False), clock=lambda: now[0]) as p:
        for k in range(1, 11):
            now[0] = k * 0.5
            p.update("sweep", k, 10)
        p.update("level", 1, 32)
        p.update("level", 2, 32)
        p.update("wait (s)", 3)
    assert out.getvalue().splitlines() == ["otpu-x: sweep 1/10", "otpu-x: sweep 5/10", "otpu-x: sweep 9/10",
                                           "otpu-x: level 1/32", "otpu-x: wait (s) 3"]


def test_a_terminal_gets_a_bar_and_no_lines():
    out = io.StringIO()
    with WorkProgress("otpu-x", console=Console(file=out, force_terminal=True, width=80)) as p:
        assert p.bar is not None
        p.update("sweep", 3, 10)
    assert "otpu-x: sweep" not in out.getvalue()
