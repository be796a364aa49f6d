"""RTL cycle counts against the timing model, the specification, on every kernel of the library
(nangate45-small): each case runs bit-exact and lands within 5% of the model's cycles. The counts of
both are deterministic (a function of the program and the state), so the band is a property of the
design, not a timing of the test machine. The ratios are printed by the slow kernel test of
test_rtl_machine.py and tabled in docs/rtl.md."""
import pytest

from otpu_core import rtlcases
from otpu_core.rtlcheck import compare_case
from rtl_support import TARGET, rtl_backend  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow      # it needs a Verilator build of the machine: minutes on a cold cache

BAND = 0.05


@pytest.mark.parametrize("name", [c.name for c in rtlcases.kernel_cases(TARGET)])
def test_rtl_cycles_are_within_5_percent_of_the_timing_model(rtl_backend, name):
    case = next(c for c in rtlcases.kernel_cases(TARGET) if c.name == name)
    r = compare_case(rtl_backend, case)
    assert r.ok, r.message()
    assert abs(r.ratio - 1) <= BAND, f"{name}: RTL {r.rtl_cycles} cycles, model {r.model_cycles} (ratio {r.ratio:.3f})"
