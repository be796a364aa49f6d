"""How otpu-selftest prints: one line per stage, the hint of the stage that stopped, the verdict.

A stage may be several checks (the address stage tests each channel); its line shows the worst
status, the messages joined and the seconds summed. Lines are printed as each stage ends.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rich.markup import escape

from otpu_core.checks import Row, Status

STATUS_STYLE = {Status.PASS: "green", Status.WARN: "bold yellow", Status.FAIL: "bold red", Status.SKIP: "yellow",
                Status.INFO: "cyan"}
_RANK = {Status.FAIL: 4, Status.WARN: 3, Status.SKIP: 2, Status.INFO: 1, Status.PASS: 0}
NAME_WIDTH = 10
MESSAGE_WIDTH = 120


@dataclass
class StageLine:
    stage: str
    rows: list[Row] = field(default_factory=list)

    @property
    def status(self) -> Status:
        if any(r.blocked_by for r in self.rows):
            return Status.FAIL
        return max((r.status for r in self.rows), key=_RANK.__getitem__)

    @property
    def message(self) -> str:
        """Each row's message, joined; a failing stage shows only what failed; a long passing list is counted."""
        st = self.status
        rows = [r for r in self.rows if r.status == st or r.blocked_by] if st == Status.FAIL else self.rows
        joined = "; ".join(dict.fromkeys(r.message for r in rows if r.message))
        if st == Status.PASS and len(self.rows) > 2 and all(r.section == "isa" for r in self.rows):
            return f"{len(self.rows)} op checks bit-exact against the golden simulator"
        if st == Status.PASS and len(self.rows) > 2 and len(joined) > MESSAGE_WIDTH:
            return f"{len(self.rows)} checks pass ({self.rows[0].section})"
        return joined

    @property
    def seconds(self) -> float: return sum(r.seconds for r in self.rows)

    @property
    def hint(self) -> str | None:
        for r in self.rows:
            if r.hint and (r.status == Status.FAIL or r.blocked_by):
                return r.hint
        return None

    def as_dict(self) -> dict:
        return {"stage": self.stage, "status": self.status.value, "message": self.message,
                "seconds": round(self.seconds, 3), "hint": self.hint, "rows": [r.as_dict() for r in self.rows]}


def group_stages(rows: list[Row]) -> list[StageLine]:
    out: list[StageLine] = []
    for r in rows:
        if not out or out[-1].stage != r.stage:
            out.append(StageLine(r.stage or r.name))
        out[-1].rows.append(r)
    return out


def stage_text(line: StageLine) -> str:
    """Rich markup for one stage line (and its hint when the stage stopped the run)."""
    st = line.status
    text = (f"  [{STATUS_STYLE[st]}]\\[{st.value}][/] {line.stage:<{NAME_WIDTH}} {escape(line.message)}"
            f"  ({line.seconds:.1f}s)")
    if line.hint and st == Status.FAIL:
        text += f"\n         hint: {escape(line.hint)}"
    return text


def verdict_text(stopped: str | None, lines: list[StageLine] = ()) -> str:
    """`ALL PASS` (with the stages that checked nothing counted: `ALL PASS, 2 skipped`) or
    `stopped at stage 'x'`."""
    if stopped is not None:
        return f"[bold red]stopped at stage '{stopped}'[/]"
    extra = "".join(f", {k} {what}" for k, what in ((sum(ln.status == Status.WARN for ln in lines), "near a limit"),
                                                      (sum(ln.status == Status.SKIP for ln in lines), "skipped")) if k)
    return f"[bold green]ALL PASS[/]{extra}"


def verdict_plain(stopped: str | None, lines: list[StageLine] = ()) -> str:
    from rich.text import Text
    return Text.from_markup(verdict_text(stopped, lines)).plain
