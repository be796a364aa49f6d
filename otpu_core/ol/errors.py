"""Compile errors of `ol` programs, each naming the line of the user's program that caused it.

The line is the innermost stack frame outside the compiler package itself, so an error raised
deep inside lowering still points at the `ol` source line that asked for the operation; when
that line is in the kernel library, the user's line that called the library follows it.
"""
from __future__ import annotations

import linecache
import sys
from pathlib import Path

from ..errors import UsageError

_OL_DIR = str(Path(__file__).resolve().parent)
_KERNELS_DIR = str(Path(__file__).resolve().parent.parent / "kernels")


def _frame_outside(frame, dirs: tuple[str, ...]):
    while frame is not None:
        if not _inside(frame, dirs):
            fname = frame.f_code.co_filename
            return fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno).strip()
        frame = frame.f_back
    return None


def source_line() -> tuple[str, int, str] | None:
    """(file, line number, text) of the innermost frame outside `otpu_core/ol`, or None."""
    return _frame_outside(sys._getframe(1), (_OL_DIR,))


CHAIN_DEPTH = 8


def source_chain() -> tuple[tuple[str, int, str], ...]:
    """(file, line, function) of the frames between the compiler's entry and the `ol` call being
    traced, innermost first: the line that emitted an instruction, then the kernel lines that
    called it, up to the kernel function itself (at most CHAIN_DEPTH frames)."""
    frame, out = sys._getframe(1), []
    while frame is not None and _inside(frame, (_OL_DIR,)):
        frame = frame.f_back
    while frame is not None and not _inside(frame, (_OL_DIR,)) and len(out) < CHAIN_DEPTH:
        out.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(out)


def _inside(frame, dirs: tuple[str, ...]) -> bool:
    return str(Path(frame.f_code.co_filename).resolve()).startswith(dirs)


def caller_line() -> tuple[str, int, str] | None:
    """The innermost frame outside both the compiler and the kernel library: the user's line."""
    return _frame_outside(sys._getframe(1), (_OL_DIR, _KERNELS_DIR))


class CompileError(UsageError):
    """An `ol` program that cannot be compiled; the message ends with the program line responsible."""

    def __init__(self, message: str, hint: str | None = None, where: tuple[str, int, str] | None = None):
        self.where = where if where is not None else source_line()
        self.reason = message
        if self.where is not None and self.where[0]:
            fname, line, text = self.where
            message = f"{message}\n  at {Path(fname).name}:{line}: {text}"
            caller = caller_line() if where is None else None
            if caller is not None and caller[:2] != self.where[:2]:
                message += f"\n  called from {Path(caller[0]).name}:{caller[1]}: {caller[2]}"
        super().__init__(message, hint)
