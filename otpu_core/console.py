"""Terminal output shared by every tool: Rich consoles (colour only on a tty), JSON, user errors."""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from .errors import OtpuError


PIPE_WIDTH = 160  # tables written to a pipe or file are not squeezed to 80 columns


def _console(file) -> Console:
    width = None if file.isatty() else PIPE_WIDTH
    # emoji off: ":abc:" in user data (e.g. "tmem:abc:2") must print as typed
    return Console(file=file, highlight=False, soft_wrap=True, width=width, emoji=False)


def stdout() -> Console:
    # Made per call so tests that swap sys.stdout (CliRunner) see the output.
    return _console(sys.stdout)


def stderr() -> Console:
    return _console(sys.stderr)


def print_json(obj: Any) -> None:
    """Machine-readable output: plain JSON on stdout, never coloured, one document per call."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_jsonable) + "\n")


def _jsonable(o: Any) -> Any:
    if hasattr(o, "as_dict"):
        return o.as_dict()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


def print_error(err: OtpuError | str, prog: str = "otpu") -> None:
    con = stderr()
    message = err.message if isinstance(err, OtpuError) else err
    # The message is data (paths, specs, "[arch]"): never parsed as markup.
    con.print(Text.assemble((f"{prog}: error:", "bold red"), " ", message))
    hint = getattr(err, "hint", None)
    if hint:
        con.print(f"  hint: {hint}", markup=False)


SPIN_AFTER = 2.0  # seconds of waiting before a spinner appears
PIPED_EVERY = 5.0  # seconds between progress lines on stderr when it is not a terminal


def spin_while(busy: Callable[[], bool], describe: Callable[[], str], console: Console,
               after: float = SPIN_AFTER, poll: float = 0.0) -> None:
    """Call `busy()` until it returns False (sleeping `poll` s between calls). Past `after`
    seconds, on a terminal, a transient spinner shows `describe()` and the time elapsed; not on
    a terminal, a line with `describe()` goes to stderr every PIPED_EVERY seconds."""
    t0 = time.monotonic()
    said = t0
    while busy():
        now = time.monotonic()
        if console.is_terminal and now - t0 >= after:
            break
        if not console.is_terminal and now - said >= PIPED_EVERY:   # piped: a plain line now and then
            said = now
            print(f"otpu: {describe()} ({now - t0:.0f} s)", file=sys.stderr, flush=True)
        time.sleep(poll)
    else:
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(describe(), total=None)
        while busy():
            bar.update(task, description=describe())
            time.sleep(poll)


class WorkProgress:
    """Progress of a long job: a transient bar on stderr when it is a terminal, otherwise plain
    lines on stderr (`<prog>: <what> <done>/<total>`), at most one per `every` seconds and one
    whenever `what` changes. Use as a context manager; `update(what, done, total)` (total None:
    a count without an end)."""

    def __init__(self, prog: str, every: float = 2.0, console: Console | None = None, clock=time.monotonic):
        self.prog, self.every, self.clock = prog, every, clock
        self.console = console or stderr()
        self.bar: Progress | None = None
        self.task = None
        self._last = (None, -1e9)

    def __enter__(self) -> "WorkProgress":
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                TimeElapsedColumn(), console=self.console, transient=True)
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, what: str, done: float, total: float | None = None) -> None:
        if self.bar is not None:
            if self.task is None:
                self.task = self.bar.add_task(what, total=total)
            self.bar.update(self.task, description=what, completed=done, total=total)
            return
        now = self.clock()
        if what != self._last[0] or now - self._last[1] >= self.every:
            count = f"{done:g}/{total:g}" if total else f"{done:g}"
            print(f"{self.prog}: {what} {count}", file=self.console.file, flush=True)
            self._last = (what, now)
