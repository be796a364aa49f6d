"""Thermal and power model: warms under load and cools idle (monotone, bounded, the closed-form
first-order response), TEMP and XADC encodings as the datasheet formulas, power as host.md 5.4."""
import json
import math

import numpy as np
import pytest

from otpu_core import target
from otpu_core.card import faults as F
from otpu_core.card import thermal as T

YPCB = target.load("ypcb-00338")
FULL = {**{u: 1.0 for u in T.ACTIVITY_UNITS}, T.DRAM_RATE_KEY: YPCB.uarch.DRAM_BYTES_PER_CYCLE * YPCB.core_hz}


def model(serial=1, spec=""):
    return T.Thermal(YPCB, serial, {}, F.parse(spec))


def celsius(code):
    return code * 503.975 / 4096 - 273.15          # host.md 1.2


def compare(got, want):
    got, want = np.asarray(got, float), np.asarray(want, float)
    return float(np.max(np.abs(got - want))), float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))


def test_power_at_full_load_is_the_reference_total():
    # host.md 5.4: report total 6.0 W with units summing to 2.95 W leaves fixed 3.05 W
    th = model()
    assert th.power_of({})["fpga_w"] == pytest.approx(3.05, abs=1e-12)
    assert th.power_of(FULL)["fpga_w"] == pytest.approx(6.0, abs=1e-12)
    half = th.power_of({"mxu": 0.5, "vpu": 2.0, "dma": -1})        # utilisations are clamped to 0..1
    assert half["fpga_w"] == pytest.approx(3.05 + 0.5 * 1.2 + 0.35, abs=1e-12)
    # the board input carries FPGA and DRAM through the regulators plus the board's own loads
    p = th.power_of(FULL)
    assert p["board_w"] == pytest.approx((6.0 + 2 * (0.9 + 1.1)) / 0.87 + 2.0, abs=1e-12)


def test_warms_under_load_monotone_bounded_and_first_order():
    th = model(serial=4)
    t0 = th.state["die_c"]
    p = th.power_of(FULL)
    ss = th.ambient_c + T.DIE_R * p["fpga_w"]
    times, got = np.arange(1, 121) * 5.0, []
    for _ in times:
        th.tick(5.0, FULL)
        got.append(th.die_c)
    assert all(b >= a for a, b in zip([t0] + got, got)) and max(got) <= ss
    want = ss + (t0 - ss) * np.exp(-times / T.DIE_TAU)      # closed form of dT/dt = (Tss - T) / tau
    maxabs, cos = compare(got, want)
    assert maxabs < 1e-9 and cos > 1 - 1e-12, (maxabs, cos)
    assert ss - got[-1] < 0.01 and got[-1] - t0 > 8


def test_cools_idle_monotone_and_bounded():
    th = model()
    th.tick(600, FULL)
    hot_die, hot_board = th.die_c, th.board_c
    idle_die = th.ambient_c + T.DIE_R * th.power_of({})["fpga_w"]
    idle_board = th.ambient_c + T.BOARD_R * th.power_of({})["board_w"]
    dies, boards = [], []
    for _ in range(100):
        th.tick(20, {})
        dies.append(th.die_c)
        boards.append(th.board_c)
    assert all(b <= a for a, b in zip([hot_die] + dies, dies)) and min(dies) >= idle_die
    assert all(b <= a for a, b in zip([hot_board] + boards, boards)) and min(boards) >= idle_board
    assert dies[-1] - idle_die < 0.01


def test_one_long_step_equals_many_short_ones():
    a, b = model(), model()
    a.tick(90, FULL)
    for _ in range(90):
        b.tick(1, FULL)
    assert abs(a.die_c - b.die_c) < 1e-9 and abs(a.board_c - b.board_c) < 1e-9
    with pytest.raises(ValueError):
        a.tick(-1, {})


def test_temp_register_and_xadc_decode_with_the_datasheet_formulas():
    th = model(serial=2)
    codes, temps = [], []
    for _ in range(8):
        th.tick(10, FULL)
        reg = th.temp_register()
        assert reg >> 31 == 1
        code = reg & 0xFFF
        assert th.read(T.XADC_TEMP) == code << 4
        codes.append(code * 503.975 / 4096 - 273.15)        # host.md 1.2
        temps.append(th.die_c)
    maxabs, cos = compare(codes, temps)
    assert maxabs <= 503.975 / 4096 / 2 + 1e-9 and cos > 0.99999, (maxabs, cos)
    vccint = (th.read(T.XADC_VCCINT) >> 4) * 3.0 / 4096       # XADC supply: V = code / 4096 x 3 V
    assert abs(vccint - th.rails()["vccint_v"]) <= 3.0 / 4096 / 2
    assert abs((th.read(T.XADC_VCCAUX) >> 4) * 3.0 / 4096 - 1.8) <= 3.0 / 4096
    assert th.read(T.XADC_SR) & T.SR_EOC


def test_xadc_min_max_and_reset():
    th = model()
    start = th.read(T.XADC_TEMP)
    th.tick(300, FULL)
    assert th.read(T.XADC_MAX_TEMP) == th.read(T.XADC_TEMP) > start
    th.tick(600, {})
    assert th.read(T.XADC_MAX_TEMP) > th.read(T.XADC_TEMP) and th.read(T.XADC_MIN_TEMP) <= start
    th.write(T.XADC_SRR, 0x1234)                     # wrong key: nothing happens
    assert th.read(T.XADC_MAX_TEMP) > th.read(T.XADC_TEMP)
    th.write(T.XADC_SRR, T.XADC_RESET_KEY)
    assert th.read(T.XADC_MAX_TEMP) == th.read(T.XADC_MIN_TEMP) == th.read(T.XADC_TEMP)


def test_hot_fault_floors_the_die_and_raises_the_alarms():
    th = model(spec="hot:c=95")
    assert th.die_c == 95.0 and abs(celsius(th.temp_register() & 0xFFF) - 95.0) < 0.07
    assert th.read(T.XADC_AOSR) == T.AOSR_ALM0 | T.AOSR_ANY          # above 85 C, below OT 125 C
    assert th.board_c > 64                                              # the LM73's default THIGH
    th.tick(1000, FULL)
    assert th.die_c == 95.0                                             # the model stays below the floor
    over = model(spec="hot:c=130")
    assert over.read(T.XADC_AOSR) & T.AOSR_OT
    cool = model()
    assert cool.read(T.XADC_AOSR) == 0
    # thresholds are writable: lower the temperature alarm below the idle temperature
    cool.write(T.XADC_ALM_TEMP_HI, round((30.0 + 273.15) * 4096 / 503.975) << 4)
    assert cool.read(T.XADC_AOSR) & T.AOSR_ALM0
    assert math.isclose(celsius(cool.read(T.XADC_ALM_TEMP_HI) >> 4), 30.0, abs_tol=0.07)


def test_state_is_json_and_two_serials_differ():
    th = model(serial=3)
    th.tick(30, FULL)
    again = T.Thermal(YPCB, 3, json.loads(json.dumps(th.state)), F.NO_FAULTS)
    assert again.die_c == th.die_c and again.read(T.XADC_MAX_TEMP) == th.read(T.XADC_MAX_TEMP)
    assert model(serial=1).ambient_c != model(serial=2).ambient_c
