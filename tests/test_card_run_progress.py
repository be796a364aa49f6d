"""`otpu card run` shows the cycles of a long run on a terminal, and nothing otherwise."""
import io
import time

from rich.console import Console

from otpu_core.board import Board, BoardBackend
from otpu_core.commands.card_cmd import wait_showing_cycles

LONG = """loop count={n} body=@end
ld dram=0 tmem=0 n=64
end:
halt
"""


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=100), out


def run_long(con, after, n=60_000):
    with Board.open("sim", "sim-small") as board:
        backend = BoardBackend(board)
        backend.start(LONG.format(n=n))
        t0 = time.monotonic()
        stats = wait_showing_cycles(backend, board, 60, con, after=after)
        return stats, time.monotonic() - t0


def test_a_long_run_on_a_terminal_shows_its_cycles():
    con, out = console(terminal=True)
    stats, took = run_long(con, after=0.05)
    assert took > 0.3, "the run must outlast the delay for this test to mean anything"
    text = out.getvalue()
    assert "sim: running," in text and " cycles" in text
    shown = [int(w.replace(",", "")) for w in text.replace("\r", " ").split() if w.replace(",", "").isdigit()]
    assert shown and 0 < max(shown) <= stats.cycles          # cycles the card had counted, never more than the run took


def test_nothing_is_shown_off_a_terminal_or_before_the_delay():
    con, out = console(terminal=False)
    run_long(con, after=0.0, n=20_000)
    assert out.getvalue() == ""
    con, out = console(terminal=True)
    run_long(con, after=30.0, n=1000)
    assert "running" not in out.getvalue()


def test_a_run_that_never_halts_reports_the_time_it_was_given():
    import re

    import pytest

    from otpu_core.errors import DeviceError
    con, _ = console(terminal=False)
    with Board.open("sim:hung", "sim-small", faults="hang") as board:
        backend = BoardBackend(board)
        backend.start(LONG.format(n=10))
        with pytest.raises(DeviceError) as e:
            wait_showing_cycles(backend, board, 1.0, con)
    waited = float(re.search(r"did not halt within ([0-9.]+)s", e.value.message).group(1))
    assert 1.0 <= waited < 5.0
