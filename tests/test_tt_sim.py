"""The simulated p150a behind the device interface: persistence, hangs, resets, locks, power, faults."""
import errno
import json
import os
import subprocess
import sys

import pytest

from otpu_core.errors import UsageError
from otpu_core.tt import consts as K
from otpu_core.tt import ioctl as I
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card, open_device
from otpu_core.tt.device import DeviceGone
from otpu_core.tt.faults import parse
from otpu_core.tt.noc import NocHung
from otpu_core.tt.simdev import SimDevice


def test_telemetry_and_harvesting():
    with Card("tt:sim:a") as card:
        values = card.telemetry.read()
        cols = values[K.TAGS["ENABLED_TENSIX_COL"]]
        assert bin(cols).count("1") == 12 and len(card.tiles.tensix) == 120
        assert card.tiles.harvested_x == [15, 16]
        assert values[K.TAGS["GDDR_STATUS"]] == 0x55555555 and values[K.TAGS["ENABLED_GDDR"]] == 0xFF
        assert (values[K.TAGS["BOARD_ID_HIGH"]] << 32 | values[K.TAGS["BOARD_ID_LOW"]]) >> 36 & 0xFFFFF == 0x40


def test_each_card_keeps_its_harvesting_and_telemetry_agrees_with_the_fuses():
    for name in ("a", "b", "c"):
        with Card(f"tt:sim:{name}") as card:
            low, high = sorted(card.dev.chip.identity["harvested_phys_cols"])
            # translated 16 is the lowest harvested physical column (tt-zephyr-platforms noc_init.c)
            assert card.tiles.harvested_x == [15, 16]
            assert card.tiles.harvested_noc0_x == [K.PHYS_COL_X[high], K.PHYS_COL_X[low]]
            first = card.tiles.harvested_noc0_x
        with Card(f"tt:sim:{name}") as again:
            assert again.tiles.harvested_noc0_x == first


def test_another_process_sees_the_same_chip(tmp_path):
    with Card("tt:sim:shared") as card:
        t = card.tiles.tile("tensix", 3, 5)
        card.noc.write(t, L.USER_BASE, b"shared bytes")
        serial = hex(card.telemetry.read()[K.TAGS["BOARD_ID_LOW"]])
        code = ("from otpu_core.tt.card import Card\n"
                "from otpu_core.tt import layout as L, consts as K\n"
                "with Card('tt:sim:shared') as c:\n"
                "    t = c.tiles.tile('tensix', 3, 5)\n"
                "    print(c.noc.read(t, L.USER_BASE, 12).decode(), hex(c.telemetry.read()[K.TAGS['BOARD_ID_LOW']]))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["shared", "bytes", serial]
        assert os.getpid() in card.dev.pids()


def test_l1_and_dram_round_trip():
    with Card("tt:sim:m") as card:
        t = card.tiles.tile("tensix", 14, 11)
        data = os.urandom(5000)
        card.noc.write(t, 0x100000, data)
        assert card.noc.read(t, 0x100000, 5000) == data
        d = card.tiles.dram(7, 2)
        card.noc.write(d, (3 << 30) + (2 << 20) - 8, data[:100])   # crosses a 2 MiB window boundary
        assert card.noc.read(d, (3 << 30) + (2 << 20) - 8, 100) == data[:100]


def test_guard_refuses_before_issuing_and_bypass_hangs_the_chip():
    with Card("tt:sim:h") as card:
        harvested = card.tiles.harvested_x[0]
        with pytest.raises(UsageError) as e:
            card.noc.read32(card.tiles.tile("tensix", harvested, 2), 0)
        assert f"x={harvested}" in e.value.message
        good = card.tiles.tile("tensix", 1, 2)
        assert card.noc.read32(good, K.SOFT_RESET_0) == 0x47800      # RISCs held: the refused access did not hang it
        # bypass the guard: aim a raw window at the harvested column
        tlb = card.dev.allocate_tlb()
        win = card.dev.map_tlb(tlb)
        card.dev.configure_tlb(tlb.id, 0, harvested, 2)
        assert win.read32(0x100) == 0xFFFFFFFF
        # from now on every access fails, also to good tiles and to ARC
        with pytest.raises(NocHung):
            card.noc.read32(good, K.SOFT_RESET_0)
        with pytest.raises(NocHung):
            card.telemetry.read()
        card.noc.write32(good, L.USER_BASE, 5)                             # writes vanish
        win.close()
        card.dev.free_tlb(tlb.id)
        with card.exclusive():
            card.asic_reset(settle=0)
        assert card.noc.read32(good, K.SOFT_RESET_0) == 0x47800
        assert card.noc.read32(good, L.USER_BASE) == 0                     # L1 was wiped


@pytest.mark.parametrize("addr", [0xFFB00000, 0xFFB14010])
def test_private_ram_hangs_when_the_guard_is_bypassed(addr):
    with Card("tt:sim:p") as card:
        tlb = card.dev.allocate_tlb()
        win = card.dev.map_tlb(tlb)
        card.dev.configure_tlb(tlb.id, K.REG_WINDOW_BASE, 1, 2)
        win.read32(addr - K.REG_WINDOW_BASE)
        with pytest.raises(NocHung):
            card.noc.read32(card.tiles.tile("tensix", 2, 2), K.SOFT_RESET_0)
        assert "private memory" in card.dev.chip.hang_reason()


def test_old_descriptors_fail_after_reset_and_the_tool_reopens():
    with Card("tt:sim:r") as old, Card("tt:sim:r") as resetter:
        t = old.tiles.tile("tensix", 2, 3)
        old.noc.write(t, L.USER_BASE, b"x" * 8)
        resetter.dev.reset_device(I.RESET_ASIC)
        # the resetting descriptor survives but only GET_*_INFO/RESET until POST_RESET
        resetter.dev.device_info()
        with pytest.raises(DeviceGone):
            resetter.dev.lock_ctl(I.LOCK_TEST, 0)
        # every older descriptor: ioctls ENODEV, mappings gone (SIGBUS on hardware)
        with pytest.raises(DeviceGone) as e:
            old.dev.driver_info()
        assert e.value.errno == errno.ENODEV
        with pytest.raises(DeviceGone):
            old.noc.read32(t, L.USER_BASE)
        resetter.dev.reset_device(I.RESET_POST)
        resetter.dev.lock_ctl(I.LOCK_TEST, 0)
        assert old.ensure_alive() is True                 # reopened by PCI address
        assert old.noc.read(t, L.USER_BASE, 8) == bytes(8)
        assert old.ensure_alive() is False


def test_lock_ctl_between_descriptors_and_release_at_close():
    a, b = SimDevice("l"), SimDevice("l")
    try:
        assert a.lock_ctl(I.LOCK_ACQUIRE, 5) == 1
        assert b.lock_ctl(I.LOCK_ACQUIRE, 5) == 0
        assert b.lock_ctl(I.LOCK_TEST, 5) == 2 and a.lock_ctl(I.LOCK_TEST, 5) == 3
        a.close()
        assert b.lock_ctl(I.LOCK_ACQUIRE, 5) == 1
    finally:
        a.close()
        b.close()


def test_tlb_rules():
    dev = SimDevice("t")
    try:
        with pytest.raises(OSError) as e:
            dev.allocate_tlb(1 << 20)
        assert e.value.errno == errno.EINVAL
        tlb = dev.allocate_tlb()
        with pytest.raises(OSError) as e:
            dev.configure_tlb(tlb.id, 0x1000, 1, 2)
        assert e.value.errno == errno.EINVAL
        win = dev.map_tlb(tlb)
        with pytest.raises(OSError) as e:
            dev.free_tlb(tlb.id)
        assert e.value.errno == errno.EBUSY
        win.close()
        dev.free_tlb(tlb.id)
        big = dev.allocate_tlb(K.TLB_4G)
        assert big.id == 202 and big.offset_uc == K.TLB_MMAP_UC + (512 << 20)
    finally:
        dev.close()


def test_power_down_at_last_close_resets_every_risc():
    with Card("tt:sim:pw") as card:
        from otpu_core.tt.launch import boot
        t = card.tiles.tile("tensix", 4, 4)
        boot(card.noc, t)
        assert card.noc.read32(t, K.SOFT_RESET_0) == 0x47000      # BRISC released (tt-umd SOFT_RESET_* bits)
    with Card("tt:sim:pw") as card:
        assert card.noc.read32(card.tiles.tile("tensix", 4, 4), K.SOFT_RESET_0) == 0x47800


def test_fault_specs():
    assert [f.kind for f in parse("hang_resident:x=1,y=2; wedge:x=3,y=4,risc=trisc0;hang_chip")] == \
        ["hang_resident", "wedge", "hang_chip"]
    with pytest.raises(UsageError) as e:
        parse("melt:x=1")
    assert "hang_resident" in e.value.hint and "bad_tile" in e.value.hint
    for bad in ("wedge:x=1", "wedge:x=1,y=2,risc=cpu", "hang_chip:x=1", "noc_stuck:x=a,y=2"):
        with pytest.raises(UsageError):
            parse(bad)
    with pytest.raises(UsageError, match="not a live Tensix"):
        open_device("tt:sim:f", parse("noc_stuck:x=15,y=2"))


def test_env_faults_apply_once(monkeypatch):
    monkeypatch.setenv("OTPU_TT_SIM_FAULTS", "bad_tile:x=2,y=2")
    with Card("tt:sim:e") as card:
        t = card.tiles.tile("tensix", 2, 2)
        assert card.noc.read32(t, K.NIU0_BASE + K.NOC_ID_TRANSLATED) == 0xFFFFFFFF
        with card.exclusive():
            card.asic_reset(settle=0)
        assert card.noc.read32(t, K.NIU0_BASE + K.NOC_ID_TRANSLATED) == (2 << 6) | 2
    with Card("tt:sim:e") as card:       # the same spec is not injected again
        assert card.noc.read32(card.tiles.tile("tensix", 2, 2), K.NIU0_BASE + K.NOC_ID_TRANSLATED) == (2 << 6) | 2
    ident = json.loads((card.dev.chip.dir / "identity.json").read_text())
    assert ident["applied_faults"] == ["bad_tile:x=2,y=2"]


def test_device_spec_errors():
    with pytest.raises(UsageError):
        open_device("xdma0")
    with pytest.raises(UsageError):
        open_device("tt:sim:bad/name")
    with pytest.raises(UsageError):
        open_device("tt:0", parse("hang_chip"))


def test_windows_are_reused_not_reconfigured_per_access():
    with Card("tt:sim:w") as card:
        calls = []
        real = card.dev._ioctl
        card.dev._ioctl = lambda req, buf: (calls.append(req), real(req, buf))[1]
        a, b = card.tiles.tile("tensix", 1, 2), card.tiles.tile("tensix", 2, 2)
        for _ in range(50):
            card.noc.read32(a, L.USER_BASE)
            card.noc.read32(b, L.USER_BASE)
            card.noc.read32(a, K.SOFT_RESET_0)          # another 2 MiB window of the same tile
        assert calls.count(I.CONFIGURE_TLB) == 3       # one aim per (tile, window), then reuse


def test_real_device_is_found_again_by_pci_address(tmp_path):
    from otpu_core.tt.kmd import minor_of_bdf
    pci, dev = tmp_path / "pci", tmp_path / "dev"
    (pci / "0000:3b:00.0" / "tenstorrent" / "tenstorrent!2").mkdir(parents=True)
    dev.mkdir()
    assert minor_of_bdf("0000:3b:00.0", dev, pci) is None       # node not there yet
    (dev / "2").write_bytes(b"")
    assert minor_of_bdf("0000:3b:00.0", dev, pci) == 2
    assert minor_of_bdf("0000:3c:00.0", dev, pci) is None


def test_arc_message_queue():
    from otpu_core.tt.arc import ArcError
    with Card("tt:sim:arc") as card:
        M = K.MSG
        first = card.arc.send(M["TEST"], 41)
        second = card.arc.send(M["TEST"], 7)
        assert first[:2] == [0, 42] and second[:3] == [0, 8, first[2] + 1]     # {0, arg+1, last_serial+1}
        for _ in range(10):                                   # more than the queue's 4 entries: pointers wrap
            card.arc.send(M["TEST"], 1)
        card.arc.send(M["AICLK_GO_BUSY"])
        assert card.telemetry.read()[K.TAGS["AICLK"]] == 1350
        card.arc.send(M["FORCE_AICLK"], 250)
        assert card.arc.send(M["GET_AICLK"])[1] == 250         # aiclk_ppm.c get_aiclk_handler: data[1]
        card.arc.send(M["FORCE_AICLK"], 0)
        card.arc.send(M["AICLK_GO_LONG_IDLE"])
        assert card.telemetry.read()[K.TAGS["AICLK"]] == 800
        with pytest.raises(ArcError, match="does not know"):
            card.arc.send(0x5F)


def test_query_mappings_and_power_gating():
    with Card("tt:sim:pg") as card:
        maps = {m.mapping_id: (m.mapping_base, m.mapping_size) for m in card.dev.query_mappings()}
        assert maps[1] == (0, 512 << 20) and maps[5] == (4 << 36, 32 << 30) and len(maps) == 6
        card.dev.set_power_state(0)                          # a power-aware client that turned Tensix off
        with pytest.raises(NocHung):                         # touching a clock-gated Tensix hangs
            card.noc.read32(card.tiles.tile("tensix", 1, 2), L.USER_BASE)
