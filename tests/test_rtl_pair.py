"""MM PAIR and QACT DUP (column reuse) on the RTL of nangate45-pair (nangate45-small with PAIR and
4 MXU columns) under Verilator, against the golden simulator: TMEM and DRAM bit for bit after
each program, RTL cycles against the timing model's, and the programs the golden simulator
faults on stopping the RTL with the same error at the same pc. Every case is slow (a Verilator build)."""
import numpy as np
import pytest

from otpu_core import formats, isa, rtlcases
from otpu_core.isasim import SimError
from otpu_core.rtlbackend import RtlBackend
from otpu_core.rtlcheck import compare_op_checks, compare_run, golden_machine, reset_state
from rtl_support import compare_kernels, require_verilator, rtl_backend  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

PAIR_TARGET = "nangate45-pair"
D = 32
ACT, WEIGHTS, SCALES, PRIOR, ALPHA, OUT = 0x10000, 0x20000, 0x30000, 0x40000, 0x48000, 0x50000
T_OUT, T_ALPHA = 2048, 4000

@pytest.fixture(scope="module")
def pair_backend():
    require_verilator()
    be = RtlBackend(PAIR_TARGET, max_cycles=5_000_000)
    assert be.cfg.PAIR and be.cfg.MCOLS == 4 and be.params["PAIR"] == 1
    return be


def _program(be, rng, *, wf, kb, m, n=6, flags="", dup=True, qflags="", ab=1, ors=None, srs_pad=0, ssa=SCALES,
             qrows=None, shuffled=False, junk=False, pair=True):
    """DRAM and TMEM for one QACT (DUP: M rows and their copies; else 2M distinct rows) and one MM
    PAIR over them; returns the program text. ors defaults to an odd stride (no MXU bank conflict).
    junk: the unused half of an odd kb's last chunk holds random bytes and the ACT block after
    the MM's its own codes (the QACT quantises one block more)."""
    ors = n + 1 if ors is None else ors
    rows_q = qrows or (m if dup else 2 * m)
    kq = kb + 1 if junk else kb
    x = (rng.standard_normal((rows_q, kq * D)) * rng.uniform(0.1, 4, (rows_q, 1))).astype(np.float32)
    if shuffled:            # rows j + M: row j's values in another order (one row scale, other sub-block offsets)
        x[m:] = rng.permuted(x[:m], axis=1)
    w = formats.quantize(rng.standard_normal((n, kb * D)).astype(np.float32), isa.WF_NAMES[wf], D)
    rs = w.rows.shape[1]
    if junk:
        assert kb % 2
        w.rows[:, rs - D // 2:] = rng.integers(0, 256, (n, D // 2), dtype=np.uint8)
    srs = -(-w.scales.shape[1] // 8) * 8 + srs_pad
    scales = np.zeros((n, srs), np.uint8)
    scales[:, :w.scales.shape[1]] = w.scales
    reset_state(be)
    be.write(ACT, x)
    be.write(WEIGHTS, w.rows)
    be.write(ssa, scales)
    out_words = m * ors + m
    be.write(PRIOR, rng.standard_normal(out_words).astype(np.float32))
    be.write(ALPHA, rng.uniform(0.5, 2, m).astype(np.float32))
    body = [f"ld dram={ACT} tmem=0 n={rows_q * kq * D}",
            f"qact src=0 rows={rows_q} ab={ab} kb={kq} srs={kq * D} {'dup' if dup else ''} {qflags}"]
    if "acc" in flags:
        body.append(f"ld dram={PRIOR} tmem={T_OUT} n={out_words}")
    if "ascale" in flags:
        body.append(f"ld dram={ALPHA} tmem={T_ALPHA} n={m}")
    body += [f"mm sa={WEIGHTS} ssa={T_ALPHA if 'ascale' in flags else ssa} out={T_OUT} n={n} kb={kb} rs={rs} m={m} "
             f"ab={ab} ors={ors} srs={srs} wf={wf} {'pair' if pair else ''} {flags}",
             f"st dram={OUT} tmem={T_OUT} n={out_words}", "halt"]
    return "\n".join(body)


CASES = [  # (wf, kb, M, MM flags, ACT rows: "dup" QACT DUP, "2m" 2M distinct rows, "shuffled" see _program, QACT flags)
    ("e2m1", 3, 2, "", "dup", ""),                      # odd KB: the last chunk's odd block is +0
    ("e2m1", 4, 2, "acc", "2m", ""),                    # 2M distinct ACT rows: row j + M's data is its own
    ("e2m1", 5, 1, "rmax", "dup", ""),
    ("int4", 3, 2, "acc rmax", "2m", ""),
    ("int4", 6, 2, "", "dup", ""),
    ("int4", 1, 2, "unit", "dup", ""),                  # one block: every chunk's odd half is +0
    ("int4", 4, 2, "unit acc ascale", "2m", ""),
    ("e2m1", 7, 2, "unit rmax", "2m", ""),
    ("fp4x6", 3, 2, "", "dup", "row"),                  # seed format: exact accumulation over both halves
    ("fp4x6", 4, 2, "acc rmax", "dup", "row sub"),      # with sub-block offsets
    ("fp4x6", 5, 2, "", "shuffled", "row sub"),         # offsets of rows j + M differ from row j's
]


@pytest.mark.parametrize("wf,kb,m,flags,rows,qflags", CASES,
                         ids=["-".join(filter(None, (c[0], f"kb{c[1]}", f"m{c[2]}", c[3].replace(" ", "+"), c[4],
                                                     c[5].replace(" ", "+")))) for c in CASES])
def test_mm_pair_is_bit_exact_within_5_percent_of_the_model(pair_backend, wf, kb, m, flags, rows, qflags, capsys):
    be = pair_backend
    rng = np.random.default_rng(kb * 100 + m * 10 + len(flags) + len(rows))
    prog = _program(be, rng, wf=wf, kb=kb, m=m, flags=flags, dup=rows == "dup", qflags=qflags,
                    shuffled=rows == "shuffled")
    r = compare_run(be, prog)
    with capsys.disabled():
        print(f"\n  PAIR {wf} kb={kb} M={m} {flags or '-'} {rows} {qflags}: {r.message()}")
    assert r.ok, r.message()
    written = be.read(OUT, 4 * (m * 7 + m)).view(np.uint32)
    assert np.count_nonzero(written) >= m * 6            # the MM wrote real results
    if rows == "dup":
        copy = slice(m, 2 * m)
        assert np.array_equal(be.act_q[copy], be.act_q[:m]) and np.array_equal(be.act_scale[copy], be.act_scale[:m])
    assert abs(r.ratio - 1) <= 0.05, r.message()


def test_a_long_pair_mm_takes_a_chunk_a_cycle_as_the_model_does(pair_backend, capsys):
    """64 weight rows of 8 e2m1 blocks: without PAIR (M = 4 rows, a block a cycle) the MM is
    bound by the array's 2 cycles a chunk; PAIR (M = 2 over the same 4 ACT rows) takes a chunk a
    cycle and is bound by DRAM instead. Both land within 5% of the model."""
    be = pair_backend
    runs = {}
    for pair, m in ((False, 4), (True, 2)):
        prog = _program(be, np.random.default_rng(9), wf="e2m1", kb=8, m=m, n=64, flags="unit", dup=False,
                        qrows=4, pair=pair)
        runs[pair] = compare_run(be, prog)
        assert runs[pair].ok, runs[pair].message()
        assert abs(runs[pair].ratio - 1) <= 0.05, runs[pair].message()
    with capsys.disabled():
        print(f"\n  64 x 8 e2m1 blocks: M=4 {runs[False].message()}; PAIR M=2 {runs[True].message()}")
    assert runs[True].rtl_cycles < runs[False].rtl_cycles - 100


@pytest.mark.parametrize("wf,flags,qflags", [("int4", "unit", ""), ("fp4x6", "unit", "row sub"), ("e2m1", "acc", "")])
def test_the_empty_half_of_an_odd_kb_chunk_is_a_zero_term_whatever_it_holds(pair_backend, wf, flags, qflags):
    """With an odd kb the last chunk's second half holds no block: PAIR adds +0 for it. Here that
    half holds random bytes and the next ACT block real codes, so a column that read them would
    change the result (with UNIT: the scale words past kb, zero here, would otherwise zero it)."""
    be = pair_backend
    prog = _program(be, np.random.default_rng(5), wf=wf, kb=3, m=2, flags=flags, dup=False, qflags=qflags,
                    junk=True, shuffled=wf == "fp4x6")
    r = compare_run(be, prog)
    assert r.ok, r.message()


def _golden_fault(be, prog) -> SimError:
    instrs = be.prepare(prog).instrs
    m = golden_machine(be)
    m.load(list(instrs))
    with pytest.raises(SimError) as e:
        m.run()
    return e.value


FAULTS = [  # (what, program arguments, the instruction the golden simulator refuses)
    ("PAIR with 2M > MCOLS", dict(wf="e2m1", kb=2, m=3, dup=False, qrows=4), isa.Op.MM),
    ("PAIR with an int8 WF", dict(wf="int8", kb=2, m=2, dup=False), isa.Op.MM),
    ("PAIR scale stride not a multiple of 8", dict(wf="int4", kb=2, m=2, srs_pad=4), isa.Op.MM),
    ("PAIR scale address not a multiple of 8", dict(wf="int4", kb=2, m=2, ssa=SCALES + 4), isa.Op.MM),
    ("QACT DUP with 2*rows > MCOLS", dict(wf="e2m1", kb=2, m=3), isa.Op.QACT),
    ("QACT rows > the ACT rows", dict(wf="e2m1", kb=2, m=2, dup=False, qrows=5), isa.Op.QACT),
    ("QACT blocks past ACT_BLOCKS", dict(wf="e2m1", kb=7, m=2, ab=10), isa.Op.QACT),
    ("QACT SUB without ROW", dict(wf="fp4x6", kb=2, m=2, qflags="sub"), isa.Op.QACT),
    ("PAIR fp4x6 over per-block activation scales", dict(wf="fp4x6", kb=4, m=2), isa.Op.MM),
    ("PAIR fp4x6 over rows j + M of another row scale", dict(wf="fp4x6", kb=4, m=2, dup=False, qflags="row"), isa.Op.MM),
]


@pytest.mark.parametrize("what,kw,op", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_pair_program_the_golden_faults_on_stops_the_rtl_with_its_error(pair_backend, what, kw, op):
    be = pair_backend
    prog = _program(be, np.random.default_rng(3), **kw)
    fault = _golden_fault(be, prog)
    assert be.prepare(prog).instrs[fault.pc].op == op, fault
    _assert_rtl_stops(be, prog, fault)


def _assert_rtl_stops(be, prog, fault: SimError) -> None:
    """The RTL stops with the golden fault's error, naming the faulting instruction (its pc and
    disassembly) as the golden simulator does."""
    r = compare_run(be, prog)
    assert r.rtl_fault is not None, r.message()
    assert r.golden_fault.pc == fault.pc and r.ok and r.same_fault, r.message()
    assert (r.rtl_fault.pc, r.rtl_fault.disasm) == (fault.pc, fault.disasm), r.message()


def test_pair_and_dup_on_a_target_without_pair_are_illegal_opcodes(rtl_backend):
    be = rtl_backend
    assert not be.cfg.PAIR
    for prog in ("qact src=0 rows=1 ab=0 kb=1 srs=32 dup\nhalt",
                 f"mm sa={WEIGHTS} ssa={SCALES} out={T_OUT} n=1 kb=2 rs=32 m=1 ors=1 srs=8 wf=e2m1 pair\nhalt"):
        reset_state(be)
        fault = _golden_fault(be, prog)
        assert fault.kind == "illegal-opcode"
        _assert_rtl_stops(be, prog, fault)


def test_every_op_check_and_kernel_runs_bit_exact_on_the_pair_target(pair_backend, capsys):
    """Every op check (the diag's PAIR one included: not refused here) and every kernel case of the
    library on nangate45-pair, bit-exact and within 5% of the model's cycles. swiglu_mlp over fp4x6
    weights compiles to QACT DUP (ROW, SUB) + MM PAIR on this target."""
    be = pair_backend
    results, refused = compare_op_checks(be)
    bad = {t: r.message() for t, r in results.items() if not r.ok}
    assert not bad, bad
    assert not refused and "mxu: MM e2m1 PAIR" in results and len(results) >= 110
    case = next(c for c in rtlcases.kernel_cases(PAIR_TARGET) if c.name == "swiglu_mlp fp4x6")
    instrs = case.build()[1].instrs
    assert any(i.op == isa.Op.MM and i.has(isa.F_PAIR) for i in instrs)
    assert any(i.op == isa.Op.QACT and i.has(isa.F_DUP) for i in instrs)
    kernels = compare_kernels(be)
    with capsys.disabled():
        print(f"\nkernel cases on {PAIR_TARGET}:\n" +
              "\n".join(f"  {n:26s} {r.message()}" for n, (r, _) in kernels.items()))
    bad = {n: r.message() for n, (r, _) in kernels.items() if not r.ok or abs(r.ratio - 1) > 0.05}
    assert not bad, bad
    assert len(kernels) >= 16 and "swiglu_mlp fp4x6" in kernels
