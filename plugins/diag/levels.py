"""DCGM-style run levels of otpu-diag (`-r 1|2|3`, or quick / medium / long) and what each runs.

Level 1 answers "is the card there and sane" in seconds: platform, registers and I2C. Level 2
(the default) adds the memory tests, every ISA op check and the system checks. Level 3 adds
March C- over each whole channel and a soak of every program. `--mem` and `--soak` given with
a level override its choice; docs/tools.md lists the measured durations.
"""
from __future__ import annotations

from dataclasses import dataclass

from otpu_core.errors import UsageError


@dataclass(frozen=True)
class Level:
    number: int
    name: str
    sections: tuple[str, ...] | None   # None: every section
    mem: str
    soak: int
    meaning: str


LEVELS = {
    1: Level(1, "quick", ("platform", "regs", "i2c"), "quick", 0,
             "platform, registers and I2C: seconds, before a job (DCGM r1)"),
    2: Level(2, "medium", None, "quick", 0,
             "level 1 plus the memory tests, every ISA op check and the system checks (the default)"),
    3: Level(3, "long", None, "full", 10,
             "level 2 plus March C- over each whole channel and a soak of every program x10"),
}
ALIASES = {"quick": 1, "short": 1, "medium": 2, "long": 3}


def parse(text: str | None) -> Level:
    """A `-r` value: 1, 2, 3 or quick / short / medium / long (None: level 2)."""
    if text is None:
        return LEVELS[2]
    key = text.strip().lower()
    number = ALIASES.get(key)
    if number is None and key.isdigit():
        number = int(key)
    if number not in LEVELS:
        raise UsageError(f"-r {text!r}: not a run level",
                         hint="levels: " + "; ".join(f"{n} ({lv.name}): {lv.meaning}" for n, lv in LEVELS.items()))
    return LEVELS[number]
