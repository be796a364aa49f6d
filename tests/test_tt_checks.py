"""Blackhole checks in the check DAG: what diag shows for a good card and for broken ones."""
from otpu_core import checks
from otpu_core.checks import CheckContext, Registry, Status
from otpu_tt.checks import CORES, DEVICE, DRIVER, FIRMWARE, TELEMETRY, add_checks


def run(dev, fault=None):
    reg = Registry()
    add_checks(reg)
    ctx = CheckContext(dev=dev, options={"fault": fault} if fault else {})
    try:
        return {r.name: r for r in checks.run_all(reg, ctx, always=())}
    finally:
        card = ctx.cache.get("tt.card")
        if card is not None:
            card.close()


def test_checks_are_for_tt_devices_only():
    reg = Registry()
    add_checks(reg)
    assert [c.name for c in reg.for_device("tt")] == [DEVICE, DRIVER, TELEMETRY, FIRMWARE, CORES]
    assert reg.for_device("otpu") == []


def test_good_simulated_card_passes():
    rows = run("tt:sim:d")
    assert all(r.status == Status.PASS for r in rows.values()), {n: r.message for n, r in rows.items()}
    assert "2.10.1" in rows[DRIVER].message and rows[TELEMETRY].data["tensix_enabled"] == 120
    assert rows[CORES].data["states"] == {"in reset": 120}


def test_a_hung_core_fails_with_the_recovery_hint():
    rows = run("tt:sim:d2", "hang_resident:x=6,y=7")
    assert rows[CORES].status == Status.FAIL and "6,7 hung" in rows[CORES].message
    assert "recover" in rows[CORES].hint


def test_a_hung_noc_fails_telemetry_and_skips_cores():
    rows = run("tt:sim:d3", "hang_chip")
    assert rows[DEVICE].status == Status.PASS and rows[TELEMETRY].status == Status.FAIL
    assert rows[CORES].status == Status.SKIP and rows[CORES].blocked_by == TELEMETRY
