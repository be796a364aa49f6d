"""Progress bars for the long checks (DRAM scrub, March C-), shown while a tool runs them.

`CheckProgress` is a transient Rich progress display; its `options()` are the callbacks the
checks look for in `CheckContext.options` (`scrub_progress(done, total)` and
`progress(channel, element, fraction, seconds)` for March C-, `soak_progress(done, total)`). On a terminal it draws bars;
piped, it writes a plain line on stderr every few seconds (`otpu: march C- channel 0: element 2/6, 35%, 12 s`),
so a log shows the run is alive.
"""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

MARCH_ELEMENTS = 6


PIPE_EVERY_S = 5.0


class CheckProgress:
    def __init__(self, console: Console, stream=None, every: float = PIPE_EVERY_S):
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                             TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict[str, TaskID] = {}
        self.piped = not console.is_terminal
        self.stream, self.every = stream, every
        self._t0 = self._last = time.monotonic()

    def _task(self, key: str, description: str, total: float) -> TaskID:
        if key not in self.tasks:
            self.tasks[key] = self.bars.add_task(description, total=total)
        return self.tasks[key]

    def _line(self, text: str, fraction: float) -> None:
        """Piped: one line now and then, never a bar."""
        now = time.monotonic()
        if self.piped and now - self._last >= self.every:
            self._last = now
            print(f"otpu: {text}, {100 * fraction:.0f}%, {now - self._t0:.0f} s", file=self.stream or sys.stderr,
                  flush=True)

    def scrub(self, done: int, total: int) -> None:
        self.bars.update(self._task("scrub", "DRAM scrub (ECC init)", total), completed=done)
        self._line("DRAM scrub (ECC init)", done / max(total, 1))

    def march(self, ch: int, element: int, fraction: float, seconds: float) -> None:
        task = self._task(f"march{ch}", f"march C- channel {ch}", MARCH_ELEMENTS)
        what = f"march C- channel {ch}: element {element}/{MARCH_ELEMENTS}"
        self.bars.update(task, completed=element - 1 + fraction, description=what)
        self._line(what, (element - 1 + fraction) / MARCH_ELEMENTS)

    def soak(self, done: int, total: int) -> None:
        self.bars.update(self._task("soak", "soak", total), completed=done)
        self._line(f"soak: program {done} of {total}", done / max(total, 1))

    def options(self) -> dict:
        return {"scrub_progress": self.scrub, "progress": self.march, "soak_progress": self.soak}

    def __enter__(self) -> "CheckProgress":
        if self.bars.console.is_terminal:   # a pipe or a file gets the rows only
            self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bars.live.is_started:
            self.bars.stop()
