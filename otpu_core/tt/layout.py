"""Our L1 layout on a Tensix, the launch message, kernel images and the resident descriptor ring.

tt-metal's mailbox offsets move between its releases; a library with its own firmware defines
its own, and these are ours (docs/tenstorrent.md draws the map). Only the go-signal word keeps
tt-metal's place (L1 0x370, signal byte 0x373) and its RUN_MSG values. L1 16..31 is left alone:
ARC firmware keeps power-throttling state there.

Kernel and firmware images here are behaviour descriptors that the simulated Tensix executes;
a real card needs RISC-V images built with the SFPI toolchain, which this project does not ship.
"""
from __future__ import annotations

import struct

FW_BASE = 0x1000
FW_MAGIC = b"OTPUFW01"
FW_IMAGE = FW_MAGIC + struct.pack("<II", 1, 0)

LAUNCH = 0x70
LAUNCH_FMT = struct.Struct("<8I")      # magic, text, args, nonce, result, enables, rsv, rsv
LAUNCH_MAGIC = 0x4C434E4C
GO_WORD = 0x370
SIGNAL_BYTE = 0x373

KERNEL_TEXT = 0x4000
KERNEL_ARGS = 0x14000
RESULT = 0x15000
RESULT_FMT = struct.Struct("<4I")      # completed_count, nonce, status, value
KERNEL_FMT = struct.Struct("<4I")      # magic, kind, version, rsv
KERNEL_MAGIC = 0x4B54544F              # "OTTK"
KIND_SUM, KIND_RESIDENT_QUEUE = 1, 2
ENABLE_BRISC = 1

# Resident queue: a control block the host and the kernel share, then the ring.
QUEUE_CTRL = 0x16000
CTRL_WORDS = 16
C_POSTED, C_COMPLETED, C_NONCE, C_STOP, C_STATE, C_HEARTBEAT, C_EXIT, C_WAIT_SITE = range(8)
C_SLOTS, C_RING, C_IDLE_LIMIT = 8, 9, 10
QSTATE_NONE, QSTATE_POLLING, QSTATE_BLOCKED, QSTATE_EXITED = 0, 1, 2, 3
QSTATE_NAMES = {0: "none", 1: "polling", 2: "blocked in a wait", 3: "exited"}
EXIT_NONE, EXIT_STOP_SENTINEL, EXIT_STOP_REQUEST, EXIT_IDLE_LIMIT, EXIT_BAD_DESCRIPTOR = 0, 1, 2, 3, 4
EXIT_NAMES = {0: "", 1: "STOP sentinel", 2: "stop request", 3: "idle spin limit", 4: "bad descriptor"}
RING = 0x16100
RING_SLOTS = 64
DESC_BYTES = 32
DESC_FMT = struct.Struct("<HHI6I")     # op, flags, seq, a0..a5
OP_NOP, OP_ADD, OP_FILL, OP_COPY, OP_STOP = 0, 1, 2, 3, 0xFFFF
OP_NAMES = {OP_NOP: "nop", OP_ADD: "add", OP_FILL: "fill", OP_COPY: "copy", OP_STOP: "stop"}
RESIDENT_ARGS_FMT = struct.Struct("<4I")  # ctrl, ring, slots, idle_spin_limit
SUM_ARGS_FMT = struct.Struct("<2I")        # source address, word count

# Where user data may go: past everything above.
USER_BASE = 0x20000


def kernel_image(kind: int) -> bytes:
    return KERNEL_FMT.pack(KERNEL_MAGIC, kind, 1, 0)
