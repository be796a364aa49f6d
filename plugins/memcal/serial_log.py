"""The core CPU's calibration log over a serial port (`otpu-memcal console`), read with pyserial.

The firmware prints what the host calibration prints (reference host.md 6.3): per channel a
`DDR3 channel C` heading, `write latency: m0:6 ...`, `m0: b5 |0000111...| window 10 taps ...`
lines, `all lanes: 45 steps (753 ps) around +50`, `calibration: PASS` or `FAIL`, and BIST
lines. `LogSummary` follows the lines and keeps, per channel, the window, the write
latencies, the read windows and the verdicts; `read_log` prints lines as they arrive and
stops at the end of the calibration (every channel it mentioned has a verdict), after a
timeout, or never with `follow`.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable

_NAMED = re.compile(r"\bchannels \[([\d, ]+)\]")
_CHANNEL = re.compile(r"\b(?:DDR3 )?channel (\d)\b|\bch(\d)\b")
_VERDICT = re.compile(r"\b(calibration|BIST):\s*(PASS|FAIL)\b")
_WINDOW = re.compile(r"(\d+) steps \((\d+) ps\)(?: around ([+-]?\d+))?")
_COMMON = re.compile(r"common write window (\d+) ps")
_LATENCY = re.compile(r"write latency:((?:\s+m\d+:[-\d]+)+)")
_READ = re.compile(r"\bm(\d+): b(\d+) \|([01]+)\| window (\d+) taps")


@dataclass
class ChannelLog:
    verdict: str | None = None           # PASS / FAIL of "calibration:"
    bist: str | None = None
    window_steps: int | None = None
    window_ps: int | None = None
    around: int | None = None
    write_latency: dict[int, int | None] = field(default_factory=dict)
    read_taps: dict[int, int] = field(default_factory=dict)


@dataclass
class LogSummary:
    """What the log said so far; it ends when every expected channel has its `calibration:` verdict
    (the channels the log names in its `channels [0, 1]` info line, else `expected`)."""
    expected: tuple[int, ...] = (0, 1)
    channels: dict[int, ChannelLog] = field(default_factory=dict)
    lines: int = 0
    current: int = 0

    def feed(self, line: str) -> None:
        self.lines += 1
        if named := _NAMED.search(line):
            self.expected = tuple(int(x) for x in re.findall(r"\d", named.group(1)))
        m = _CHANNEL.search(line)
        if m:
            self.current = int(m.group(1) or m.group(2))
        ch = self.channels.setdefault(self.current, ChannelLog())
        for what, verdict in _VERDICT.findall(line):
            if what == "calibration":
                ch.verdict = verdict
            else:
                ch.bist = verdict
        if "all lanes" in line and (w := _WINDOW.search(line)):
            ch.window_steps, ch.window_ps = int(w.group(1)), int(w.group(2))
            ch.around = int(w.group(3)) if w.group(3) else None
        if c := _COMMON.search(line):
            ch.window_ps = int(c.group(1))
        if lat := _LATENCY.search(line):
            for item in lat.group(1).split():
                lane, _, v = item[1:].partition(":")
                ch.write_latency[int(lane)] = None if v == "-" else int(v)
        if r := _READ.search(line):
            ch.read_taps[int(r.group(1))] = int(r.group(4))

    @property
    def finished(self) -> bool:
        return all(self.channels.get(ch, ChannelLog()).verdict for ch in self.expected)

    @property
    def passed(self) -> bool:
        return self.finished and all(self.channels[ch].verdict == "PASS" for ch in self.expected)

    def as_dict(self) -> dict:
        return {"lines": self.lines, "finished": self.finished, "passed": self.passed, "expected": list(self.expected),
                "channels": {str(k): vars(v) for k, v in sorted(self.channels.items())
                             if v.verdict or v.window_ps or v.write_latency}}


TRAILER_S = 0.5        # after the last verdict, lines that follow at once (a BIST) still belong to the log


def read_log(port, summary: LogSummary, on_line: Callable[[str], None], timeout: float, follow: bool,
             clock=time.monotonic) -> bool:
    """Read lines from an open serial port until the calibration ends (unless `follow`) or
    `timeout` seconds pass without the end; True when it ended."""
    buf = b""
    deadline = clock() + timeout
    quiet_since = None
    while follow or clock() < deadline:
        chunk = port.read(port.in_waiting or 1)
        if not chunk:
            if summary.finished and not follow:
                quiet_since = quiet_since or clock()
                if clock() - quiet_since >= TRAILER_S:
                    return True
            continue
        quiet_since = None
        buf += chunk
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            summary.feed(line)
            on_line(line)
    return summary.finished
