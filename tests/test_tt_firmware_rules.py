"""The firmware's rules and the chip's limits, each shown punishing a tool that ignores it.

Sources: tenstorrent/tt-zephyr-platforms lib/tenstorrent/bh_arc/reset.c (ToggleSingleTensixReset:
data[0] = 1 and exit code 1 on a coordinate that is not a Tensix), msgqueue.c (the response
starts zeroed; the exit code is ORed into word 0), noc_init.c (ComputeNocTranslation); luwen
apps/drunken-monkey/src/hang/noc.rs (about 100 outstanding reads hang the NoC); tt-umd
device/arc/blackhole_arc_messenger.cpp (application queue under the ARC_MSG mutex) and
device/utils/robust_mutex.cpp; tt-metal issue 9144 (the top 16 MiB of a DRAM bank).
"""
import os
import struct
import subprocess
import sys

import pytest

from otpu_core.tt import consts as K
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card
from otpu_core.tt.coords import TENSIX, Tile
from otpu_core.tt.faults import parse
from otpu_core.tt.launch import boot, launch
from otpu_core.tt.noc import NocHung
from otpu_core.tt.probe import CoreState, probe_many
from otpu_core.tt.queue import ask_to_stop, read_ctrl
from otpu_core.tt.simchip import STUCK_READ_CAPACITY
from otpu_core.tt.simstate import T_BASE, T_STUCK_READS, T_WORDS
from otpu_core.tt.umdlock import INITIALIZED_FLAG, RobustMutex
from otpu_tt.recover import Ladder


def stuck_reads(card, tile) -> int:
    return card.dev.chip.W[T_BASE + tile.index * T_WORDS + T_STUCK_READS]


# ---- single-tile reset: the answer is in word 0 ------------------------------------------------

def test_a_refused_single_tile_reset_reads_as_success_in_word_1():
    with Card("tt:sim:ae") as card:
        # (8, 3) is an L2CPU tile, not a Tensix: the firmware refuses it
        resp = card.arc.send(K.MSG["TOGGLE_SINGLE_TENSIX_RESET"], 8 | (3 << 8))
        assert resp[0] & 0xFF == 1            # the refusal
        assert resp[1] == 0                    # what a reader of word 1 would take for success
        ok = card.arc.send(K.MSG["TOGGLE_SINGLE_TENSIX_RESET"], 3 | (4 << 8))
        assert ok[0] & 0xFF == 0
        # the ladder reads word 0: a refused reset is a failed rung, not a fixed core
        ladder = Ladder(card, yes=True)
        result = ladder._tile_reset([CoreState(Tile(TENSIX, 8, 3, (8, 3)), "unresponsive")])
        assert result == "failed: ARC refused the reset of core 8,3 (status 1)"


def test_rung_3_on_firmware_without_0xae_is_skipped_not_sent():
    with Card("tt:sim:ae2", parse("noc_stuck:x=3,y=4;old_fw")) as card:
        report = Ladder(card, yes=True, settle=0).run([(3, 4)])
    assert report.steps[2].result == "skipped: firmware 19.8.0.0 has no single-tile reset (ARC 0xAE arrived in 19.9.0.0)"
    assert report.fixed_at == 4


# ---- ARC messages: the application queue, under tt-umd's mutex -----------------------------------

def test_messages_go_on_queue_3_under_the_umd_mutex_and_leave_luwens_queue_2_alone():
    from otpu_core.tt.simarc import MSGQ_BASE, MSGQ_BYTES
    with Card("tt:sim:q3") as card:
        u = card.dev.chip.csm_u32

        def serial(q):
            return u[((MSGQ_BASE + q * MSGQ_BYTES) >> 2) + 6]
        before = [serial(q) for q in range(4)]
        card.arc.send(K.MSG["TEST"], 1)
        assert [serial(q) - b for q, b in enumerate(before)] == [0, 0, 0, 1]
        path = card.dev.arc_mutex_path()
        assert path.name == "TT_UMD_LOCK.ARC_MSG_sim_PCIe"
        raw = path.read_bytes()
        assert struct.unpack_from("<Q", raw, 40)[0] == INITIALIZED_FLAG == 0x5454554D444D5458
        assert struct.unpack_from("<ii", raw, 48) == (0, 0)          # not held between messages


HOLD_MUTEX = ("import sys, os, time\nfrom otpu_core.tt.umdlock import RobustMutex\n"
              "m = RobustMutex(sys.argv[1])\nm.acquire(5)\nprint('held', flush=True)\n"
              "if sys.argv[2] == 'die':\n    os._exit(0)\n"
              "time.sleep(0.3)\nopen(sys.argv[3], 'w').write('released')\nm.release()\n")


def test_the_arc_mutex_excludes_another_process_and_survives_a_dead_holder(tmp_path):
    path, marker = tmp_path / "TT_UMD_LOCK.ARC_MSG_0_PCIe", tmp_path / "released"
    mutex = RobustMutex(path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_MUTEX, str(path), "hold", str(marker)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    mutex.acquire(10)                                  # waits for the holder...
    assert marker.read_text() == "released"            # ...which wrote this just before letting go
    assert struct.unpack_from("<i", path.read_bytes(), 52)[0] == os.getpid()
    mutex.release()
    holder.wait()
    dead = subprocess.Popen([sys.executable, "-c", HOLD_MUTEX, str(path), "die", str(marker)],
                            stdout=subprocess.PIPE, text=True)
    assert dead.stdout.readline().strip() == "held"
    dead.wait()
    mutex.acquire(5)                                   # EOWNERDEAD: made consistent, ours now
    mutex.release()


# ---- stuck tiles: read once, then remembered ------------------------------------------------------

def test_reading_a_stuck_tile_over_and_over_wedges_the_noc():
    with Card("tt:sim:sr", parse("noc_stuck:x=3,y=4")) as card:
        t = card.tiles.tile("tensix", 3, 4)
        for _ in range(STUCK_READ_CAPACITY):           # each read stalls and is never given back
            assert card.noc.read32(t, K.NIU0_BASE + K.NOC_ID_TRANSLATED) == 0xFFFFFFFF
        with pytest.raises(NocHung):
            card.noc.read32(t, K.NIU0_BASE + K.NOC_ID_TRANSLATED)
        assert "outstanding" in card.dev.chip.hang_reason()


def test_status_remembers_a_stuck_tile_and_reads_it_again_only_when_asked(capsys):
    from otpu_core.cli import run_app
    from otpu_tt.cli import app
    args = ["core", "status", "--dev", "tt:sim:sm", "--json"]
    assert run_app(app, "otpu-tt", args + ["--fault", "noc_stuck:x=3,y=4"]) == 1
    capsys.readouterr()
    with Card("tt:sim:sm") as card:
        t = card.tiles.tile("tensix", 3, 4)
        first = stuck_reads(card, t)
        assert first == 1 and card.memo.stuck() == {(3, 4)}
        for _ in range(3 * STUCK_READ_CAPACITY):        # a monitor left running: never another read
            states = probe_many(card.noc, [t], 0, samples=2, skip=card.memo.stuck())
        assert stuck_reads(card, t) == first and states[0].data["remembered"]
    assert run_app(app, "otpu-tt", args + ["--reprobe"]) == 1
    with Card("tt:sim:sm") as card:
        assert stuck_reads(card, card.tiles.tile("tensix", 3, 4)) == first + 1
        report = Ladder(card, yes=True, settle=0).run(None)
        assert report.fixed_at == 3 and card.memo.stuck() == set()       # recovery forgets it


# ---- foreign firmware: its L1 is not ours -----------------------------------------------------------

def test_a_core_running_foreign_firmware_is_left_alone():
    with Card("tt:sim:ff", parse("foreign_fw:x=6,y=6")) as card:
        t = card.tiles.tile("tensix", 6, 6)
        state = probe_many(card.noc, [t])[0]
        assert state.state == "foreign fw" and state.healthy and "not ours" in state.detail
        assert "queue_state" not in state.data                           # our mailbox was not read
        report = Ladder(card, yes=True, settle=0).run([(6, 6)])
        assert report.steps == [] and report.recovered                   # healthy: nothing done to it
        with pytest.raises(Exception, match="not ours"):
            launch(card.noc, t, L.KIND_SUM, b"")
        # the hazard: read its L1 as if it were our mailbox, and "stop" it by writing there
        ctrl = read_ctrl(card.noc, t)
        assert ctrl[L.C_STATE] == L.QSTATE_BLOCKED                       # looks like a hung kernel of ours
        ask_to_stop(card.noc, t, ctrl)
        assert probe_many(card.noc, [t])[0].state == "wedged"            # its firmware is corrupted


# ---- addresses ------------------------------------------------------------------------------------

def test_writes_into_the_top_16_mib_of_a_bank_are_lost():
    with Card("tt:sim:top") as card:
        d = card.tiles.dram(2)
        tlb = card.dev.allocate_tlb()                                    # bypass the guard
        win = card.dev.map_tlb(tlb)
        card.dev.configure_tlb(tlb.id, K.DRAM_BANK_ADDRESSABLE, d.x, d.y)
        win.write(0, b"top-of-bank!")
        assert win.read(0, 12) == bytes(12)                              # written, and gone
        card.dev.configure_tlb(tlb.id, K.DRAM_BANK_ADDRESSABLE - K.TLB_2M, d.x, d.y)
        win.write(K.TLB_2M - 12, b"just below!!")
        assert win.read(K.TLB_2M - 12, 12) == b"just below!!"
        win.close()
        card.dev.free_tlb(tlb.id)


def test_translation_off_addresses_pcie_and_dram_at_noc0():
    with Card("tt:sim:tr", parse("translation_off")) as card:
        tiles = card.tiles
        assert not tiles.translation and (tiles.pcie.x, tiles.pcie.y) == (2, 0)
        assert [(tiles.dram(b, 0).x, tiles.dram(b, 0).y) for b in (0, 5)] == [(0, 0), (9, 2)]
        assert tiles.tensix_columns == sorted(set(K.PHYS_COL_X) - set(tiles.harvested_noc0_x))
        t = tiles.tile("tensix", tiles.tensix_columns[0], 2)
        card.noc.write32(t, L.USER_BASE, 0xFFFFFFFF)
        assert card.noc.read32(t, L.USER_BASE) == 0xFFFFFFFF             # hang detection read PCIe at (2,0): fine
        card.noc.write(tiles.dram(5, 1), 64, b"noc0 dram")
        assert card.noc.read(tiles.dram(5, 0), 64, 9) == b"noc0 dram"    # every port of a bank is the bank
        boot(card.noc, t)
        assert probe_many(card.noc, [t])[0].state == "idle"
        # the hazard: a translated coordinate on a chip without translation has no endpoint
        tlb = card.dev.allocate_tlb()
        win = card.dev.map_tlb(tlb)
        card.dev.configure_tlb(tlb.id, K.PCIE_NIU_NOC_ADDR & ~(K.TLB_2M - 1), *K.PCIE_TRANSLATED_XY)
        win.read32((K.PCIE_NIU_NOC_ADDR + K.NOC_NODE_ID) & (K.TLB_2M - 1))
        assert "no live endpoint" in card.dev.chip.hang_reason()


def test_with_translation_on_noc0_tensix_coordinates_hit_another_tile():
    with Card("tt:sim:n0") as card:
        cols = card.tiles.tensix_columns
        t = next(t for t in card.tiles.tensix if t.noc0[0] != t.x and t.noc0[0] in cols)   # a column that moved
        tlb = card.dev.allocate_tlb()
        win = card.dev.map_tlb(tlb)
        card.dev.configure_tlb(tlb.id, K.REG_WINDOW_BASE, t.noc0[0], t.noc0[1])   # raw NOC0, translation on
        node = win.read32(K.NIU0_BASE + K.NOC_ID_TRANSLATED - K.REG_WINDOW_BASE)
        win.close()
        card.dev.free_tlb(tlb.id)
        # the answer comes from the tile whose *translated* x is that number, not from the one meant
        assert (node & 0x3F, node >> 6) == (t.noc0[0], t.y) != (t.x, t.y)
        other = card.tiles.tile("tensix", t.noc0[0], t.y)
        assert other.noc0 != t.noc0


def test_a_p100a_moves_its_harvested_bank_as_the_firmware_does():
    with Card("tt:sim:p100a-1") as card:
        chip = card.dev.chip
        dead = [b for b in range(8) if not chip.enabled_gddr >> b & 1]
        assert len(dead) == 1 and card.tiles.dram_banks == sorted(set(range(8)) - set(dead))
        for bank in card.tiles.dram_banks:                               # each translated tile reaches its bank
            card.noc.write(card.tiles.dram(bank, 2), 0x100, struct.pack("<I", 0xB0 + bank))
        for bank in card.tiles.dram_banks:
            with open(chip.dir / "dram" / f"bank{bank}.bin", "rb") as f:
                assert struct.unpack("<I", os.pread(f.fileno(), 4, 0x100))[0] == 0xB0 + bank
        with pytest.raises(Exception, match="harvested"):
            card.tiles.dram(dead[0])
