"""otpu-lens profiles agree with the simulator and the card: cycles, instructions and unit busy cycles
equal what `otpu sim run` reports for the same program; a run on the simulated card matches its
counters and the timing model's profile; wraps, cut buffers and trace-less bitstreams are reported;
the roofline, DRAM streams and cycle account check out against independent counts."""
import functools
import json

import numpy as np
import pytest

from otpu_core import isa
from otpu_core.cli import build_app, run_app
from otpu_core.isasim import Machine
from otpu_core.target import load as load_target
from otpu_lens import profile as profile_mod
from otpu_lens import recorder, workloads

T = "sim-small"
BUSY = {"DMA": "DMA_BUSY", "MXU": "MXU_BUSY", "QUANT": "QNT_BUSY", "VPU": "VPU_BUSY", "COLL": "COLL_BUSY"}


@functools.lru_cache(maxsize=None)
def _sim_profile(name: str) -> dict:
    t = load_target(T)
    return recorder.record(workloads.get(name), workloads.Context(t, {}), recorder.SimEngine(t), lambda *a: None)[0]


def _step(name: str):
    return next(workloads.get(name).build(workloads.Context(load_target(T), {})))


@pytest.mark.parametrize("name", ["attention", "mlp"])
def test_profile_numbers_equal_otpu_sim_run(name, tmp_path, capsys):
    step = _step(name)
    prog, image = tmp_path / "p.bin", tmp_path / "dram.bin"
    prog.write_bytes(isa.encode_program(step.program.instrs))
    (addr, data), = step.writes
    data.tofile(image)
    args = [a for k, v in enumerate(step.args) for a in ("--arg", f"{k}={v}")]
    cmd = ["sim", "run", str(prog), "-t", T, "--dram", f"{image}@{addr}", *args, "--json"]
    assert run_app(build_app(), "otpu", cmd) == 0
    report = json.loads(capsys.readouterr().out)
    p = _sim_profile(name)
    assert p["cycles"] == report["cycles"] and p["instructions"] == report["instructions"]
    busy = p["slices"][0]["busy"]
    assert {u: busy[u] for u in BUSY} == {u: report["counters"][c] for u, c in BUSY.items()}
    # every instruction that runs on a unit has a row: counted here from the executed stream
    m = Machine(load_target(T))
    seen = []
    m.on_step = lambda sid, pc, ins: seen.append(ins.unit != isa.Unit.SEQ)
    m.write_dram(addr, data)
    m.load(step.program.instrs, step.args)
    m.run()
    assert p["traced"] == sum(seen) and p["instrs"]["data"]["pc"].size == sum(seen)


def test_cycle_account_streams_and_roofline_check_out():
    p = _sim_profile("attention")
    s = p["slices"][0]
    assert sum(s["buckets"].values()) == p["cycles"]
    cols = p["instrs"]["data"]
    rows = p["programs"][0]["rows"]
    unit = np.array([rows[pc][3] for pc in cols["pc"]])
    mxu = unit == 1
    # the replayed DRAM queue gives each MM the wait its U record reports (two independent sources)
    t = load_target(T)
    m = Machine(t, trace=True)
    step = _step("attention")
    (addr, data), = step.writes
    m.write_dram(addr, data)
    m.load(step.program.instrs, step.args)
    m.run()
    from otpu_lens.records import decode
    dec = decode(m.trace_records(0))
    assert (cols["dsw"][mxu] == dec.bp[mxu]).all() and mxu.any()
    # roofline: bytes as the DRAM counters count them, MACs from the executed MM fields
    c = m.counters(0)
    macs = 0
    m2 = Machine(t)

    def count(sid, pc, ins):
        nonlocal macs
        if ins.op == isa.Op.MM:
            macs += ins["n"] * ins["kb"] * t.config().D * ins["m"]
    m2.on_step = count
    m2.write_dram(addr, data)
    m2.load(step.program.instrs, step.args)
    m2.run()
    roof = p["roofline"]
    bpc = t.uarch.DRAM_BYTES_PER_CYCLE * t.uarch.DRAM_EFFICIENCY
    assert roof["bytes"] == 64 * (c["DRAM_RD"] + c["DRAM_WR"]) and roof["macs"] == macs
    bound = max(roof["bytes"] / bpc, macs / (t.config().D * t.config().MCOLS))
    assert roof["efficiency"] == pytest.approx(bound / p["cycles"], rel=1e-12)
    assert roof["ridge"] == pytest.approx(t.config().D * t.config().MCOLS / bpc)
    # the source table covers every mapped instruction's busy cycles
    dur = cols["dur"]
    src = np.array([rows[pc][4] for pc in cols["pc"]])
    assert sum(r["busy"] for r in p["source_table"]) == int(dur[src >= 0].sum())


def test_a_card_run_matches_its_counters_and_the_timing_model(tmp_path):
    eng = recorder.CardEngine("sim:lensp", T, "first")
    try:
        hw = recorder.record(workloads.get("attention"), workloads.Context(eng.target, {}), eng, lambda *a: None)[0]
    finally:
        eng.close()
    board = hw["board"]["counters"]
    assert hw["kind"] == "hw" and hw["cycles"] == board["CYCLES"] and hw["instructions"] == board["ICOUNT"]
    assert {u: hw["slices"][0]["busy"][u] for u in ("DMA", "MXU", "QUANT", "VPU")} == \
        {u: board[BUSY[u]] for u in ("DMA", "MXU", "QUANT", "VPU")}
    assert hw["trace"]["complete"] and hw["trace"]["count"] == hw["trace"]["records"]
    sim = _sim_profile("attention")
    for k, v in sim["instrs"]["data"].items():
        assert (hw["instrs"]["data"][k] == v).all(), k


def _small_trace_target(tmp_path, depth: int) -> str:
    text = open("targets/sim-small.toml").read().replace("TRACE_DEPTH = 4096", f"TRACE_DEPTH = {depth}")
    path = tmp_path / "tiny-trace.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("keep", ["first", "last"])
def test_a_trace_that_does_not_fit_is_reported(keep, tmp_path):
    said = []
    eng = recorder.CardEngine(f"sim:wrap{keep}", _small_trace_target(tmp_path, 256), keep)
    try:
        p = recorder.record(workloads.get("attention"), workloads.Context(eng.target, {}), eng,
                            lambda level, text: said.append((level, text)))[0]
    finally:
        eng.close()
    tr = p["trace"]
    assert not tr["complete"] and p["traced"] < _sim_profile("attention")["traced"]
    warned = " ".join(t for lvl, t in said if lvl == "warn")
    if keep == "last":
        assert tr["wrapped"] and tr["lost"] == tr["count"] - 256 > 0 and "ring wrapped" in warned
    else:   # a card that stops when full counts only what it kept
        assert tr["full"] and tr["count"] == 256 and tr["traced_to"] < p["cycles"] - 1
        assert "buffer filled at 256 records" in warned
    assert p["cycles"] == p["board"]["counters"]["CYCLES"]        # the counters still tell the whole run


def test_a_bitstream_without_a_trace_gives_a_counters_only_profile():
    eng = recorder.CardEngine("sim:notrace", T, "first")
    eng.has_trace = False                       # as a register-map-1 or trace-less bitstream reports
    try:
        p = recorder.record(workloads.get("rmsnorm"), workloads.Context(eng.target, {}), eng, lambda *a: None)[0]
    finally:
        eng.close()
    assert p["kind"] == "board" and p["traced"] == 0 and p["instrs"]["data"]["pc"].size == 0
    assert p["slices"][0]["busy"]["VPU"] == p["board"]["counters"]["VPU_BUSY"] > 0
    assert any("no trace buffer" in n["text"] for n in p["notes"])


def test_program_sources_name_the_kernel_lines_and_survive_the_cache(tmp_path):
    from otpu_core import ol
    from otpu_core.kernels import softmax
    from otpu_core.ol.cache import cached_compile
    from otpu_core.ol.runtime import Image

    def kernel(x, out):
        ol.store(out, softmax(ol.load(x)))       # the line every instruction's chain ends at
    img = Image(T)
    x, out = img.tensor(np.ones((2, 40), np.float32)), img.tensor(shape=(2, 40))
    prog = ol.compile_kernel(kernel, T, x=x, out=out)
    here = kernel.__code__.co_firstlineno + 1
    vops = [s for ins, s in zip(prog.instrs, prog.sources) if ins.op == isa.Op.VOP]
    assert vops and all(s[-1][1] == here and s[-1][2] == "kernel" and s[0][0].endswith("kernels/softmax.py")
                        for s in vops)
    ld = prog.sources[0]
    assert prog.instrs[0].op == isa.Op.LD and ld == ((__file__, here, "kernel"),)
    assert prog.source_of(len(prog.instrs) - 1) == ()                  # the final HALT
    again = cached_compile(kernel, T, directory=tmp_path, x=x, out=out)
    again = cached_compile(kernel, T, directory=tmp_path, x=x, out=out)
    assert again.stats.cached and again.sources == prog.sources


def test_profile_columns_rebuild_the_absolute_times():
    p = _sim_profile("mlp")
    c = p["instrs"]["data"]
    ready = c["d"] + c["rdy"]
    start = ready + c["wait"]
    assert (np.diff(c["d"]) >= 0).all() and (c["rdy"] >= 0).all() and (c["wait"] >= 0).all() and (c["dur"] >= 0).all()
    assert int((start + c["dur"]).max()) < p["cycles"]
    assert set(profile_mod.INSTR_COLUMNS) == set(c)
