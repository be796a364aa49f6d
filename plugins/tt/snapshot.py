"""What `otpu-tt smi` and `otpu-tt list` report, derived from ARC telemetry the way tt-smi does.

`derive` turns raw tag values into tt-smi's quantities (tt-smi tt_smi/backend.py
get_bh_chip_telemetry, get_bh_chip_limits, get_dram_training_status, get_firmware_versions),
with numbers where tt-smi has strings of numbers; a tag the firmware does not publish gives None.
Two readings differ from a value-against-limit guess: throttling is what the firmware says holds
AICLK back (the arbiter in the top half of AICLK_ARB_MAX; tt-zephyr-platforms aiclk_ppm.h), and
the temperature limit is the shutdown limit, as tt-smi shows it, with the throttle point beside.
`ttsmi` writes the same data in tt-smi's own `-s` shape.
"""
from __future__ import annotations

import os
import platform
import pwd
import time

import psutil

from otpu_core.card.runstate import process_command
from otpu_core.errors import DeviceError
from otpu_core.tt import consts as K
from otpu_core.tt.card import Card

T = K.TAGS


def signed_16_16(v: int) -> float:
    return (v - (1 << 32) if v & 0x80000000 else v) / 65536.0


def semver3(v: int) -> str:
    """ETH firmware as tt-smi decodes it (hex_to_semver_eth): bytes 16, 8, 0."""
    return f"{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def gddr_version(v: int) -> str | None:
    return None if v in (0, 0xFFFFFFFF) else f"{v >> 16}.{v & 0xFFFF}"


def build_date(v: int) -> str | None:
    """0xYMDDHHMM as tt-smi's hex_to_date reads it (year - 2020 in the top nibble)."""
    if v in (0, 0xFFFFFFFF):
        return None
    return f"{(v >> 28 & 0xF) + 2020:04d}-{v >> 24 & 0xF:02d}-{v >> 16 & 0xFF:02d}"


def pcie_gen(speed: str | None) -> int | None:
    if not speed:
        return None
    try:
        gts = float(speed.split()[0])
    except ValueError:
        return None
    return {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(gts)


def p100_dram_trained(status: int) -> bool:
    """tt-smi's p100 rule: seven channels trained and BIST-passed, one slot empty (harvested)."""
    passing = empty = 0
    for ch in range(K.DRAM_BANKS):
        train, bist = status >> 2 * ch & 3, status >> 16 + 2 * ch & 3
        if train == 1 and bist == 1:
            passing += 1
        elif train == 0 and bist == 0:
            empty += 1
        else:
            return False
    return passing == 7 and empty == 1


def throttling(v: dict[int, int]) -> dict | None:
    """Who holds AICLK back: the effective maximum arbiter, unless it is fmax itself (None: no tag)."""
    if T["AICLK_ARB_MAX"] not in v:
        return None
    word = v[T["AICLK_ARB_MAX"]]
    arb, mhz = word >> 16, word & 0xFFFF
    name = K.AICLK_ARB_MAX_NAMES[arb] if arb < len(K.AICLK_ARB_MAX_NAMES) else f"arbiter {arb}"
    return {"throttled": arb != K.ARB_FMAX, "arbiter": name, "max_mhz": mhz}


def derive(v: dict[int, int]) -> dict:
    """tt-smi's derivations from raw tag values. A tag the firmware does not publish gives None (N/A)."""
    def f(tag: str, fn=lambda x: x):
        return fn(v[T[tag]]) if T[tag] in v else None

    def pair(hi: str, lo: str):
        return (v[T[hi]] << 32) | v[T[lo]] if T[hi] in v and T[lo] in v else None

    board_id, bundle = pair("BOARD_ID_HIGH", "BOARD_ID_LOW"), f("FLASH_BUNDLE_VERSION")
    upi = None if board_id is None else (board_id >> 36) & 0xFFFFF
    board_type = None if upi is None else K.UPI_NAMES.get(upi, "N/A")
    gddr, speed, asic_id = f("GDDR_STATUS"), f("GDDR_SPEED"), pair("ASIC_ID_HIGH", "ASIC_ID_LOW")
    if gddr is None:
        trained = None
    elif (bundle or 0) >= 0x13070000:
        trained = gddr == 0x55555555 or (board_type == "p100a" and p100_dram_trained(gddr))
    else:
        trained = gddr == 0x5555
    limits = {
        "vdd_min": f("VDD_LIMITS", lambda x: (x & 0xFFFF) / 1000), "vdd_max": f("VDD_LIMITS", lambda x: (x >> 16) / 1000),
        "tdp_limit": f("TDP_LIMIT_MAX"), "tdc_limit": f("TDC_LIMIT_MAX"), "asic_fmax": f("AICLK_LIMIT_MAX"),
        "therm_trip_l1_limit": f("THM_LIMIT_THROTTLE"), "thm_limit": f("THM_LIMIT_SHUTDOWN"),
        "board_power_limit": f("BOARD_POWER_LIMIT"),
    }
    telemetry = {
        "voltage": f("VCORE", lambda x: x / 1000), "current": f("TDC", lambda x: x & 0xFFFF),
        "aiclk": f("AICLK", lambda x: x & 0xFFFF), "power": f("TDP", lambda x: x & 0xFFFF),
        "board_power": f("INPUT_POWER"), "asic_temperature": f("ASIC_TEMPERATURE", lambda x: round(signed_16_16(x), 2)),
        "fan_speed": f("FAN_RPM", lambda x: x & 0xFFFF), "heartbeat": f("TIMER_HEARTBEAT", lambda x: x // 6),
    }
    return {
        "board_info": {
            "board_type": board_type, "board_id": None if board_id is None else f"{board_id:016x}",
            "asic_id": None if asic_id is None else f"{asic_id:016x}", "coords": "N/A", "dram_status": trained,
            "dram_speed": None if speed is None else (f"{speed // 1000}G" if speed % 1000 == 0 else str(speed)),
            "tensix_enabled": f("ENABLED_TENSIX_COL", lambda x: bin(x & 0x3FFF).count("1") * len(K.TENSIX_ROWS)),
            "dram_banks_enabled": f("ENABLED_GDDR", lambda x: bin(x & 0xFF).count("1")),
        },
        "telemetry": telemetry,
        "throttling": throttling(v),
        "firmwares": {
            "fw_bundle_version": f("FLASH_BUNDLE_VERSION", K.version_text), "cm_fw": f("CM_FW_VERSION", K.version_text),
            "cm_fw_date": f("FW_BUILD_DATE", build_date), "eth_fw": f("ETH_FW_VERSION", semver3),
            "dm_app_fw": f("DM_APP_FW_VERSION", K.version_text), "dm_bl_fw": f("DM_BL_FW_VERSION", K.version_text),
            "gddr_fw": f("GDDR_FW_VERSION", gddr_version), "tt_flash_version": f("TT_FLASH_VERSION", K.version_text),
        },
        "limits": limits,
        "smbus_telem": {K.TAG_NAMES.get(t, f"TAG_{t}"): f"0x{val:x}" for t, val in sorted(v.items())},
    }


def device_snapshot(card: Card) -> dict:
    card.require()
    facts = card.dev.host_facts()
    values = card.telemetry.read()
    d = derive(values)
    d["board_info"].update({
        "bus_id": card.info.bdf, "pcie_speed": pcie_gen(facts.get("current_link_speed")),
        "pcie_width": facts.get("current_link_width"), "pcie_max_speed": pcie_gen(facts.get("max_link_speed")),
        "pcie_max_width": facts.get("max_link_width"), "harvested_x": card.tiles.harvested_x,
        "harvested_noc0_x": card.tiles.harvested_noc0_x})
    return {"dev": card.spec, **d, "raw": values, "processes": processes(card), "sysfs": facts.get("sysfs", {})}


def processes(card: Card) -> list[dict]:
    out = []
    for pid in card.dev.pids():
        try:
            user = pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
        except (OSError, KeyError):
            user = "?"
        out.append({"pid": pid, "user": user, "device": card.spec, "cmdline": " ".join(process_command(pid).split())})
    return out


def memory_text(size: float) -> str:
    """tt-tools-common's get_size: 1024-scaled, two decimals ('62.73 GB')."""
    for unit in ("", "K", "M", "G", "T", "P"):
        if size < 1024:
            return f"{size:.2f} {unit}B"
        size /= 1024
    return "N/A"


def distro() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME", "N/A")
    except OSError:
        return "N/A"


def host_info(cards: list[Card]) -> dict:
    """tt-smi's host_info (tt-tools-common utils_common/system_utils.py get_host_info)."""
    uname = platform.uname()
    driver = next((c.dev.host_facts().get("driver_version") for c in cards), None)
    return {"OS": uname.system, "Distro": distro(), "Kernel": uname.release, "Hostname": uname.node,
            "Platform": uname.machine, "Python": platform.python_version(),
            "Memory": memory_text(psutil.virtual_memory().total), "Driver": f"TT-KMD {driver}" if driver else "N/A"}


def readable(cards: list[Card]) -> tuple[list[dict], list[dict]]:
    """(`device_snapshot` of each card that can be read now, {dev, error, hint} of each that cannot)."""
    good, bad = [], []
    for c in cards:
        try:
            c.ensure_alive()          # a reset elsewhere disowns our descriptor: reopen
            good.append(device_snapshot(c))
        except DeviceError as e:      # hung NoC, lost link, reset pending: say so, keep the others
            bad.append({"dev": c.spec, "bus_id": c.info.bdf, "error": e.message, "hint": e.hint})
    return good, bad


def snapshot(cards: list[Card]) -> dict:
    """Our JSON (`otpu-tt smi --json`): tt-smi's sections with numbers, plus what tt-smi lacks; cards that
    cannot be read are listed under `errors`."""
    good, bad = readable(cards)
    for d in good:
        d.pop("raw")
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host_info": host_info(cards), "device_info": good,
            "errors": bad}
