"""TMEM_IMPL 3, the seed's single-copy TMEM with conflict replay, under Verilator (otpu_tmem with
its own testbench): a port that loses its banks is denied, replays and reads the words as they
were; a write to a word a denied port waits for trips the replay-precondition assertion, which
stops the simulation. (The whole machine is not built with TMEM_IMPL 3: its units do not hold a
denied read yet, so target.check_rtl_buildable refuses it; see test_rtl_sources.py.)"""
import re

import pytest

from otpu_core import rtlsim
from rtl_support import require_verilator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tmem_tb():
    require_verilator()
    rtl = rtlsim.RTL_DIR
    return rtlsim.build("otpu_tmem_tb", [rtl / "core" / "otpu_tmem.sv", rtl / "tb" / "otpu_tmem_tb.sv"], {}).exe


def test_a_denied_read_replays_and_reads_the_words_as_they_were(tmem_tb):
    out = rtlsim.run(tmem_tb, []).stdout
    m = re.search(r"gnt0 (\d) gnt1 (\d) gnt1_replay (\d) data (\w+) (\w+) (\w+) (\w+) deny (\d+)", out)
    assert m, out
    assert m.group(1, 2, 3) == ("1", "0", "1"), "port 1 loses every bank to port 0, then replays alone"
    assert [int(x, 16) for x in m.group(4, 5, 6, 7)] == [0x104, 0x105, 0x106, 0x107]
    assert m.group(8) == "1"


def test_a_write_to_a_word_a_denied_port_waits_for_stops_the_simulation(tmem_tb):
    with pytest.raises(rtlsim.RtlError, match="replay precondition violated: TMEM word 5 written while read port 1"):
        rtlsim.run(tmem_tb, ["+violate"])
