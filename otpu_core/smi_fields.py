"""The fields otpu-smi reports, named like nvidia-smi's query fields, and how they print.

`Field` is what the `otpu_smi_fields(board)` hook returns: a query name (`power.draw`), a
value, a unit and where it came from (`measured`, `estimate`, `register`, ...). `CATALOGUE`
lists every name `--query` accepts, with its unit and meaning (`--help-query` prints it). A
plugin's measured field replaces smi's own field of the same name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

NA = "[N/A]"


@dataclass(frozen=True)
class Field:
    name: str
    value: Any
    unit: str = ""
    source: str = "register"

    def text(self, units: bool = True) -> str:
        """The value as nvidia-smi prints it in CSV: `45 %`, `3.42 W`, `[N/A]` when unknown."""
        v = self.value
        if v is None:
            return NA
        if isinstance(v, bool):
            s = "yes" if v else "no"
        elif isinstance(v, float):
            s = f"{v:.2f}"
        else:
            s = str(v)
        return f"{s} {self.unit}" if units and self.unit else s

    def as_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "unit": self.unit, "source": self.source}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    unit: str
    help: str


CATALOGUE: dict[str, FieldSpec] = {s.name: s for s in (
    FieldSpec("index", "", "Position of the card in this report, from 0."),
    FieldSpec("timestamp", "", "When the sample was taken (YYYY/MM/DD HH:MM:SS.mmm)."),
    FieldSpec("device", "", "The --dev spec the card was opened with (/dev/xdma0, sim, sim:NAME)."),
    FieldSpec("name", "", "Card name: the board of the target."),
    FieldSpec("target", "", "Target description the card was compared with."),
    FieldSpec("link", "", "Register link state: ok, down, or not an openTPU card."),
    FieldSpec("bitstream.build", "", "BUILD_ID: first 8 hex digits of the build's commit."),
    FieldSpec("bitstream.regmap", "", "Register-map version (REGMAP)."),
    FieldSpec("bitstream.config", "", "D, MCOLS and LANES read from VERSION."),
    FieldSpec("cfg_hash.card", "", "CFG_HASH the card reports."),
    FieldSpec("cfg_hash.target", "", "CFG_HASH of the target's arch layer."),
    FieldSpec("cfg_hash.match", "", "Whether the two hashes agree."),
    FieldSpec("pcie.link.gen.current", "", "PCIe link speed in use (GT/s)."),
    FieldSpec("pcie.link.width.current", "", "PCIe link width in use (lanes)."),
    FieldSpec("clocks.core", "MHz", "Core clock (CORE_KHZ)."),
    FieldSpec("temperature.die", "C", "FPGA die temperature from the XADC (TEMP register)."),
    FieldSpec("temperature.die.limit", "C", "Die temperature the checks call too hot."),
    FieldSpec("temperature.board", "C", "Board temperature from a sensor plugin (LM73), else [N/A]."),
    FieldSpec("health", "", "ok, or what is wrong now (DMA engine, STATUS ERROR / AXI_ERR, injected faults) and "
                            "what clears it."),
    FieldSpec("card_target", "", "The target the card itself is built as (a simulated card knows; a real one: "
                                 "the target whose CFG_HASH it reports, [N/A] if several share it)."),
    FieldSpec("power.draw", "W", "Board power: measured by a sensor plugin, else estimated from utilisation."),
    FieldSpec("power.source", "", "measured, or estimate (and the model the estimate used)."),
    FieldSpec("power.max", "W", "Power of the design with every unit busy (the model's total)."),
    FieldSpec("power.limit", "W", "The power limit shown beside power.draw: the design's all-busy power."),
    FieldSpec("voltage.input", "V", "Board input voltage from its power monitor (a sensor plugin), else [N/A]."),
    FieldSpec("current.input", "A", "Board input current from its power monitor, else [N/A]."),
    FieldSpec("voltage.core", "V", "Core rail voltage from its PMBus regulator (READ_VOUT), else [N/A]."),
    FieldSpec("current.core", "A", "Core rail current from its PMBus regulator (READ_IOUT), else [N/A]."),
    FieldSpec("power.core", "W", "Input power of the core rail's PMBus regulator (READ_PIN), else [N/A]."),
    FieldSpec("memory.total", "MiB", "Card DRAM size, all channels."),
    FieldSpec("memory.used", "MiB", "DRAM the running process has placed (image, weights, KV cache), from its status file."),
    FieldSpec("memory.free", "MiB", "memory.total minus memory.used."),
    FieldSpec("memory.calibration", "", "DDR3 calibration state per channel (STATUS CALIB bits)."),
    FieldSpec("memory.type", "", "DRAM type and data rate (DDR_MTS)."),
    FieldSpec("state", "", "running or idle (STATUS RUN and HALTED)."),
    FieldSpec("utilization.running", "%", "Share of the sampling interval the core was running a program."),
    FieldSpec("utilization.mxu", "%", "MXU busy over the sampling interval (MXU_BUSY)."),
    FieldSpec("utilization.mac", "%", "MXU consuming weight chunks (MXU_MAC)."),
    FieldSpec("utilization.vpu", "%", "VPU busy (VPU_BUSY)."),
    FieldSpec("utilization.quant", "%", "Quantiser busy (QNT_BUSY)."),
    FieldSpec("utilization.dma", "%", "DMA unit busy (DMA_BUSY)."),
    FieldSpec("utilization.dram", "%", "DRAM beats moved per core cycle."),
    FieldSpec("stall.tmem_deny", "%", "Cycles some unit's TMEM request was not granted."),
    FieldSpec("stall.dram_wait", "%", "Cycles a DRAM request waited (backpressure)."),
    FieldSpec("stall.mxu_starve", "%", "MXU streaming with an empty chunk FIFO (register map 3)."),
    FieldSpec("ipc", "", "Instructions retired per cycle over the sampling interval."),
    FieldSpec("dram.bandwidth", "GB/s", "DRAM bytes read and written per second over the sampling interval."),
    FieldSpec("dram.read", "GB/s", "DRAM read bandwidth."),
    FieldSpec("dram.write", "GB/s", "DRAM write bandwidth."),
    FieldSpec("sample.ms", "ms", "Length of the sampling interval between the two SNAP latches."),
    FieldSpec("process.pid", "", "PID of the process using the card (status file), else [N/A]."),
    FieldSpec("process.command", "", "Its command line."),
    FieldSpec("process.model", "", "The model it runs."),
    FieldSpec("process.tokens", "", "Tokens it has produced."),
    FieldSpec("process.tok_s", "tok/s", "Its wall-clock tokens per second."),
)}


class QueryError(ValueError):
    """A --query names a field the catalogue does not have."""


def parse_query(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise QueryError("--query needs at least one field name")
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        raise QueryError(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    return names


def merge(own: Iterable[Field], contributed: Iterable[Iterable[Field] | None]) -> dict[str, Field]:
    """smi's own fields, each replaced by a plugin's field of the same name."""
    out = {f.name: f for f in own}
    for fields in contributed:
        for f in fields or ():
            if isinstance(f, Field):
                out[f.name] = f
    return out


def csv_header(names: list[str], units: bool = True) -> str:
    def head(n: str) -> str:
        unit = CATALOGUE[n].unit
        return f"{n} [{unit}]" if units and unit else n
    return ", ".join(head(n) for n in names)


def csv_row(fields: dict[str, Field], names: list[str], units: bool = True) -> str:
    return ", ".join((fields[n].text(units) if n in fields else NA).replace(",", ";") for n in names)


def help_text() -> str:
    width = max(len(n) for n in CATALOGUE)
    lines = ["Fields for --query (use with --format csv[,noheader][,nounits]):", ""]
    for spec in CATALOGUE.values():
        unit = f" [{spec.unit}]" if spec.unit else ""
        lines.append(f"  {spec.name:<{width}}  {spec.help}{unit}")
    return "\n".join(lines)
