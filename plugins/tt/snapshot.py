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
    if t["asic_temperature"] >= limits["therm_trip_l1_limit"]:
        reasons.append("thermal")
    if t["power"] >= limits["tdp_limit"]:
        reasons.append("power")
    if t["current"] >= limits["tdc_limit"]:
        reasons.append("current")
    return reasons


def device_snapshot(card: Card) -> dict:
    v = card.telemetry.read()
    g = lambda tag: v.get(T[tag], 0)  # noqa: E731
    board_id = (g("BOARD_ID_HIGH") << 32) | g("BOARD_ID_LOW")
    upi = (board_id >> 36) & 0xFFFFF
    bundle = g("FLASH_BUNDLE_VERSION")
    facts = card.dev.host_facts()
    gddr = g("GDDR_STATUS")
    trained = gddr == 0x55555555 if bundle >= 0x13070000 else gddr & 0xFFFF == 0x5555
    speed = g("GDDR_SPEED")
    limits = {
        "vdd_min": (g("VDD_LIMITS") & 0xFFFF) / 1000, "vdd_max": (g("VDD_LIMITS") >> 16) / 1000,
        "tdp_limit": g("TDP_LIMIT_MAX"), "tdc_limit": g("TDC_LIMIT_MAX"), "asic_fmax": g("AICLK_LIMIT_MAX"),
        "therm_trip_l1_limit": g("THM_LIMIT_THROTTLE"), "thm_limit": g("THM_LIMIT_SHUTDOWN"),
        "board_power_limit": g("BOARD_POWER_LIMIT"),
    }
    telemetry = {
        "voltage": g("VCORE") / 1000, "current": g("TDC") & 0xFFFF, "aiclk": g("AICLK") & 0xFFFF,
        "power": g("TDP") & 0xFFFF, "board_power": g("INPUT_POWER"),
        "asic_temperature": round(_signed_16_16(g("ASIC_TEMPERATURE")), 2), "fan_speed": g("FAN_RPM") & 0xFFFF,
        "heartbeat": g("TIMER_HEARTBEAT") // 6,
    }
    reasons = throttling(telemetry, limits)
    return {
        "dev": card.spec,
        "board_info": {
            "bus_id": card.info.bdf, "board_type": K.UPI_NAMES.get(upi, f"unknown (UPI {upi:#x})"),
            "board_id": f"{board_id:016x}", "asic_id": f"{(g('ASIC_ID_HIGH') << 32) | g('ASIC_ID_LOW'):016x}",
            "coords": "N/A", "dram_status": trained, "dram_speed": f"{speed // 1000}G" if speed % 1000 == 0 else str(speed),
            "pcie_speed": _pcie_gen(facts.get("current_link_speed")), "pcie_width": facts.get("current_link_width"),
            "pcie_max_speed": _pcie_gen(facts.get("max_link_speed")), "pcie_max_width": facts.get("max_link_width"),
            "tensix_enabled": bin(g("ENABLED_TENSIX_COL") & 0x3FFF).count("1") * len(K.TENSIX_ROWS),
            "harvested_x": card.tiles.harvested_x, "harvested_noc0_x": card.tiles.harvested_noc0_x,
        },
        "telemetry": telemetry,
        "throttling": reasons,
        "firmwares": {
            "fw_bundle_version": K.version_text(bundle), "cm_fw": K.version_text(g("CM_FW_VERSION")),
            "eth_fw": _eth_version(g("ETH_FW_VERSION")), "dm_app_fw": K.version_text(g("DM_APP_FW_VERSION")),
            "dm_bl_fw": K.version_text(g("DM_BL_FW_VERSION")),
            "gddr_fw": f"{g('GDDR_FW_VERSION') >> 16}.{g('GDDR_FW_VERSION') & 0xFFFF}",
            "tt_flash_version": _eth_version(g("TT_FLASH_VERSION")),
        },
        "limits": limits,
        "smbus_telem": {K.TAG_NAMES.get(t, f"TAG_{t}"): f"0x{val:x}" for t, val in sorted(v.items())},
        "processes": processes(card),
        "sysfs": facts.get("sysfs", {}),
    }


def processes(card: Card) -> list[dict]:
    out = []
    for pid in card.dev.pids():
        try:
            user = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
        except (OSError, KeyError):
            user = "?"
        out.append({"pid": pid, "user": user, "device": card.spec, "cmdline": process_command(pid)})
    return out


def host_info(card: Card | None) -> dict:
    uname = platform.uname()
    return {"OS": uname.system, "Kernel": uname.release, "Hostname": uname.node, "Platform": uname.machine,
            "Python": platform.python_version(),
            "Driver": card.dev.host_facts().get("driver_version", "?") if card is not None else "?"}


def snapshot(cards: list[Card]) -> dict:
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host_info": host_info(cards[0] if cards else None),
            "device_info": [device_snapshot(c) for c in cards]}
