"""Fault specs for the simulated Blackhole: `--fault` and `$OTPU_TT_SIM_FAULTS`.

Syntax: `kind[:key=value,...][;kind...]`, e.g. `hang_resident:x=1,y=2;wedge:x=3,y=4,risc=trisc0`.
Coordinates are translated, as the tools show them. Each kind is a state a real p150a can be
left in, and the comment says which rung of `otpu-tt core recover` is the lowest that fixes it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from . import consts as K

# kind -> (required keys, optional keys with defaults, description)
KINDS: dict[str, tuple[tuple[str, ...], dict[str, str], str]] = {
    "hang_resident": (("x", "y"), {}, "a resident kernel blocked in a wait with work pending (rung 1: stop)"),
    "wedge": (("x", "y"), {"risc": "brisc"}, "a RISC stuck, deaf to stop requests (rung 2: soft reset)"),
    "noc_stuck": (("x", "y"), {}, "a tile whose NoC interface is stuck (rung 3: tile reset)"),
    "bad_tile": (("x", "y"), {}, "a tile only an ASIC reset brings back (rung 5)"),
    "hang_chip": ((), {}, "the NoC hung, as after an access to a bad endpoint (rung 5)"),
    "very_hung": ((), {}, "a hung NoC that an ASIC reset alone does not clear (rung 6: SBR)"),
    "link_down": ((), {}, "the PCIe link went down; a secondary bus reset retrains it (rung 6)"),
    "link_lost": ((), {}, "the PCIe link is gone: nothing but a power cycle helps (rung 7)"),
    "foreign_fw": (("x", "y"), {}, "a core running firmware that is not ours (tt-metal's): its L1 is not ours to touch"),
    "old_fw": ((), {}, "firmware 19.8: no single-tile reset message 0xAE"),
    "translation_off": ((), {}, "a fw_table with noc_translation_en off: only NOC0 coordinates have endpoints"),
    "throttle": ((), {"arb": "thermal"}, "AICLK held below fmax by a maximum arbiter (thermal, tdp, tdc, ...)"),
}
ENV = "OTPU_TT_SIM_FAULTS"


@dataclass(frozen=True)
class Fault:
    kind: str
    params: dict[str, str] = field(default_factory=dict)

    def xy(self) -> tuple[int, int]:
        return int(self.params["x"], 0), int(self.params["y"], 0)

    @property
    def risc(self) -> str: return self.params.get("risc", "brisc")

    def __str__(self) -> str:
        return self.kind + (":" + ",".join(f"{k}={v}" for k, v in self.params.items()) if self.params else "")


def parse(spec: str | None) -> list[Fault]:
    """Parse a fault spec; every mistake is a UsageError that names the known kinds or keys."""
    faults: list[Fault] = []
    for part in (spec or "").split(";"):
        part = part.strip()
        if not part:
            continue
        kind, _, rest = part.partition(":")
        kind = kind.strip()
        if kind not in KINDS:
            raise UsageError(f"unknown Blackhole fault '{kind}'", hint="known faults: " + ", ".join(KINDS))
        required, optional, _ = KINDS[kind]
        params = dict(optional)
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or key not in (*required, *optional):
                raise UsageError(f"fault '{kind}': bad parameter '{item}'",
                                 hint=f"'{kind}' takes " + (", ".join(f"{k}=..." for k in (*required, *optional)) or "no parameters"))
            params[key] = value
        missing = [k for k in required if k not in params]
        if missing:
            raise UsageError(f"fault '{kind}' needs {', '.join(missing)}", hint=f"e.g. {kind}:x=1,y=2")
        if kind == "throttle" and params["arb"] not in K.AICLK_ARB_MAX_NAMES[1:]:
            raise UsageError(f"fault 'throttle': unknown arbiter '{params['arb']}'",
                             hint="one of " + ", ".join(K.AICLK_ARB_MAX_NAMES[1:]))
        if "risc" in params and params["risc"] not in K.RISC_BITS:
            raise UsageError(f"fault '{kind}': unknown RISC '{params['risc']}'", hint="one of " + ", ".join(K.RISC_BITS))
        for key in ("x", "y"):
            if key in params:
                try:
                    int(params[key], 0)
                except ValueError:
                    raise UsageError(f"fault '{kind}': {key}={params[key]} is not an integer") from None
        faults.append(Fault(kind, params))
    return faults
