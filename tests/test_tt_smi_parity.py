"""Telemetry as the firmware publishes it, and `otpu-tt smi` next to tt-smi.

Sources: tenstorrent/tt-zephyr-platforms lib/tenstorrent/bh_arc/telemetry.h (tag names),
telemetry.c (the table: TAG_COUNT slots, empty ones, no ASIC_ID, the 100 ms heartbeat),
aiclk_ppm.h (the AICLK_ARB_MAX arbiters); tenstorrent/tt-smi tt_smi/log.py (the snapshot model),
tests/test_snapshot.py (the keys it checks), tt_smi/backend.py (what fills it), tt_smi/utils.py
(get_board_type, hex_to_semver_m3_fw); tenstorrent/tt-umd nanobind/py_api_telemetry.cpp.
"""
import json
import time

from otpu_core.cli import run_app
from otpu_core.tt import consts as K
from otpu_core.tt.card import Card
from otpu_core.tt.simarc import PUBLISHED, TELEM_TABLE
from otpu_tt.cli import app
from otpu_tt.snapshot import derive

FIRMWARE_TAGS = """BOARD_ID_HIGH BOARD_ID_LOW ASIC_ID HARVESTING_STATE UPDATE_TELEM_SPEED VCORE TDP TDC VDD_LIMITS
THM_LIMIT_SHUTDOWN ASIC_TEMPERATURE VREG_TEMPERATURE BOARD_TEMPERATURE AICLK AXICLK ARCCLK L2CPUCLK0 L2CPUCLK1
L2CPUCLK2 L2CPUCLK3 ETH_LIVE_STATUS GDDR_STATUS GDDR_SPEED ETH_FW_VERSION GDDR_FW_VERSION DM_APP_FW_VERSION
DM_BL_FW_VERSION FLASH_BUNDLE_VERSION CM_FW_VERSION L2CPU_FW_VERSION FAN_SPEED TIMER_HEARTBEAT TELEM_ENUM_COUNT
ENABLED_TENSIX_COL ENABLED_ETH ENABLED_GDDR ENABLED_L2CPU PCIE_USAGE INPUT_CURRENT NOC_TRANSLATION FAN_RPM
GDDR_0_1_TEMP GDDR_2_3_TEMP GDDR_4_5_TEMP GDDR_6_7_TEMP GDDR_0_1_CORR_ERRS GDDR_2_3_CORR_ERRS GDDR_4_5_CORR_ERRS
GDDR_6_7_CORR_ERRS GDDR_UNCORR_ERRS MAX_GDDR_TEMP ASIC_LOCATION BOARD_POWER_LIMIT INPUT_POWER TDC_LIMIT_MAX
THM_LIMIT_THROTTLE FW_BUILD_DATE TT_FLASH_VERSION ENABLED_TENSIX_ROW THERM_TRIP_COUNT ASIC_ID_HIGH ASIC_ID_LOW
AICLK_LIMIT_MAX TDP_LIMIT_MAX AICLK_ARB_MIN AICLK_ARB_MAX ENABLED_MIN_ARB ENABLED_MAX_ARB AICLK_PPM_INFO
HOST_AICLK_LIMIT""".split()       # telemetry.h, tags 1..70 in order


def run(args, capsys):
    code = run_app(app, "otpu-tt", args)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def test_every_firmware_tag_is_named():
    assert [K.TAG_NAMES[t] for t in range(1, K.TAG_COUNT)] == FIRMWARE_TAGS


def test_the_simulated_table_is_the_firmwares_and_empty_slots_are_skipped():
    with Card("tt:sim:tel") as card:
        u = card.dev.chip.csm_u32
        t = TELEM_TABLE >> 2
        assert (u[t], u[t + 1]) == (0x100, 71)                       # version 0.1.0, TAG_COUNT entries
        entries = [u[t + 2 + i] for i in range(71)]
        assert [i for i, e in enumerate(entries) if e == 0] == [2, 66, 67, 68, 69, 70]
        assert all(e >> 16 == e & 0xFFFF for e in entries)          # TELEM_OFFSET(tag) == tag
        values = card.telemetry.read()
        assert set(values) == PUBLISHED and 0 not in values
        assert not {3, 39, 57, 58, 59} & set(values)                # no ASIC_ID, INPUT_CURRENT, ...
        assert "TAG_0" not in card.telemetry.named()
        assert values[K.TAGS["UPDATE_TELEM_SPEED"]] == 100
        hb0, t0 = values[K.TAGS["TIMER_HEARTBEAT"]], time.monotonic()
        time.sleep(0.35)
        hb1, t1 = card.telemetry.read()[K.TAGS["TIMER_HEARTBEAT"]], time.monotonic()
        assert 3 <= hb1 - hb0 <= (t1 - t0) / 0.1 + 1                # one per 100 ms update


def test_throttling_comes_from_the_arbiter_not_from_value_against_limit(capsys):
    T = K.TAGS
    at_limit = {T["TDP"]: 150, T["TDP_LIMIT_MAX"]: 150, T["AICLK_ARB_MAX"]: 1350 | (0 << 16)}
    assert derive(at_limit)["throttling"] == {"throttled": False, "arbiter": "fmax", "max_mhz": 1350}
    thermal = {T["AICLK_ARB_MAX"]: 1000 | (4 << 16)}                 # aiclk_arb_max_thm
    assert derive(thermal)["throttling"] == {"throttled": True, "arbiter": "thermal", "max_mhz": 1000}
    code, out, _ = run(["smi", "--dev", "tt:sim:th", "--fault", "throttle:arb=tdp"], capsys)
    assert code == 0 and "tdp (AICLK held at or below 1000 MHz)" in out
    code, out, _ = run(["smi", "--dev", "tt:sim:th", "--json"], capsys)
    d = json.loads(out)["device_info"][0]
    assert d["throttling"] == {"throttled": True, "arbiter": "tdp", "max_mhz": 1000}


def test_temperature_shows_the_shutdown_limit_with_the_throttle_point(capsys):
    code, out, _ = run(["smi", "--dev", "tt:sim:tmp"], capsys)
    assert code == 0 and "/ 110.0 °C (throttles at 90)" in out


def test_versions_and_board_names_as_tt_smi_writes_them():
    T = K.TAGS
    d = derive({T["TT_FLASH_VERSION"]: 0x03030100, T["BOARD_ID_HIGH"]: 0x36 << 4, T["BOARD_ID_LOW"]: 1,
                T["FW_BUILD_DATE"]: 0x5A140C1E})
    assert d["firmwares"]["tt_flash_version"] == "3.3.1.0"           # hex_to_semver_m3_fw: four parts
    assert d["firmwares"]["cm_fw_date"] == "2025-10-20"              # hex_to_date: 0xYMDDHHMM
    assert d["board_info"]["board_type"] == "bh-scrappy"
    assert derive({T["BOARD_ID_HIGH"]: 0x47 << 4, T["BOARD_ID_LOW"]: 0})["board_info"]["board_type"] == "tt-galaxy-bh"


def test_smi_shows_every_card_by_default(capsys):
    for name in ("one", "two"):
        Card(f"tt:sim:{name}").close()
    code, out, _ = run(["smi", "--json"], capsys)
    assert code == 0 and [d["dev"] for d in json.loads(out)["device_info"]] == ["tt:sim:one", "tt:sim:two"]


# tt-smi's snapshot model (tt_smi/log.py), field by field, with the types its backend puts there
# (tt_smi/backend.py): strings, except dram_status (get_dram_training_status: bool), pcie_speed
# (get_pci_properties: the generation as int), limits without a source (0), and pid/device (int).
SNAPSHOT_SCHEMA = {
    "time": str, "host_info": dict, "host_sw_vers": dict, "device_info": list, "processes": list,
}
HOST_INFO = ["OS", "Distro", "Kernel", "Hostname", "Platform", "Python", "Memory", "Driver"]
HOST_SW = ["tt_smi", "pyluwen", "tt_umd"]
DEVICE = ["smbus_telem", "board_info", "telemetry", "firmwares", "limits"]
BOARD_INFO = {"bus_id": str, "board_type": str, "board_id": str, "coords": str, "dram_status": bool,
              "dram_speed": str, "pcie_speed": int, "pcie_width": str}
TELEMETRY = ["voltage", "current", "power", "board_power", "aiclk", "asic_temperature", "fan_speed", "heartbeat"]
FIRMWARES = ["fw_bundle_version", "tt_flash_version", "cm_fw", "cm_fw_date", "eth_fw", "dm_bl_fw", "dm_app_fw", "gddr_fw"]
LIMITS = ["vdd_min", "vdd_max", "tdp_limit", "tdc_limit", "asic_fmax", "therm_trip_l1_limit", "thm_limit",
          "bus_peak_limit", "fan_rpm_limit", "board_power_limit"]
SMBUS_CHECKED = ["BOARD_ID_HIGH", "BOARD_ID_LOW", "ETH_FW_VERSION", "DDR_STATUS", "FAN_SPEED", "AICLK", "AXICLK",
                 "ARCCLK", "VCORE", "ASIC_TEMPERATURE", "VREG_TEMPERATURE", "BOARD_TEMPERATURE", "TDP", "TDC",
                 "VDD_LIMITS", "TT_FLASH_VERSION"]            # tests/test_snapshot.py smbus_telem_list


def test_snapshot_has_tt_smis_shape(capsys, tmp_path, monkeypatch):
    code, out, _ = run(["smi", "-s", "--dev", "tt:sim:ts"], capsys)
    assert code == 0
    snap = json.loads(out)
    assert list(snap) == list(SNAPSHOT_SCHEMA) and all(isinstance(snap[k], t) for k, t in SNAPSHOT_SCHEMA.items())
    assert list(snap["host_info"]) == HOST_INFO and all(isinstance(v, str) for v in snap["host_info"].values())
    assert snap["host_info"]["Driver"] == "TT-KMD 2.10.1" and snap["host_info"]["Memory"].endswith("B")
    assert list(snap["host_sw_vers"]) == HOST_SW
    d = snap["device_info"][0]
    assert list(d) == DEVICE
    assert {k: type(v) for k, v in d["board_info"].items()} == BOARD_INFO
    assert d["board_info"]["board_type"] == "p150a" and d["board_info"]["pcie_speed"] == 4
    assert list(d["telemetry"]) == TELEMETRY and all(isinstance(v, str) for v in d["telemetry"].values())
    assert d["telemetry"]["aiclk"] == " 800" and d["telemetry"]["voltage"] == "0.72"       # backend's formats
    assert list(d["firmwares"]) == FIRMWARES and d["firmwares"]["fw_bundle_version"] == "19.9.0.0"
    assert d["firmwares"]["tt_flash_version"] == "N/A"            # firmware 19.9 does not publish tag 58
    assert list(d["limits"]) == LIMITS and d["limits"]["thm_limit"] == "110" and d["limits"]["bus_peak_limit"] == 0
    smbus = d["smbus_telem"]
    assert set(SMBUS_CHECKED) <= set(smbus) and "THM_LIMIT_SHUTDOWN" in smbus
    assert smbus["DDR_STATUS"] == "0x55555555" and smbus["ASIC_ID"] is None and smbus["INPUT_POWER"].startswith("0x")
    assert "GDDR_STATUS" not in smbus and not any(k.startswith("TAG_") for k in smbus)
    procs = snap["processes"]
    assert procs and all(list(p) == ["pid", "user", "device", "cmdline"] for p in procs)
    assert all(isinstance(p["pid"], int) and p["device"] == 0 for p in procs)
    # -f FILE writes the same; -f alone writes tt-smi's default log file
    code, _, err = run(["smi", "-f", str(tmp_path / "snap.json"), "--dev", "tt:sim:ts"], capsys)
    assert code == 0 and list(json.loads((tmp_path / "snap.json").read_text())) == list(SNAPSHOT_SCHEMA)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, _, err = run(["smi", "-f", "--dev", "tt:sim:ts"], capsys)
    logs = list((tmp_path / "tt_smi_logs").glob("*_results.json"))
    assert code == 0 and len(logs) == 1 and str(logs[0]) in err
    code, _, err = run(["smi", "out.json", "--dev", "tt:sim:ts"], capsys)
    assert code == 2 and "only taken with -s or -f" in err
