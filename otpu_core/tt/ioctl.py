"""The tt-kmd ioctl ABI (driver 2.10.1): request numbers and every struct, packed as the driver does.

Every request is `_IO(0xFA, nr)`: no size and no direction bits, so the number is (0xFA << 8) | nr.
Structs are ctypes little-endian structures with natural alignment, which is how the driver's
`ioctl.h` compiles on x86-64; `tests/test_tt_ioctl.py` pins each size and field offset to the
reference. Both device implementations use these definitions: the real device hands the bytes
to the kernel, the simulated chip decodes them as the driver would.
"""
from __future__ import annotations

import ctypes as C

# Linux asm-generic/ioctl.h encoding.
_IOC_NRSHIFT, _IOC_TYPESHIFT, _IOC_SIZESHIFT, _IOC_DIRSHIFT = 0, 8, 16, 30
_IOC_NONE = 0
TENSTORRENT_IOCTL_MAGIC = 0xFA


def _IOC(direction: int, typ: int, nr: int, size: int) -> int:
    return (direction << _IOC_DIRSHIFT) | (typ << _IOC_TYPESHIFT) | (nr << _IOC_NRSHIFT) | (size << _IOC_SIZESHIFT)


def _IO(typ: int, nr: int) -> int:
    return _IOC(_IOC_NONE, typ, nr, 0)


GET_DEVICE_INFO = _IO(TENSTORRENT_IOCTL_MAGIC, 0)
QUERY_MAPPINGS = _IO(TENSTORRENT_IOCTL_MAGIC, 2)
GET_DRIVER_INFO = _IO(TENSTORRENT_IOCTL_MAGIC, 5)
RESET_DEVICE = _IO(TENSTORRENT_IOCTL_MAGIC, 6)
LOCK_CTL = _IO(TENSTORRENT_IOCTL_MAGIC, 8)
ALLOCATE_TLB = _IO(TENSTORRENT_IOCTL_MAGIC, 11)
FREE_TLB = _IO(TENSTORRENT_IOCTL_MAGIC, 12)
CONFIGURE_TLB = _IO(TENSTORRENT_IOCTL_MAGIC, 13)
SET_NOC_CLEANUP = _IO(TENSTORRENT_IOCTL_MAGIC, 14)
SET_POWER_STATE = _IO(TENSTORRENT_IOCTL_MAGIC, 15)

REQUEST_NAMES = {GET_DEVICE_INFO: "GET_DEVICE_INFO", QUERY_MAPPINGS: "QUERY_MAPPINGS",
                 GET_DRIVER_INFO: "GET_DRIVER_INFO", RESET_DEVICE: "RESET_DEVICE", LOCK_CTL: "LOCK_CTL",
                 ALLOCATE_TLB: "ALLOCATE_TLB", FREE_TLB: "FREE_TLB", CONFIGURE_TLB: "CONFIGURE_TLB",
                 SET_NOC_CLEANUP: "SET_NOC_CLEANUP", SET_POWER_STATE: "SET_POWER_STATE"}

# RESET_DEVICE flags
RESET_RESTORE_STATE, RESET_PCIE_LINK, RESET_CONFIG_WRITE, RESET_USER = 0, 1, 2, 3
RESET_ASIC, RESET_ASIC_DMC, RESET_POST = 4, 5, 6
RESET_FLAG_NAMES = {0: "RESTORE_STATE", 1: "RESET_PCIE_LINK", 2: "CONFIG_WRITE", 3: "USER_RESET",
                    4: "ASIC_RESET", 5: "ASIC_DMC_RESET", 6: "POST_RESET"}
# LOCK_CTL flags
LOCK_ACQUIRE, LOCK_RELEASE, LOCK_TEST, LOCK_ACQUIRE_BLOCKING = 0, 1, 2, 3
LOCK_COUNT = 64
# SET_POWER_STATE flags
POWER_MAX_AI_CLK, POWER_MRISC_PHY_WAKEUP, POWER_TENSIX_ENABLE, POWER_L2CPU_ENABLE = 1, 2, 4, 8
# QUERY_MAPPINGS ids
MAPPING_NAMES = {1: "BAR0_UC", 2: "BAR0_WC", 3: "BAR2_UC", 4: "BAR2_WC", 5: "BAR4_UC", 6: "BAR4_WC"}

u8, u16, u32, u64 = C.c_uint8, C.c_uint16, C.c_uint32, C.c_uint64


class _S(C.LittleEndianStructure):
    def pack(self) -> bytearray: return bytearray(bytes(self))

    @classmethod
    def unpack(cls, buf) -> "_S": return cls.from_buffer_copy(bytes(buf[:C.sizeof(cls)]))

    def as_dict(self) -> dict:
        return {name: (list(getattr(self, name)) if isinstance(getattr(self, name), C.Array) else getattr(self, name))
                for name, *_ in self._fields_ if not name.startswith("rsv")}


# ---- GET_DEVICE_INFO ----------------------------------------------------------------------
class GetDeviceInfoIn(_S):
    _fields_ = [("output_size_bytes", u32)]


class GetDeviceInfoOut(_S):
    _fields_ = [("output_size_bytes", u32), ("vendor_id", u16), ("device_id", u16),
                ("subsystem_vendor_id", u16), ("subsystem_id", u16), ("bus_dev_fn", u16),
                ("max_dma_buf_size_log2", u16), ("pci_domain", u16), ("rsv0", u16)]


class GetDeviceInfo(_S):
    _fields_ = [("in_", GetDeviceInfoIn), ("out", GetDeviceInfoOut)]


# ---- GET_DRIVER_INFO ----------------------------------------------------------------------
class GetDriverInfoIn(_S):
    _fields_ = [("output_size_bytes", u32)]


class GetDriverInfoOut(_S):
    _fields_ = [("output_size_bytes", u32), ("driver_version", u32), ("driver_version_major", u8),
                ("driver_version_minor", u8), ("driver_version_patch", u8), ("rsv0", u8)]


class GetDriverInfo(_S):
    _fields_ = [("in_", GetDriverInfoIn), ("out", GetDriverInfoOut)]


# ---- QUERY_MAPPINGS (variable length: header then N mappings) -----------------------------
class QueryMappingsIn(_S):
    _fields_ = [("output_mapping_count", u32), ("rsv0", u32)]


class Mapping(_S):
    _fields_ = [("mapping_id", u32), ("rsv0", u32), ("mapping_base", u64), ("mapping_size", u64)]


def query_mappings_buffer(count: int) -> bytearray:
    buf = bytearray(C.sizeof(QueryMappingsIn) + count * C.sizeof(Mapping))
    QueryMappingsIn.from_buffer(buf).output_mapping_count = count
    return buf


def query_mappings_result(buf: bytearray) -> list[Mapping]:
    count = QueryMappingsIn.from_buffer(buf).output_mapping_count
    base = C.sizeof(QueryMappingsIn)
    return [Mapping.unpack(buf[base + i * C.sizeof(Mapping):]) for i in range(count)]


# ---- RESET_DEVICE ---------------------------------------------------------------------------
class ResetDeviceIn(_S):
    _fields_ = [("output_size_bytes", u32), ("flags", u32)]


class ResetDeviceOut(_S):
    _fields_ = [("output_size_bytes", u32), ("result", u32)]


class ResetDevice(_S):
    _fields_ = [("in_", ResetDeviceIn), ("out", ResetDeviceOut)]


# ---- LOCK_CTL -------------------------------------------------------------------------------
class LockCtlIn(_S):
    _fields_ = [("output_size_bytes", u32), ("flags", u32), ("index", u8), ("rsv0", u8 * 3)]


class LockCtlOut(_S):
    _fields_ = [("value", u8), ("rsv0", u8 * 3)]


class LockCtl(_S):
    _fields_ = [("in_", LockCtlIn), ("out", LockCtlOut)]


# ---- TLBs -----------------------------------------------------------------------------------
class AllocateTlbIn(_S):
    _fields_ = [("size", u64), ("rsv0", u64)]


class AllocateTlbOut(_S):
    _fields_ = [("id", u32), ("rsv0", u32), ("mmap_offset_uc", u64), ("mmap_offset_wc", u64), ("rsv1", u64)]


class AllocateTlb(_S):
    _fields_ = [("in_", AllocateTlbIn), ("out", AllocateTlbOut)]


class FreeTlbIn(_S):
    _fields_ = [("id", u32)]


class NocTlbConfig(_S):
    _fields_ = [("addr", u64), ("x_end", u16), ("y_end", u16), ("x_start", u16), ("y_start", u16),
                ("noc", u8), ("mcast", u8), ("ordering", u8), ("linked", u8), ("static_vc", u8),
                ("rsv0", u8 * 3), ("rsv1", u32 * 2)]


class ConfigureTlbIn(_S):
    _fields_ = [("id", u32), ("rsv0", u32), ("config", NocTlbConfig)]


class ConfigureTlbOut(_S):
    _fields_ = [("rsv0", u64)]


class ConfigureTlb(_S):
    _fields_ = [("in_", ConfigureTlbIn), ("out", ConfigureTlbOut)]


# ---- argsz-style requests -------------------------------------------------------------------
class SetNocCleanup(_S):
    _fields_ = [("argsz", u32), ("flags", u32), ("enabled", u8), ("x", u8), ("y", u8), ("noc", u8),
                ("rsv0", u32), ("addr", u64), ("data", u64)]


class SetPowerState(_S):
    _fields_ = [("argsz", u32), ("flags", u32), ("rsv0", u8), ("validity", u8), ("power_flags", u16),
                ("power_settings", u16 * 14)]


ALL_STRUCTS = (GetDeviceInfo, GetDriverInfo, QueryMappingsIn, Mapping, ResetDevice, LockCtl, AllocateTlb,
               FreeTlbIn, NocTlbConfig, ConfigureTlb, SetNocCleanup, SetPowerState)


def bdf_text(domain: int, bus_dev_fn: int) -> str:
    """GET_DEVICE_INFO's bus_dev_fn ([15:8] bus, [7:3] device, [2:0] function) as a sysfs BDF."""
    return f"{domain:04x}:{bus_dev_fn >> 8:02x}:{(bus_dev_fn >> 3) & 0x1F:02x}.{bus_dev_fn & 7:x}"
