"""Helpers of the RTL tests: Verilator present (a failure under OTPU_CI, a skip elsewhere), one
RtlBackend per session (the build cache and its flock share one build across xdist workers), and
every kernel case of the library and every ISA op check run on a backend against the golden simulator."""
import os

import pytest

from otpu_core import opchecks, rtlcases, rtlsim
from otpu_core.rtlcheck import compare_case, compare_run, reset_state

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


def compare_op_checks(be) -> tuple[dict, list]:
    """({title: Comparison} for every op check of selftest/diag on `be`, each from the diag image;
    the titles of the checks the target cannot run: the PAIR one without column reuse)."""
    image = opchecks.diag_image(be.cfg)
    checks = opchecks.op_checks(be.cfg, gen=True, waitw=True) + [opchecks.demo_check(be.cfg),
                                                                 opchecks.masked_check(be.cfg)]
    results, refused = {}, []
    for check in checks:
        if "pair" in check.caps and not be.cfg.PAIR:
            refused.append(check.title)
            continue
        reset_state(be)
        for addr, data in image.items():
            be.write(addr, data)
        results[check.title] = compare_run(be, list(check.program))
    return results, refused
