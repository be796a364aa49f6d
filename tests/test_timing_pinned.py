"""The timing model's absolute costs, pinned: one worked program per unit with its exact cycles,
schedule and counter increments, worked out by hand from the documented rates.

Sources, written into each case: shared/reference/isa.md section 7 (FeSens/openTPU docs: MXU one
D = 128-byte chunk per cycle, 4-bit one block per cycle and PAIR a whole chunk, replay
ceil(M/MCOLS) per chunk, MXU tree latency 7, DRAM peak 128 bytes a cycle with 30 cycles of
latency, VPU LANES words a cycle and composites on two long lanes, DSTEP 8 state words a cycle
plus about 200 of fill, a V^T append one 64-byte read-modify-write per byte), shared/reference/
host.md 1.2-1.3 (what CYCLES, ICOUNT, B_RD/B_WR/A_RD/SW_WR, B_STALL and the free-running
counters count, 64 bytes per DRAM event) and the project's own choices in docs/simulator.md
"Timing model" (dispatch one cycle before a unit starts, VPU pipeline 4 and fold 8, quantiser 4,
RLD 3, the program fetch, 88% DRAM efficiency on ypcb-00338). Every number below is a literal,
not read from the code or the target file, so a constant extra cycle per instruction (which
cancels out of ratio tests) or a miscounted DRAM read fails here.

ypcb-00338: D 128, MCOLS 4, LANES 8, DRAM 128 B/cycle x 0.88 = 112.64 B/cycle, latency 30.
A run starts by fetching its image (32 bytes per instruction): a 2-instruction image (64 B)
takes ceil(64 / 112.64) = 1 DRAM cycle plus 30 of latency, so the first instruction dispatches
at cycle 31 and its unit starts at 32 (DRAM_RD 1 beat); 3 instructions (96 B) also take 1 cycle
but 2 beats, 4 (128 B) take 2 cycles and 2 beats (first dispatch at 32). CYCLES is the last
completion + 1.
"""
import numpy as np
import pytest

from otpu_core.asm import assemble
from otpu_core.isasim import Machine
from otpu_core.target import load

BOARD = "ypcb-00338"

# name: (arch overrides, slices, program, {counter: value}, [(pc, dispatch, start, end), ...], derivation)
CASES = {
    "sequencer": ({}, 1, "li rd=r1 imm=5\naddi rd=r1 ra=r1 imm=1\nnop\nhalt",
                  dict(CYCLES=36, ICOUNT=4, DRAM_RD=2, RUNNING=36, DMA_BUSY=0, VPU_BUSY=0),
                  [(0, 32, 32, 33), (1, 33, 33, 34), (2, 34, 34, 35)],
                  "4 instructions fetched in 2 cycles + 30; LI, ADDI, NOP retire one a cycle in the "
                  "sequencer (no unit, no slot); HALT at 35 -> CYCLES 36"),
    "vpu-elementwise": ({}, 1, "vop.add dst=4000 a=0 rows=4 cols=64 drs=64 ars=64 bmode=scalar imm=1.0\nhalt",
                        dict(CYCLES=69, ICOUNT=2, VPU_BUSY=36, DRAM_RD=1, B_RD=0),
                        [(0, 31, 32, 68)],
                        "256 words at LANES 8 = 32 cycles + pipeline 4: 32 -> 68"),
    "vpu-composite": ({}, 1, "vop.exp2 dst=4000 a=0 rows=4 cols=64 drs=64 ars=64\nhalt",
                      dict(CYCLES=165, ICOUNT=2, VPU_BUSY=132, DRAM_RD=1),
                      [(0, 31, 32, 164)],
                      "exp2 on the two long lanes: 256 / 2 = 128 cycles + 4"),
    "vpu-reduction": ({}, 1, "vop.rsum dst=4000 a=0 rows=4 cols=64 drs=1 ars=64\nhalt",
                      dict(CYCLES=77, ICOUNT=2, VPU_BUSY=44, DRAM_RD=1),
                      [(0, 31, 32, 76)],
                      "256 / 8 = 32 cycles + pipeline 4 + the 64-partial fold 8"),
    "dma-ld-compute-bound": ({}, 1, "ld dram=0 tmem=0 n=1000\nhalt",
                             dict(CYCLES=158, ICOUNT=2, DMA_BUSY=125, B_RD=63, DRAM_RD=64, B_STALL=0),
                             [(0, 31, 32, 157)],
                             "1000 TMEM words at 8 a cycle = 125 (the 4000 bytes stream in ceil(4000 / 112.64) "
                             "= 36 + 30 cycles); B_RD = ceil(4000 / 64) = 63, DRAM_RD = 63 + 1 fetched"),
    "dma-ld-dram-bound": ({}, 1, "ld dram=0 tmem=0 n=64\nhalt",
                          dict(CYCLES=66, ICOUNT=2, DMA_BUSY=33, B_RD=4, DRAM_RD=5),
                          [(0, 31, 32, 65)],
                          "256 bytes: ceil(256 / 112.64) = 3 cycles from 32, data 30 later: 65 (8 TMEM cycles "
                          "hide under it)"),
    "dma-st": ({}, 1, "st dram=0x1000 tmem=0 n=64\nhalt",
               dict(CYCLES=66, ICOUNT=2, DMA_BUSY=33, B_WR=4, DRAM_WR=4, DRAM_RD=1),
               [(0, 31, 32, 65)],
               "the same 256 bytes written: B_WR 4 beats, DRAM_WR 4"),
    "dma-waitw-holds-at-once": ({}, 1, "waitw addr=0x100 dst=3 ref=5\nhalt",
                                dict(CYCLES=64, ICOUNT=2, DMA_BUSY=31, B_RD=1, DRAM_RD=2),
                                [(0, 31, 32, 63)],
                                "one 64-byte read of the word (ceil(64 / 112.64) = 1 cycle + 30), no polls: "
                                "B_RD 1, DRAM_RD 1 + 1 fetched"),
    "dma-waitw-polls-once": ({}, 1, "waitw addr=0x100 dst=3 ref=5 interval=100\nhalt",
                             dict(CYCLES=133, ICOUNT=2, DMA_BUSY=100, B_RD=2, DRAM_RD=3),
                             [(0, 31, 32, 132)],
                             "one failed poll every 100 cycles, then the read that holds: busy 100 cycles, "
                             "two 64-byte reads"),
    "rld-waits-for-its-writer": ({}, 1,
                                 "vop.fill dst=3 rows=1 cols=8 bmode=scalar imm=2.0\nrld rd=r1 addr=3\nnop\nhalt",
                                 dict(CYCLES=43, ICOUNT=4, VPU_BUSY=5, DRAM_RD=2),
                                 [(0, 32, 33, 38), (1, 33, 38, 41), (2, 41, 41, 42)],
                                 "FILL 33 -> 38 (1 + 4); RLD reads the word at 38 and the register is ready "
                                 "3 cycles later, so the NOP dispatches at 41"),
    "mxu-int8-dram-bound": ({}, 1, "mm sa=0 out=0 n=64 kb=2 rs=256 m=1 ors=64 unit\nhalt",
                            dict(CYCLES=216, ICOUNT=2, MXU_BUSY=183, MXU_MAC=128, MXU_STARVE=48, B_STALL=48,
                                 B_RD=256, A_RD=0, DRAM_RD=257, TMEM_DENY=0),
                            [(0, 31, 32, 215)],
                            "64 rows x 2 chunks = 128 chunk steps (32 -> 160); 16384 bytes stream in "
                            "ceil(16384 / 112.64) = 146 cycles + 30 = 208, so the MXU starves 48 cycles (B_STALL "
                            "too), then the tree latency 7: 215"),
    "mxu-replay-compute-bound": ({"ACT_ROWS": 16}, 1, "mm sa=0 out=0 n=64 kb=2 rs=256 m=16 ors=65 unit\nhalt",
                                 dict(CYCLES=552, ICOUNT=2, MXU_BUSY=519, MXU_MAC=512, MXU_STARVE=0, B_STALL=0,
                                      B_RD=256, TMEM_DENY=512),
                                 [(0, 31, 32, 551)],
                                 "M 16 over MCOLS 4 replays each chunk 4 times: 512 steps (32 -> 544) + 7; "
                                 "TMEM_DENY = N x (M - distinct banks of j x 65 mod 8) = 64 x (16 - 8)"),
    "mxu-4-bit": ({}, 1, "mm sa=0 out=0 n=64 kb=2 rs=128 m=1 ors=64 unit wf=int4\nhalt",
                  dict(CYCLES=168, ICOUNT=2, MXU_BUSY=135, MXU_MAC=64, MXU_STARVE=0, B_RD=128, DRAM_RD=129),
                  [(0, 31, 32, 167)],
                  "two 4-bit blocks fill one 128-byte chunk and the MXU takes one block a cycle: 64 chunks "
                  "in 128 cycles (32 -> 160, the 8192 bytes arrive at 135) + 7"),
    "mxu-4-bit-pair": ({"PAIR": True}, 1, "mm sa=0 out=0 n=64 kb=2 rs=128 m=1 ors=64 unit wf=int4 pair\nhalt",
                       dict(CYCLES=143, ICOUNT=2, MXU_BUSY=110, MXU_MAC=64, MXU_STARVE=39, B_STALL=39, B_RD=128),
                       [(0, 31, 32, 142)],
                       "PAIR takes a whole chunk a cycle: 64 steps (32 -> 96), data by 32 + 73 + 30 = 135, "
                       "starving 39, + 7"),
    "quantiser-qact": ({}, 1, "qact src=0 rows=4 ab=0 kb=2 srs=256\nhalt",
                       dict(CYCLES=165, ICOUNT=2, QNT_BUSY=132, DRAM_RD=1, DRAM_WR=0),
                       [(0, 31, 32, 164)],
                       "4 rows x 256 words at 8 a cycle = 128 + the quantiser's 4"),
    "quantiser-v-transpose-append": ({}, 1,
                                     "qst src=0 dst=0x1000 sdst=0x100000 rows=1 kb=1 srs=128 drs=1 es=256 row\nhalt",
                                     dict(CYCLES=1077, ICOUNT=2, QNT_BUSY=1044, SW_WR=129, DRAM_WR=129),
                                     [(0, 31, 32, 1076)],
                                     "128 words / 8 = 16 cycles + 128 bytes x 8 cycles of read-modify-write = 1040, "
                                     "+ 4; each byte writes a whole 64-byte beat: 128 x 64 + one scale word = 8196 "
                                     "bytes = 129 beats"),
    "stream-engine-dstep": ({"DSTEP": True}, 1, "dstep state=0 qk=0 v=200 rows=64 cols=64 g=300 o=400 gs=1\nhalt",
                            dict(CYCLES=745, ICOUNT=2, DMA_BUSY=712, B_RD=256, B_WR=256, DRAM_RD=257, DRAM_WR=256),
                            [(0, 31, 32, 744)],
                            "64 x 64 state words at 8 a cycle = 512 + 200 fill; the 16 KiB state is read and "
                            "written back (32768 bytes in 291 + 30 cycles, hidden)"),
    "scoreboard-raw": ({}, 1, "ld dram=0 tmem=0 n=256\nvop.add dst=4000 a=0 rows=4 cols=64 drs=64 ars=64 "
                              "bmode=scalar imm=1.0\nhalt",
                       dict(CYCLES=109, ICOUNT=3, DMA_BUSY=40, VPU_BUSY=36, B_RD=16, DRAM_RD=18),
                       [(0, 31, 32, 72), (1, 32, 72, 108)],
                       "LD 32 -> 72 (1024 bytes: 10 + 30; DRAM_RD 16 + 2 fetched); the VOP reads what it "
                       "wrote, so it starts at 72, not 33: 72 + 32 + 4 = 108"),
    "scoreboard-independent": ({}, 1, "ld dram=0 tmem=0 n=256\nvop.add dst=4000 a=6000 rows=4 cols=64 drs=64 "
                                      "ars=64 bmode=scalar imm=1.0\nhalt",
                               dict(CYCLES=73, ICOUNT=3, DMA_BUSY=40, VPU_BUSY=36),
                               [(0, 31, 32, 72), (1, 32, 33, 69)],
                               "no footprint in common: the VOP runs under the LD, 33 -> 69"),
    "collective-gather": ({"S": 2}, 2, "gather src=0 dst=1000 rows=4 cols=64 srs=64 drs=64 seg=256\nhalt",
                          dict(CYCLES=97, ICOUNT=2, COLL_BUSY=64, DRAM_RD=1),
                          [(0, 31, 32, 96)],
                          "S x rows x cols = 512 words at 8 a cycle on both slices at once"),
    "collective-bar": ({"S": 2}, 2, "bar\nhalt", dict(CYCLES=34, ICOUNT=2, COLL_BUSY=1, DRAM_RD=1),
                       [(0, 31, 32, 33)], "BAR holds the collective unit one cycle"),
}


def _host(m):
    """The host answers the polled WAITW once nothing else can run."""
    m.write_dram(0x100, np.array([5], "<u4").view(np.uint8))


def _run(name):
    arch, slices, text, _, _, _ = CASES[name]
    t = load(BOARD)
    m = Machine(t, cfg=t.config().replace(**arch) if arch else None, host=_host if "polls" in name else None)
    m.timing.keep_log = True
    if name == "dma-waitw-holds-at-once":
        _host(m)
    prog = assemble(text)
    m.load([prog] * slices if slices > 1 else prog)
    m.run()
    return m


@pytest.mark.parametrize("name", list(CASES))
def test_worked_program_cycles_schedule_and_counters(name):
    _, slices, _, counters, schedule, why = CASES[name]
    m = _run(name)
    for sid in range(slices):
        got = m.counters(sid)
        wrong = {k: (got[k], v) for k, v in counters.items() if got[k] != v}
        assert not wrong, f"{name} (slice {sid}): counter (model, pinned) {wrong}; pinned because {why}"
        sched = [(pc, d, s, e) for s_, pc, _, d, s, e in m.timing.log if s_ == sid]
        assert sched == schedule, f"{name} (slice {sid}): schedule {sched}, pinned {schedule}: {why}"


def test_free_running_counters_add_up_across_runs():
    """Per-run counters restart with each load, the free-running ones keep adding (host.md 1.3):
    two worked programs back to back give the sum of their pinned increments."""
    t = load(BOARD)
    m = Machine(t)
    m.load(assemble("ld dram=0 tmem=0 n=1000\nhalt"))
    m.run()
    m.load(assemble("vop.exp2 dst=4000 a=0 rows=4 cols=64 drs=64 ars=64\nhalt"))
    m.run()
    c = m.counters()
    assert (c["CYCLES"], c["ICOUNT"], c["B_RD"]) == (165, 2, 0)                     # the second run's
    assert (c["RUNNING"], c["INSTR"], c["DMA_BUSY"], c["VPU_BUSY"], c["DRAM_RD"]) == (158 + 165, 4, 125, 132, 64 + 1)
