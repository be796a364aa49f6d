"""The check DAG and its two policies: diagnosis (run everything possible) and bring-up (stop at first failure)."""
import pytest

from otpu_core.checks import Check, CheckContext, Registry, Result, Status, run_all, run_one, run_stages, summary
from otpu_core.errors import DeviceBusy, UsageError


def _ok(msg="ok"):
    return lambda ctx: Result(Status.PASS, msg)


def _fail(msg="bad", hint="do this"):
    return lambda ctx: Result(Status.FAIL, msg, hint=hint)


def _registry(*checks):
    reg = Registry()
    for c in checks:
        reg.add(c)
    return reg


def test_diag_policy_skips_dependents_of_a_failure_and_runs_the_rest():
    reg = _registry(
        Check("platform", "ID register", _ok()),
        Check("platform", "calib 0", _fail(), needs=("ID register",)),
        Check("platform", "calib 1", _ok(), needs=("ID register",)),
        Check("mem", "ch0 data", _ok(), needs=("calib 0",)),
        Check("mem", "ch1 data", _ok(), needs=("calib 1",)),
        Check("mem", "interleave", _ok(), needs=("calib 0", "calib 1")),
    )
    rows = {r.name: r for r in run_all(reg, CheckContext("sim"))}
    assert rows["ch0 data"].status == Status.SKIP and rows["ch0 data"].message == "needs calib 0 (FAIL)"
    assert rows["interleave"].blocked_by == "calib 0"
    assert rows["ch1 data"].status == Status.PASS
    assert summary(rows.values()) == {"platform": {"PASS": 2, "WARN": 0, "FAIL": 1, "SKIP": 0, "INFO": 0},
                                      "mem": {"PASS": 1, "WARN": 0, "FAIL": 0, "SKIP": 2, "INFO": 0}}


def test_needs_run_first_even_when_registered_later():
    order = []
    def rec(name):
        return lambda ctx: (order.append(name), Result(Status.PASS))[1]
    reg = _registry(Check("b", "late", rec("late"), needs=("early",)), Check("a", "early", rec("early")))
    run_all(reg, CheckContext("sim"))
    assert order == ["early", "late"]


def test_only_sections_keeps_platform_and_prerequisites():
    reg = _registry(Check("platform", "ID", _ok()), Check("regs", "scratch", _ok(), needs=("ID",)),
                    Check("mem", "data", _ok(), needs=("ID",)))
    names = [r.name for r in run_all(reg, CheckContext("sim"), sections=["regs"])]
    assert names == ["ID", "scratch"]


def test_exception_becomes_fail_row_but_device_busy_propagates():
    def boom(ctx):
        raise ZeroDivisionError("x")
    reg = _registry(Check("s", "boom", boom))
    row = run_all(reg, CheckContext("sim"))[0]
    assert row.status == Status.FAIL and row.message == "the check itself failed: x" and row.data["traceback"]
    assert "ZeroDivisionError" not in row.message + (row.hint or "")
    def busy(ctx):
        raise DeviceBusy("busy: held by PID 1 (x)")
    with pytest.raises(DeviceBusy):
        run_all(_registry(Check("s", "busy", busy)), CheckContext("sim"))
    def bad_input(ctx):
        raise UsageError("--power-json p.json: not a power report")
    with pytest.raises(UsageError):       # an input error found while checking ends the run with exit 2
        run_all(_registry(Check("s", "input", bad_input)), CheckContext("sim"))


def test_a_vacuous_skip_lets_dependents_run_and_a_plain_skip_does_not():
    reg = _registry(Check("p", "scrub", lambda ctx: Result(Status.SKIP, "no ECC: nothing to do", vacuous=True)),
                    Check("p", "pins", lambda ctx: Result(Status.SKIP, "no I2C")),
                    Check("m", "data", _ok(), needs=("scrub",)), Check("i", "scan", _ok(), needs=("pins",)))
    rows = {r.name: r for r in run_all(reg, CheckContext("sim"))}
    assert rows["scrub"].status == Status.SKIP and rows["data"].status == Status.PASS
    assert rows["scan"].status == Status.SKIP and rows["scan"].blocked_by == "pins"


def test_exit_code_is_a_bit_mask_of_the_parts_that_failed():
    from otpu_core.checks import Row, exit_code
    def r(section, name, status=Status.FAIL):
        return Row(section, name, status, "", 0.0)
    assert exit_code([r("mem", "x", Status.PASS)]) == 0
    assert exit_code([r("mem", "channel 0 data bits")]) == 1 | 8
    assert exit_code([r("platform", "DDR3 calibration channel 1")]) == 1 | 8
    assert exit_code([r("isa", "vpu: ADD")]) == 1 | 16
    assert exit_code([r("isa", "vpu: ADD"), r("mem", "y"), r("platform", "ID register")]) == 1 | 4 | 8 | 16
    assert exit_code([r("i2c", "I2C pins"), r("model", "m")]) == 1 | 32 | 64


def test_stage_policy_stops_at_first_failure_and_tolerates_plain_skips():
    ran = []
    def rec(name, status=Status.PASS):
        return lambda ctx: (ran.append(name), Result(status, name))[1]
    reg = _registry(
        Check("platform", "link", rec("link"), stage="link"),
        Check("mem", "bandwidth", rec("bandwidth", Status.SKIP), stage="bandwidth"),
        Check("platform", "config", rec("config", Status.FAIL), stage="config", needs=("link",)),
        Check("mem", "pattern", rec("pattern"), stage="pattern", needs=("config",)),
    )
    rows, stopped = run_stages(reg, CheckContext("sim"), ["link", "bandwidth", "config", "pattern"])
    assert stopped == "config" and [r.name for r in rows] == ["link", "bandwidth", "config"]
    assert ran == ["link", "bandwidth", "config"]
    rows, stopped = run_stages(reg, CheckContext("sim"), ["link", "bandwidth"])
    assert stopped is None


def test_stage_policy_shows_a_failing_hidden_prerequisite():
    reg = _registry(Check("platform", "driver", _fail("no module")), Check("platform", "link", _ok(), stage="link", needs=("driver",)))
    rows, stopped = run_stages(reg, CheckContext("sim"), ["link"])
    assert stopped == "link" and rows[0].name == "driver" and rows[0].stage == "link"



def test_stage_policy_stops_where_a_skipped_prerequisite_blocks_a_stage():
    """A prerequisite that SKIPs (no sensor on this card) is no failure, but the check needing it
    cannot run: its stage stops the bring-up there."""
    ran = []
    def rec(name, status=Status.PASS):
        return lambda ctx: (ran.append(name), Result(status, name))[1]
    reg = _registry(Check("i2c", "sensor", rec("sensor", Status.SKIP), stage="i2c"),
                    Check("thermal", "temp", rec("temp"), stage="thermal", needs=("sensor",)),
                    Check("mem", "pattern", rec("pattern"), stage="pattern"))
    rows, stopped = run_stages(reg, CheckContext("sim"), ["i2c", "thermal", "pattern"])
    assert stopped == "thermal" and ran == ["sensor"]
    assert [(r.name, r.status, r.blocked_by) for r in rows] == [("sensor", Status.SKIP, None),
                                                                ("temp", Status.SKIP, "sensor")]


def test_a_check_whose_prerequisite_never_ran_is_skipped_not_run():
    ran = []
    check = Check("regs", "scratch", lambda ctx: (ran.append(1), Result(Status.PASS))[1], needs=("ID",))
    ctx = CheckContext("sim")
    row = run_one(check, ctx)
    assert (row.status, row.message, row.blocked_by, ran) == (Status.SKIP, "needs ID (not run)", "ID", [])
    assert ctx.rows["scratch"] is row

def test_device_kind_filters_checks():
    reg = _registry(Check("tt", "telemetry", _ok(), devices=("tt",)), Check("platform", "ID", _ok()))
    assert [r.name for r in run_all(reg, CheckContext("tt:sim"))] == ["telemetry"]
    assert [r.name for r in run_all(reg, CheckContext("sim"))] == ["ID"]


def test_graph_errors_are_usage_errors():
    reg = _registry(Check("s", "a", _ok(), needs=("b",)), Check("s", "b", _ok(), needs=("a",)))
    with pytest.raises(UsageError, match="cycle: a -> b -> a"):
        run_all(reg, CheckContext("sim"))
    with pytest.raises(UsageError, match="needs 'zz', which no plugin provides"):
        run_all(_registry(Check("s", "a", _ok(), needs=("zz",))), CheckContext("sim"))
    with pytest.raises(ValueError, match="two checks are named 'a'"):
        _registry(Check("s", "a", _ok()), Check("s", "a", _ok()))
