"""The `otpu-memcal` command (also `otpu memcal`): status, cal, selfcal, scan, console."""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

import typer

from otpu_core import cliopts
from otpu_core.board import Board
from otpu_core.card import litedram_map as M
from otpu_core.card import regs
from otpu_core.cli import add_version_option, tool_main
from otpu_core.console import WorkProgress, print_json, stderr, stdout
from otpu_core.errors import EXIT_CHECKS_FAILED, DeviceBusy, DeviceError, UsageError

from . import render, selfcal, serial_log
from .csr import Csr
from .ensure import Options, calibrated, ensure, record_cpu, require_hostcal
from .results import Results, running_settings
from .scan import scan_channel
from .status import gather

PROG = "otpu-memcal"
DEFAULT_BIST_MIB = 64.0
MAX_FIRMWARE_BYTES = 4 << M.SC_FW_LOG2_MAX      # what selfcal_status can say the CPU's memory holds
HELP = ("DDR3 calibration of an openTPU card's LiteDRAM controllers: status, cal (from the host), selfcal (the "
        "core's CPU), scan (window maps), console (the CPU's log over a serial port). Exit 0 ok, 1 calibration "
        "failed, 2 bad options or a card without HOSTCAL, 3 card busy or absent.")

app = typer.Typer(name="memcal", no_args_is_help=True, add_completion=False, rich_markup_mode=None, help=HELP)


add_version_option(app, PROG)


# ---- option checks -----------------------------------------------------------------------------

def _channels(channel: Optional[int]) -> list[int]:
    return [0, 1] if channel is None else [channel]


def _mib(name: str, value: float, allow_zero: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{name} {value}: must be a finite number of MiB " + (">= 0 (0: no BIST)" if allow_zero else "> 0"))
    return value


ChannelOpt = typer.Option(None, "--channel", "-c", min=0, max=M.NCHANNELS - 1, help="Only this channel (0 or 1).")
StrideOpt = typer.Option(1, "--stride", min=1, max=M.PERIOD_STEPS // 2,
                         help=f"Sweep every N CK/DQS phase steps (1..{M.PERIOD_STEPS // 2}; 1 = all {M.PERIOD_STEPS}).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document.")


def _open(dev, target, fault, lock: bool = True) -> Board:
    # The calibration does not depend on the arch layer: any configuration is calibrated as it is.
    return Board.open(dev, target, check=False, faults=fault, lock=lock)


def _say(json_out: bool):
    con = stderr()
    return (lambda text: None) if json_out else (lambda text: con.print(text, markup=False, highlight=False))


def _progress_hook(prog: WorkProgress, ch: int):
    return lambda what, done, total: prog.update(f"channel {ch} {what}", done, total)


def _print(lines) -> None:
    con = stdout()
    for line in lines:
        con.print(line, highlight=False, markup=False) if isinstance(line, str) else con.print(line, highlight=False)


def _header(board: Board) -> str:
    info = board.info
    return (f"{board.t.dev}: LiteDRAM, {M.NCHANNELS} channels, DDR3-{info.ddr_mts or '?'} CL {M.CL} CWL {M.CWL}, "
            f"sys {M.SYS_HZ / 1e6:.2f} MHz, CK/DQS steps of {M.STEP_PS:.1f} ps ({M.PERIOD_STEPS} per tCK)")


# ---- status ------------------------------------------------------------------------------------

@app.command()
def status(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
           maps: bool = typer.Option(False, "--maps", help="Also print each channel's window maps."),
           json_out: bool = JsonOpt) -> None:
    """Per channel: calibrated or not, by whom and when, the CK/DQS phase, window widths, BIST result."""
    try:
        board, note = _open(dev, target, fault), None
    except DeviceBusy as e:
        if fault is not None:
            raise
        board, note = _open(dev, target, None, lock=False), f"{e.message}: registers only, the CPU's report not read"
    with board:
        st = gather(board, with_report=note is None)
    if note:
        st.problems.append(note)
    if json_out:
        print_json(st.as_dict())
        return
    _print(render.status_lines(st, maps))


# ---- cal ---------------------------------------------------------------------------------------

@app.command()
def cal(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
        force: bool = typer.Option(False, "--force", help="Calibrate from the host even channels that are calibrated."),
        channel: Optional[int] = ChannelOpt, stride: int = StrideOpt,
        bist_mib: Optional[float] = typer.Option(None, "--bist-mib", help="MiB the BIST writes and checks after "
                                                 "calibrating (default 64, or the whole channel if smaller)."),
        sweep_bist_mib: float = typer.Option(8.0, "--sweep-bist-mib",
                                             help="MiB of BIST traffic at each sweep step (0: the DFII check only)."),
        bitslips: bool = typer.Option(False, "--bitslips", help="Also print every lane's map at every read bitslip."),
        json_out: bool = JsonOpt) -> None:
    """Calibrate: wait for the core's CPU, then calibrate from the host what it left (every chosen channel with --force)."""
    if bist_mib is not None:
        _mib("--bist-mib", bist_mib, False)
    opts = Options(stride, bist_mib or 0.0, _mib("--sweep-bist-mib", sweep_bist_mib, True))
    chans = _channels(channel)
    say = _say(json_out)
    with _open(dev, target, fault) as board:
        require_hostcal(board)
        channel_mib = board.t.channel_bytes / (1 << 20)
        opts.bist_mib = min(DEFAULT_BIST_MIB, channel_mib) if bist_mib is None else bist_mib
        for name, mib in (("--bist-mib", opts.bist_mib), ("--sweep-bist-mib", opts.sweep_bist_mib)):
            if mib > channel_mib:
                raise UsageError(f"{name} {mib:g}: a channel of this card has {channel_mib:g} MiB")
        before = calibrated(board)
        if not force and all(before[ch] for ch in chans):
            if json_out:
                print_json({"device": board.t.dev, "by": None, "channels": {}, "failures": {},
                            "message": "calibrated already (--force to redo)"})
            else:
                say(f"{'both channels are' if len(chans) > 1 else f'channel {chans[0]} is'} calibrated (--force to redo)")
            return
        if not json_out:
            say(_header(board))
        with WorkProgress(PROG) as prog:
            out = ensure(board, chans, force, opts, log=say, progress=prog.update)
    if json_out:
        print_json({"device": board.t.dev, "by": out.by, "notes": out.notes,
                    "channels": {str(ch): r for ch, r in out.channels.items()},
                    "failures": {str(ch): {"error": e.message, "hint": e.hint, "code": e.code,
                                           "error_text": M.ERROR_TEXT.get(e.code), "partial": e.partial}
                                 for ch, e in out.failures.items()}})
    else:
        for ch in sorted(out.channels):
            _print(render.channel_block(out.channels[ch], full=bitslips))
        for ch, e in sorted(out.failures.items()):
            _print(render.channel_block({**e.partial, "ch": ch, "failed": True, "error": e.message, "hint": e.hint},
                                        full=bitslips))
        if not out.failures:
            stdout().print(f"calibration: PASS (by {out.by})", markup=False, highlight=False)
    if out.failures:
        raise typer.Exit(EXIT_CHECKS_FAILED)


# ---- selfcal -----------------------------------------------------------------------------------

@app.command("selfcal")
def selfcal_cmd(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
                firmware: Optional[Path] = typer.Option(None, "--firmware", help="Load this firmware image (raw "
                                                        "little-endian 32-bit words) into the CPU first."),
                channel: Optional[int] = ChannelOpt,
                stride: Optional[int] = typer.Option(None, "--stride", min=1, max=255,
                                                     help="Scan stride the CPU uses (default: its configured one)."),
                timeout: float = typer.Option(selfcal.WAIT_S, "--timeout", help="Seconds to wait for the CPU."),
                json_out: bool = JsonOpt) -> None:
    """Hand calibration to the core's CPU: release it (after loading --firmware), wait, print what it found."""
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout {timeout}: must be a finite number of seconds > 0")
    image = None
    if firmware is not None:
        if firmware.is_dir():
            raise UsageError(f"--firmware {firmware}: is a directory, not a firmware image")
        if firmware.exists() and not firmware.is_file():
            raise UsageError(f"--firmware {firmware}: not a regular file (a firmware image is a file of 32-bit words)")
        if firmware.is_file() and firmware.stat().st_size > MAX_FIRMWARE_BYTES:
            raise UsageError(f"--firmware {firmware}: {firmware.stat().st_size} bytes; a LiteDRAM core's CPU memory "
                             f"holds at most {MAX_FIRMWARE_BYTES} ({MAX_FIRMWARE_BYTES // 4} words)")
        try:
            image = firmware.read_bytes()
        except OSError as e:
            raise UsageError(f"--firmware {firmware}: cannot be read: {e.strerror or e}") from None
        if not image or len(image) % 4:
            raise UsageError(f"--firmware {firmware}: a firmware image is whole little-endian 32-bit words; "
                             f"{len(image)} bytes is {'empty' if not image else 'not a multiple of 4'}")
    chans = _channels(channel)
    with _open(dev, target, fault) as board:
        require_hostcal(board)
        csr = Csr(board.t)
        selfcal.require(csr)
        old_config = csr.r(M.B_SELFCAL + M.SC_CONFIG)
        res = Results(board.t.devname)
        with WorkProgress(PROG) as prog:
            if image is not None:
                selfcal.load(csr, image, tick=lambda d, n: prog.update("loading firmware (words)", d, n))
            res.begin(chans, "selfcal")
            try:
                selfcal.release(csr, channels=sum(1 << ch for ch in chans), stride=stride)
                t0 = time.time()
                cpu = selfcal.wait(csr, timeout, tick=lambda s: prog.update("waiting for the core's CPU (s)", round(s)))
            finally:
                res.end()
        rep = record_cpu(board, csr, res, chans)
        for ch in chans:
            if res.channel(ch):
                res.channel(ch)["time"] = t0
        res.save()
        csr.w(M.B_SELFCAL + M.SC_CONFIG, old_config)      # a later reset calibrates what it did before
        ok = calibrated(board)
    results = {ch: (rep or {}).get("channels", {}).get(ch) for ch in chans}
    good = all(ok[ch] and results[ch] and results[ch]["state"] == "ok" for ch in chans)
    if json_out:
        print_json({"device": board.t.dev, "cpu": cpu.as_dict(), "firmware_id": f"0x{rep['firmware_id']:08x}" if rep else None,
                    "channels": {str(ch): results[ch] for ch in chans}, "ok": good})
    else:
        stdout().print(f"core CPU: {cpu.describe()}" + (f", firmware 0x{rep['firmware_id']:08x}" if rep else ""), markup=False)
        for ch in chans:
            r = results[ch]
            if r is None:
                stdout().print(f"channel {ch}: no report from the CPU", markup=False)
            elif r["state"] != "ok":
                stdout().print(f"channel {ch}: calibration FAILED: error {r['error']} ({r['error_text']})", markup=False)
                _print(render.pass_maps(r))
            else:
                _print(render.channel_block(r))
    if not good:
        raise typer.Exit(EXIT_CHECKS_FAILED)


# ---- scan --------------------------------------------------------------------------------------

@app.command()
def scan(dev: cliopts.Dev = None, target: cliopts.TargetName = None, fault: cliopts.Fault = None,
         channel: Optional[int] = ChannelOpt, stride: int = StrideOpt,
         bist_mib: float = typer.Option(0.0, "--bist-mib", help="MiB of BIST traffic per sweep step (0: the DFII "
                                                                "check only; the region is saved and restored)."),
         json_out: bool = JsonOpt) -> None:
    """The full window maps (phase sweep per lane, read maps per bitslip) without changing the running settings."""
    _mib("--bist-mib", bist_mib, True)
    chans = _channels(channel)
    with _open(dev, target, fault) as board:
        require_hostcal(board)
        st = board.status()
        if st & regs.ST_RUN and not st & regs.ST_HALTED:
            raise DeviceBusy(f"{board.t.dev} is running a program: a scan takes the DRAM out of service",
                             hint="wait for the program to end, or stop it")
        csr = Csr(board.t)
        res = Results(board.t.devname)
        cpu = selfcal.state(csr)
        if cpu.running:
            raise DeviceBusy(f"{board.t.dev}: the core's CPU is calibrating", hint="wait for it (`otpu-memcal selfcal`)")
        ok = calibrated(board)
        if any(not ok[ch] for ch in chans):
            raise UsageError(f"channel {next(ch for ch in chans if not ok[ch])} is not calibrated: it has no running "
                             "settings to scan around", hint="`otpu-memcal cal` calibrates it (and prints its maps)")
        if any(running_settings(res.channel(ch)) is None for ch in chans) and cpu.present:
            record_cpu(board, csr, res, [ch for ch in chans if running_settings(res.channel(ch)) is None])
        out = {}
        with WorkProgress(PROG) as prog:
            for ch in chans:
                settings = running_settings(res.channel(ch))
                if settings is None:
                    raise UsageError(f"channel {ch}: its running settings are unknown (no saved calibration and no "
                                     "report from the core's CPU), so a scan could not put them back",
                                     hint="`otpu-memcal cal --force` calibrates it from the host and prints its maps")
                out[ch] = scan_channel(board, csr, ch, settings, stride, bist_mib, _progress_hook(prog, ch))
    if json_out:
        print_json({"device": board.t.dev, "channels": {str(ch): r for ch, r in out.items()}})
        return
    for ch, r in out.items():
        _print(render.channel_block(r, full=True))


# ---- console -----------------------------------------------------------------------------------

@app.command()
def console(port: str = typer.Option(..., "--port", "-p", help="Serial port of the core CPU's UART (e.g. /dev/ttyUSB1)."),
            baud: int = typer.Option(115200, "--baud", min=50, max=4_000_000, help="Baud rate."),
            timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for the end of the calibration."),
            follow: bool = typer.Option(False, "--follow", help="Keep printing after the calibration ends (Ctrl-C stops)."),
            json_out: bool = JsonOpt) -> None:
    """The core CPU's calibration log over its serial port, until it says PASS or FAIL for every channel."""
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout {timeout}: must be a finite number of seconds > 0")
    if not port.strip():
        raise UsageError("--port '': name the serial port of the core CPU's UART (e.g. /dev/ttyUSB1)")
    import serial
    try:
        ser = serial.Serial(port, baud, timeout=0.1)
    except (serial.SerialException, OSError) as e:
        raise DeviceError(f"serial port {port}: {e}", hint="check the port name (`ls /dev/tty*`) and that you may use it "
                                                           "(the dialout group)") from None
    summary = serial_log.LogSummary()
    con = stdout()
    lines: list[str] = []

    def show(line: str) -> None:
        lines.append(line)
        if not json_out:
            style = "green" if "PASS" in line else "bold red" if "FAIL" in line else None
            con.print(line, style=style, markup=False, highlight=False)

    try:
        with ser:
            ended = serial_log.read_log(ser, summary, show, timeout, follow)
    except serial.SerialException as e:
        raise DeviceError(f"serial port {port}: {e}") from None
    if json_out:
        print_json({"port": port, "baud": baud, **summary.as_dict(), "log": lines})
    elif not ended:
        stderr().print(f"{PROG}: no end of the calibration within {timeout:g} s ({summary.lines} lines read)", markup=False)
    else:
        con.print("calibration log: " + ("PASS" if summary.passed else "FAIL"), markup=False)
    if not summary.passed:
        raise typer.Exit(EXIT_CHECKS_FAILED)


def main() -> None:
    tool_main(app, PROG)
