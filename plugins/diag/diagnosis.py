"""What the pattern of failed rows says about the board: the "diagnosis:" lines of otpu-diag.

Rules run in a fixed order and each adds hints when its pattern matches: link and ID, PCIe
width, calibration, byte lanes and single DQ bits, aliased address bits, the interleave, the
groups of ISA op checks, I2C, temperature, soak and DMA bandwidth. Rows are read by name and
by the data the core checks attach (`channel`, `lanes`, `bits`, `addr_bits`, `regmap`,
`vpu_lanes`), never by parsing messages.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import numpy as np

from otpu_core import memtest
from otpu_core.checks import Row, Status
from otpu_core.corechecks import names as N


def _failed(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.status == Status.FAIL]


def diagnose(rows: list[Row]) -> list[str]:
    by_name = {r.name: r for r in rows}
    failed = _failed(rows)
    failed_names = {r.name for r in failed}
    hints: list[str] = []

    if N.ID in failed_names:
        hints.append("nothing answers on BAR0: the PCIe link is down, the bitstream is not loaded, or the FPGA "
                     "was reprogrammed after the PC enumerated it (rescan the PCI bus or reboot)")
    link_gone = N.ID in failed_names and not (by_name.get(N.PCIE) and by_name[N.PCIE].data)
    if N.PCIE in failed_names and not link_gone:     # no link at all is the ID hint's "link is down"
        hints.append("PCIe link below Gen1 x8: lane order / GT placement in the build, or a narrower slot")
    for ch in (0, 1):
        if N.calib(ch) in failed_names:
            hints.append(f"DDR3 channel {ch} not calibrated: LiteDRAM builds: reset the card so its calibration CPU "
                         "runs again; MIG builds: DDR pinout and clocking; check the memory voltage")

    lane_hints = _memory_hints(failed)
    hints += lane_hints
    if N.INTERLEAVE in failed_names and not lane_hints:
        hints.append("interleave patterns fail while each channel passes: the host's split/join of 64-byte beats "
                     "(and the CHASH swap) disagrees with the card's interleave")

    hints += _follows(rows, by_name)
    hung = [r for r in failed if (r.data or {}).get("hung")]
    if hung:
        later = sum(1 for r in rows if r.status == Status.SKIP and (r.data or {}).get("hung_on"))
        hints.append(f"the core hung on '{hung[0].name}' (it did not halt): a hung sequencer or memory path; "
                     f"reload the bitstream (a simulated card: `otpu sim reset`)"
                     + (f"; the {later} program{'s' if later != 1 else ''} after it were not run" if later else ""))
    else:
        hints += _isa_hints(rows, by_name)

    if any(r.section == "i2c" for r in failed):
        hints.append("I2C bus fault: a missing pull-up, a device holding SCL/SDA low, or the pin assignment")
    if N.TEMP in failed_names:
        t = (by_name[N.TEMP].data or {}).get("temp_c")
        at = f" ({t:.1f} C)" if isinstance(t, (int, float)) else ""
        hints.append(f"die temperature out of range{at}: check the heatsink, the fan and the airflow; "
                     "a card this hot will fail timing")
    if N.SOAK in failed_names:
        soak = by_name[N.SOAK].data or {}
        if soak.get("intermittent") or "deterministic" not in soak:
            hints.append("intermittent failures under soak: timing margin (WNS of the build), temperature, or "
                         "calibration drift")
        if soak.get("deterministic"):
            hints.append(f"under soak {', '.join(soak['deterministic'])} fail every round: a deterministic fault "
                         "(their own rows say what), not an intermittent one")
    if any(N.is_bandwidth(n) for n in failed_names):
        hints.append("DMA bandwidth low: LnkSta width and speed (lspci -vv), the IOMMU (iommu=pt), or the "
                     "driver in poll mode")
    if N.CYCLES in failed_names:
        hints.append("cycle counters disagree with the wall clock: the core clock (CORE_KHZ) is not what the build "
                     "says, or the MMCM is not locked")
    return hints


def _follows(rows: list[Row], by_name: dict[str, Row]) -> list[str]:
    """What the first causes kept from running: checks SKIPped because a memory check they
    need failed (a program cannot be judged on DRAM that does not store its data)."""
    blocked: dict[str, int] = defaultdict(int)
    for r in rows:
        cause = by_name.get(r.blocked_by or "")
        if r.status == Status.SKIP and cause is not None and cause.status == Status.FAIL and cause.section == "mem" \
                and r.section in ("isa", "system"):
            blocked[cause.name] += 1
    if not blocked:
        return []
    n = sum(blocked.values())
    return [f"the {n} ISA and system checks were not run: they need working DRAM ({', '.join(blocked)} failed)"]


def _memory_hints(failed: list[Row]) -> list[str]:
    lanes: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(memtest.LANES, np.int64))
    bits: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(memtest.DQ_BITS, np.int64))
    addr: dict[int, dict] = defaultdict(dict)
    for r in failed:
        d = r.data or {}
        if "channel" not in d or "lanes" not in d:
            continue
        ch = int(d["channel"])
        lanes[ch] += np.asarray(d["lanes"], np.int64)
        bits[ch] += np.asarray(d["bits"], np.int64)
        for bit, what in (d.get("addr_bits") or {}).items():
            addr[ch].setdefault(int(bit), what)
    out: list[str] = []
    for ch in sorted(set(lanes) | set(addr)):
        # an aliased address line explains every wrong byte; an address bit common to the wrong
        # words (March C-) only says where the lane errors are
        aliased = any(str(v).startswith("aliases") for v in addr.get(ch, {}).values())
        if ch in lanes and not aliased:
            out += memtest.lane_hints(ch, lanes[ch], bits[ch])
        out += memtest.address_hints(ch, addr.get(ch, {}))
    return out


def _isa_hints(rows: list[Row], by_name: dict[str, Row]) -> list[str]:
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.section == "isa" and r.group and r.status in (Status.PASS, Status.FAIL):
            groups[r.group].append(r)
    if not groups:
        return []
    bad = {g for g, rs in groups.items() if any(r.status == Status.FAIL for r in rs)}
    whole = {g for g, rs in groups.items() if all(r.status == Status.FAIL for r in rs)}
    if not bad:
        return []
    if bad == set(groups) and len(groups) > 1:
        return ["every op-check group fails: program load, the sequencer, the core clock or reset, or DRAM "
                "(a hung core fails them all)"]
    out = []
    lanes = sorted({int(x) for r in groups.get("vpu", []) if r.status == Status.FAIL
                    for x in (r.data or {}).get("vpu_lanes", [])})
    if bad == {"vpu-new"}:
        regmap = ((by_name.get(N.CONFIG) and by_name[N.CONFIG].data) or {}).get("regmap", 0)
        if regmap >= 3:
            out.append("only RDOT / OUTER / LOG2 fail on register map 3: a VPU fault in those functions")
        else:
            out.append("only RDOT / OUTER / LOG2 fail on an older register map: the bitstream predates them; "
                       "load a current one")
    if "control" in bad:
        out.append("control programs fail: the sequencer (loops, registers, HALT)")
    if "dma" in bad:
        out.append("DMA programs fail: the DMA unit, its byte shifter or its write masks")
    if "mxu" in whole and not {"vpu", "dma"} & bad:
        out.append("every MXU program fails while VPU and DMA pass: the MXU / DSP datapath")
    elif "mxu" in bad:
        out.append("some MXU programs fail: the flag paths (ACC / RMAX / ASCALE epilogue) or ACT RAM addressing")
    if "quant" in bad and "mxu" not in bad:
        out.append("quantiser programs fail while the MXU passes: the quantiser (QACT / QST)")
    if "vpu-composite" in bad and "vpu" not in bad:
        out.append("composite VPU functions fail while plain ones pass: the composite lanes (EXP2 / RECIP / "
                   "RSQRT / LOG2)")
    if "vpu" in bad:
        plural = "s" if len(lanes) > 1 else ""
        where = f" (wrong words all on VPU lane{plural} {', '.join(map(str, lanes))})" if lanes else ""
        out.append(f"VPU programs fail: a VPU lane or the TMEM ports{where}")
    if bad == {"vpu-edge"}:
        out.append("only edge values fail: FTZ / inf / NaN handling differs from otpu_core/fp32.py")
    if "gen" in bad and not _on_lanes(groups["gen"], lanes):
        out.append("decode-loop programs fail: RLD, ARGMAX or HALT CHAIN")
    if "waitw" in bad:
        out.append("WAITW programs fail: the DMA wait on host-written DRAM words")
    if "collective" in bad:
        out.append("GATHER fails: the collective path between slices")
    return out


def _on_lanes(rows: list[Row], lanes: list[int]) -> bool:
    """Whether every failing row's wrong words sit on the faulty VPU lanes already named (then
    that group fails because of them, and gets no hint of its own)."""
    failing = [r for r in rows if r.status == Status.FAIL]
    return bool(lanes) and all((r.data or {}).get("vpu_lanes") and set((r.data or {})["vpu_lanes"]) <= set(lanes)
                               for r in failing)
