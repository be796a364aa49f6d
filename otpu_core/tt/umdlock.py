"""tt-umd's named cross-process mutexes, so our ARC messages and tt-umd's never interleave.

tt-umd sends every Blackhole ARC message on the application queue while holding its ARC_MSG
mutex (device/arc/blackhole_arc_messenger.cpp): a process-shared, robust pthread mutex in the
shared-memory file `/dev/shm/TT_UMD_LOCK.ARC_MSG_<device number>_PCIe`
(device/utils/lock_manager.cpp, device/utils/robust_mutex.cpp). The file holds
`{pthread_mutex_t mutex; uint64_t initialized; pid_t owner_tid; pid_t owner_pid}`; `initialized`
is 0x5454554d444d5458 ("TTUMDMTX") once the mutex was set up, and the owner fields name the
holder while it holds it. `RobustMutex` here opens, initialises and takes that same mutex through
the C library, so a tt-umd process (tt-metal, tt-smi) and this tool exclude each other. A holder
that dies leaves the mutex to the next taker (EOWNERDEAD, made consistent), as in tt-umd.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import platform
import threading
import time
from pathlib import Path

from ..card.runstate import process_command
from ..errors import DeviceBusy, DeviceError

SHM_DIR = Path("/dev/shm")
UMD_LOCK_PREFIX = "TT_UMD_LOCK."
INITIALIZED_FLAG = 0x5454554D444D5458
PTHREAD_PROCESS_SHARED, PTHREAD_MUTEX_ROBUST = 1, 1
# sizeof(pthread_mutex_t) in glibc, per machine; the wrapper follows it.
MUTEX_BYTES = {"x86_64": 40, "aarch64": 48, "ppc64le": 40, "riscv64": 40}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def arc_mutex_path(device_number: int) -> Path:
    return SHM_DIR / f"{UMD_LOCK_PREFIX}ARC_MSG_{device_number}_PCIe"


class RobustMutex:
    """One of tt-umd's named mutexes, opened (and initialised on first use) at `path`."""

    _threads = threading.Lock()     # the pthread mutex excludes processes; this, our own threads

    def __init__(self, path: Path):
        self.path = Path(path)
        self._mutex_bytes = MUTEX_BYTES.get(platform.machine())
        if self._mutex_bytes is None:
            raise DeviceError(f"tt-umd's ARC mutex layout is not known on {platform.machine()}",
                              hint="ARC messages need it to stay out of tt-umd's way")
        self.size = self._mutex_bytes + 16
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)      # tt-umd's critical section for first use
            try:
                if os.fstat(fd).st_size != self.size:
                    os.ftruncate(fd, self.size)
                self._map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
                if self._word(self._mutex_bytes, ctypes.c_uint64).value != INITIALIZED_FLAG:
                    self._initialise()
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        self._held = 0

    def _open(self) -> int:
        old = os.umask(0)
        try:
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileExistsError:
                return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise DeviceError(f"cannot open tt-umd's ARC mutex {self.path}: {e.strerror}",
                              hint="it is created mode 0666 by whichever tool first sends an ARC message") from None
        finally:
            os.umask(old)

    def _word(self, offset: int, ctype):
        return ctype.from_address(self._base + offset)

    def _initialise(self) -> None:
        attr = ctypes.create_string_buffer(64)
        for call in (lambda: _libc.pthread_mutexattr_init(attr),
                     lambda: _libc.pthread_mutexattr_setpshared(attr, PTHREAD_PROCESS_SHARED),
                     lambda: _libc.pthread_mutexattr_setrobust(attr, PTHREAD_MUTEX_ROBUST),
                     lambda: _libc.pthread_mutex_init(ctypes.c_void_p(self._base), attr)):
            err = call()
            if err:
                raise DeviceError(f"initialising tt-umd's ARC mutex {self.path} failed: {os.strerror(err)}")
        self._word(self._mutex_bytes, ctypes.c_uint64).value = INITIALIZED_FLAG
        self._owner(0, 0)

    def _owner(self, tid: int, pid: int) -> None:
        self._word(self._mutex_bytes + 8, ctypes.c_int32).value = tid
        self._word(self._mutex_bytes + 12, ctypes.c_int32).value = pid

    def owner_pid(self) -> int:
        return self._word(self._mutex_bytes + 12, ctypes.c_int32).value

    def acquire(self, timeout: float) -> None:
        """Take the mutex, waiting up to `timeout` seconds; DeviceBusy naming the holder if it stays held."""
        if not self._threads.acquire(timeout=max(timeout, 0)):
            raise DeviceBusy(f"another thread of this process holds tt-umd's ARC mutex {self.path}")
        deadline = time.time() + timeout
        ts = _Timespec(int(deadline), int((deadline % 1) * 1e9))
        err = _libc.pthread_mutex_timedlock(ctypes.c_void_p(self._base), ctypes.byref(ts))
        if err == errno.EOWNERDEAD:          # the last holder died holding it: it is ours now
            err = _libc.pthread_mutex_consistent(ctypes.c_void_p(self._base))
        if err:
            self._threads.release()
            pid = self.owner_pid()
            who = f"PID {pid} ({process_command(pid)})" if pid else "another process"
            raise DeviceBusy(f"ARC is busy: {who} has held tt-umd's ARC message mutex for over {timeout:g} s",
                             hint=f"that process may be stuck mid-message; the mutex is {self.path}")
        self._owner(threading.get_native_id(), os.getpid())
        self._held += 1

    def release(self) -> None:
        self._held -= 1
        self._owner(0, 0)
        _libc.pthread_mutex_unlock(ctypes.c_void_p(self._base))
        self._threads.release()

    def __enter__(self) -> "RobustMutex":
        self.acquire(10.0)
        return self

    def __exit__(self, *exc) -> None:
        self.release()
