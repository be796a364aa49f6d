"""Core checks that the simulated card never fails on its own: bandwidth (SKIP on a simulated
card), register stuck bits, PCIe link speed and width, ECC scrub; driven with a patched transport."""
from __future__ import annotations

import pytest

from otpu_core.card import regs
from otpu_core.checks import CheckContext, Status
from otpu_core.corechecks import device, memchecks, platform, regchecks


@pytest.fixture
def ctx():
    c = CheckContext("sim:unit", {"target": "sim-small"})
    yield c
    device.close(c)


def test_bandwidth_measures_both_directions(ctx, monkeypatch):
    t = device.transport(ctx)
    monkeypatch.setattr(t, "physical_timing", True)
    ctx.options.update(bw_mib=1, bw_min_gbs=1e-6)   # the simulated link is slow; the arithmetic is what counts
    res = memchecks.bandwidth(ctx, ch=1)
    assert res.status == Status.PASS and res.data["channel"] == 1
    assert res.data["h2c_gbs"] > 0 and res.data["c2h_gbs"] > 0
    assert res.message.startswith("host->card ") and "card->host" in res.message
    ctx.options["bw_min_gbs"] = 1e9
    res = memchecks.bandwidth(ctx, ch=0)
    assert res.status == Status.FAIL and res.message.endswith("(below 1e+09 GB/s)") and "iommu=pt" in res.hint


def test_stuck_masks_by_hand():
    written = [0, 0xFFFFFFFF, 0x0000FFFF]
    read = [0x10, 0xFFFFFF7F, 0x0000FF7F]    # bit 4 stuck at 1, bit 7 stuck at 0
    assert regchecks.stuck_masks(written, read) == (0x80, 0x10)


def test_register_check_reports_stuck_bits(ctx, monkeypatch):
    t = device.transport(ctx)
    real_read = t.reg_read

    def read(off):
        v = real_read(off)
        return (v | 1 << 9) & ~(1 << 30) & 0xFFFFFFFF if off == regs.off("PROG_N") else v
    monkeypatch.setattr(t, "reg_read", read)
    res = regchecks.rw_patterns(ctx)
    assert res.status == Status.FAIL
    assert res.message == "PROG_N stuck at 0: 0x40000000, stuck at 1: 0x00000200"


@pytest.mark.parametrize("speed,width,status,text", [
    ("5.0 GT/s PCIe", 8, Status.PASS, "5.0 GT/s PCIe x8"),
    ("2.5 GT/s PCIe", 8, Status.WARN, "2.5 GT/s PCIe x8: slower than the target's 5 GT/s"),
    ("2.5 GT/s PCIe", 4, Status.FAIL, "2.5 GT/s PCIe x4, below Gen1 x8"),
    (None, 0, Status.FAIL, "no PCIe link (link speed unknown, width 0)"),
])
def test_pcie_link(ctx, monkeypatch, speed, width, status, text):
    monkeypatch.setattr(device.transport(ctx), "link", lambda: {"speed": speed, "width": width})
    res = platform.pcie_link(ctx)
    assert (res.status, res.message) == (status, text)


def test_scrub_on_an_ecc_card_runs_once(ctx, monkeypatch):
    t = device.transport(ctx)
    monkeypatch.setattr(t, "ecc", True)
    seen = []
    ctx.options["scrub_progress"] = lambda done, total: seen.append((done, total))
    res = platform.dram_scrub(ctx)
    assert res.status == Status.PASS and "GiB written in" in res.message
    assert seen[-1][0] == seen[-1][1] == 16 << 20
    assert t.reg_read(regs.off("SCRATCH")) == regs.DRAM_INIT
    assert platform.dram_scrub(ctx).message == "already done since configuration"


def test_xdma_driver_names_missing_nodes():
    res = platform.xdma_driver(CheckContext("/dev/xdma9"))
    assert res.status == Status.FAIL
    assert res.message.startswith("missing /dev/xdma9_user, /dev/xdma9_h2c_0, /dev/xdma9_c2h_0")
    assert platform.xdma_driver(CheckContext("sim")).status == Status.SKIP


def _patch_reads(monkeypatch, t, off, fn):
    real = t.reg_read
    monkeypatch.setattr(t, "reg_read", lambda o: fn(real(o)) if o == off else real(o))


def test_sticky_status_error_bits_fail(ctx, monkeypatch):
    t = device.transport(ctx)
    _patch_reads(monkeypatch, t, regs.off("STATUS"), lambda v: v | regs.ST_AXI_ERR)
    res = platform.status_errors(ctx)
    assert res.status == Status.FAIL and "ERROR / AXI_ERR stay set after CLEAR" in res.message
