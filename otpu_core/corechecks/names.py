"""Row names of the core checks: the names other checks `need` and diagnosis rules look for."""
from __future__ import annotations

# platform
PCIE = "PCIe link"
DRIVER = "XDMA driver"
ID = "ID register"
CONFIG = "configuration (VERSION)"
SCRUB = "DRAM initialized (ECC)"
STATUS_ERR = "STATUS error bits"
TEMP = "die temperature"
POWER = "power estimate"
# regs
SCRATCH = "SCRATCH / PROG_ADDR / PROG_N read / write"
TRACE_RW = "TRACE_ADDR / TRACE_CTRL read / write"
RO_VALUES = "read-only registers: values"
RO_IGNORE = "read-only registers: ignore writes"
SNAP = "SNAP and the free-running counters"
# i2c
I2C_PINS = "I2C pins"
# mem
INTERLEAVE = "interleave patterns"
# system
DEMO = "all-units demo"
MASKED = "masked (partial) DRAM writes"
STREAM = "stream program"
CYCLES = "cycle counters"
SOAK = "soak"


def calib(ch: int) -> str: return f"DDR3 calibration channel {ch}"


def data_bits(ch: int) -> str: return f"channel {ch} data bits (walking 1 / 0)"


def addr_bits(ch: int) -> str: return f"channel {ch} address bits"


def random_blocks(ch: int) -> str: return f"channel {ch} random blocks"


def subbeat(ch: int) -> str: return f"channel {ch} sub-beat updates (host merge)"


def bandwidth(ch: int) -> str: return f"channel {ch} DMA bandwidth"


def march(ch: int) -> str: return f"channel {ch} march C-"


def i2c_bus(bus: int) -> str: return f"I2C bus {bus} scan"


def is_bandwidth(name: str) -> bool: return name.endswith("DMA bandwidth")
