"""The files of a simulated card: its state file, where its DRAM lives, room on the disk, listing
and removing cards.

`<card>.card.json` says what the card is (target, serial, faults, where its DRAM file is). A
state file that is not JSON, or missing while the card's other files are there, is reported
(`CardStateError`, exit 3, naming the file and how to make a new card), never silently replaced
by a new card. DRAM is a sparse file as large as the card's DRAM; it is kept in the run
directory when that filesystem has room for all of it, else in `$OTPU_CACHE/sim` (default
`~/.cache/otpu/sim`) when that one has, and the state file records where, so every process
finds it. The small files (registers, IMEM, trace, TMEM) are allocated when created, so a full
disk is a message naming the directory and the bytes needed, never a Bus error later.
"""
from __future__ import annotations

import errno
import json
import os
import time
import zlib
from pathlib import Path

import numpy as np

from ..errors import DeviceError
from .runstate import DeviceLock, lock_holders, run_dir

STATE = ".card.json"
# Every file of a card in its run directory (the device lock `<card>.lock` stays: a waiter may hold it open).
CARD_FILES = (STATE, ".bar0", ".dram", ".gens", ".imem", ".trace", ".tmem", ".periph", ".error", ".card.lock",
              ".json", ".dma")
DRAM_MARGIN = 64 << 20      # room left on a filesystem beside a card's DRAM


class CardStateError(DeviceError):
    """A simulated card's state file is corrupt or gone while the card's files remain."""

    def __init__(self, message: str, hint: str | None = None, short: str = "bad state file"):
        super().__init__(message, hint)
        self.short = short


def card_name(spec_name: str | None) -> str:
    """Run-directory name of a simulated card: `sim`, or `sim-NAME` for `--dev sim:NAME`."""
    return "sim" if not spec_name else f"sim-{spec_name}"


def dev_of(name: str) -> str:
    """The `--dev` spec of a run-directory card name (`sim-x` -> `sim:x`)."""
    return "sim:" + name[4:] if name.startswith("sim-") else name


def serial_of(name: str) -> int: return zlib.crc32(name.encode()) & 0x7FFFFFFF


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def human(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def no_room(where: Path, need: int, free: int, what: str) -> OSError:
    """ENOSPC with the directory, the space needed and where to point OTPU_RUN_DIR."""
    return OSError(errno.ENOSPC, f"{where} has {human(free)} free, {what} needs {human(need)}: free some space "
                                 "or point OTPU_RUN_DIR at a filesystem with room (`otpu sim list` shows the "
                                 "cards there and `otpu sim rm` removes old ones)")


def load_state(directory: Path, name: str) -> dict | None:
    """The card's state file; None when the card does not exist yet. A corrupt state file, or
    none beside the card's other files, is a CardStateError."""
    path = directory / f"{name}{STATE}"
    fix = f"`otpu sim reset --dev {dev_of(name)}` makes a new card, `otpu sim rm {dev_of(name)}` removes it"
    try:
        text = path.read_text()
    except FileNotFoundError:
        if (directory / f"{name}.bar0").exists():
            raise CardStateError(f"simulated card {dev_of(name)}: its state file {path} is gone while its other "
                                 f"files remain in {directory}", hint=fix, short="state file missing") from None
        return None
    except OSError as e:
        raise CardStateError(f"simulated card {dev_of(name)}: its state file {path} cannot be read: "
                             f"{e.strerror or e}", hint=fix) from None
    try:
        meta = json.loads(text)
        if not isinstance(meta, dict) or not isinstance(meta.get("target"), str) or "serial" not in meta:
            raise ValueError("not a card's state")
        int(meta["serial"])
    except (ValueError, TypeError):
        raise CardStateError(f"simulated card {dev_of(name)}: its state file {path} is corrupt (not the JSON "
                             "otpu wrote)", hint=fix, short="corrupt state file") from None
    return meta


def save_state(directory: Path, name: str, meta: dict) -> None:
    path = directory / f"{name}{STATE}"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if e.errno == errno.ENOSPC:
            raise no_room(directory, 4096, free_bytes(directory), "the card's state file") from None
        raise


def dram_home(directory: Path, nbytes: int) -> Path:
    """Where a new card's DRAM file goes: the run directory if its filesystem holds all of it,
    else the cache (`$OTPU_CACHE/sim`, `~/.cache/otpu/sim`) when that one does; else the run
    directory all the same (writes then check the room they need)."""
    if free_bytes(directory) >= nbytes + DRAM_MARGIN:
        return directory
    cache = Path(os.environ.get("OTPU_CACHE") or Path.home() / ".cache" / "otpu") / "sim"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if free_bytes(cache) >= nbytes + DRAM_MARGIN:
            return cache
    except OSError:
        pass
    return directory


def dram_path(directory: Path, name: str, meta: dict) -> Path:
    return Path(meta.get("dram_dir") or directory) / f"{name}.dram"


def file_array(path: Path, count: int, dtype) -> np.ndarray:
    """A small state file mapped as an array, its blocks allocated now: a full disk fails here
    with a message, not later with a Bus error on first touch."""
    nbytes = count * np.dtype(dtype).itemsize
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        if os.fstat(fd).st_size < nbytes:
            os.ftruncate(fd, nbytes)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise no_room(path.parent, nbytes, free_bytes(path.parent), f"{path.name}") from None
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
    finally:
        os.close(fd)
    return np.memmap(path, dtype=dtype, mode="r+", shape=(count,))


def allocated(path: Path) -> int:
    """Bytes a (sparse) file really takes on disk."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def destroy(name: str, directory: Path | None = None) -> None:
    """Remove every file of a simulated card (its next open powers on a new one)."""
    directory = directory or run_dir()
    try:
        meta = load_state(directory, name)
    except CardStateError:
        meta = None
    paths = [directory / f"{name}{suffix}" for suffix in CARD_FILES]
    if meta and meta.get("dram_dir"):
        dram = dram_path(directory, name, meta)
        paths += [dram, dram.with_suffix(".gens")]
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def names(directory: Path | None = None) -> list[str]:
    """Run-directory names of the simulated cards there (any with a state file or registers)."""
    directory = directory or run_dir()
    found = {p.name[:-len(STATE)] for p in directory.glob(f"sim*{STATE}")}
    found |= {p.name[:-len(".bar0")] for p in directory.glob("sim*.bar0")}
    return sorted(n for n in found if n == "sim" or n.startswith("sim-"))


def describe(name: str, directory: Path | None = None) -> dict:
    """What `otpu sim list` shows of one card: its spec, target, faults, age, DRAM on disk, holder."""
    directory = directory or run_dir()
    row = {"dev": dev_of(name), "name": name, "target": None, "faults": None, "created": None,
           "dram_file": None, "dram_bytes_on_disk": 0, "held_by": None, "state": "ok"}
    try:
        meta = load_state(directory, name)
    except CardStateError as e:
        row["state"] = e.short
        meta = None
    if meta:
        row.update(target=meta.get("target_name") or meta.get("target"), faults=meta.get("faults") or "",
                   created=meta.get("created"))
        dram = dram_path(directory, name, meta)
        row.update(dram_file=str(dram), dram_bytes_on_disk=allocated(dram) + allocated(dram.with_suffix(".gens")))
    lock = DeviceLock(name, directory)
    holders = lock_holders(lock.path) if lock.path.exists() else set()
    if holders:
        pid, cmd = lock.holder()
        row["held_by"] = {"pid": pid, "cmd": cmd}
    return row


def age(created: float | None) -> str:
    if not created:
        return "?"
    s = max(0.0, time.time() - float(created))
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h" if s < 172800 \
        else f"{s / 86400:.0f} days"
