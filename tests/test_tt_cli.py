"""otpu-tt and ft_tt_core from the command line: output, JSON, exit codes, errors without tracebacks."""
import json
import os
import subprocess
import sys

from otpu_core.cli import run_app
from otpu_tt.cli import app, core_app


def run(args, capsys, which=app, prog="otpu-tt"):
    code = run_app(which, prog, args)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out, out.err


def test_smi_json_has_the_tt_smi_shape(capsys):
    code, out, _ = run(["smi", "--dev", "tt:sim:c", "--json"], capsys)
    assert code == 0
    snap = json.loads(out)
    d = snap["device_info"][0]
    assert set(snap) >= {"time", "host_info", "device_info"}
    assert d["board_info"]["board_type"] == "p150a" and d["board_info"]["dram_status"] is True
    assert d["board_info"]["tensix_enabled"] == 120 and len(d["board_info"]["harvested_x"]) == 2
    t, lim = d["telemetry"], d["limits"]
    assert t["aiclk"] == 800 and lim["asic_fmax"] == 1350 and lim["tdp_limit"] == 150
    assert 0.7 <= t["voltage"] <= lim["vdd_max"] and 20 < t["asic_temperature"] < 90
    assert d["firmwares"]["fw_bundle_version"] == "19.9.0.0"
    assert d["throttling"] == {"throttled": False, "arbiter": "fmax", "max_mhz": 1350}
    assert any(p["pid"] for p in d["processes"])
    assert d["smbus_telem"]["GDDR_STATUS"] == "0x55555555"
    # the driver's sysfs files (a second path to the same firmware values) agree with ARC over the NoC
    sysfs = d["sysfs"]
    assert sysfs["tt_card_type"] == "p150a" and sysfs["tt_serial"] == d["board_info"]["board_id"]
    assert abs(int(sysfs["temp1_input"]) / 1000 - t["asic_temperature"]) < 1.0
    assert int(sysfs["in0_input"]) == round(t["voltage"] * 1000)


def test_smi_text_and_list(capsys):
    code, out, _ = run(["smi", "--dev", "tt:sim:c"], capsys)
    assert code == 0 and "p150a" in out and "AICLK" in out and "heartbeat" in out
    code, out, _ = run(["list", "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and [r["dev"] for r in rows] == ["tt:sim:c"] and rows[0]["board_type"] == "p150a"


def test_core_status_json_and_grid(capsys):
    code, out, _ = run(["core", "status", "--dev", "tt:sim:g", "--fault", "hang_resident:x=2,y=3", "--json"], capsys)
    data = json.loads(out)
    states = {(c["x"], c["y"]): c["state"] for c in data["cores"]}
    assert code == 1 and len(states) == 120 and states[(2, 3)] == "hung" and not data["healthy"]
    code, out, _ = run(["core", "status", "--dev", "tt:sim:g2", "--fault", "wedge:x=4,y=4"], capsys)
    assert code == 1 and "wedged" in out and "4,4" in out
    assert "to recover: `otpu-tt core recover --all --dev tt:sim:g2`" in out
    code, out, _ = run(["core", "status", "--dev", "tt:sim:g3"], capsys)
    assert code == 0 and "120 in reset" in out


def test_probe_refuses_a_harvested_coordinate(capsys):
    code, _, err = run(["core", "probe", "15,2", "--dev", "tt:sim:p"], capsys)
    assert code == 2 and "x=15, y=2" in err and "harvested" in err
    code, out, _ = run(["core", "probe", "1,2", "--dev", "tt:sim:p", "--json"], capsys)
    assert code == 0 and json.loads(out)["state"] == "in reset"
    code, out, _ = run(["core", "probe", "1,2", "--dev", "tt:sim:p2", "--fault", "wedge:x=1,y=2"], capsys)
    assert code == 1 and "wedged" in out


def test_recover_exit_codes(capsys):
    code, out, _ = run(["core", "recover", "3,4", "--dev", "tt:sim:r1", "--fault", "hang_resident:x=3,y=4"], capsys)
    assert code == 0 and "recovered at rung 1" in out
    code, out, _ = run(["core", "recover", "3,4", "--dev", "tt:sim:r2", "--fault", "noc_stuck:x=3,y=4"], capsys)
    assert code == 2 and "needs --yes" in out and "tile-reset" in out
    code, out, _ = run(["core", "recover", "--all", "--yes", "--settle", "0", "--max-rung", "4", "--json",
                        "--dev", "tt:sim:r3", "--fault", "bad_tile:x=3,y=4"], capsys)
    report = json.loads(out)
    assert code == 1 and report["fixed_at_rung"] is None and [s["rung"] for s in report["steps"]] == [1, 2, 3, 4]
    code, _, err = run(["core", "recover", "--dev", "tt:sim:r4"], capsys)
    assert code == 2 and "X,Y or --all" in err


def test_ft_tt_core_is_the_core_group(capsys):
    code, out, _ = run(["recover", "--all", "--yes", "--settle", "0", "--dev", "tt:sim:f", "--fault", "hang_chip"],
                       capsys, which=core_app, prog="ft_tt_core")
    assert code == 0 and "recovered at rung 5" in out


def test_user_errors(capsys):
    code, _, err = run(["smi", "--dev", "tt:sim:u", "--fault", "melt"], capsys)
    assert code == 2 and "unknown Blackhole fault 'melt'" in err and "hang_resident" in err
    code, _, err = run(["smi", "--dev", "tt:7"], capsys)
    assert code == 3 and "/dev/tenstorrent/7 does not exist" in err
    code, _, err = run(["smi", "--dev", "tt:sim:h", "--fault", "hang_chip"], capsys)
    assert code == 3 and "NoC is hung" in err


def test_console_scripts_and_otpu_root():
    out = subprocess.run([sys.executable, "-c", "from otpu_tt.cli import core_main; core_main()", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "recover" in out.stdout
    out = subprocess.run([sys.executable, "-m", "otpu_core", "tt", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "smi" in out.stdout and "core" in out.stdout


def test_live_mode_ends_with_exit_0_on_ctrl_c(capsys, monkeypatch):
    import otpu_tt.cliopts as cli
    ticks = []

    def sleep(seconds):
        ticks.append(seconds)
        if len(ticks) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(cli, "pause", sleep)
    code, out, _ = run(["smi", "--dev", "tt:sim:live", "-l", "0.5"], capsys)
    assert code == 0 and ticks == [0.5, 0.5] and "AICLK" in out


def test_smi_derivations_by_hand_and_missing_tags_are_na():
    from otpu_core.tt import consts as K
    from otpu_tt.snapshot import derive
    T = K.TAGS
    v = {T["BOARD_ID_HIGH"]: 0x00000400, T["BOARD_ID_LOW"]: 0x12345678, T["VCORE"]: 805, T["TDC"]: 0x00C80045,
         T["TDP"]: 0x0096005A, T["AICLK"]: 0x05460546, T["ASIC_TEMPERATURE"]: 0xFFFF8000,      # -0.5 °C
         T["VDD_LIMITS"]: (900 << 16) | 700, T["TDP_LIMIT_MAX"]: 90, T["TDC_LIMIT_MAX"]: 200,
         T["THM_LIMIT_THROTTLE"]: 90, T["GDDR_STATUS"]: 0x5555, T["FLASH_BUNDLE_VERSION"]: 0x12060000,
         T["GDDR_SPEED"]: 14000, T["TIMER_HEARTBEAT"]: 61}
    d = derive(v)
    b, t = d["board_info"], d["telemetry"]
    assert b["board_type"] == "p150a" and b["board_id"] == "0000040012345678"     # UPI = bits 36.. = 0x40
    assert t == {"voltage": 0.805, "current": 0x45, "aiclk": 1350, "power": 90, "board_power": None,
                 "asic_temperature": -0.5, "fan_speed": None, "heartbeat": 10}
    assert b["dram_status"] is True and b["dram_speed"] == "14G"                   # old bundle: 16-bit check
    assert d["throttling"] is None and d["limits"]["vdd_max"] == 0.9      # no AICLK_ARB_MAX: unknown, not guessed
    assert d["firmwares"]["fw_bundle_version"] == "18.6.0.0" and d["firmwares"]["cm_fw"] is None
    assert b["asic_id"] is None and b["tensix_enabled"] is None


def test_live_smi_survives_a_reset_by_someone_else(capsys, monkeypatch):
    import otpu_tt.cliopts as cli
    from otpu_core.tt import ioctl as I
    from otpu_core.tt.card import Card
    calls = []

    def pause(seconds):
        calls.append(seconds)
        if len(calls) == 1:                       # between two samples: another user resets the card
            with Card("tt:sim:lr") as other:
                other.dev.reset_device(I.RESET_ASIC)
                other.dev.reset_device(I.RESET_POST)
        elif len(calls) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(cli, "pause", pause)
    reopened = []
    real_reopen = Card.reopen
    monkeypatch.setattr(Card, "reopen", lambda self, *a: (reopened.append(self.spec), real_reopen(self, *a))[1])
    code, out, err = run(["smi", "--dev", "tt:sim:lr", "-l", "1"], capsys)
    assert code == 0 and reopened == ["tt:sim:lr"] and "AICLK" in out and err == ""


def test_issue_scenario_repeated_fault_note_and_starting_over(capsys):
    args = ["core", "recover", "--all", "--yes", "--settle", "0", "--json", "--dev", "tt:sim:r"]
    code, out, err = run(args + ["--fault", "noc_stuck:x=1,y=2"], capsys)
    assert code == 0 and json.loads(out)["fixed_at_rung"] == 3 and "note" not in err
    code, out, err = run(args + ["--fault", "noc_stuck:x=1,y=2;old_fw"], capsys)
    assert code == 0 and json.loads(out)["steps"] == []
    code, out, _ = run(["core", "recover", "--all", "--dev", "tt:sim:r"], capsys)
    assert code == 0 and "every core is healthy: nothing to do" in out and "recovery ladder" not in out   # no empty table
    assert "note:" in err and "'noc_stuck:x=1,y=2' not applied" in err and "otpu-tt sim reset --dev tt:sim:r" in err
    code, out, _ = run(["sim", "reset", "--dev", "tt:sim:r"], capsys)
    assert code == 0 and "tt:sim:r: powered off and on" in out
    code, out, err = run(args + ["--fault", "noc_stuck:x=1,y=2"], capsys)
    report = json.loads(out)
    assert code == 0 and report["fixed_at_rung"] == 3 and "note" not in err      # old_fw went with the power
    assert report["steps"][-1]["result"] == "fixed"


def test_sim_reset_clears_link_lost_and_refuses_a_real_card(capsys):
    code, _, err = run(["smi", "--dev", "tt:sim:lost", "--fault", "link_lost"], capsys)
    assert code == 3 and "link" in err
    code, _, _ = run(["sim", "reset", "--dev", "tt:sim:lost"], capsys)
    assert code == 0
    code, out, _ = run(["core", "status", "--dev", "tt:sim:lost", "--json"], capsys)
    assert code == 0 and json.loads(out)["healthy"] and len(json.loads(out)["cores"]) == 120
    code, _, err = run(["sim", "reset", "--dev", "tt:0"], capsys)
    assert code == 2 and "simulated cards; tt:0 is a real card" in err


def test_chip_hung_and_link_lost_have_their_own_glyphs(capsys):
    from rich.console import Console
    from otpu_core.tt.card import Card
    from otpu_core.tt.probe import CoreState
    from otpu_tt.views import STATE_STYLE, core_grid
    glyphs = [g for g, _ in STATE_STYLE.values()]
    assert len(set(glyphs)) == len(glyphs) and "-" not in glyphs          # '-' is harvested
    with Card("tt:sim:gl") as card:
        tiles = card.tiles
    for state in ("chip hung", "link lost"):
        con = Console(width=120, record=True, file=open(os.devnull, "w"))
        con.print(core_grid(tiles, [CoreState(t, state) for t in tiles.tensix]))
        text = con.export_text()
        glyph = STATE_STYLE[state][0]
        assert f"{glyph} {state}" in text                                     # the legend names it
        row = next([c.strip() for c in line.split("│")][1:-1] for line in text.splitlines() if line.startswith("│  2 "))
        assert row[1:] == [glyph] * 12 + ["-", "-"]                           # row 2: 12 live columns, 2 harvested


def test_smi_and_diag_name_harvested_columns_the_same_way(capsys):
    code, out, _ = run(["smi", "--dev", "tt:sim:hv", "--json"], capsys)
    b = json.loads(out)["device_info"][0]["board_info"]
    label = (f"harvested translated x {', '.join(map(str, b['harvested_x']))} "
             f"(NOC0 x {', '.join(map(str, b['harvested_noc0_x']))})")
    assert b["harvested_x"] == [15, 16] and b["harvested_noc0_x"] != b["harvested_x"]
    code, out, _ = run(["smi", "--dev", "tt:sim:hv"], capsys)
    assert code == 0 and label in out
    from otpu_core import checks
    from otpu_core.checks import CheckContext, Registry
    from otpu_tt.checks import TELEMETRY, add_checks
    reg = Registry()
    add_checks(reg)
    ctx = CheckContext(dev="tt:sim:hv", options={})
    try:
        rows = {r.name: r for r in checks.run_all(reg, ctx, always=())}
    finally:
        ctx.cache["tt.card"].close()
    assert label in rows[TELEMETRY].message


def test_recover_plan_shows_power_cycle_as_an_answer_not_an_action(capsys):
    code, out, _ = run(["core", "recover", "3,4", "--dev", "tt:sim:pl", "--fault", "noc_stuck:x=3,y=4", "--json"], capsys)
    report = json.loads(out)
    assert code == 2 and [r["rung"] for r in report["needs_yes"]] == [3, 4, 5, 6] and report["then_power_cycle"]
    code, out, _ = run(["core", "recover", "3,4", "--dev", "tt:sim:pl2", "--fault", "noc_stuck:x=3,y=4"], capsys)
    plan, _, after = out.partition("would run next (needs --yes)")[2].partition("if those do not help")
    assert code == 2 and "6 pcie-sbr" in plan and "power-cycle" not in plan
    assert "7 power-cycle" in after and "not an action" in after
    code, out, _ = run(["core", "recover", "3,4", "--max-rung", "5", "--json", "--dev", "tt:sim:pl3",
                        "--fault", "noc_stuck:x=3,y=4"], capsys)
    report = json.loads(out)
    assert [r["rung"] for r in report["needs_yes"]] == [3, 4, 5] and not report["then_power_cycle"]


def test_status_on_a_hung_chip_or_a_lost_link_draws_the_grid_and_exits_1(capsys):
    for fault, glyph in (("hang_chip", "!"), ("link_lost", "L")):
        name = f"tt:sim:gr-{fault}"
        code, out, _ = run(["core", "status", "--dev", name, "--fault", fault], capsys)
        row = next([c.strip() for c in line.split("│")][1:-1] for line in out.splitlines() if line.startswith("│  5 "))
        assert code == 1 and row[1:] == [glyph] * 12 + ["-", "-"] and "the whole chip:" in out
        assert f"`otpu-tt core recover --all --yes --dev {name}`" in out
        code, out, _ = run(["core", "status", "--dev", name, "--json"], capsys)
        data = json.loads(out)
        assert code == 1 and not data["healthy"] and "broken" in data and len(data["cores"]) == 120
        assert {c["state"] for c in data["cores"]} == {"chip hung" if fault == "hang_chip" else "link lost"}


def test_list_shows_degraded_cards_and_keeps_bus_and_serial_of_a_hung_one(capsys):
    from otpu_core.tt.card import Card
    with Card("tt:sim:l1") as card:
        serial = card.telemetry.named()["BOARD_ID_LOW"]
    run(["core", "status", "--dev", "tt:sim:l1", "--fault", "hang_chip"], capsys)         # hangs after a good read
    run(["core", "status", "--dev", "tt:sim:l2", "--fault", "noc_stuck:x=3,y=4"], capsys)
    code, out, _ = run(["list", "--json"], capsys)
    rows = {r["dev"]: r for r in json.loads(out)}
    hung, stuck = rows["tt:sim:l1"], rows["tt:sim:l2"]
    assert code == 0 and hung["health"] == "broken" and hung["status"] == "NoC hung" and hung["remembered"]
    assert hung["bus_id"] and int(hung["board_id"][8:], 16) == serial and hung["board_type"] == "p150a"
    assert stuck["health"] == "degraded" and "1 unresponsive (3,4)" in stuck["detail"]
    assert "recover --all --yes --dev tt:sim:l2" in stuck["detail"] and stuck["cores"]["healthy"] == 119
    code, out, _ = run(["list"], capsys)
    assert "degraded" in out and "NoC hung" in out


def test_probe_prints_a_table_and_names_the_recover_command(capsys):
    code, out, _ = run(["core", "probe", "3,4", "--dev", "tt:sim:pt", "--fault", "hang_resident:x=3,y=4"], capsys)
    assert code == 1 and "{" not in out and "PC snapshots" in out and "BRISC 0x" in out
    assert "`otpu-tt core recover 3,4 --dev tt:sim:pt`" in out
    code, out, _ = run(["core", "probe", "3,4", "--dev", "tt:sim:pt2", "--fault", "noc_stuck:x=3,y=4", "--json"], capsys)
    assert code == 1 and json.loads(out)["recover"] == "otpu-tt core recover 3,4 --yes --dev tt:sim:pt2"


def test_selftest_flags_old_firmware_and_hints_the_full_command(capsys):
    from otpu_core import checks
    from otpu_core.checks import CheckContext, Registry, Status
    from otpu_tt.checks import CORES, FIRMWARE, TELEMETRY, add_checks

    def rows(dev, fault):
        reg = Registry()
        add_checks(reg)
        ctx = CheckContext(dev=dev, options={"fault": fault})
        try:
            return {r.name: r for r in checks.run_all(reg, ctx, always=())}
        finally:
            ctx.cache["tt.card"].close()
    r = rows("tt:sim:st1", "noc_stuck:x=3,y=4;old_fw")
    assert r[FIRMWARE].status == Status.FAIL and "19.8.0.0 is older than 19.9.0.0" in r[FIRMWARE].message
    assert r[CORES].hint.startswith("`otpu-tt core recover --all --yes --dev tt:sim:st1`")
    r = rows("tt:sim:st2", "link_lost")
    assert r[TELEMETRY].status == Status.FAIL and "`otpu-tt sim reset --dev tt:sim:st2`" in r[TELEMETRY].hint
    assert "recover --all --yes --dev tt:sim:st2" in r[TELEMETRY].hint
    r = rows("tt:sim:st3", "wedge:x=5,y=5")
    assert r[FIRMWARE].status == Status.PASS and r[CORES].hint.startswith("`otpu-tt core recover --all --dev tt:sim:st3`")


def test_version_and_help(capsys):
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.startswith("otpu-tt ")
    code, out, _ = run(["smi", "--help"], capsys)
    assert code == 0 and "tt-smi's -s JSON shape" in out and "--snapshot" in out and "--filename" in out


def test_live_smi_shows_a_card_that_hangs_instead_of_quitting(capsys, monkeypatch):
    import otpu_tt.cliopts as cli
    from otpu_core.tt.card import Card
    calls = []

    def pause(seconds):
        calls.append(seconds)
        if len(calls) == 1:                       # between two samples the card's NoC hangs
            with Card("tt:sim:lh") as other:
                other.dev.chip._hang("test: a bad endpoint elsewhere")
        elif len(calls) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(cli, "pause", pause)
    code, out, _ = run(["smi", "--dev", "tt:sim:lh", "-l", "1"], capsys)
    assert code == 0 and "tt:sim:lh" in out and "the NoC is hung" in out and "recover --all --yes" in out
