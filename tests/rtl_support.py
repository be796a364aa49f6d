"""Helpers of the RTL tests: Verilator present (a failure under OTPU_CI, a skip elsewhere), one
RtlBackend per session (the build cache and its flock share one build across xdist workers), and
every kernel case of the library run on a backend against the golden simulator."""
import os

import pytest

from otpu_core import rtlcases, rtlsim
from otpu_core.rtlcheck import compare_case

TARGET = "nangate45-small"


def require_verilator() -> None:
    if rtlsim.available():
        return
    why = f"Verilator 5 is not installed ({rtlsim.INSTALL_HINT})"
    if os.environ.get("OTPU_CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def rtl_backend():
    require_verilator()
    from otpu_core.rtlbackend import RtlBackend
    return RtlBackend(TARGET, max_cycles=5_000_000)


def compare_kernels(be) -> dict:
    """{case name: (Comparison, the run's testbench statistics)} for every kernel case of the
    backend's target on `be`."""
    out = {}
    for case in rtlcases.kernel_cases(be.target.name):
        out[case.name] = (compare_case(be, case), dict(be.last))
    return out

