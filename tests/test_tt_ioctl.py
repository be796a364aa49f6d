"""tt-kmd ABI: request numbers, struct sizes and field offsets against the reference, and the real
device's ioctl/mmap path against a stand-in kernel (a recording ioctl and a file-backed window)."""
import ctypes as C
import errno
import mmap
import os
import struct

import pytest

from otpu_core.errors import DeviceError
from otpu_core.tt import consts as K
from otpu_core.tt import ioctl as I
from otpu_core.tt.device import DeviceGone
from otpu_core.tt.kmd import KmdDevice, MmapWindow


def test_request_numbers_are_IO_0xFA_nr():
    # _IO: direction 0 and size 0, so only the magic (bits 15:8) and nr (7:0) remain.
    expected = {"GET_DEVICE_INFO": 0xFA00, "QUERY_MAPPINGS": 0xFA02, "GET_DRIVER_INFO": 0xFA05,
                "RESET_DEVICE": 0xFA06, "LOCK_CTL": 0xFA08, "ALLOCATE_TLB": 0xFA0B, "FREE_TLB": 0xFA0C,
                "CONFIGURE_TLB": 0xFA0D, "SET_NOC_CLEANUP": 0xFA0E, "SET_POWER_STATE": 0xFA0F}
    for name, number in expected.items():
        assert getattr(I, name) == number, name
    # the generic encoder puts size and direction where Linux does
    assert I._IOC(3, 0xFA, 5, 16) == (3 << 30) | (16 << 16) | (0xFA << 8) | 5


SIZES = {I.GetDeviceInfoIn: 4, I.GetDeviceInfoOut: 20, I.GetDeviceInfo: 24, I.GetDriverInfo: 16,
         I.QueryMappingsIn: 8, I.Mapping: 24, I.ResetDevice: 16, I.LockCtlIn: 12, I.LockCtlOut: 4, I.LockCtl: 16,
         I.AllocateTlbIn: 16, I.AllocateTlbOut: 32, I.AllocateTlb: 48, I.FreeTlbIn: 4, I.NocTlbConfig: 32,
         I.ConfigureTlbIn: 40, I.ConfigureTlb: 48, I.SetNocCleanup: 32, I.SetPowerState: 40}


@pytest.mark.parametrize("struct_type,size", SIZES.items(), ids=lambda v: getattr(v, "__name__", str(v)))
def test_struct_sizes(struct_type, size):
    assert C.sizeof(struct_type) == size


OFFSETS = [
    (I.GetDeviceInfoOut, {"output_size_bytes": 0, "vendor_id": 4, "device_id": 6, "subsystem_vendor_id": 8,
                          "subsystem_id": 10, "bus_dev_fn": 12, "max_dma_buf_size_log2": 14, "pci_domain": 16}),
    (I.GetDriverInfoOut, {"driver_version": 4, "driver_version_major": 8, "driver_version_minor": 9,
                          "driver_version_patch": 10}),
    (I.Mapping, {"mapping_id": 0, "mapping_base": 8, "mapping_size": 16}),
    (I.ResetDeviceIn, {"output_size_bytes": 0, "flags": 4}),
    (I.LockCtlIn, {"flags": 4, "index": 8}),
    (I.AllocateTlbOut, {"id": 0, "mmap_offset_uc": 8, "mmap_offset_wc": 16}),
    (I.NocTlbConfig, {"addr": 0, "x_end": 8, "y_end": 10, "x_start": 12, "y_start": 14, "noc": 16, "mcast": 17,
                      "ordering": 18, "linked": 19, "static_vc": 20}),
    (I.ConfigureTlbIn, {"id": 0, "config": 8}),
    (I.SetNocCleanup, {"argsz": 0, "flags": 4, "enabled": 8, "x": 9, "y": 10, "noc": 11, "addr": 16, "data": 24}),
    (I.SetPowerState, {"argsz": 0, "flags": 4, "validity": 9, "power_flags": 10, "power_settings": 12}),
]


@pytest.mark.parametrize("struct_type,offsets", OFFSETS, ids=lambda v: getattr(v, "__name__", ""))
def test_field_offsets(struct_type, offsets):
    for field, offset in offsets.items():
        assert getattr(struct_type, field).offset == offset, field


def test_outer_structs_place_out_after_in():
    assert I.GetDeviceInfo.out.offset == 4 and I.ResetDevice.out.offset == 8
    assert I.LockCtl.out.offset == 12 and I.AllocateTlb.out.offset == 16 and I.ConfigureTlb.out.offset == 40


def test_configure_tlb_bytes_by_hand():
    s = I.ConfigureTlb()
    s.in_.id = 7
    s.in_.config.addr, s.in_.config.x_end, s.in_.config.y_end, s.in_.config.ordering = 0xFFA00000, 3, 4, 1
    raw = bytes(s)
    assert struct.unpack_from("<I", raw, 0)[0] == 7
    assert struct.unpack_from("<QHHHHBBB", raw, 8) == (0xFFA00000, 3, 4, 0, 0, 0, 0, 1)


def test_bdf_text():
    assert I.bdf_text(0, (0x3B << 8) | (0 << 3) | 0) == "0000:3b:00.0"
    assert I.bdf_text(1, (0x05 << 8) | (0x1F << 3) | 7) == "0001:05:1f.7"


class FakeKernel:
    """Records ioctl requests and answers a few the way tt-kmd does."""

    def __init__(self):
        self.calls = []
        self.fail_with = None

    def __call__(self, fd, request, buf, mutate):
        self.calls.append((request, bytes(buf)))
        if self.fail_with:
            raise OSError(self.fail_with, os.strerror(self.fail_with))
        if request == I.GET_DEVICE_INFO:
            o = I.GetDeviceInfo.from_buffer(buf).out
            o.vendor_id, o.device_id, o.bus_dev_fn, o.pci_domain = K.PCI_VENDOR, K.PCI_DEVICE_BH, 0x3B00, 0
        elif request == I.ALLOCATE_TLB:
            o = I.AllocateTlb.from_buffer(buf).out
            o.id, o.mmap_offset_uc, o.mmap_offset_wc = 5, K.TLB_MMAP_UC + 5 * K.TLB_2M, K.TLB_MMAP_WC + 5 * K.TLB_2M
        elif request == I.RESET_DEVICE:
            I.ResetDevice.from_buffer(buf).out.result = 0
        return 0


@pytest.fixture
def fake_node(tmp_path):
    node = tmp_path / "dev"
    node.mkdir()
    (node / "0").write_bytes(b"")
    return node


def test_kmd_device_packs_what_the_driver_reads(fake_node):
    kernel = FakeKernel()
    dev = KmdDevice(0, dev_dir=fake_node, ioctl_fn=kernel)
    info = dev.device_info()
    assert (info.vendor_id, info.device_id, info.bdf) == (0x1E52, 0xB140, "0000:3b:00.0")
    tlb = dev.allocate_tlb()
    dev.configure_tlb(tlb.id, 0x200000, 1, 2)
    dev.reset_device(I.RESET_ASIC)
    dev.lock_ctl(I.LOCK_ACQUIRE, 63)
    dev.set_noc_cleanup(1, 2, 0x16000 + 12, 1)
    dev.set_power_state(I.POWER_TENSIX_ENABLE | I.POWER_MRISC_PHY_WAKEUP)
    requests = [r for r, _ in kernel.calls]
    assert requests == [I.GET_DEVICE_INFO, I.ALLOCATE_TLB, I.CONFIGURE_TLB, I.RESET_DEVICE, I.LOCK_CTL,
                        I.SET_NOC_CLEANUP, I.SET_POWER_STATE]
    get = dict((r, b) for r, b in kernel.calls)
    assert struct.unpack_from("<I", get[I.GET_DEVICE_INFO])[0] == 20         # in.output_size_bytes
    assert struct.unpack_from("<Q", get[I.ALLOCATE_TLB])[0] == 2 << 20
    assert struct.unpack_from("<IIQHH", get[I.CONFIGURE_TLB]) == (5, 0, 0x200000, 1, 2)
    assert get[I.CONFIGURE_TLB][26] == 1                                       # ordering = strict
    assert struct.unpack_from("<II", get[I.RESET_DEVICE]) == (8, 4)
    assert struct.unpack_from("<IIB", get[I.LOCK_CTL]) == (4, 0, 63)
    assert struct.unpack_from("<IIBBBBIQQ", get[I.SET_NOC_CLEANUP]) == (32, 0, 1, 1, 2, 0, 0, 0x1600C, 1)
    assert struct.unpack_from("<IIBBH", get[I.SET_POWER_STATE]) == (40, 0, 0, 4, 6)
    dev.close()


def test_enodev_after_reset_is_device_gone(fake_node):
    kernel = FakeKernel()
    dev = KmdDevice(0, dev_dir=fake_node, ioctl_fn=kernel)
    kernel.fail_with = errno.ENODEV
    with pytest.raises(DeviceGone):
        dev.driver_info()
    kernel.fail_with = errno.EINVAL
    with pytest.raises(OSError) as e:
        dev.driver_info()
    assert not isinstance(e.value, DeviceGone)
    dev.close()


def test_missing_node_is_device_error(tmp_path):
    with pytest.raises(DeviceError) as e:
        KmdDevice(3, dev_dir=tmp_path)
    assert e.value.exit_code == 3 and "does not exist" in e.value.message


def test_mmap_window_uses_single_word_accesses(tmp_path):
    # A file stands in for the device: the window is an ordinary shared mapping at an offset.
    path = tmp_path / "bar"
    path.write_bytes(bytes(3 * mmap.PAGESIZE))
    fd = os.open(path, os.O_RDWR)
    win = MmapWindow(fd, mmap.PAGESIZE, mmap.PAGESIZE)
    win.write32(8, 0xDEADBEEF)
    win.write(16, b"\x01\x02\x03\x04\x05")
    assert win.read32(8) == 0xDEADBEEF and win.read(16, 5) == b"\x01\x02\x03\x04\x05"
    win.close()
    os.close(fd)
    raw = path.read_bytes()
    assert raw[mmap.PAGESIZE + 8:mmap.PAGESIZE + 12] == struct.pack("<I", 0xDEADBEEF)


def test_kmd_reads_sysfs_telemetry_hwmon_and_pids(fake_node, tmp_path, monkeypatch):
    import otpu_core.tt.kmd as kmd
    bdf = "0000:3b:00.0"
    pci, cls, proc = tmp_path / "pci" / bdf, tmp_path / "class" / "tenstorrent!0", tmp_path / "proc" / "0"
    for d in (pci / "hwmon" / "hwmon3", cls, proc):
        d.mkdir(parents=True)
    (pci / "current_link_speed").write_text("16.0 GT/s PCIe\n")
    (pci / "current_link_width").write_text("16\n")
    (pci / "hwmon" / "hwmon3" / "temp1_input").write_text("45250\n")
    (cls / "tt_card_type").write_text("p150a\n")
    (cls / "tt_aiclk").write_text("800\n")
    (proc / "pids").write_text("101\n202\n")
    (tmp_path / "version").write_text("2.10.1\n")
    monkeypatch.setattr(kmd, "SYSFS_PCI", tmp_path / "pci")
    monkeypatch.setattr(kmd, "SYSFS_CLASS", tmp_path / "class")
    monkeypatch.setattr(kmd, "PROC_DIR", tmp_path / "proc")
    monkeypatch.setattr(kmd, "MODULE_VERSION", tmp_path / "version")
    dev = KmdDevice(0, dev_dir=fake_node, ioctl_fn=FakeKernel())
    facts = dev.host_facts()
    assert facts["driver_version"] == "2.10.1" and facts["current_link_width"] == "16" and facts["bdf"] == bdf
    assert facts["sysfs"] == {"tt_card_type": "p150a", "tt_aiclk": "800", "temp1_input": "45250"}
    assert dev.pids() == [101, 202]
    dev.close()


def test_default_device_is_the_simulator_without_cards(monkeypatch):
    import otpu_core.tt.card as card
    from otpu_core.tt.simdev import SimDevice
    monkeypatch.setattr(card, "present_minors", lambda: [])
    assert card.default_spec() == "tt:sim"
    monkeypatch.setattr(card, "present_minors", lambda: [2, 5])
    assert card.default_spec() == "tt:2"
    monkeypatch.setattr(card, "present_minors", lambda: [])
    dev = card.open_device(None)
    try:
        assert isinstance(dev, SimDevice) and dev.spec == "tt:sim"
    finally:
        dev.close()
