"""Memory checks (section `mem`): per channel data bits, address bits, random blocks, sub-beat
updates, DMA bandwidth and (with `--mem full`) March C-; across channels the interleave patterns.

Per-channel rows carry the memtest data (channel, lanes, bits, addr_bits) that diagnosis reads.
Selftest stages: addr (address bits, random blocks), pattern (interleave, sub-beat updates),
bandwidth.
"""
from __future__ import annotations

import functools
import time

import numpy as np

from .. import memtest
from ..card import regs
from ..checks import Check, CheckContext, Result, Status
from . import device
from . import names as N

CORE = (N.ID, N.calib(0), N.calib(1), N.SCRUB)
BW_PASS_GBS = 0.25
ADDR_HINT = ("a stuck or aliased address line (A / BA pinout), the controller's address width, or channel 1 "
             "not at AXI 0x8000_0000")
PATTERN_HINT = ("errors on one channel: its byte lanes (calibration, DQ pinout); errors following the 64-byte "
                "interleave: the host's split/join against the card's interleave")
BW_HINT = "check LnkSta in `lspci -vv` (link width and speed), the IOMMU (iommu=pt) and the driver mode"


def _mem_result(r: memtest.MemResult, hint: str) -> Result:
    """A memtest outcome as a row; a failure's hint names the lane, DQ bit or address bit when it can."""
    if r.ok:
        return Result(Status.PASS, r.message, r.data())
    specific = (memtest.address_hints(r.channel, r.addr_bits) if r.addr_bits
                else memtest.lane_hints(r.channel, r.errors.lanes, r.errors.bits))
    return Result(Status.FAIL, r.message, r.data(), hint="; ".join(specific) or hint)


def data_bits(ctx: CheckContext, ch: int) -> Result:
    return _mem_result(memtest.data_bits(device.channels(ctx), ch), PATTERN_HINT)


def address_bits(ctx: CheckContext, ch: int) -> Result:
    return _mem_result(memtest.address_bits(device.channels(ctx), ch), ADDR_HINT)


def random_blocks(ctx: CheckContext, ch: int) -> Result:
    return _mem_result(memtest.random_blocks(device.channels(ctx), ch), PATTERN_HINT)


def subbeat(ctx: CheckContext, ch: int) -> Result:
    return _mem_result(memtest.subbeat_updates(device.channels(ctx), ch), PATTERN_HINT)


def march(ctx: CheckContext, ch: int) -> Result:
    progress = ctx.options.get("progress")
    report = (lambda e, f, s: progress(ch, e, f, s)) if progress else None
    return _mem_result(memtest.march_c_minus(device.channels(ctx), ch, progress=report), PATTERN_HINT)


def bandwidth(ctx: CheckContext, ch: int) -> Result:
    t = device.transport(ctx)
    if not t.physical_timing:
        return Result(Status.SKIP, f"{t.dev}: the link rate is modelled, not measured")
    mib = int(ctx.options.get("bw_mib", 256))
    n = min(mib << 20, t.channel_bytes)
    buf = np.random.default_rng(ch).integers(0, 256, n, dtype=np.uint8)
    t0 = time.perf_counter()
    t.mem_write(ch, 0, buf)
    w = n / (time.perf_counter() - t0) / 1e9
    t0 = time.perf_counter()
    back = t.mem_read(ch, 0, n)
    r = n / (time.perf_counter() - t0) / 1e9
    data = {"channel": ch, "h2c_gbs": round(w, 3), "c2h_gbs": round(r, 3)}
    if not np.array_equal(back, buf):
        return Result(Status.FAIL, "data read back differs", data, hint=PATTERN_HINT)
    msg = f"host->card {w:.2f} GB/s, card->host {r:.2f} GB/s"
    floor = float(ctx.options.get("bw_min_gbs", BW_PASS_GBS))
    if min(w, r) < floor:
        return Result(Status.FAIL, msg + f" (below {floor:g} GB/s)", data, hint=BW_HINT)
    return Result(Status.PASS, msg, data)


def interleave_regions(total: int) -> list[tuple[int, int]]:
    """Six logical regions: a big aligned one, odd starts and lengths, the middle, near and at the top."""
    mib = 1 << 20
    return [(0, mib), (mib + 12345, 1000), (2 * mib + 60, 70), (total // 2 - 4096, 8192),
            (total - 2 * mib, mib), (total - 100, 100)]


def interleave(ctx: CheckContext) -> Result:
    b = device.board(ctx)
    t = device.transport(ctx)
    total = t.channels * t.channel_bytes
    chash = b.chash
    rng = np.random.default_rng(77)
    regions = interleave_regions(total)
    data = [rng.integers(0, 256, n, dtype=np.uint8) for _, n in regions]
    for (addr, _), d in zip(regions, data):
        b.write(addr, d)
    for (addr, n), d in zip(regions, data):
        got = b.read(addr, n)
        bad = np.flatnonzero(got != d)
        if bad.size:
            first = addr + int(bad[0])
            ch, off = regs.beat_channel(first, chash)
            return Result(Status.FAIL, f"region 0x{addr:x}+{n}: {bad.size} wrong bytes, first at 0x{first:x} "
                                       f"(logical beat {first // regs.BEAT}, channel {ch} offset 0x{off:x})",
                          {"region": [addr, n], "first": first, "channel_of_first": ch}, hint=PATTERN_HINT)
    return Result(Status.PASS, f"{len(regions)} regions, {sum(n for _, n in regions)} bytes")


def checks() -> list[Check]:
    """Every memory check; March C- rows are the diag's `--mem full` and it drops them otherwise."""
    out = []
    for ch in (0, 1):
        needs = (N.ID, N.calib(ch), N.SCRUB)
        bind = functools.partial
        out += [
            Check("mem", N.data_bits(ch), bind(data_bits, ch=ch), needs=needs),
            Check("mem", N.addr_bits(ch), bind(address_bits, ch=ch), needs=needs, stage="addr"),
            Check("mem", N.random_blocks(ch), bind(random_blocks, ch=ch), needs=needs, stage="addr"),
            Check("mem", N.subbeat(ch), bind(subbeat, ch=ch), needs=needs, stage="pattern"),
            Check("mem", N.bandwidth(ch), bind(bandwidth, ch=ch), needs=needs, stage="bandwidth"),
        ]
    out.append(Check("mem", N.INTERLEAVE, interleave, needs=CORE, stage="pattern"))
    out += [Check("mem", N.march(ch), functools.partial(march, ch=ch), needs=(N.ID, N.calib(ch), N.SCRUB))
            for ch in (0, 1)]
    return out
