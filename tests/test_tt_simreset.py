"""Powering a simulated Blackhole off (`otpu-tt sim reset`), and fault specs the card already had."""
import json
import os

import pytest

from otpu_core.errors import DeviceBusy, UsageError
from otpu_core.tt import consts as K
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card, power_cycle_sim
from otpu_core.tt.faults import parse
from otpu_tt.recover import Ladder

NODE_ID = K.NIU0_BASE + K.NOC_ID_TRANSLATED


def test_a_repeated_spec_is_reported_not_silently_dropped():
    with Card("tt:sim:rep", parse("noc_stuck:x=1,y=2")) as card:
        assert card.fault_note() is None and card.dev.repeated_faults == []
        assert Ladder(card, yes=True, settle=0).run([(1, 2)]).fixed_at == 3
    with Card("tt:sim:rep", parse("noc_stuck:x=1,y=2;old_fw")) as card:
        assert [str(f) for f in card.dev.repeated_faults] == ["noc_stuck:x=1,y=2"]     # old_fw is new: applied
        note = card.fault_note()
        assert "'noc_stuck:x=1,y=2'" in note and "old_fw" not in note
        assert "otpu-tt sim reset --dev tt:sim:rep" in note
        assert card.noc.read32(card.tiles.tile("tensix", 1, 2), NODE_ID) == (2 << 6) | 1    # not stuck again


def test_power_cycle_forgets_faults_state_and_old_firmware():
    with Card("tt:sim:pc", parse("noc_stuck:x=1,y=2;old_fw")) as card:
        serial, bdf, harvested = card.dev.chip.identity["board_id"], card.info.bdf, card.tiles.harvested_noc0_x
        t = card.tiles.tile("tensix", 3, 3)
        card.noc.write(t, L.USER_BASE, b"before the power cut")
    assert power_cycle_sim("tt:sim:pc") == "pc"
    ident = json.loads((card.dev.chip.dir / "identity.json").read_text())
    assert ident["applied_faults"] == [] and ident["board_id"] == serial
    # the same spec applies again, on current firmware: the ladder fixes it at rung 3 (0xAE known), not 4
    with Card("tt:sim:pc", parse("noc_stuck:x=1,y=2")) as card:
        assert card.fault_note() is None
        assert card.info.bdf == bdf and card.tiles.harvested_noc0_x == harvested        # fused facts stay
        assert card.noc.read(card.tiles.tile("tensix", 3, 3), L.USER_BASE, 20) == bytes(20)   # L1 lost
        report = Ladder(card, yes=True, settle=0).run([(1, 2)])
        assert report.fixed_at == 3 and report.steps[-1].result == "fixed"


def test_power_cycle_clears_a_lost_link_that_no_rung_can():
    with Card("tt:sim:ll", parse("link_lost")) as card:
        assert card.broken is not None
        assert Ladder(card, yes=True, settle=0).run(None).steps[-1].result.startswith("needs a power cycle")
    with Card("tt:sim:ll") as card:
        assert card.broken is not None                                 # still lost in the next process
    power_cycle_sim("tt:sim:ll")
    with Card("tt:sim:ll") as card:
        assert card.broken is None and len(card.tiles.tensix) == 120
        assert card.noc.read32(card.tiles.tile("tensix", 14, 11), NODE_ID) == (11 << 6) | 14


def test_power_cycle_refuses_a_card_in_use_and_a_real_card():
    with Card("tt:sim:busy") as card:
        with pytest.raises(DeviceBusy) as e:
            power_cycle_sim("tt:sim:busy")
        assert f"PID {os.getpid()}" in e.value.message
        assert card.alive()                                            # untouched
    with pytest.raises(UsageError) as e:
        power_cycle_sim("tt:0")
    assert "real card" in e.value.message
