"""What `otpu-tt smi` and `otpu-tt list` report, derived from ARC telemetry the way tt-smi does.

The JSON keeps tt-smi's snapshot shape (time, host_info, device_info[] with board_info,
telemetry, firmwares, limits, smbus_telem; processes[]) so scripts written for one read the
other; values are numbers where tt-smi has strings of numbers.
"""
from __future__ import annotations

import os
import platform
import pwd
import time

from otpu_core.card.runstate import process_command
from otpu_core.tt import consts as K
from otpu_core.tt.card import Card

T = K.TAGS


def _signed_16_16(v: int) -> float:
    return (v - (1 << 32) if v & 0x80000000 else v) / 65536.0


def _eth_version(v: int) -> str:
    return f"{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def _pcie_gen(speed: str | None) -> int | None:
    if not speed:
        return None
    try:
        gts = float(speed.split()[0])
    except ValueError:
        return None
    return {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(gts)


def throttling(t: dict, limits: dict) -> list[str]:
    """Why the chip is (or would be) held back: at or over a limit it reports itself."""
    reasons = []
    for name, value, limit in (("thermal", t["asic_temperature"], limits["therm_trip_l1_limit"]),
                               ("power", t["power"], limits["tdp_limit"]), ("current", t["current"], limits["tdc_limit"])):
        if value is not None and limit and value >= limit:
            reasons.append(name)
    return reasons


def derive(v: dict[int, int]) -> dict:
    """tt-smi's derivations from raw tag values. A tag the firmware does not publish gives None (N/A)."""
    def f(tag: str, fn=lambda x: x):
        return fn(v[T[tag]]) if T[tag] in v else None

    def pair(hi: str, lo: str):
        return (v[T[hi]] << 32) | v[T[lo]] if T[hi] in v and T[lo] in v else None

    board_id, bundle = pair("BOARD_ID_HIGH", "BOARD_ID_LOW"), f("FLASH_BUNDLE_VERSION")
    upi = None if board_id is None else (board_id >> 36) & 0xFFFFF
    gddr, speed, asic_id = f("GDDR_STATUS"), f("GDDR_SPEED"), pair("ASIC_ID_HIGH", "ASIC_ID_LOW")
    if gddr is None:
        trained = None
    else:
        trained = gddr == 0x55555555 if (bundle or 0) >= 0x13070000 else gddr & 0xFFFF == 0x5555
    limits = {
        "vdd_min": f("VDD_LIMITS", lambda x: (x & 0xFFFF) / 1000), "vdd_max": f("VDD_LIMITS", lambda x: (x >> 16) / 1000),
        "tdp_limit": f("TDP_LIMIT_MAX"), "tdc_limit": f("TDC_LIMIT_MAX"), "asic_fmax": f("AICLK_LIMIT_MAX"),
        "therm_trip_l1_limit": f("THM_LIMIT_THROTTLE"), "thm_limit": f("THM_LIMIT_SHUTDOWN"),
        "board_power_limit": f("BOARD_POWER_LIMIT"),
    }
    telemetry = {
        "voltage": f("VCORE", lambda x: x / 1000), "current": f("TDC", lambda x: x & 0xFFFF),
        "aiclk": f("AICLK", lambda x: x & 0xFFFF), "power": f("TDP", lambda x: x & 0xFFFF),
        "board_power": f("INPUT_POWER"), "asic_temperature": f("ASIC_TEMPERATURE", lambda x: round(_signed_16_16(x), 2)),
        "fan_speed": f("FAN_RPM", lambda x: x & 0xFFFF), "heartbeat": f("TIMER_HEARTBEAT", lambda x: x // 6),
    }
    return {
        "board_info": {
            "board_type": None if upi is None else K.UPI_NAMES.get(upi, f"unknown (UPI {upi:#x})"),
            "board_id": None if board_id is None else f"{board_id:016x}",
            "asic_id": None if asic_id is None else f"{asic_id:016x}", "coords": "N/A", "dram_status": trained,
            "dram_speed": None if speed is None else (f"{speed // 1000}G" if speed % 1000 == 0 else str(speed)),
            "tensix_enabled": f("ENABLED_TENSIX_COL", lambda x: bin(x & 0x3FFF).count("1") * len(K.TENSIX_ROWS)),
        },
        "telemetry": telemetry,
        "throttling": throttling(telemetry, limits),
        "firmwares": {
            "fw_bundle_version": f("FLASH_BUNDLE_VERSION", K.version_text), "cm_fw": f("CM_FW_VERSION", K.version_text),
            "eth_fw": f("ETH_FW_VERSION", _eth_version), "dm_app_fw": f("DM_APP_FW_VERSION", K.version_text),
            "dm_bl_fw": f("DM_BL_FW_VERSION", K.version_text),
            "gddr_fw": f("GDDR_FW_VERSION", lambda x: f"{x >> 16}.{x & 0xFFFF}"),
            "tt_flash_version": f("TT_FLASH_VERSION", _eth_version),
        },
        "limits": limits,
        "smbus_telem": {K.TAG_NAMES.get(t, f"TAG_{t}"): f"0x{val:x}" for t, val in sorted(v.items())},
    }


def device_snapshot(card: Card) -> dict:
    card.require()
    facts = card.dev.host_facts()
    d = derive(card.telemetry.read())
    d["board_info"].update({
        "bus_id": card.info.bdf, "pcie_speed": _pcie_gen(facts.get("current_link_speed")),
        "pcie_width": facts.get("current_link_width"), "pcie_max_speed": _pcie_gen(facts.get("max_link_speed")),
        "pcie_max_width": facts.get("max_link_width"), "harvested_x": card.tiles.harvested_x,
        "harvested_noc0_x": card.tiles.harvested_noc0_x})
    return {"dev": card.spec, **d, "processes": processes(card), "sysfs": facts.get("sysfs", {})}


def processes(card: Card) -> list[dict]:
    out = []
    for pid in card.dev.pids():
        try:
            user = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
        except (OSError, KeyError):
            user = "?"
        out.append({"pid": pid, "user": user, "device": card.spec, "cmdline": " ".join(process_command(pid).split())})
    return out


def host_info(card: Card | None) -> dict:
    uname = platform.uname()
    return {"OS": uname.system, "Kernel": uname.release, "Hostname": uname.node, "Platform": uname.machine,
            "Python": platform.python_version(),
            "Driver": card.dev.host_facts().get("driver_version", "?") if card is not None else "?"}


def snapshot(cards: list[Card]) -> dict:
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host_info": host_info(cards[0] if cards else None),
            "device_info": [device_snapshot(c) for c in cards]}
