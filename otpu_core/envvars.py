"""Numbers read from environment variables, checked: a value that is not a finite number in range
is a usage error naming the variable, the value and what is allowed (never a traceback)."""
from __future__ import annotations

import math
import os

from .errors import UsageError


def number(name: str, default: float, low: float, high: float, integer: bool = False) -> float:
    """`$name` as a number in [low, high] (an int when `integer`); `default` when unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text, 0) if integer else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not low <= value <= high:
        kind = "a whole number" if integer else "a number"
        raise UsageError(f"{name}={text!r}: must be {kind} from {low:g} to {high:g}",
                         hint=f"unset {name} for the default ({default:g})")
    return value
