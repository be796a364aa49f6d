"""The one error the model layer raises at a user: a model file or option that cannot be used.

`ModelError` is a `UsageError` (exit 2): the message names the file, the key or tensor, the
value found and what is allowed, so a loader failure never reaches a user as a traceback.
"""
from __future__ import annotations

from ..errors import UsageError


class ModelError(UsageError):
    """A model file, its configuration or a model option is unusable (names file, key, value, allowed)."""
