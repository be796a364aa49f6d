"""Op-check programs: their golden results against hand and numpy references, the bit-exact
comparison, and every program on the simulated card against the golden simulator."""
from __future__ import annotations

import numpy as np
import pytest

from otpu_core import opchecks, target
from otpu_core.checks import CheckContext
from otpu_core.corechecks import device, programs

T = target.load("sim-small")
CFG = T.config()
IMAGE = opchecks.diag_image(CFG)
DATA = IMAGE[opchecks.DATA].view(np.float32)
CHECKS = {c.title: c for c in opchecks.op_checks(CFG, gen=True, waitw=True)}


def golden(title):
    return opchecks.run_golden(T, CHECKS[title], IMAGE)


def f32(b):
    return b.view(np.float32)


def test_titles_unique_and_groups_known():
    groups = {c.group for c in CHECKS.values()}
    assert groups == {"control", "dma", "mxu", "quant", "vpu", "vpu-reduce", "vpu-new", "vpu-composite", "vpu-edge",
                      "gen", "waitw", "collective"}
    assert len(CHECKS) == len(opchecks.op_checks(CFG, gen=True, waitw=True))
    assert not any(c.group in ("gen", "waitw") for c in opchecks.op_checks(CFG))


def test_dma_programs_copy_exactly():
    assert np.array_equal(golden("dma: LD/ST aligned"), IMAGE[opchecks.DATA][:1024])
    out = golden("dma: ST unaligned target")
    assert not out[:28].any() and np.array_equal(out[28:428], IMAGE[opchecks.DATA][:400])
    out = golden("dma: LD unaligned source")
    assert np.array_equal(out, IMAGE[opchecks.DATA][52:452])


def test_loops_by_hand():
    words = golden("control: LOOP").view(np.uint32)
    data = IMAGE[opchecks.DATA].view(np.uint32)
    assert words.tolist() == [data[0], data[4], data[8], data[12], data[16]]
    # 3 x 4 stores at r1 = 0,4,8,12 | 20,24,28,32 | 40,44,48,52 (bytes), each of TMEM word r1
    nested = golden("control: LOOP nested").view(np.uint32)
    want = np.zeros(15, np.uint32)
    for r1 in (0, 4, 8, 12, 20, 24, 28, 32, 40, 44, 48, 52):
        want[r1 // 4] = data[r1]
    assert np.array_equal(nested, want)
    assert np.array_equal(golden("control: LOOP count 0").view(np.uint32), data[:4])
    assert golden("control: LOOP count from a register").view(np.uint32).tolist() == [data[9]] * 7


@pytest.mark.parametrize("func,ref", [("ADD", np.add), ("SUB", np.subtract), ("MUL", np.multiply),
                                      ("MAX", np.maximum), ("MIN", np.minimum)])
def test_vpu_elementwise_against_numpy_float32(func, ref):
    a, b = DATA[:128].reshape(4, 32), DATA[128:256].reshape(4, 32)
    want = ref(a, b).astype(np.float32).ravel()
    got = f32(golden(f"vpu: {func} FULL"))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    scalar = f32(golden(f"vpu: {func} SCALAR")).reshape(4, 32)
    assert np.array_equal(scalar, ref(a, np.float32(1.75)).astype(np.float32))


def test_reductions_against_float64():
    a = DATA[:128].reshape(4, 32).astype(np.float64)
    got = f32(golden("vpu-reduce: RSUM")).astype(np.float64)
    want = a.sum(axis=1)
    err = np.abs(got - want).max()
    cos = got @ want / np.linalg.norm(got) / np.linalg.norm(want)
    assert err < 1e-5 * np.abs(a).sum() and cos > 1 - 1e-9, (err, cos)
    got = f32(golden("vpu-reduce: RSSQ")).astype(np.float64)
    want = (a * a).sum(axis=1)
    assert np.abs(got - want).max() < 1e-5 * want.max()
    assert np.array_equal(f32(golden("vpu-reduce: RMAX")), DATA[:128].reshape(4, 32).max(axis=1))


def test_compare_names_words_bits_and_lanes():
    want = np.arange(64, dtype=np.uint32).view(np.uint8)
    got = want.copy()
    assert opchecks.compare(got, want, 8).ok
    got.view(np.uint32)[11] ^= 1 << 7
    got.view(np.uint32)[19] ^= 1 << 7
    m = opchecks.compare(got, want, 8)
    assert (m.words, m.first, m.bits, m.vpu_lanes, m.main_lane) == (2, 44, 0x80, [3], 3)
    assert m.message(64) == "2 of 64 words differ from the golden simulator, first at OUT+0x2c (bits 0x00000080)"
    got.view(np.uint32)[20] ^= 1
    m = opchecks.compare(got, want, 8)
    assert m.lane_words == [0, 0, 0, 2, 1, 0, 0, 0] and m.main_lane == 3


def test_every_program_bit_exact_on_the_simulated_card(tmp_path, monkeypatch):
    monkeypatch.setenv("OTPU_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("OTPU_SIM_FAULTS", raising=False)
    ctx = CheckContext("sim:ops", {"target": "sim-small"})
    try:
        checks = list(CHECKS.values()) + [opchecks.demo_check(CFG), opchecks.masked_check(CFG),
                                          opchecks.stream_check(CFG)]
        bad = {c.title: programs.run_check(ctx, c) for c in checks}
        bad = {k: (v.error or v.mismatch.message(0)) for k, v in bad.items() if not v.ok}
        assert not bad
    finally:
        device.close(ctx)
