"""Progress bars for the long checks (DRAM scrub, March C-), shown while a tool runs them.

`CheckProgress` is a transient Rich progress display; its `options()` are the callbacks the
checks look for in `CheckContext.options` (`scrub_progress(done, total)` and
`progress(channel, element, fraction, seconds)` for March C-, `soak_progress(done, total)`). On a terminal it draws bars;
elsewhere it stays off.
"""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn, TimeElapsedColumn

MARCH_ELEMENTS = 6


class CheckProgress:
    def __init__(self, console: Console):
        self.bars = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                             TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict[str, TaskID] = {}

    def _task(self, key: str, description: str, total: float) -> TaskID:
        if key not in self.tasks:
            self.tasks[key] = self.bars.add_task(description, total=total)
        return self.tasks[key]

    def scrub(self, done: int, total: int) -> None:
        self.bars.update(self._task("scrub", "DRAM scrub (ECC init)", total), completed=done)

    def march(self, ch: int, element: int, fraction: float, seconds: float) -> None:
        task = self._task(f"march{ch}", f"march C- channel {ch}", MARCH_ELEMENTS)
        self.bars.update(task, completed=element - 1 + fraction,
                         description=f"march C- channel {ch}: element {element}/{MARCH_ELEMENTS}")

    def soak(self, done: int, total: int) -> None:
        self.bars.update(self._task("soak", "soak", total), completed=done)

    def options(self) -> dict:
        return {"scrub_progress": self.scrub, "progress": self.march, "soak_progress": self.soak}

    def __enter__(self) -> "CheckProgress":
        if self.bars.console.is_terminal:   # a pipe or a file gets the rows only
            self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bars.live.is_started:
            self.bars.stop()
