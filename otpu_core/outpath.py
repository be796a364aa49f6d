"""Files a command writes its results to: checked before the work that fills them, written after.

A long run must not end in "cannot write" with its result gone. `check_writable` refuses an
output path up front (exit 2, naming the option and the path): a directory, a missing parent
directory, a place the user may not write. `write_or_show` writes the text and, should that
still fail (disk full, the directory removed meanwhile), prints the text to stdout instead and
raises the usage error afterwards, so the result is on the screen and the exit code says the
file is not there. The path `-` is standard output, for every option that writes a file.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .errors import UsageError


STDOUT = "-"


def is_stdout(path: Path | str | None) -> bool: return path is not None and str(path) == STDOUT


def check_writable(path: Path, option: str) -> Path:
    """`path` if a file can be created or overwritten there; else a UsageError naming `option`."""
    if is_stdout(path):
        return path
    where = f"{option} {path}"
    if str(path) == "":
        raise UsageError(f"{option} '': name a file to write (or - for standard output)")
    if path.is_dir():
        raise UsageError(f"{where}: is a directory; name a file to write")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"{where}: directory {parent} does not exist")
    if path.exists():      # a file to overwrite, or a device such as /dev/stdout
        if not os.access(path, os.W_OK):
            raise UsageError(f"{where}: permission denied (the file is not writable)")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: permission denied (cannot create files in {parent})")
    return path


def write_or_show(path: Path, data: str | bytes, option: str) -> None:
    """Write `data` to `path`; if that fails, put text on stdout first, then raise a UsageError."""
    if is_stdout(path):
        try:
            if isinstance(data, bytes):
                sys.stdout.flush()
                sys.stdout.buffer.write(data)
            else:
                sys.stdout.write(data if data.endswith("\n") else data + "\n")
            sys.stdout.flush()
        except OSError as e:
            raise UsageError(f"{option} -: standard output could not be written ({e.strerror or e})") from None
        return
    try:
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    except OSError as e:
        if isinstance(data, str):
            sys.stdout.write(data if data.endswith("\n") else data + "\n")
            sys.stdout.flush()
            shown = "; it is printed above instead"
        else:
            shown = ""
        raise UsageError(f"{option} {path}: could not be written ({e.strerror or e}){shown}") from None

