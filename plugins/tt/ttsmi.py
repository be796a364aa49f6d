"""`otpu-tt smi -s` / `-f`: a snapshot in exactly the JSON shape `tt-smi -s` prints, so its readers read ours.

The shape is tt-smi 6.2.1's (tt_smi/log.py TTSMILog, dumped with exclude_none and indent 4; keys
checked by tests/test_snapshot.py), filled the way its backend fills it for a Blackhole through
tt-umd (tt_smi/backend.py): every leaf a string, formatted as the backend formats it, except
`board_info.dram_status` (the backend stores a bool), `board_info.pcie_speed` (the PCIe
generation as an int), limits the backend has no source for (the int 0), and the processes'
`pid` and `device` (ints; `device` is the card's position in `device_info`). `smbus_telem` names
tags as tt-umd's Python enum does (DDR_STATUS for tag 22, ...), in its order, null for a tag the
firmware does not publish, plus INPUT_POWER; tt-umd's enum ends with NUMBER_OF_TAGS = 69, which
firmware 19.x publishes (as AICLK_PPM_INFO), so tt-smi shows that value under that name, and so
does this. One difference by choice: tt-smi's `cm_fw_date` for Blackhole decodes the CM version
word as a date (a leftover variable in get_firmware_versions); here it is FW_BUILD_DATE when the
firmware publishes it, else "N/A".
"""
from __future__ import annotations

import datetime
import json
import os
from importlib import metadata
from pathlib import Path

from otpu_core.tt import consts as K
from otpu_core.tt.card import Card

from .snapshot import host_info, readable

LOG_FOLDER = Path("~/tt_smi_logs")
UMD_NUMBER_OF_TAGS = 69
NA = "N/A"


def umd_tag_names() -> list[tuple[str, int]]:
    """tt-umd's Blackhole TelemetryTag enum as tt-smi iterates it (nanobind/py_api_telemetry.cpp)."""
    names = [(K.UMD_TAG_NAMES.get(tag, name), tag) for name, tag in sorted(K.TAGS.items(), key=lambda kv: kv[1])
             if tag not in K.UMD_UNNAMED_TAGS]
    return names + [("NUMBER_OF_TAGS", UMD_NUMBER_OF_TAGS)]


def smbus_telem(values: dict[int, int]) -> dict[str, str | None]:
    out = {name: (hex(values[tag]) if tag in values else None) for name, tag in umd_tag_names()}
    out["INPUT_POWER"] = hex(values[K.TAGS["INPUT_POWER"]]) if K.TAGS["INPUT_POWER"] in values else None
    return out


def _fmt(value, spec: str, missing=NA):
    return missing if value is None else format(value, spec)


def device_entry(d: dict) -> dict:
    """One card's `device_info` entry from `device_snapshot` data (raw values included)."""
    b, t, f, lim = d["board_info"], d["telemetry"], d["firmwares"], d["limits"]
    return {
        "smbus_telem": smbus_telem(d["raw"]),
        "board_info": {
            "bus_id": b["bus_id"], "board_type": b["board_type"] or NA, "board_id": b["board_id"] or NA,
            "coords": "N/A", "dram_status": bool(b["dram_status"]), "dram_speed": b["dram_speed"] or NA,
            "pcie_speed": b["pcie_speed"] if b["pcie_speed"] is not None else NA, "pcie_width": b["pcie_width"] or NA,
        },
        "telemetry": {
            "voltage": f"{t['voltage'] if t['voltage'] is not None else 10000:4.2f}",
            "current": f"{t['current'] or 0:5.1f}", "power": f"{t['power'] or 0:5.1f}",
            "board_power": _fmt(t["board_power"], "5.1f"), "aiclk": f"{t['aiclk'] or 0:4.0f}",
            "asic_temperature": f"{t['asic_temperature'] or 0:4.1f}", "fan_speed": f"{t['fan_speed'] or 0}",
            "heartbeat": f"{t['heartbeat'] or 0}",
        },
        "firmwares": {key: (f[key] or NA) for key in ("fw_bundle_version", "tt_flash_version", "cm_fw", "cm_fw_date",
                                                     "eth_fw", "dm_bl_fw", "dm_app_fw", "gddr_fw")},
        "limits": {
            "vdd_min": _fmt(lim["vdd_min"], "4.2f", 0), "vdd_max": _fmt(lim["vdd_max"], "4.2f", 0),
            "tdp_limit": _fmt(lim["tdp_limit"], "3.0f", 0), "tdc_limit": _fmt(lim["tdc_limit"], "3.0f", 0),
            "asic_fmax": _fmt(lim["asic_fmax"], "4.0f", 0), "therm_trip_l1_limit": _fmt(lim["therm_trip_l1_limit"], "2.0f", 0),
            "thm_limit": _fmt(lim["thm_limit"], "2.0f", 0), "bus_peak_limit": 0, "fan_rpm_limit": 0,
            "board_power_limit": _fmt(lim["board_power_limit"], "3.0f", 0),
        },
    }


def host_sw_vers() -> dict:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return NA
    return {"tt_smi": version("tt-smi"), "pyluwen": version("pyluwen"), "tt_umd": version("tt-umd")}


def snapshot(cards: list[Card]) -> tuple[dict, list[dict]]:
    """(the tt-smi snapshot of the cards that can be read, {dev, error, hint} of those that cannot)."""
    good, bad = readable(cards)
    devices, procs = [], []
    for i, d in enumerate(good):
        devices.append(device_entry(d))
        procs += [{"pid": p["pid"], "user": p["user"], "device": i, "cmdline": p["cmdline"]} for p in d["processes"]]
    procs.sort(key=lambda p: (p["device"], p["pid"]))
    return ({"time": datetime.datetime.now().isoformat(), "host_info": host_info(cards), "host_sw_vers": host_sw_vers(),
             "device_info": devices, "processes": procs}, bad)


def text(snap: dict) -> str:
    return json.dumps(snap, indent=4)


def default_log_path(now: datetime.datetime | None = None) -> Path:
    """tt-smi's default `-f` file: ~/tt_smi_logs/<mm-dd-YYYY_HH:MM:SS>_results.json."""
    now = now or datetime.datetime.now()
    return Path(os.path.expanduser(str(LOG_FOLDER))) / f"{now.strftime('%m-%d-%Y_%H:%M:%S')}_results.json"

