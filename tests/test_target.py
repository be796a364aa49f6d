"""Target descriptions: every shipped target loads, every validation rule fires with a clear message."""
import copy
import tomllib

import pytest

from otpu_core import target
from otpu_core.errors import TargetError

BASE = tomllib.loads((target.TARGETS_DIR / "ypcb-00338.toml").read_text())


def _dump(doc) -> str:
    lines = []
    for key in ("name", "description"):
        if key in doc:
            lines.append(f"{key} = {_val(doc[key])}")
    for layer, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{layer}]")
            lines += [f"{k} = {_val(v)}" for k, v in table.items()]
        elif layer not in ("name", "description"):
            lines.insert(0, f"{layer} = {_val(table)}")
    return "\n".join(lines) + "\n"


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return repr(v)


def _load_modified(tmp_path, mutate):
    doc = copy.deepcopy(BASE)
    mutate(doc)
    path = tmp_path / "t.toml"
    path.write_text(_dump(doc))
    return path, target.load(path)


def _error(tmp_path, mutate) -> str:
    with pytest.raises(TargetError) as e:
        _load_modified(tmp_path, mutate)
    assert e.value.exit_code == 2
    return str(e.value) + " " + (e.value.hint or "")


@pytest.mark.parametrize("name", ["ypcb-00338", "bcu1525", "nangate45-small", "nangate45-card", "sim-small"])
def test_shipped_targets_load(name):
    t = target.load(name)
    assert t.name == name
    cfg = t.config()
    assert cfg.D & (cfg.D - 1) == 0 and cfg.max_k == cfg.ACT_BLOCKS * cfg.D
    assert 0 <= t.arch_hash() < 2**32


def test_default_is_ypcb_and_env_selects(monkeypatch):
    t = target.default()
    assert t.name == "ypcb-00338"
    a = t.config()
    assert (a.D, a.MCOLS, a.LANES, a.ACT_BLOCKS, a.S) == (128, 4, 8, 128, 1)
    assert t.platform["channels"] * t.platform["channel_bytes"] == 4 << 30
    assert t.platform["core_mhz"] == 133.33
    monkeypatch.setenv("OTPU_TARGET", "sim-small")
    assert target.default().config().D == 32


def test_roundtrip_of_dump_is_identity(tmp_path):
    path, t = _load_modified(tmp_path, lambda d: None)
    assert t.arch == target.load("ypcb-00338").arch and t.uarch == target.load("ypcb-00338").uarch


def test_arch_hash_ignores_uarch_tech_platform(tmp_path):
    ref = target.load("ypcb-00338").arch_hash()
    def mutate(d):
        d["uarch"]["MXU_IMPL"] = 2
        d["uarch"]["DRAM_EFFICIENCY"] = 0.5
        d["uarch"]["CHASH"] = False
        d["tech"]["device"] = "other"
        d["platform"]["core_mhz"] = 100.0
    assert _load_modified(tmp_path, mutate)[1].arch_hash() == ref


@pytest.mark.parametrize("key,value", [("S", 2), ("D", 64), ("MCOLS", 8), ("LANES", 16), ("ACT_BLOCKS", 64),
                                       ("ACT_ROWS", 8), ("TMEM_WORDS", 32768), ("IMEM_WORDS", 16384),
                                       ("PAIR", True), ("DSTEP", True), ("STREAM", True), ("SEQ_WC", True)])
def test_arch_hash_changes_with_each_arch_field(key, value):
    cfg = target.load("ypcb-00338").config()
    assert target.arch_hash(cfg.replace(**{key: value})) != target.arch_hash(cfg)


def test_arch_hash_is_a_fixed_function():
    # an independent computation of the documented formula: sha256 of "KEY=int;..." in field order, low 4 bytes LE
    import hashlib
    cfg = target.load("sim-small").config()
    text = "S=1;D=32;MCOLS=4;LANES=8;ACT_BLOCKS=16;ACT_ROWS=0;TMEM_WORDS=16384;DRAM_BYTES=16777216;" \
           "IMEM_WORDS=8192;PAIR=1;DSTEP=1;STREAM=1;SEQ_WC=0"
    assert target.arch_hash(cfg) == int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


@pytest.mark.parametrize("layer,key,value,expect", [
    ("arch", "D", 48, "power of two from 16 to 256"),
    ("arch", "D", 512, "power of two from 16 to 256"),
    ("arch", "D", 8, "power of two from 16 to 256"),
    ("arch", "LANES", 12, "one of 4, 8, 16"),
    ("arch", "MCOLS", 3, "one of 1, 2, 4, 8"),
    ("arch", "S", 3, "one of 1, 2, 4, 8"),
    ("arch", "ACT_BLOCKS", 100, "power of two"),
    ("arch", "ACT_ROWS", 999, "from 0 to 256"),
    ("arch", "D", "128", "an integer"),
    ("arch", "PAIR", 1, "true or false"),
    ("uarch", "MXU_IMPL", 3, "one of 1, 2"),
    ("uarch", "TMEM_IMPL", 0, "one of 1, 2, 3"),
    ("uarch", "DRAM_EFFICIENCY", 1.5, "fraction from 0.1 to 1.0"),
    ("uarch", "CHASH", "yes", "true or false"),
    ("tech", "family", "tsmc", "one of 'generic', 'xilinx7', 'xilinxus', 'asic'"),
    ("platform", "memory", "DDR5", "one of"),
    ("platform", "core_mhz", -1.0, "positive"),
    ("platform", "host_link", "usb", "one of"),
])
def test_bad_values_name_file_layer_key_value_and_allowed(tmp_path, layer, key, value, expect):
    msg = _error(tmp_path, lambda d: d[layer].__setitem__(key, value))
    assert str(tmp_path / "t.toml") in msg
    assert f"[{layer}] {key} = {value!r}" in msg
    assert expect in msg


def test_unknown_key_names_allowed_keys(tmp_path):
    msg = _error(tmp_path, lambda d: d["arch"].__setitem__("DD", 128))
    assert "[arch] unknown key 'DD'" in msg and "MCOLS" in msg


def test_unknown_layer(tmp_path):
    msg = _error(tmp_path, lambda d: d.__setitem__("board", {"x": 1}))
    assert "unknown top-level key 'board'" in msg and "platform" in msg


def test_missing_key_and_layer(tmp_path):
    assert "[arch] missing key 'LANES'" in _error(tmp_path, lambda d: d["arch"].pop("LANES"))
    assert "missing layer [uarch]" in _error(tmp_path, lambda d: d.pop("uarch"))


@pytest.mark.parametrize("feature", ["DSTEP", "STREAM"])
def test_lanes16_with_stream_engine_is_refused_with_reason(tmp_path, feature):
    def mutate(d):
        d["arch"]["LANES"] = 16
        d["arch"][feature] = True
    msg = _error(tmp_path, mutate)
    assert f"{feature} = true with LANES = 16" in msg and "no stream engine" in msg


def test_lanes16_without_stream_engine_is_fine(tmp_path):
    assert _load_modified(tmp_path, lambda d: d["arch"].__setitem__("LANES", 16))[1].config().LANES == 16


def test_act_rows_below_mcols_refused(tmp_path):
    assert "ACT_ROWS = 2: must be 0 or at least MCOLS (4)" in _error(tmp_path, lambda d: d["arch"].__setitem__("ACT_ROWS", 2))


def test_dram_must_match_platform_memory(tmp_path):
    msg = _error(tmp_path, lambda d: d["platform"].__setitem__("channel_bytes", 1 << 30))
    assert "DRAM_BYTES = 4294967296" in msg and "channels x channel_bytes / S = 2147483648" in msg


def test_unknown_target_and_missing_file(tmp_path):
    with pytest.raises(TargetError, match="unknown target 'nope'") as e:
        target.load("nope")
    assert "ypcb-00338" in e.value.hint
    with pytest.raises(TargetError, match="does not exist"):
        target.load(tmp_path / "absent.toml")


def test_invalid_toml_names_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[arch\nD = 1")
    with pytest.raises(TargetError, match="bad.toml: not valid TOML"):
        target.load(p)


def test_sim_uarch_and_rtl_params_carry_both_layers():
    t = target.load("ypcb-00338")
    su = t.sim_uarch()
    assert su["D"] == 128 and su["FIFO_DEPTH"] == 1024
    rp = t.rtl_params()
    assert rp["TECH"] == "xilinx7" and rp["CFG_HASH"] == t.arch_hash() and rp["CORE_MHZ"] == 133.33
