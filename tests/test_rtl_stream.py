"""STREAM's hardware subset (isa.stream_hw_cfg) on the RTL of nangate45-stream (nangate45-small
with the stream engine) under Verilator, against the golden simulator: every TMEM word and DRAM
byte after each program, RTL cycles against the timing model's; the descriptors the golden faults
on stopping the RTL with its error, and those it runs in the general form, which the engine does
not, stopping it as unsupported. Every case is slow (a Verilator build)."""
import dataclasses

import numpy as np
import pytest

from otpu_core import isa, rtlcases
from otpu_core import target as target_mod
from otpu_core.isasim import SimError
from otpu_core.rtlbackend import RtlBackend, RtlFault
from otpu_core.rtlcheck import compare_case, compare_op_checks, compare_run, golden_machine, reset_state
from rtl_support import require_verilator

pytestmark = pytest.mark.slow

TARGET = "nangate45-stream"
TMEM_WORDS, DRAM_BYTES = 8192, 16 << 20
STATE, DESC, VEC, X, K, KS, OUT = 0x10000, 8100, 0, 1100, 1400, 3, 1500
# a golden fault kind as the RTL's error (rtlbackend.ERRORS): the RTL folds alignment into shape
RTL_ERROR = {"shape": "shape", "misaligned": "shape", "out-of-range": "TMEM or DRAM range"}
# signed zeros, subnormals, the smallest normals; then infinities, NaNs (with payloads) and the largest normals
FINITE_SPECIAL = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00400000, 0x00800000, 0x80800001],
                          np.uint32)
SPECIAL = np.concatenate([FINITE_SPECIAL, np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F812345,
                                                    0x7F7FFFFF, 0xFF7FFFFF], np.uint32)])


@pytest.fixture(scope="module")
def stream_backend():
    require_verilator()
    be = RtlBackend(TARGET, max_cycles=5_000_000)
    assert be.cfg.STREAM and be.cfg.DSTEP and be.params["STREAM"] == 1
    return be


def _values(rng, n: int, scale: float = 1.0, special: float = 0.0, kinds=SPECIAL) -> np.ndarray:
    """n fp32 words: normals of the given scale, a `special` fraction of them drawn from `kinds`."""
    v = (rng.standard_normal(n) * scale).astype(np.float32).view(np.uint32)
    pick = rng.random(n) < special
    v[pick] = rng.choice(kinds, int(pick.sum()))
    return v


def _program(be, rng, desc: isa.StreamDesc, *, flags: str = "", src: int = STATE, dst: int = STATE, vec: int = VEC,
             out: int = OUT, desc_at: int = DESC, words=None, nonfinite_slots: bool = False) -> str:
    """A cold machine holding a random state (at src and dst), column slots, X, K0 (a decay in
    (0, 1)) and K1, garbage in the output words and the descriptor; returns the STREAM program.
    Infinities, NaNs, signed zeros and subnormals sit in the state (sparse: most rows stay finite)
    and X; the slots, which every row reads, get signed zeros and subnormals (and, with
    `nonfinite_slots`, infinities and NaNs too, which then reach most outputs)."""
    rows, cols = max(desc.rows, 1), max(desc.cols, 1)
    reset_state(be)
    for a in {src, dst}:                                       # a state at the source and at the destination
        be.write(a, _values(rng, min(rows * cols, (DRAM_BYTES - a) // 4), special=0.003))
    be.tmem[:] = _values(rng, TMEM_WORDS)                     # every word the STREAM must not write: garbage
    n_vec = min(4 * cols, TMEM_WORDS - vec)
    be.tmem[vec: vec + n_vec] = _values(rng, n_vec, 1 / np.sqrt(cols), 0.03,
                                        SPECIAL if nonfinite_slots else FINITE_SPECIAL)
    be.tmem[X: X + rows] = _values(rng, rows, special=0.1)
    be.tmem[K] = np.float32(rng.uniform(0.5, 1.0)).view(np.uint32)
    be.tmem[K + KS] = np.float32(rng.uniform(0.1, 1.0)).view(np.uint32)
    w = np.asarray(desc.encode() if words is None else words, np.uint32)
    be.tmem[desc_at: desc_at + len(w)] = w[: TMEM_WORDS - desc_at]
    return (f"stream desc={desc_at} ks={KS} src={src} dst={dst} vec={vec} x={X} k={K} out={out} {flags}\n"
            "halt")


PROGRAMS = [(isa.D_DELTA, 1), (isa.D_DELTA, 2), (isa.D_DELTA1, 1), (isa.D_DELTA1, 2), (isa.D_SCALE, 1),
            (isa.D_DOT, 1), (isa.D_DOT, 2)]
SHAPES = [(1, 64), (7, 128), (16, 256), (33, 192), (256, 64), (130, 128), (3, 256), (64, 64), (256, 256), (40, 192),
          (5, 64)]
CASES = [(dm, a, gate, q) for dm, a in PROGRAMS for gate in ("const", "col", "one") for q in (True, False)]
NAMES = {isa.D_DELTA: "delta", isa.D_DELTA1: "delta1", isa.D_SCALE: "scale", isa.D_DOT: "dot"}


def _check(be, prog, desc: isa.StreamDesc, slack: int = 0) -> None:
    """Bit-exact, and within 5% of the model's cycles (plus `slack` cycles); most of what the
    STREAM wrote (O, or the state without q) is finite, so the numbers say something."""
    c = compare_run(be, prog)
    print(f"{c.message()}")
    assert c.ok, c.message()
    assert 0.95 * c.model_cycles <= c.rtl_cycles <= 1.05 * c.model_cycles + slack, c.message()
    got = (be.tmem[OUT: OUT + desc.rows] if desc.q_en else
           be.read(STATE, 4 * desc.rows * desc.cols).view(np.uint32)).view(np.float32)
    assert np.isfinite(got).mean() > 0.5, f"{np.isfinite(got).mean():.2f} of the results finite"


@pytest.mark.parametrize("i", range(len(CASES)),
                         ids=[f"{NAMES[dm]}-a{a}-{gate}-{'q' if q else 'noq'}-{SHAPES[i % len(SHAPES)][0]}x"
                              f"{SHAPES[i % len(SHAPES)][1]}" for i, (dm, a, gate, q) in enumerate(CASES)])
def test_every_program_gate_and_q_is_bit_exact_within_5_percent_of_the_model(stream_backend, i):
    """The four scalar programs x G = K0 / slot 3 / 1.0 x q on and off x A over slot 1 or 2, on
    states of 1 to 256 rows and 64 to 256 columns (many of them several rings long), with
    infinities, NaNs, signed zeros and subnormals in the state, the slots and X."""
    dm, a, gate, q = CASES[i]
    rows, cols = SHAPES[i % len(SHAPES)]
    desc = isa.state_desc(rows, cols, dm, a_idx=a, gate=gate, q=q)
    assert isa.stream_hw_cfg(desc, 0) is not None
    _check(stream_backend, _program(stream_backend, np.random.default_rng(i), desc), desc)


@pytest.mark.parametrize("dm", sorted(NAMES), ids=[NAMES[d] for d in sorted(NAMES)])
@pytest.mark.parametrize("rows,cols", [(9, 64), (48, 192)])
def test_szero_reads_no_state_and_is_bit_exact(stream_backend, dm, rows, cols):
    """SZERO: the source reads +0 whatever DRAM holds (nothing is read), the result is written.
    The model charges the writes from the STREAM's start; the engine's first write waits for the
    column slots (a, B, G and q: 4 x cols words at 2 x LANES a cycle) and X, which only a wide row
    shows (48 x 192: 104 cycles of loads, 1.054-1.058 of the model), so that is the slack."""
    desc = isa.state_desc(rows, cols, dm, a_idx=2, gate="col", q=True)
    loads = (4 * cols + rows) // 8
    _check(stream_backend, _program(stream_backend, np.random.default_rng(rows + dm), desc, flags="szero"), desc, loads)


@pytest.mark.parametrize("dst", [STATE + 0x40000, STATE - 4 * 64 - 32], ids=["apart", "overlapping-below"])
def test_a_destination_apart_from_or_below_the_source_is_bit_exact(stream_backend, dst):
    """The engine reads ahead of its writes, which is what the golden computes when the destination
    does not overlap the source from above."""
    desc = isa.state_desc(40, 128, isa.D_DELTA, a_idx=1, gate="const", q=False)
    c = compare_run(stream_backend, _program(stream_backend, np.random.default_rng(7), desc, src=STATE, dst=dst))
    assert c.ok and abs(c.ratio - 1) <= 0.05, c.message()


@pytest.mark.parametrize("dm,a", PROGRAMS[::2], ids=[NAMES[p[0]] for p in PROGRAMS[::2]])
def test_infinities_and_nans_in_the_slots_are_bit_exact(stream_backend, dm, a):
    """Non-finite slot words reach most rows (a NaN in slot a makes every A a NaN): the NaNs the
    engine makes are the canonical ones, its infinities signed as the golden's."""
    desc = isa.state_desc(24, 128, dm, a_idx=a, gate="col", q=True)
    c = compare_run(stream_backend, _program(stream_backend, np.random.default_rng(dm), desc, nonfinite_slots=True))
    assert c.ok, c.message()


STREAM_CASES = ("mamba2_step", "gla_step", "retnet_step", "gated_deltanet")


@pytest.mark.parametrize("name", STREAM_CASES)
def test_the_kernel_library_state_steps_are_bit_exact_within_5_percent(stream_backend, name):
    """The recurrent steps compile to STREAMs on this target (gated_deltanet to DSTEPs), each in
    the hardware subset, and run bit-exact at the model's cycles."""
    case = next(c for c in rtlcases.kernel_cases(TARGET) if c.name == name)
    _, prog, _ = case.build()
    ops = [ins.op for ins in prog.instrs]
    assert (isa.Op.DSTEP if name == "gated_deltanet" else isa.Op.STREAM) in ops
    c = compare_case(stream_backend, case)
    print(f"{name}: model {c.model_cycles} RTL {c.rtl_cycles} ratio {c.ratio:.3f}")
    assert c.ok, c.message()
    assert abs(c.ratio - 1) <= 0.05, c.message()


def test_every_op_check_is_bit_exact(stream_backend):
    results, refused = compare_op_checks(stream_backend)
    assert results and refused == ["mxu: MM e2m1 PAIR"]          # no column reuse on this target
    bad = {t: c.message() for t, c in results.items() if not c.ok}
    assert not bad, bad


def _fs(payload: int) -> int:
    return int(isa.float_safe(payload))


GDN = isa.state_desc(8, 64, isa.D_DELTA, a_idx=1, gate="const", q=True)


def _words(desc=GDN, **edit) -> np.ndarray:
    w = np.asarray(desc.encode(), np.uint32).copy()
    for i, v in edit.items():
        w[int(i[1:])] = v
    return w


GOLDEN_FAULTS = [
    ("word 1 not float-safe", dict(words=_words(w1=0x3F800000))),
    ("reserved word 3 set", dict(words=_words(w3=_fs(1)))),
    ("reserved word 2 bits", dict(words=_words(w2=_fs(3 | 1 << 20)))),
    ("op word not float-safe", dict(words=_words(w6=0))),
    ("op past 10", dict(words=_words(w5=_fs(11 | 8 << 7)))),
    ("rows 0", dict(desc=dataclasses.replace(GDN, rows=0))),
    ("cols 0", dict(desc=dataclasses.replace(GDN, cols=0))),
    ("q_en with o_reg_en", dict(desc=dataclasses.replace(GDN, o_reg_en=1))),
    ("a column slot past 3", dict(desc=dataclasses.replace(GDN, g_src=isa.G_SLOT, g_idx=5))),
    ("too few op words before TMEM's end", dict(desc_at=TMEM_WORDS - 6)),
    ("the descriptor past TMEM's end", dict(desc_at=TMEM_WORDS - 3)),
    ("a slot past TMEM's end", dict(vec=TMEM_WORDS - 64)),
    ("out past TMEM's end", dict(out=TMEM_WORDS - 4)),
    ("a misaligned source", dict(src=STATE + 4, dst=STATE + 4)),
    ("a misaligned destination", dict(dst=STATE + 0x4000 + 4)),
    ("a source past DRAM's end", dict(src=DRAM_BYTES - 1024, dst=STATE)),
]


def _golden(be, prog):
    m = golden_machine(be)
    m.load(list(be.prepare(prog).instrs))
    m.run()


@pytest.mark.parametrize("what,kw", GOLDEN_FAULTS, ids=[f[0] for f in GOLDEN_FAULTS])
def test_a_stream_the_golden_faults_on_stops_the_rtl_with_its_error(stream_backend, what, kw):
    be = stream_backend
    kw = dict(kw)
    prog = _program(be, np.random.default_rng(11), kw.pop("desc", GDN), **kw)
    with pytest.raises(SimError) as g:
        _golden(be, prog)
    assert g.value.pc == 0, g.value
    with pytest.raises(RtlFault) as r:
        be.run(prog)
    assert (r.value.pc, r.value.name) == (0, RTL_ERROR[g.value.kind]), r.value


UNSUPPORTED = [
    ("U = MUL", dict(desc=dataclasses.replace(GDN, u_mode=isa.U_MUL))),
    ("32 columns", dict(desc=dataclasses.replace(GDN, cols=32))),
    ("300 rows", dict(desc=dataclasses.replace(GDN, rows=300))),
    ("q from slot 1", dict(desc=dataclasses.replace(GDN, q_idx=1))),
    ("G = K1", dict(desc=dataclasses.replace(GDN, g_idx=1))),
    ("A over slot 3", dict(desc=dataclasses.replace(GDN, a_idx=3))),
    ("A = RDOT(S, S)", dict(desc=dataclasses.replace(GDN, a_op=isa.A_SELF))),
    ("B = slot 2", dict(desc=dataclasses.replace(GDN, b_idx=2))),
    ("a_en without a program using A", dict(desc=dataclasses.replace(GDN, ops=isa.DPROGS[isa.D_SCALE]))),
    ("a fifth program", dict(desc=dataclasses.replace(GDN, ops=((isa.SOP_ADD, 2, isa.OP_X, isa.OP_A),)))),
    ("srs set", dict(desc=dataclasses.replace(GDN, srs=64))),
    ("rsave", dict(desc=dataclasses.replace(GDN, rsave=1))),
    ("NODST", dict(flags="nodst")),
    ("a TMEM source", dict(flags="src_t", src=2000, dst=STATE)),
    ("a destination overlapping the source from above", dict(dst=STATE + 4 * 64)),
]


@pytest.mark.parametrize("what,kw", UNSUPPORTED, ids=[f[0] for f in UNSUPPORTED])
def test_a_stream_outside_the_hardware_subset_stops_the_rtl_as_unsupported(stream_backend, what, kw):
    """The golden runs every descriptor (the general form); the card's engine runs the subset, so
    the RTL stops rather than compute something else."""
    be = stream_backend
    kw = dict(kw)
    desc = kw.pop("desc", GDN)
    prog = _program(be, np.random.default_rng(13), desc, **kw)
    _golden(be, prog)
    flags = sum(m for name, m in (("szero", isa.F_SZERO), ("src_t", isa.F_SRC_T), ("nodst", isa.F_NODST))
                if name in kw.get("flags", ""))
    assert "overlapping" in what or isa.stream_hw_cfg(desc, flags) is None
    with pytest.raises(RtlFault) as r:
        be.run(prog)
    assert (r.value.pc, r.value.name) == (0, "unsupported by the RTL"), r.value


@pytest.fixture(scope="module")
def scoreboard_backend():
    """nangate45-stream built with SEQ_WC = 0 (the sequencer's scoreboard orders each STREAM by its
    conservative footprint, not by wait entries) and TMEM_IMPL 3 (the engine's two read ports
    are denied and replay)."""
    require_verilator()
    t = target_mod.load(TARGET)
    variant = dataclasses.replace(t, arch=dataclasses.replace(t.arch, SEQ_WC=False),
                                  uarch=dataclasses.replace(t.uarch, TMEM_IMPL=3))
    be = RtlBackend(variant, max_cycles=5_000_000)
    assert be.params["SEQ_WC"] == 0 and be.params["TMEM_IMPL"] == 3
    return be


def test_the_state_steps_on_a_scoreboard_machine_with_the_single_copy_tmem(scoreboard_backend, capsys):
    """The kernel cases that use the stream engine stay bit-exact there."""
    be = scoreboard_backend
    rows, denied = [], 0
    for case in rtlcases.kernel_cases(TARGET):
        if case.name in STREAM_CASES:
            case = dataclasses.replace(case, target=be.target)
            c = compare_case(be, case)
            assert c.ok, (case.name, c.message())
            denied += be.last["tmem_deny"]
            rows.append(f"{case.name:16s} RTL {c.rtl_cycles:6d} model {c.model_cycles:6d} denied {be.last['tmem_deny']}")
    with capsys.disabled():
        print("\nSEQ_WC 0, TMEM_IMPL 3 on nangate45-stream:\n" + "\n".join(rows))
    assert len(rows) == len(STREAM_CASES) and denied > 0


def test_the_scoreboard_holds_a_reader_of_the_stream_outputs_and_state(scoreboard_backend):
    """A VOP reading O and an LD reading the state back, each touching nothing else of the
    STREAM's footprint, wait for it on the scoreboard: the out and DRAM ranges are in it."""
    be = scoreboard_backend
    desc = isa.state_desc(64, 128, isa.D_DELTA, a_idx=1, gate="const", q=True)
    prog = _program(be, np.random.default_rng(21), desc).replace(
        "halt", f"vop.copy dst=6000 a={OUT} rows=1 cols=64\nld dram={STATE} tmem=6100 n=64\nhalt")
    c = compare_run(be, prog)
    assert c.ok, c.message()
