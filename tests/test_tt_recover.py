"""The recovery ladder: every fault of the simulated chip is fixed at the lowest rung that can fix it."""
import os
import subprocess
import sys

import pytest

from otpu_core.tt import consts as K
from otpu_core.tt import layout as L
from otpu_core.tt.card import Card
from otpu_core.tt.faults import parse
from otpu_core.tt.launch import boot
from otpu_core.tt.probe import probe
from otpu_tt.recover import Ladder


def recover(fault: str, xy=(3, 4), yes=True, max_rung=7, name="rec", force=False):
    with Card(f"tt:sim:{name}", parse(fault)) as card:
        report = Ladder(card, max_rung=max_rung, yes=yes, settle=0, force=force).run([xy] if xy else None)
        return report.before[0], report


@pytest.mark.parametrize("fault,state,rung", [
    ("hang_resident:x=3,y=4", "hung", 1),
    ("wedge:x=3,y=4,risc=brisc", "wedged", 2),
    ("wedge:x=3,y=4,risc=trisc0", "wedged", 2),
    ("noc_stuck:x=3,y=4", "unresponsive", 3),
    ("noc_stuck:x=3,y=4;old_fw", "unresponsive", 4),
    ("bad_tile:x=3,y=4", "unresponsive", 5),
    ("hang_chip", "chip hung", 5),
    ("very_hung", "chip hung", 6),
    ("link_down", "link lost", 6),
])
def test_each_fault_is_fixed_at_its_rung(fault, state, rung):
    before, report = recover(fault)
    assert before.state == state
    assert report.fixed_at == rung, [(s.rung, s.result) for s in report.steps]
    assert [s.rung for s in report.steps] == list(range(1, rung + 1))      # lowest first, no rung skipped over
    assert report.recovered and all(s.healthy for s in report.after)
    assert report.steps[-1].result == "fixed" and report.steps[-1].fixed == ["3,4"]


def test_lost_link_ends_with_the_honest_answer():
    before, report = recover("link_lost")
    assert before.state == "link lost"
    assert not report.recovered and report.fixed_at is None
    assert report.steps[-1].rung == 7 and report.steps[-1].result.startswith("needs a power cycle: `otpu-tt sim reset --dev tt:sim:")
    # as tt-smi -r does: the PCIe link reset (with config restore) and the ASIC reset are tried first
    assert [s.rung for s in report.steps] == [1, 2, 3, 4, 5, 6, 7]
    assert all(s.result.startswith("skipped: the PCIe link is gone") for s in report.steps[:5])
    assert report.steps[5].result.startswith("failed") and "did not land" in report.steps[5].result


def test_rungs_from_3_need_yes():
    _, report = recover("noc_stuck:x=3,y=4", yes=False)
    assert [s.rung for s in report.steps] == [1, 2]
    assert [r.number for r in report.needs_yes] == [3, 4, 5, 6] and not report.recovered
    assert report.then_power_cycle                        # rung 7 is the answer after them, not a --yes action


def test_max_rung_stops_the_climb():
    _, report = recover("bad_tile:x=3,y=4", max_rung=4)
    assert [s.rung for s in report.steps] == [1, 2, 3, 4] and not report.recovered
    assert report.after[0].state == "unresponsive"


def test_all_recovers_several_cores_and_leaves_healthy_ones_alone():
    with Card("tt:sim:many", parse("hang_resident:x=1,y=2;wedge:x=14,y=11,risc=ncrisc")) as card:
        boot(card.noc, card.tiles.tile("tensix", 7, 7))
        report = Ladder(card, yes=True, settle=0).run(None)
        assert report.fixed_at == 2 and report.recovered
        assert sorted(report.steps[0].targets) == ["1,2", "14,11"]
        assert report.steps[0].fixed == ["1,2"] and report.steps[1].fixed == ["14,11"]
        assert probe(card.noc, card.tiles.tile("tensix", 7, 7)).state == "idle"     # untouched


def test_nothing_to_do_on_a_healthy_core():
    with Card("tt:sim:ok") as card:
        report = Ladder(card, yes=True, settle=0).run([(2, 2)])
    assert report.steps == [] and report.recovered


def test_resetting_a_kernel_blocked_in_a_wait_without_asking_wedges_the_tile():
    # The rule the ladder follows, shown by breaking it: the tile's NoC interface gets stuck.
    with Card("tt:sim:rule", parse("hang_resident:x=5,y=6")) as card:
        t = card.tiles.tile("tensix", 5, 6)
        card.noc.write32(t, K.SOFT_RESET_0, K.RISC_ALL)
        assert probe(card.noc, t).state == "unresponsive"
    with Card("tt:sim:rule2", parse("hang_resident:x=5,y=6")) as card:
        t = card.tiles.tile("tensix", 5, 6)
        card.noc.write32(t, L.QUEUE_CTRL + 4 * L.C_STOP, 1)           # asked first
        card.noc.write32(t, K.SOFT_RESET_0, K.RISC_ALL)
        assert probe(card.noc, t).state == "in reset"


def test_chip_wide_rungs_stop_the_ladder_while_another_process_has_the_card():
    # The seed's rule: rungs 3+ run under the advisory lock and look for other users first. Rung 3
    # resets one core (others are named, not refused); rung 4 would reset every Tensix under them,
    # so the ladder stops there with "close PID N" instead of climbing on to "needs a power cycle".
    code = ("from otpu_core.tt.card import Card\nimport time\n"
            "c = Card('tt:sim:busy')\nprint('open', flush=True)\ntime.sleep(30)\n")
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert other.stdout.readline().strip() == "open"
        _, report = recover("bad_tile:x=3,y=4", name="busy")
        assert [s.rung for s in report.steps] == [1, 2, 3, 4] and not report.recovered
        assert report.steps[2].result.startswith("still bad") and f"PID {other.pid}" in report.notes[0]
        assert report.steps[3].result.startswith("refused") and f"PID {other.pid}" in report.busy
        assert "close it and retry" in report.busy and "--force" in report.busy
        _, forced = recover("bad_tile:x=3,y=4", name="busy", force=True)
        step5 = forced.steps[-1]
        assert [s.rung for s in forced.steps] == [1, 2, 3, 4, 5] and step5.result.startswith("refused")
        assert f"PID {other.pid}" in forced.busy and "--force" not in forced.busy     # no forcing an ASIC reset
        assert any("every Tensix was reset under them" in n for n in forced.notes)
    finally:
        other.kill()
        other.wait()


def test_a_real_bad_endpoint_access_is_recovered_by_asic_reset():
    with Card("tt:sim:bad") as card:
        tlb = card.dev.allocate_tlb()                   # bypass the guard on purpose
        win = card.dev.map_tlb(tlb)
        card.dev.configure_tlb(tlb.id, 0, card.tiles.harvested_x[0], 5)
        win.read32(0)
        assert "harvested" in card.dev.chip.hang_reason()
        report = Ladder(card, yes=True, settle=0).run(None)
        assert report.before[0].state == "chip hung" and report.fixed_at == 5
        assert [s.result.split(":")[0] for s in report.steps[:4]] == ["skipped"] * 4
        assert len(report.after) == 120 and report.recovered


def test_asic_reset_refuses_while_another_process_holds_the_lock():
    code = ("from otpu_core.tt.card import Card\nimport time, os\n"
            "c = Card('tt:sim:locked')\nheld = c.exclusive()\nheld.__enter__()\nc.dev.close()\n"   # keeps only the lock file
            "print('locked', flush=True)\ntime.sleep(30)\n")
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert other.stdout.readline().strip() == "locked"
        _, report = recover("hang_chip", name="locked")
        step5 = next(s for s in report.steps if s.rung == 5)
        assert "busy: held by PID" in step5.result and str(other.pid) in step5.result
    finally:
        other.kill()
        other.wait()
