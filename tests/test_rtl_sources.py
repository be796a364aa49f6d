"""target.sources() against rtl/ on disk and what the RTL can be built for (no Verilator needed)."""
import re

import pytest

from otpu_core import rtlbackend, rtlsim, target
from otpu_core.errors import TargetError


def test_sources_are_the_rtl_files_on_disk_in_build_order():
    t = target.load("nangate45-small")
    srcs = t.sources()
    on_disk = sorted(p for p in rtlsim.RTL_DIR.rglob("*.sv*") if p.parent.name != "tb")
    assert sorted(srcs) == on_disk, "every RTL file is listed once, and every listed file exists"
    names = [p.name for p in srcs]
    assert names[:2] == ["otpu_fp_funcs.svh", "otpu_defs.svh"], "the included headers come first"
    assert names[-1] == "otpu_core.sv", "the slice top comes last"
    defined = {}
    for i, p in enumerate(srcs):
        for mod in re.findall(r"^\s*module\s+(\w+)", p.read_text(), re.M):
            defined[mod] = i
    for i, p in enumerate(srcs):      # every unit a file instantiates comes from an earlier file
        for mod in re.findall(r"^\s*(otpu_\w+)\s+(?:#\(|u_\w+\s*\()", p.read_text(), re.M):
            assert defined[mod] < i, f"{p.name} instantiates {mod}, listed later"


def test_the_build_reads_exactly_the_listed_sources():
    t = target.load("nangate45-small")
    tb = rtlbackend.tb_sources(t)
    assert tb[: len(t.sources())] == t.sources()
    assert [p.name for p in tb[len(t.sources()):]] == ["otpu_dram_model.sv", "otpu_tb.sv"]
    params = rtlbackend.tb_params(t)
    core = (rtlsim.RTL_DIR / "core" / "otpu_core.sv").read_text()
    for name in target.RTL_CORE_PARAMS:
        assert f"parameter int {name} " in core, name
        assert params[name] == int(t.rtl_params()[name])
    assert params["DRAM_RATE_Q8"] == round(32 * 0.8 * 256) and params["SEQ_WC"] == 1


def test_build_key_changes_with_sources_params_defines_flags_and_version(tmp_path):
    src = tmp_path / "a.sv"
    src.write_text("module a; endmodule\n")
    base = rtlsim.build_key("a", [src], {"D": 32}, {}, ("--binary",), "Verilator 5.006")
    assert base == rtlsim.build_key("a", [src], {"D": 32}, {}, ("--binary",), "Verilator 5.006")
    others = [rtlsim.build_key("a", [src], {"D": 64}, {}, ("--binary",), "Verilator 5.006"),
              rtlsim.build_key("a", [src], {"D": 32}, {"X": 1}, ("--binary",), "Verilator 5.006"),
              rtlsim.build_key("a", [src], {"D": 32}, {}, ("--binary", "-O3"), "Verilator 5.006"),
              rtlsim.build_key("a", [src], {"D": 32}, {}, ("--binary",), "Verilator 5.020")]
    src.write_text("module a; wire w; endmodule\n")
    others.append(rtlsim.build_key("a", [src], {"D": 32}, {}, ("--binary",), "Verilator 5.006"))
    assert len({base, *others}) == 6


@pytest.mark.parametrize("name,missing", [("sim-small", "general STREAM"), ("bcu1525", "S > 1")])
def test_targets_beyond_the_rtl_are_refused_naming_what_is_missing(name, missing):
    with pytest.raises(TargetError) as e:
        target.check_rtl_buildable(target.load(name))
    assert missing in e.value.message and "nangate45-small" in (e.value.hint or "")
    assert "PAIR" not in e.value.message            # column reuse is in the RTL (sim-small has it)


def test_rtl_targets():
    for name in ("nangate45-small", "nangate45-pair", "nangate45-stream", "nangate45-card", "ypcb-00338"):
        target.check_rtl_buildable(target.load(name))
    stream = rtlbackend.tb_params(target.load("nangate45-stream"))
    assert stream["STREAM"] == 1 and all(p["STREAM"] == 0 for p in (rtlbackend.tb_params(target.load(n))
                                                                       for n in ("nangate45-small", "nangate45-pair")))
    assert "STREAM" not in " ".join(target.rtl_missing(target.load("nangate45-stream")))
    pair, small = (rtlbackend.tb_params(target.load(n)) for n in ("nangate45-pair", "nangate45-small"))
    assert (pair["PAIR"], pair["MCOLS"], small["PAIR"]) == (1, 4, 0)
    assert {k: v for k, v in pair.items() if k not in ("PAIR", "MCOLS")} == \
        {k: v for k, v in small.items() if k not in ("PAIR", "MCOLS")}


@pytest.mark.parametrize("text,words", [("", "program has no instructions"), ("bogus op\n", "unknown mnemonic")])
def test_rtl_run_refuses_a_bad_program_before_building(text, words, tmp_path, monkeypatch, capsys):
    from otpu_core.cli import build_app, run_app
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))     # a cold cache: a build would take minutes
    prog = tmp_path / "p.s"
    prog.write_text(text)
    assert run_app(build_app(), "otpu", ["rtl", "run", str(prog)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(prog) in err and not (tmp_path / "cache").exists()
