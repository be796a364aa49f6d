"""Board over XdmaTransport on file-backed device nodes: identification, scrub, PCIe facts, default --dev."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from otpu_core import devspec
from otpu_core.board import Board
from otpu_core.card import regs
from otpu_core.card.simcard import SimCard
from otpu_core.transport import xdma
from otpu_core.transport.xdma import XdmaTransport

CH = 1 << 20


@pytest.fixture
def nodes(tmp_path):
    base = tmp_path / "xdma0"
    with open(f"{base}_user", "wb") as f:
        f.truncate(1 << 20)
        f.seek(regs.off("ID"))
        f.write(regs.ID_OTPU.to_bytes(4, "little"))     # a v1 bitstream: ID and nothing else
    with open(f"{base}_h2c_0", "wb") as f:
        f.truncate(1 << 32)
    os.link(f"{base}_h2c_0", f"{base}_c2h_0")
    return str(base)


def test_v1_card_identifies_and_scrubs_once(nodes):
    with open(f"{nodes}_h2c_0", "r+b") as f:             # junk where the scrub must write zeros
        for axi in (0, CH - 64, 0x8000_0000, 0x8000_0000 + CH - 64):
            f.seek(axi)
            f.write(b"\xAB" * 64)
    b = Board(XdmaTransport(nodes, channel_bytes=CH), check=False)
    assert b.info.regmap == 1 and b.info.caps == {} and b.snapshot() is None
    seen = []
    assert b.scrub(progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (2 * CH, 2 * CH)
    assert b.reg("SCRATCH") == regs.DRAM_INIT
    assert not b.scrub()                                   # once per configuration
    b.close()
    with open(f"{nodes}_h2c_0", "rb") as f:
        for axi in (0, CH - 64, 0x8000_0000, 0x8000_0000 + CH - 64):
            f.seek(axi)
            assert f.read(64) == bytes(64)


def test_board_logical_io_on_file_nodes(nodes):
    b = Board(XdmaTransport(nodes, channel_bytes=CH), check=False)
    payload = np.random.default_rng(9).integers(0, 256, 5000, dtype=np.uint8)
    b.write(300, payload)
    assert np.array_equal(b.read(300, payload.size), payload)
    b.close()
    with open(f"{nodes}_h2c_0", "rb") as f:              # beat 0 of the data is logical beat 4 (256..319)
        f.seek(128)                                        # -> chunk 2, channel 0 (no CHASH on v1), offset 128
        assert f.read(64)[44:] == payload[:20].tobytes()


def test_pcie_facts_come_from_sysfs(nodes, tmp_path, monkeypatch):
    dev = tmp_path / "sys" / "xdma0_user" / "device"
    dev.mkdir(parents=True)
    for name, value in (("vendor", "0x10ee"), ("device", "0x7028"), ("current_link_speed", "5.0 GT/s PCIe"),
                        ("current_link_width", "8")):
        (dev / name).write_text(value + "\n")
    monkeypatch.setattr(xdma, "SYSFS_CLASS", tmp_path / "sys")
    t = XdmaTransport(nodes)
    assert t.link() == {"vendor": 0x10EE, "device": 0x7028, "speed": "5.0 GT/s PCIe", "width": 8}
    t.close()


def test_default_dev_prefers_a_real_card(monkeypatch):
    assert devspec.default_dev() == "sim"
    monkeypatch.setattr(xdma, "present", lambda prefix="/dev/xdma": ["/dev/xdma1"])
    assert devspec.default_dev() == "/dev/xdma1"
    monkeypatch.setenv("OTPU_DEV", "sim:other")
    assert devspec.default_dev() == "sim:other"
    spec, dev = devspec.resolve(None)
    assert spec.prefix == "sim" and dev == "sim:other"


def test_a_run_whose_process_died_reads_as_halted_with_error():
    code = textwrap.dedent("""
        import os
        from otpu_core.board import Board, prepare
        b = Board.open("sim", "sim-small")
        b.load_program(0x80000, prepare("loop count=100000000 body=@e\\nnop\\ne:\\nhalt\\n").image)
        b.start()
        os._exit(0)
        """)
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    card = SimCard("sim")
    try:
        st = card.reg_read(regs.off("STATUS"))
        assert st & regs.ST_HALTED and st & regs.ST_ERROR
        assert "exited" in card.last_error()
    finally:
        card.close()
    with Board.open("sim", "sim-small") as b:              # and the card works again
        b.write(0, np.ones(128, np.uint8))
        assert b.read(0, 128).sum() == 128
