"""Platform checks (section `platform`): PCIe link, driver, ID, configuration, DRAM scrub, status,
die temperature and the power estimate. The selftest stages link, config and scrub live here."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .. import power
from ..card import regs
from ..checks import Check, CheckContext, Result, Status
from . import device
from . import names as N

HOST_LINK = {"pcie-gen2-x8": (5.0, 8), "pcie-gen3-x8": (8.0, 8), "pcie-gen3-x16": (8.0, 16)}
TEMP_MAX_C = 85.0
TEMP_WARN_C = 75.0        # inside the limit, but this close to it is worth a look (DCGM's Warn)
GEN1_GTS = 2.5

LINK_HINT = ("check `lspci -d 10ee:` lists the card, the xdma driver is loaded and /dev/xdma0_user exists "
             "(`otpu setup --check` checks each, with its fix); after programming the FPGA, rescan the PCI bus or "
             "reboot")
CONFIG_HINT = ("load the bitstream built for this target, or pass the target the card was built for "
               "(--target); D, MCOLS and LANES come from the bitstream")
SCRUB_HINT = "host->card DMA does not work: check the driver and the link (try the driver's poll mode)"


def pcie_link(ctx: CheckContext) -> Result:
    """FAIL below Gen1 (2.5 GT/s) or below the target's width; a slower speed than the target's is noted."""
    link = device.transport(ctx).link()
    want = HOST_LINK.get(device.target(ctx).platform["host_link"])
    if want is None:
        return Result(Status.SKIP, "the target has no PCIe host link")
    speed, width = link.get("speed"), link.get("width") or 0
    if speed is None:
        return Result(Status.FAIL, "no PCIe link (link speed unknown, width 0)", hint=LINK_HINT)
    m = re.match(r"([\d.]+)", str(speed))
    gts = float(m.group(1)) if m else 0.0
    text = f"{speed} x{width}"
    data = {"gts": gts, "width": width, "target_gts": want[0], "target_width": want[1]}
    if gts < GEN1_GTS or width < want[1]:
        return Result(Status.FAIL, f"{text}, below Gen1 x{want[1]}", data,
                      hint="lane order / GT placement in the build, or a narrower slot")
    if gts < want[0]:
        return Result(Status.WARN, text + f": slower than the target's {want[0]:g} GT/s", data,
                      hint="a slot or riser that trains at a lower speed; `lspci -vv` LnkSta and LnkCap")
    return Result(Status.PASS, text, data)


def xdma_driver(ctx: CheckContext) -> Result:
    if not ctx.dev.startswith("/dev/"):
        return Result(Status.SKIP, f"{ctx.dev} is not an XDMA device node: no driver to check")
    nodes = [f"{ctx.dev}_{n}" for n in ("user", "h2c_0", "c2h_0")]
    missing = [n for n in nodes if not os.path.exists(n)]
    try:
        loaded = any(line.split()[0] == "xdma" for line in Path("/proc/modules").read_text().splitlines())
    except OSError:
        loaded = False
    if missing or not loaded:
        what = ("missing " + ", ".join(missing)) if missing else "xdma not in /proc/modules"
        return Result(Status.FAIL, what, hint="load the xdma driver (modprobe xdma) and check udev permissions")
    return Result(Status.PASS, "nodes present, driver loaded")


def id_register(ctx: CheckContext) -> Result:
    v = device.transport(ctx).reg_read(regs.off("ID"))
    if v == regs.ID_OTPU:
        return Result(Status.PASS, f"ID 0x{v:08x}", {"id": v})
    if v == regs.LINK_DOWN:
        msg = "ID 0xffffffff: registers read all ones (the link dropped, or the FPGA was reprogrammed after enumeration)"
    else:
        msg = f"ID 0x{v:08x}, expected 0x{regs.ID_OTPU:08x}: not an openTPU bitstream"
    return Result(Status.FAIL, msg, {"id": v}, hint=LINK_HINT)


def configuration(ctx: CheckContext) -> Result:
    i = device.info(ctx)
    t = device.target(ctx)
    cfg = t.config()
    data = {"D": i.d, "MCOLS": i.mcols, "LANES": i.lanes, "regmap": i.regmap, "core_khz": i.core_khz,
            "build_id": i.build_id, "ddr_mts": i.ddr_mts, "cfg_hash": i.cfg_hash}
    wrong = [f"{k} {v} (target {getattr(cfg, k)})" for k, v in (("D", i.d), ("MCOLS", i.mcols), ("LANES", i.lanes))
             if v != getattr(cfg, k)]
    if i.cfg_hash is not None and i.cfg_hash != t.arch_hash():
        wrong.append(f"CFG_HASH 0x{i.cfg_hash:08x} (target {t.name} 0x{t.arch_hash():08x})")
    ddr = f", DDR3-{i.ddr_mts}" if i.ddr_mts else ""
    core = f"core {i.core_khz / 1000:g} MHz" if i.core_khz else "core clock unknown"
    msg = (f"D={i.d} MCOLS={i.mcols} LANES={i.lanes}, register map {i.regmap}, {core}{ddr}, "
           f"build {i.build_id or 0:08x}")
    if wrong:
        return Result(Status.FAIL, f"card does not match target {t.name}: " + "; ".join(wrong), data, hint=CONFIG_HINT)
    return Result(Status.PASS, msg, data)


def dram_scrub(ctx: CheckContext) -> Result:
    b = device.board(ctx)
    t = device.transport(ctx)
    if not getattr(t, "ecc", False):
        return Result(Status.SKIP, "no ECC on this card: nothing to initialize", vacuous=True)
    t0 = time.perf_counter()
    if not b.scrub(progress=ctx.options.get("scrub_progress")):
        return Result(Status.PASS, "already done since configuration")
    total = t.channels * t.channel_bytes
    return Result(Status.PASS, f"{total / 2**30:g} GiB written in {time.perf_counter() - t0:.1f} s "
                               "(ECC check bits initialized)")


def status_errors(ctx: CheckContext) -> Result:
    t = device.transport(ctx)
    st = t.reg_read(regs.off("STATUS"))
    errs = st & (regs.ST_ERROR | regs.ST_AXI_ERR)
    if not errs:
        return Result(Status.PASS, f"STATUS 0x{st:08x}")
    t.reg_write(regs.off("CTRL"), regs.CTRL_CLEAR)
    t.reg_write(regs.off("CTRL"), 0)
    st2 = t.reg_read(regs.off("STATUS"))
    if st2 & (regs.ST_ERROR | regs.ST_AXI_ERR):
        return Result(Status.FAIL, f"STATUS 0x{st2:08x}: ERROR / AXI_ERR stay set after CLEAR",
                      hint="the memory path reports errors: check calibration and the DRAM")
    return Result(Status.PASS, f"STATUS 0x{st:08x} had stale error bits; cleared by CTRL CLEAR")


def die_temperature(ctx: CheckContext) -> Result:
    if not device.info(ctx).caps.get("temp"):
        return Result(Status.SKIP, "no TEMP register (CAPS TEMP clear)")
    raw = device.transport(ctx).reg_read(regs.off("TEMP"))
    c = regs.temp_code_to_c(raw & 0xFFF) if raw & regs.TEMP_VALID else None
    if c is None:
        return Result(Status.FAIL, "TEMP not valid", hint="the XADC is not converting")
    data = {"temp_c": round(c, 2)}
    if not 0 < c < TEMP_MAX_C:
        return Result(Status.FAIL, f"{c:.1f} C, outside 0..{TEMP_MAX_C:g} C", data,
                      hint="check the heatsink, the fan and the airflow over the card")
    if c >= TEMP_WARN_C:
        return Result(Status.WARN, f"{c:.1f} C, near the {TEMP_MAX_C:g} C limit", data,
                      hint="check the heatsink, the fan and the airflow over the card")
    return Result(Status.PASS, f"{c:.1f} C", data)


def power_estimate(ctx: CheckContext) -> Result:
    m = power.model(ctx.options.get("power_json"))
    idle = m.estimate({u: 0.0 for u in power.UNIT_COUNTER.values()})
    busy = m.estimate({u: 1.0 for u in power.UNIT_COUNTER.values()})
    return Result(Status.INFO, f"idle ~{idle.w:.1f} W, all units busy ~{busy.w:.1f} W ({m.source})",
                  {"idle_w": idle.w, "busy_w": busy.w})


def checks() -> list[Check]:
    return [
        Check("platform", N.PCIE, pcie_link),
        Check("platform", N.DRIVER, xdma_driver),
        Check("platform", N.ID, id_register, stage="link"),
        Check("platform", N.CONFIG, configuration, needs=(N.ID,), stage="config"),
        Check("platform", N.SCRUB, dram_scrub, needs=(N.ID, N.calib(0), N.calib(1)), stage="scrub"),
        Check("platform", N.STATUS_ERR, status_errors, needs=(N.ID,)),
        Check("platform", N.TEMP, die_temperature, needs=(N.CONFIG,), stage="config"),
        Check("platform", N.POWER, power_estimate),
    ]
