"""`--dev` specs: which transport opens a device name, gathered from every plugin's `otpu_transports`.

A `TransportSpec` names a prefix (`sim`, `/dev/xdma`, `tt:`), a one-line description, a
function that opens a spec and optionally one that lists the devices present. `resolve(dev)`
picks the spec for a `--dev` value; no `--dev` (and no `OTPU_DEV`) means the first
`/dev/xdma*_user` present, else the simulated card. Naming a real device never falls back to
the simulator: a missing node is a DeviceError.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from .errors import UsageError


@dataclass(frozen=True)
class TransportSpec:
    """One kind of device a plugin can open.

    `open` is called as `open(dev, target=..., faults=..., lock=...)`: `dev` (str) positional,
    the rest by keyword, any of them possibly omitted, so an opener is declared
    `open(dev: str, *, target: str | None = None, faults: str | None = None, lock: bool = True)`
    (extra keywords may be swallowed by `**kw`). `target` is a target name or path (None: the
    default target), `faults` a fault spec (None: none; a device that cannot take faults
    refuses a non-empty spec with a UsageError), `lock=False` opens for monitoring without the
    device lock. It returns a `transport.Transport` or raises an OtpuError: DeviceError when the
    device is absent, UsageError when the spec or an argument is wrong. `list()` names the
    devices of this kind present now. `accepts(dev)` decides whether a spec is this kind's
    (default: it starts with `prefix`)."""
    prefix: str
    description: str
    open: Callable[..., Any]                    # open(dev, *, target=None, faults=None, lock=True) -> Transport
    list: Callable[[], list[str]] | None = None
    accepts: Callable[[str], bool] | None = None  # default: dev starts with prefix

    def matches(self, dev: str) -> bool:
        return self.accepts(dev) if self.accepts is not None else dev.startswith(self.prefix)


def specs() -> list[TransportSpec]:
    from . import plugins
    found: list[TransportSpec] = []
    for result in plugins.get().hook.otpu_transports():
        found.extend(result or [])
    return found


def default_dev() -> str:
    """`$OTPU_DEV`, else the first XDMA card present, else the simulated card."""
    if os.environ.get("OTPU_DEV"):
        return os.environ["OTPU_DEV"]
    from .transport.xdma import present
    cards = present()
    return cards[0] if cards else "sim"


def chosen(dev: str | None) -> str:
    """The `--dev` a command works on: the default when none was given; an empty or blank spec
    is a usage error (never a silent `sim`)."""
    if dev is None:
        return default_dev()
    if not dev.strip():
        raise UsageError(f"--dev {dev!r}: empty device spec",
                         hint="name a card: /dev/xdmaN, sim or sim:NAME (omit --dev for the default)")
    return dev


def resolve(dev: str | None) -> tuple[TransportSpec, str]:
    dev = chosen(dev)
    all_specs = specs()
    for spec in all_specs:
        if spec.matches(dev):
            return spec, dev
    raise UsageError(f"unknown device '{dev}'",
                     hint="known kinds: " + "; ".join(f"{s.prefix}... ({s.description})" for s in all_specs))


def open_transport(dev: str | None = None, **kw):
    """Open a `--dev` spec; `kw` (target, faults, lock) go to the spec's opener unchanged."""
    spec, dev = resolve(dev)
    return spec.open(dev, **kw)


def available() -> list[dict[str, str]]:
    """Every device the registered transports can see now."""
    out = []
    for spec in specs():
        for name in (spec.list() if spec.list else []):
            out.append({"dev": name, "kind": spec.prefix, "description": spec.description})
    return out
