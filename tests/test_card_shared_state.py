"""One simulated card, several processes: peripheral state (I2C buses mid-transaction, device
pointers) is shared exactly, whoever touched it last."""
import os
import subprocess
import sys
import textwrap

import pytest

from otpu_core.card import regs
from otpu_core.card.i2c import INA226_ADDR, LM73_ADDR
from otpu_i2c.bitbang import BitBangMaster
from otpu_core.card.simcard import SimCard

# The other process: executes one bit-bang step per stdin line and prints what it returned.
STEPPER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from otpu_core.card import regs
    from otpu_i2c.bitbang import BitBangMaster
    from otpu_core.card.simcard import SimCard
    card = SimCard("sim-two", "sim-small", directory=Path(sys.argv[1]))
    base = regs.I2C_BASE
    m = BitBangMaster(lambda o: card.reg_read(base + o), lambda o, v: card.reg_write(base + o, v), int(sys.argv[2]))
    print("ready", flush=True)
    for line in sys.stdin:
        print(repr(eval(line, {"m": m})), flush=True)
""")


class Peer:
    """The second process, driven step by step."""

    def __init__(self, directory, bus):
        self.p = subprocess.Popen([sys.executable, "-c", STEPPER, str(directory), str(bus)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        assert self.p.stdout.readline().strip() == "ready"

    def __call__(self, expr: str):
        self.p.stdin.write(expr + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, "the peer process died"
        return eval(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(10)


@pytest.fixture
def two(tmp_path):
    card = SimCard("sim-two", "sim-small", directory=tmp_path)
    base = regs.I2C_BASE
    mine = {b: BitBangMaster(lambda o: card.reg_read(base + o), lambda o, v: card.reg_write(base + o, v), b) for b in (0, 1)}
    peers = {b: Peer(tmp_path, b) for b in (0, 1)}
    yield mine, peers
    for p in peers.values():
        p.close()
    card.close()


def test_one_transaction_split_byte_by_byte_between_two_processes(two):
    mine, peers = two
    m, peer = mine[0], peers[0]
    m.start()
    assert peer(f"m.write_byte({LM73_ADDR << 1})") is True            # address+W, ACKed
    assert m.write_byte(0x07) is True                                  # pointer: the ID register
    assert peer("m.repeated_start()") is None
    assert m.write_byte((LM73_ADDR << 1) | 1) is True                  # address+R
    assert peer("m.read_byte(True)") == 0x01
    assert m.read_byte(False) == 0x90                                  # LM73 ID 0x0190
    assert peer("m.stop()") is None
    assert m.levels() == (1, 1) and peer("m.levels()") == (1, 1)


def test_whole_transactions_alternate_and_pointers_persist_across_processes(two):
    mine, peers = two
    # A pointer one process sets is where the other reads from (no command byte).
    assert mine[1].read(INA226_ADDR, 0xFE, 2) == b"\x54\x49"
    assert peers[1](f"m.read({INA226_ADDR}, None, 2)") == b"\x54\x49"
    assert peers[1](f"m.read({INA226_ADDR}, 0xFF, 2)") == b"\x22\x60"
    assert mine[1].read(INA226_ADDR, None, 2) == b"\x22\x60"
    for i in range(6):
        ask_peer = i % 2 == 0
        lm73 = peers[0](f"m.read({LM73_ADDR}, 7, 2)") if ask_peer else mine[0].read(LM73_ADDR, 7, 2)
        ina = mine[1].read(INA226_ADDR, 0xFE, 2) if ask_peer else peers[1](f"m.read({INA226_ADDR}, 0xFE, 2)")
        assert (lm73, ina) == (b"\x01\x90", b"\x54\x49")
    assert peers[0](f"m.read({LM73_ADDR}, 1, 1)") == mine[0].read(LM73_ADDR, 1, 1) == b"\x40"


def test_a_card_saved_by_another_layout_powers_on_cleanly(tmp_path):
    import numpy as np
    SimCard("sim-old", "sim-small", directory=tmp_path).close()
    periph = tmp_path / "sim-old.periph"
    raw = bytearray(periph.read_bytes())
    raw[:16] = b"\x0b\x00\x00\x00{\"x\": 1}Z"        # what the JSON layout wrote: an odd length word first
    periph.write_bytes(bytes(raw))
    bar = np.memmap(tmp_path / "sim-old.bar0", np.uint32, "r+")
    bar[0x20000 // 4] = 12345                          # the hidden layout word of another version
    bar.flush()
    del bar
    card = SimCard("sim-old", "sim-small", directory=tmp_path)
    try:
        assert card.reg_read(regs.off("STATUS")) & (regs.ST_CALIB0 | regs.ST_CALIB1) == regs.ST_CALIB0 | regs.ST_CALIB1
        base = regs.I2C_BASE
        m = BitBangMaster(lambda o: card.reg_read(base + o), lambda o, v: card.reg_write(base + o, v), 0)
        assert m.read(LM73_ADDR, 7, 2) == b"\x01\x90"
    finally:
        card.close()
