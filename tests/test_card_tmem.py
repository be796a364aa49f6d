"""TMEM and ACT RAM are on the card: a program sees what another process's program left there,
until power-off."""
import os
import subprocess
import sys
import textwrap

import numpy as np

from otpu_core.board import Board, BoardBackend

FILL = "ld dram=0 tmem=100 n=16\nhalt\n"
DRAIN = "st dram=4096 tmem=100 n=16\nhalt\n"


def test_tmem_survives_between_processes_until_power_off():
    data = np.arange(1, 17, dtype=np.uint32) * 0x01010101
    first = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import numpy as np
        from otpu_core.board import Board, BoardBackend
        with Board.open("sim:tm", "sim-small") as b:
            b.write(0, np.arange(1, 17, dtype=np.uint32) * 0x01010101)
            BoardBackend(b).run({FILL!r})
        """)], env=os.environ.copy(), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    with Board.open("sim:tm", "sim-small") as b:
        b.write(0, np.zeros(16, np.uint32))                 # the DRAM copy is gone: only TMEM holds it
        BoardBackend(b).run(DRAIN)
        assert np.array_equal(b.read(4096, 64).view(np.uint32), data)
        b.t.card.power_off()
        BoardBackend(b).run(DRAIN)
        assert not b.read(4096, 64).any()
