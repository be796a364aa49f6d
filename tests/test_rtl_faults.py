"""Faults on the RTL (nangate45-small, WAITC) against the golden simulator: a program the golden
simulator faults on stops the RTL with the same error at the same instruction (pc and
disassembly), also when the dispatch has gone on past it (the faulting instruction waited for a
long LD while independent VOPs behind it dispatched and ran), when a younger instruction faults
first (the RTL reports the oldest), when the sequencer's own error comes after a unit's, and when
an RLD waits on the faulting instruction. Slow (a Verilator build)."""
import pytest

from otpu_core.rtlcheck import compare_run, reset_state
from rtl_support import rtl_backend  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

LONG_LD = "ld dram=0x1000 tmem=0 n=4096 !"                     # ~640 cycles of DRAM
# m=3 > MCOLS=2: the MXU refuses it; `ld=0`: it starts once the LD has completed
BAD_MM = "mm sa=0x20000 ssa=0x30000 out=6000 n=4 kb=1 rs=32 m=3 ors=8 srs=4 wf=int8 ! ld=0"
BAD_QACT = "qact src=4200 rows=0 ab=0 kb=1 srs=32 !"            # no rows: the quantiser refuses it at once
VOPS = "\n".join(f"vop.add dst={5000 + 64 * i} a={4200 + 64 * i} rows=1 cols=64 bmode=scalar imm=1.0 !"
                 for i in range(12))


def _same_fault(be, text: str, pc: int):
    reset_state(be)
    r = compare_run(be, text)
    assert r.golden_fault is not None and r.golden_fault.pc == pc, r.message()
    assert r.rtl_fault is not None, r.message()
    assert r.same_fault and r.ok, r.message()
    assert (r.rtl_fault.pc, r.rtl_fault.disasm) == (r.golden_fault.pc, r.golden_fault.disasm), r.message()
    assert f"at pc {pc} ({r.golden_fault.disasm}): " in r.rtl_fault.message
    return r


def test_a_unit_fault_names_its_instruction_after_the_dispatch_has_moved_on(rtl_backend):
    """The MM waits ~640 cycles for the LD while the twelve VOPs behind it dispatch and complete:
    the sequencer's pc is at the HALT when the MXU reports the MM's error."""
    r = _same_fault(rtl_backend, f"{LONG_LD}\n{BAD_MM}\n{VOPS}\nhalt", pc=1)
    assert r.rtl_fault.name == "shape" and r.golden_fault.kind == "shape"
    assert rtl_backend.last["icount"] >= 14, "the twelve VOPs dispatched before the MM faulted"


def test_a_dma_waitw_timeout_names_the_waitw_after_the_dispatch_has_moved_on(rtl_backend):
    """Nobody writes the word: the WAITW (the DMA) times out after 400 cycles of polls while the
    VOPs behind it dispatch and complete."""
    r = _same_fault(rtl_backend, f"waitw addr=0x1000 dst=32 ref=1 cmp=eq interval=20 timeout=400 !\n{VOPS}\nhalt", pc=0)
    assert r.rtl_fault.name == "WAITW timeout" and r.golden_fault.kind == "waitw-timeout"


def test_a_dstep_fault_names_the_dstep_behind_the_long_ld_of_its_queue(rtl_backend):
    """DSTEP (in the DMA's queue, so after the LD) with a state address that is not a multiple of D:
    the DSTEP engine refuses it ~640 cycles after its dispatch."""
    r = _same_fault(rtl_backend, f"{LONG_LD}\ndstep state=0x40004 qk=100 v=164 rows=16 cols=32 g=700 gs=1 o=800 !\n"
                                 f"{VOPS}\nhalt", pc=1)
    assert r.rtl_fault.name == "shape"


def test_the_oldest_fault_wins_over_a_younger_one_reported_first(rtl_backend):
    """The QACT behind the MM faults at once; the MM faults ~640 cycles later: the golden
    simulator, one instruction at a time, faults on the MM, and so does the RTL."""
    r = _same_fault(rtl_backend, f"{LONG_LD}\n{BAD_MM}\n{BAD_QACT}\n{VOPS}\nhalt", pc=1)
    assert r.rtl_fault.name == "shape"


def test_a_sequencer_error_behind_a_unit_fault_names_the_unit_fault(rtl_backend):
    """An LD past TMEM (the sequencer's range check at dispatch) behind the waiting MM."""
    be = rtl_backend
    _same_fault(be, f"{LONG_LD}\n{BAD_MM}\n{VOPS}\nld dram=0 tmem={be.cfg.TMEM_WORDS - 4} n=8 !\nhalt", pc=1)


def test_a_sequencer_error_with_older_instructions_in_flight_names_its_own_pc(rtl_backend):
    be = rtl_backend
    r = _same_fault(be, f"{LONG_LD}\n{VOPS}\nld dram=0 tmem={be.cfg.TMEM_WORDS - 4} n=8 !\nhalt", pc=13)
    assert r.rtl_fault.name == "TMEM or DRAM range"


def test_an_rld_waiting_on_the_faulting_instruction_stops_with_its_fault(rtl_backend):
    """The RLD reads a word the MM writes, so it waits for the MM, which faults."""
    _same_fault(rtl_backend, f"{LONG_LD}\n{BAD_MM}\nrld rd=r1 addr=6000\n{VOPS}\nhalt", pc=1)


def test_running_past_the_end_names_the_last_instruction(rtl_backend):
    r = _same_fault(rtl_backend, f"{LONG_LD}\n{VOPS}", pc=12)
    assert r.rtl_fault.name == "ran past the end of the program"


def test_rtl_run_reports_the_same_fault_at_the_golden_pc(tmp_path, capsys):
    """`otpu rtl run` on a program both machines fault on: one row, agreeing, naming the pc; the
    result names the golden's fault and the RTL's, each with the MM's disassembly."""
    import json

    from otpu_core.cli import build_app, run_app
    from rtl_support import require_verilator
    require_verilator()
    prog = tmp_path / "fault.s"
    prog.write_text(f"{LONG_LD}\n{BAD_MM}\n{VOPS}\nhalt\n")
    assert run_app(build_app(), "otpu", ["rtl", "run", str(prog), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["ok"] and row["faulted"] and row["fault_pc"] == 1, row
    assert row["result"].startswith("the same fault: ") and row["result"].count("(mm sa=0x20000") == 2, row
