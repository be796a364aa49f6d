"""The errors a user may see, each with the exit code the CLI turns it into.

Exit codes are the suite's contract: 0 ok, 1 checks failed (selftest and diag add bits for
the part that failed, see `checks.exit_code`), 2 usage or input error, 3 device busy or absent,
70 an internal error (a bug; `OTPU_DEBUG=1` shows its traceback). Anything raised as an `OtpuError` reaches the user as its message
(plus its hint) and never as a traceback.
"""
from __future__ import annotations

EXIT_OK, EXIT_CHECKS_FAILED, EXIT_USAGE, EXIT_DEVICE = 0, 1, 2, 3
EXIT_INTERNAL = 70   # sysexits EX_SOFTWARE: a bug, never an input error


class OtpuError(Exception):
    """Base of every error meant for a user. `hint` says what to do about it."""
    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message, self.hint = message, hint

    def __str__(self) -> str: return self.message


class UsageError(OtpuError):
    """Bad flags, bad files, bad programs: the user's input is wrong (exit 2)."""
    exit_code = EXIT_USAGE


class TargetError(UsageError):
    """A target description is wrong; the message names file, layer, key, value and what is allowed."""


class DeviceError(OtpuError):
    """The card is absent, unreachable or not what was asked for (exit 3)."""
    exit_code = EXIT_DEVICE


class DeviceBusy(DeviceError):
    """Another process holds the card; the message names it."""


class ChecksFailed(OtpuError):
    """One or more checks failed (exit 1)."""
    exit_code = EXIT_CHECKS_FAILED
