"""Helpers of the RTL tests: Verilator present (a failure under OTPU_CI, a skip elsewhere) and one
RtlBackend per session (the build cache and its flock share one build across xdist workers)."""
import os

import pytest

from otpu_core import rtlsim

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
