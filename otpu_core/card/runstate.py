"""Run-directory state shared by every process that touches a card: where it lives, who holds the card.

The run directory is `$OTPU_RUN_DIR`, else `$XDG_RUNTIME_DIR/otpu`, else `<tmp>/otpu-<uid>`.
Per card name (`xdma0`, `sim`, `sim-NAME`) it holds:

- `<dev>.lock`: the device lock (flock, exclusive, non-blocking) and the holder's pid;
- `<dev>.json`: the holder's status file (pid, command, start, anything the tool publishes),
  written atomically; monitors read it and never take the lock;
- `<dev>.dma`: the DMA lock that keeps host->card and card->host transfers from overlapping
  (thread lock inside a process plus flock between processes).

A second user of a held card gets `DeviceBusy` "<dev> is busy: held by PID p (cmd)".
`OTPU_LOCK_WAIT=<seconds>` makes a tool wait for the card instead, polling once a second.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import DeviceBusy, UsageError


def run_dir() -> Path:
    """The run directory, created on first use; a UsageError naming the variable that chose it
    when it is a file or cannot be created."""
    if os.environ.get("OTPU_RUN_DIR"):
        path, source = Path(os.environ["OTPU_RUN_DIR"]), "OTPU_RUN_DIR"
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path, source = Path(os.environ["XDG_RUNTIME_DIR"]) / "otpu", "XDG_RUNTIME_DIR"
    else:
        path, source = Path(tempfile.gettempdir()) / f"otpu-{os.getuid()}", "the temporary directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
        problem = ("it is a file, not a directory" if blocker == path
                   else f"{blocker} is a file, not a directory" if blocker is not None else e.strerror or str(e))
        raise UsageError(f"run directory {path} (from {source}) cannot be used: {problem}",
                         hint="point OTPU_RUN_DIR at a directory you can create and write") from None
    return path


def open_shared(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """Open a lock or state file: never through a symlink, mode 0666 whatever the umask.

    A file this user may not write is opened read-only (flock works on it all the same).
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except PermissionError:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"{path} is a symlink: refusing to use it as a lock or state file",
                             hint="remove it; someone may be trying to make otpu overwrite another file") from None
        raise
    try:
        os.fchmod(fd, 0o666)
    except OSError:
        pass
    return fd


def process_command(pid: int) -> str:
    """The command line of a process, or '?' when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a) or "?"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> int | None:
    """When a process started (clock ticks since boot, /proc/PID/stat field 22), None if unknown.
    With the pid it names one process for good: a recycled pid has a later start."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(b")") + 2:].split()[19])    # fields after the command name start at field 3
    except (ValueError, IndexError):
        return None


def owner_alive(pid: int, start: int) -> bool:
    """Is the process that recorded (pid, its process_start) still running? A start of 0 means
    it was unknown when recorded: the pid alone decides."""
    if not pid_alive(pid):
        return False
    now = process_start(pid)
    return not start or now is None or now == start


# Device lock ---------------------------------------------------------------------------------

class DeviceLock:
    """Exclusive use of one card by one process (one open lock at a time, even inside a process)."""

    def __init__(self, devname: str, directory: Path | None = None):
        self.devname = devname
        self.path = (directory or run_dir()) / f"{devname}.lock"
        self.status_path = self.path.with_suffix(".json")
        self._fd: int | None = None

    @property
    def held(self) -> bool: return self._fd is not None

    def holder(self) -> tuple[int | None, str]:
        """(pid, command) of whoever holds the lock now, from the lock file and the status file."""
        try:
            pid = int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None, "?"
        status = read_status(self.status_path)
        cmd = status.get("cmd") if status and status.get("pid") == pid else None
        return pid, cmd or process_command(pid)

    def acquire(self, wait: float | None = None) -> "DeviceLock":
        """Take the lock, waiting up to `wait` seconds (default `$OTPU_LOCK_WAIT`, else not at all)."""
        if self._fd is not None:
            return self
        if wait is None:
            from ..envvars import number
            wait = number("OTPU_LOCK_WAIT", 0.0, 0.0, 86400.0)
        fd = open_shared(self.path)
        deadline = time.monotonic() + wait
        announced = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise self._busy() from None
                if not announced:
                    print(f"otpu: {self.devname} is busy; waiting up to {wait:g}s", file=sys.stderr)
                    announced = True
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass            # a read-only lock file still locks; the holder pid is then unknown
        self._fd = fd
        if not write_status(self.status_path, {"pid": os.getpid(), "cmd": process_command(os.getpid()),
                                                "argv": sys.argv, "dev": self.devname, "start": time.time()}):
            print(f"otpu: {self.devname}: no status file ({self.status_path} cannot be written); "
                  "monitors will not see this process", file=sys.stderr)
        return self

    def _busy(self) -> DeviceBusy:
        pid, cmd = self.holder()
        who = f"PID {pid} ({cmd})" if pid is not None else "another process"
        return DeviceBusy(f"{self.devname} is busy: held by {who}",
                          hint=f"stop it, or wait for it with OTPU_LOCK_WAIT=<seconds> (lock {self.path})")

    def release(self) -> None:
        if self._fd is None:
            return
        status = read_status(self.status_path)
        if status and status.get("pid") == os.getpid():
            try:
                self.status_path.unlink()
            except OSError:
                pass
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)        # closing the descriptor drops the flock
        self._fd = None

    def __enter__(self) -> "DeviceLock": return self.acquire()

    def __exit__(self, *exc) -> None: self.release()


def lock_holders(path: Path) -> set[int] | None:
    """PIDs holding a flock on the file at `path`, read from /proc/locks without touching the
    lock (a monitor must never take it, even for a moment). None when /proc/locks cannot be read."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except FileNotFoundError:
        return set()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    for line in lines:
        parts = line.split()
        if "->" in parts:              # a waiter, not a holder
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
            try:
                holders.add(int(parts[4]))
            except ValueError:
                pass
    return holders


# Status file ---------------------------------------------------------------------------------

def write_status(path: Path, data: dict[str, Any]) -> bool:
    """Replace a status file atomically (hidden temp file + rename). False if it cannot be written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({**data, "updated": time.time()}))
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        return False


def update_status(devname: str, **fields: Any) -> bool:
    """Merge fields into this process's status file for a card it holds."""
    path = run_dir() / f"{devname}.json"
    status = read_status(path) or {}
    if status.get("pid") != os.getpid():
        return False
    return write_status(path, {**status, **fields})


def read_status(path: Path) -> dict[str, Any] | None:
    """A status file's contents with `stale: true` added when its process is gone; None if absent."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    if isinstance(pid, int) and not pid_alive(pid):
        data["stale"] = True
    return data


# DMA lock ------------------------------------------------------------------------------------

class DmaLock:
    """Never overlap h2c and c2h on one card: a re-entrant thread lock plus a flock for other processes.

    The flock is taken only at the outermost nesting level; a forked child opens its own
    descriptor. One object per card name per process (`dma_lock`).
    """

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._pid = os.getpid()

    def __enter__(self) -> "DmaLock":
        self._lock.acquire()
        if self._depth == 0 and self.path is not None:
            if self._fd is None or self._pid != os.getpid():
                self._fd, self._pid = open_shared(self.path), os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._lock.release()


_DMA_LOCKS: dict[tuple[str, str], DmaLock] = {}
_DMA_LOCKS_GUARD = threading.Lock()


def dma_lock(devname: str | None, directory: Path | None = None) -> DmaLock:
    """The one DMA lock of a card in this process (thread-only when the card has no name)."""
    if devname is None:
        return DmaLock(None)
    directory = directory or run_dir()
    key = (str(directory), devname)
    with _DMA_LOCKS_GUARD:
        if key not in _DMA_LOCKS:
            _DMA_LOCKS[key] = DmaLock(directory / f"{devname}.dma")
        return _DMA_LOCKS[key]
