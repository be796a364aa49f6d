"""`otpu setup --check` against fake sysfs trees: each missing piece of a host is named with its fix."""
from __future__ import annotations

import json
import os

import pytest

from otpu_core import hostsetup
from otpu_core.cli import build_app, run_app

BDF = "0000:03:00.0"


def host(tmp_path, *, card=True, klass="0x120000", speed="2.5 GT/s PCIe", width="8", module=True, bound=True,
         nodes=("user", "h2c_0", "c2h_0"), mode=0o660, rules=True):
    root = tmp_path / "root"
    dev = root / "sys/bus/pci/devices" / BDF
    dev.mkdir(parents=True)
    if card:
        for name, value in (("vendor", "0x10ee"), ("device", "0x7028"), ("class", klass), ("subsystem_vendor", "0x10ee"),
                            ("subsystem_device", "0x4f54"), ("current_link_speed", speed), ("current_link_width", width)):
            (dev / name).write_text(value + "\n")
    else:
        (dev / "vendor").write_text("0x8086\n")
        (dev / "device").write_text("0x1234\n")
    drivers = root / "sys/bus/pci/drivers"
    (drivers / "xdma").mkdir(parents=True)
    (drivers / "nvme").mkdir(parents=True)
    os.symlink(drivers / ("xdma" if bound else "nvme"), dev / "driver")
    if module:
        (root / "sys/module/xdma").mkdir(parents=True)
    (root / "dev").mkdir()
    for n in nodes:
        p = root / "dev" / f"xdma0_{n}"
        p.write_text("")
        p.chmod(mode)
    if rules:
        (root / "etc/udev/rules.d").mkdir(parents=True)
        (root / "etc/udev/rules.d/60-otpu.rules").write_text(hostsetup.UDEV_RULES)
    return root


def statuses(report):
    return {i.name: (i.status, i.found, i.fix) for i in report.items}


def test_a_ready_host_passes(tmp_path):
    r = hostsetup.check(host(tmp_path), uid=1000, gids={os.stat(tmp_path).st_gid})
    assert r.ok and {s for s, _, _ in statuses(r).values()} == {"PASS"}, statuses(r)
    assert r.cards[0]["bdf"] == BDF and r.cards[0]["driver"] == "xdma" and r.cards[0]["width"] == 8


@pytest.mark.parametrize("broken,item,words", [
    (dict(card=False), "PCIe device", "rescan"),
    (dict(width="4"), f"PCIe link {BDF}", "x8"),
    (dict(speed="unknown"), f"PCIe link {BDF}", "LnkSta"),
    (dict(module=False), "xdma driver", "modprobe xdma"),
    (dict(bound=False), f"driver bound {BDF}", "driver_override"),
    (dict(nodes=()), "device nodes", "dmesg"),
    (dict(nodes=("user", "h2c_0")), "device nodes /dev/xdma0", "modprobe"),
    (dict(mode=0o600), "permissions /dev/xdma0", "60-otpu.rules"),
])
def test_each_missing_piece_fails_with_its_fix(broken, item, words, tmp_path):
    root = host(tmp_path, **broken)
    r = hostsetup.check(root, uid=4242, gids={4242})     # someone who owns nothing there
    found = statuses(r)
    assert not r.ok and found[item][0] == "FAIL" and words in found[item][2], found
    others = {k for k, (s, _, _) in found.items() if s == "FAIL"} - {item}
    assert others <= ({"device nodes", "permissions /dev/xdma0"} if item == "PCIe device" else {"permissions /dev/xdma0"}), found


def test_an_old_bitstream_and_missing_rules_warn(tmp_path):
    r = hostsetup.check(host(tmp_path, klass="0x070001", rules=False), uid=0)
    found = statuses(r)
    assert r.ok and found[f"PCIe device {BDF}"][0] == "WARN" and found["udev rules"][0] == "WARN"
    assert "otpu setup --udev-rules" in found["udev rules"][2]


def test_the_command_reports_and_exits_1_when_not_ready(tmp_path, capsys):
    root = host(tmp_path, module=False)
    assert run_app(build_app(), "otpu", ["setup", "--check", "--root", str(root), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and any(i["name"] == "xdma driver" and i["status"] == "FAIL" for i in doc["items"])
    assert run_app(build_app(), "otpu", ["setup", "--root", str(host(tmp_path / "ok"))]) == 0
    assert "ready for a card" in capsys.readouterr().out
    assert run_app(build_app(), "otpu", ["setup", "--udev-rules"]) == 0
    assert 'KERNEL=="xdma[0-9]*_user"' in capsys.readouterr().out
