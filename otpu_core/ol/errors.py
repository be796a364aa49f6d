"""Compile errors of `ol` programs, each naming the line of the user's program that caused it.

The line is the innermost stack frame outside the compiler package itself, so an error raised
deep inside lowering still points at the `ol` source line that asked for the operation.
"""
from __future__ import annotations

import linecache
import sys
from pathlib import Path

from ..errors import UsageError

_OL_DIR = str(Path(__file__).resolve().parent)


def source_line() -> tuple[str, int, str] | None:
    """(file, line number, text) of the innermost frame outside `otpu_core/ol`, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        if not str(Path(fname).resolve()).startswith(_OL_DIR):
            return fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno).strip()
        frame = frame.f_back
    return None


class CompileError(UsageError):
    """An `ol` program that cannot be compiled; the message ends with the program line responsible."""

    def __init__(self, message: str, hint: str | None = None, where: tuple[str, int, str] | None = None):
        self.where = where if where is not None else source_line()
        self.reason = message
        if self.where is not None:
            fname, line, text = self.where
            message = f"{message}\n  at {Path(fname).name}:{line}: {text}"
        super().__init__(message, hint)
