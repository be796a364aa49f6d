"""Blackhole checks for the one check DAG: device node, driver, firmware, telemetry alive, cores healthy.

`otpu-diag --dev tt:0` (or tt:sim) runs them; the card is opened once and shared through the
check context's cache. An absent or busy card raises DeviceError, which ends the run (exit 3).
"""
from __future__ import annotations

import time

from otpu_core.checks import Check, CheckContext, Result, Status
from otpu_core.tt import consts as K
from otpu_core.tt.card import Card
from otpu_core.tt.coords import harvest_label
from otpu_core.tt.faults import parse as parse_faults
from otpu_core.tt.noc import LinkLost
from otpu_core.tt.probe import CoreState, probe_many

from .recover import recover_hint, remember_stuck

DEVICE, DRIVER, TELEMETRY, FIRMWARE, CORES = "tt.device", "tt.driver", "tt.telemetry", "tt.firmware", "tt.cores"
MIN_KMD = (2, 6, 0)      # power management (SET_POWER_STATE) and the reset generations used by recovery


def card_of(ctx: CheckContext) -> Card:
    card = ctx.cache.get("tt.card")
    if card is None:
        card = ctx.cache["tt.card"] = Card(ctx.dev if ctx.dev.startswith("tt:") else None,
                                           parse_faults(ctx.options.get("fault")))
    return card


def check_device(ctx: CheckContext) -> Result:
    card = card_of(ctx)
    i = card.info
    note = card.fault_note()
    return Result(Status.PASS, f"{card.spec}: Blackhole {i.vendor_id:04x}:{i.device_id:04x} at {i.bdf}"
                  + (f"; note: {note}" if note else ""),
                  {"node": card.dev.path, "bdf": i.bdf, "subsystem": f"{i.subsystem_vendor_id:04x}:{i.subsystem_id:04x}"})


def check_driver(ctx: CheckContext) -> Result:
    card = card_of(ctx)
    info = card.dev.driver_info()
    data = {"api": info.api, "version": info.version, **card.dev.host_facts()}
    if info.api != 2:
        return Result(Status.FAIL, f"tt-kmd ioctl API {info.api}, this tool speaks API 2", data,
                      hint="install tt-kmd 2.x")
    try:
        version = tuple(int(p) for p in info.version.split("."))
    except ValueError:
        version = (0,)
    if version < MIN_KMD:
        return Result(Status.FAIL, f"tt-kmd {info.version} is older than {'.'.join(map(str, MIN_KMD))}", data,
                      hint="update tt-kmd: older drivers lack power management and reset generations")
    return Result(Status.PASS, f"tt-kmd {info.version} (ioctl API {info.api})", data)


def check_telemetry(ctx: CheckContext) -> Result:
    card = card_of(ctx)
    if card.broken is not None:
        state = "reset pending" if card.needs_post_reset else "link lost" if isinstance(card.broken, LinkLost) else "chip hung"
        return Result(Status.FAIL, card.broken.message,
                      hint=recover_hint(card, [CoreState(card.tiles.arc, state, card.broken.message)]))
    first = card.telemetry.read()
    period = first.get(K.TAGS["UPDATE_TELEM_SPEED"], 100) / 1000
    time.sleep(min(1.0, 1.5 * period))
    second = card.telemetry.read()
    hb = K.TAGS["TIMER_HEARTBEAT"]
    cols = second.get(K.TAGS["ENABLED_TENSIX_COL"], 0) & 0x3FFF
    data = {"table_version": f"{card.telemetry.version:#x}", "tags": len(second), "heartbeat": [first.get(hb), second.get(hb)],
            "tensix_enabled": bin(cols).count("1") * len(K.TENSIX_ROWS), "harvested_x": card.tiles.harvested_x,
            "harvested_noc0_x": card.tiles.harvested_noc0_x}
    if first.get(hb) == second.get(hb):
        return Result(Status.FAIL, f"ARC heartbeat stuck at {second.get(hb)} over {1.5 * period:.2f} s", data,
                      hint=f"ARC firmware is not running: `otpu-tt core recover --all --yes --dev {card.spec}` "
                           "(rung 5, an ASIC reset, needs no NoC)")
    return Result(Status.PASS, f"heartbeat advancing, {len(second)} tags, {data['tensix_enabled']} Tensix enabled; "
                  + harvest_label(card.tiles.harvested_x, card.tiles.harvested_noc0_x), data)


def check_firmware(ctx: CheckContext) -> Result:
    """The recovery ladder needs firmware 19.9.0 for rung 3 (ARC 0xAE, the single-tile reset)."""
    card = card_of(ctx)
    bundle = card.telemetry.read().get(K.TAGS["FLASH_BUNDLE_VERSION"], 0)
    data = {"fw_bundle": K.version_text(bundle), "needs": K.version_text(K.FW_SINGLE_TILE_RESET)}
    if bundle < K.FW_SINGLE_TILE_RESET:
        return Result(Status.FAIL, f"firmware bundle {data['fw_bundle']} is older than {data['needs']}: no single-tile "
                      "reset (ARC 0xAE), so recovering one core falls back to resetting every Tensix (rung 4)", data,
                      hint="update the card's firmware bundle (tt-flash) to 19.9.0 or later")
    return Result(Status.PASS, f"firmware bundle {data['fw_bundle']} (single-tile reset available)", data)


def check_cores(ctx: CheckContext) -> Result:
    card = card_of(ctx)
    states = probe_many(card.noc, card.tiles.tensix, skip=card.memo.stuck())
    remember_stuck(card, states)
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    bad = [s for s in states if not s.healthy]
    data = {"states": counts, "bad": [s.as_dict() for s in bad]}
    if bad:
        names = ", ".join(f"{s.tile.x},{s.tile.y} {s.state}" for s in bad[:6]) + (" ..." if len(bad) > 6 else "")
        return Result(Status.FAIL, f"{len(bad)} of {len(states)} cores bad: {names}", data, hint=recover_hint(card, bad))
    return Result(Status.PASS, f"{len(states)} cores healthy ({text})", data)


def add_checks(registry) -> None:
    dev = ("tt",)
    registry.add(Check("tt", DEVICE, check_device, devices=dev, stage="tt", title="device node"))
    registry.add(Check("tt", DRIVER, check_driver, needs=(DEVICE,), devices=dev, stage="tt", title="driver version"))
    registry.add(Check("tt", TELEMETRY, check_telemetry, needs=(DEVICE,), devices=dev, stage="tt", title="telemetry alive"))
    registry.add(Check("tt", FIRMWARE, check_firmware, needs=(TELEMETRY,), devices=dev, stage="tt",
                       title="firmware for recovery"))
    registry.add(Check("tt", CORES, check_cores, needs=(TELEMETRY,), devices=dev, stage="tt", title="cores healthy"))
