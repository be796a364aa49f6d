"""Fault spec parsing (every kind, every error) and the memory-fault helpers against hand-made references."""
import numpy as np
import pytest

from otpu_core import target
from otpu_core.card import faults as F
from otpu_core.errors import UsageError

EVERY_KIND = ("link_down;stuck_dq:ch=1,bit=44,val=0;addr_alias:ch=0,bit=20;no_calib:ch=1;hang;vpu_lane:lane=3,bit=7;hot:c=95;"
              "dq_slip:ch=0,bit=13,off=2;i2c_stuck:bus=1,line=0;i2c_pullup:bus=0;i2c_nack:bus=1,addr=64")


def test_every_kind_parses_with_typed_params():
    fs = F.parse(EVERY_KIND)
    assert [f.kind for f in fs] == ["link_down", "stuck_dq", "addr_alias", "no_calib", "hang", "vpu_lane", "hot",
                                    "dq_slip", "i2c_stuck", "i2c_pullup", "i2c_nack"]
    assert set(f.kind for f in fs) == set(F.KINDS)
    assert fs.get("stuck_dq")[0].params == {"ch": 1, "bit": 44, "val": 0}
    assert fs.get("addr_alias")[0]["bit"] == 20
    assert fs.get("vpu_lane")[0].params == {"lane": 3, "bit": 7}
    hot = fs.get("hot")[0]["c"]
    assert isinstance(hot, float) and hot == 95.0
    assert fs.get("hang")[0].params == {} and fs.has("link_down")
    assert fs.on_channel("no_calib", 1) and not fs.on_channel("no_calib", 0)


def test_round_trip_and_canonical_key_order():
    fs = F.parse(EVERY_KIND)
    assert str(fs) == EVERY_KIND
    assert F.parse(str(fs)) == fs
    messy = F.parse(" stuck_dq: val=1 , bit=0x2c, ch=0 ;; hot:c=87.5; ")
    assert str(messy) == "stuck_dq:ch=0,bit=44,val=1;hot:c=87.5"
    assert F.parse(str(messy)) == messy
    assert not F.parse("") and not F.parse(None) and str(F.parse("")) == ""


def test_get_of_unknown_kind_names_the_known_ones():
    with pytest.raises(KeyError, match="known: link_down"):
        F.parse("hang").get("overheat")


@pytest.mark.parametrize("spec, message, hint", [
    ("overheat", "unknown fault kind 'overheat'", "known kinds: link_down, stuck_dq, addr_alias, no_calib, hang, vpu_lane, hot, dq_slip, i2c_stuck, i2c_pullup, i2c_nack"),
    ("stuck_dq", "fault 'stuck_dq': missing keys ch, bit, val", "stuck_dq:ch=...,bit=...,val=..."),
    ("stuck_dq:ch=0,bit=3", "fault 'stuck_dq': missing key val", None),
    ("stuck_dq:ch=0,bit=3,val=1,lane=2", "fault 'stuck_dq': unknown key 'lane'", "keys of stuck_dq: ch, bit, val"),
    ("stuck_dq:ch=0,ch=1,bit=3,val=1", "fault 'stuck_dq': key 'ch' given twice", None),
    ("stuck_dq:ch=0,bit,val=1", "fault 'stuck_dq': 'bit' is not key=value", "keys of stuck_dq"),
    ("stuck_dq:ch=x,bit=1,val=1", "fault 'stuck_dq': ch=x: 'x' is not an integer (DRAM channel)", None),
    ("stuck_dq:ch=0,bit=72,val=1", "fault 'stuck_dq': bit=72: 72 is outside 0..71", None),
    ("stuck_dq:ch=0,bit=1,val=2", "fault 'stuck_dq': val=2: 2 is outside 0..1", None),
    ("addr_alias:ch=0,bit=2", "fault 'addr_alias': bit=2: 2 is outside 3..40", None),
    ("addr_alias:ch=0", "fault 'addr_alias': missing key bit", None),
    ("no_calib", "fault 'no_calib': missing key ch", None),
    ("no_calib:ch=-1", "fault 'no_calib': ch=-1: -1 is outside 0..15", None),
    ("hang:now=1", "fault 'hang' takes no keys, got 'now=1'", None),
    ("link_down:x", "fault 'link_down' takes no keys, got 'x'", None),
    ("vpu_lane:lane=3,bit=32", "fault 'vpu_lane': bit=32: 32 is outside 0..31", None),
    ("vpu_lane:bit=3", "fault 'vpu_lane': missing key lane", None),
    ("hot:c=hot", "fault 'hot': c=hot: 'hot' is not a number (degrees Celsius)", None),
    ("hot:c=500", "fault 'hot': c=500: 500 is outside -40..200", None),
    ("hang;hang", "fault 'hang' given twice", None),
])
def test_every_error_message(spec, message, hint):
    with pytest.raises(UsageError) as e:
        F.parse(spec)
    assert e.value.message.startswith(message)
    assert e.value.exit_code == 2
    if hint is not None:
        assert hint in (e.value.hint or "")


def test_from_env_reads_the_variable_and_names_it_in_errors():
    assert F.from_env({}) == F.NO_FAULTS
    assert str(F.from_env({F.ENV_VAR: "hang;hot:c=90"})) == "hang;hot:c=90"
    with pytest.raises(UsageError, match=r"^OTPU_SIM_FAULTS: unknown fault kind 'bogus'"):
        F.from_env({F.ENV_VAR: "bogus"})


def test_validate_against_target_memory():
    small = target.load("sim-small")             # 2 channels of 8 MiB: address bits 0..22
    F.parse("addr_alias:ch=1,bit=22").validate(small)
    with pytest.raises(UsageError, match=r"ch=2 but target sim-small has 2 channels \(0\.\.1\)"):
        F.parse("no_calib:ch=2").validate(small)
    with pytest.raises(UsageError, match="bit=23 is not an address line of a 8388608-byte channel"):
        F.parse("addr_alias:ch=0,bit=23").validate(small)


def _stuck_reference(data: np.ndarray, addr: int, bit: int, val: int) -> np.ndarray:
    """Bit by bit: DQ `bit` is bit bit%8 of every byte whose address is bit//8 mod 8."""
    out = data.copy()
    for i in range(out.size):
        if (addr + i) % 8 == bit // 8:
            if val:
                out[i] |= 1 << (bit % 8)
            else:
                out[i] &= 0xFF ^ (1 << (bit % 8))
    return out


@pytest.mark.parametrize("addr, bit, val", [(0, 44, 0), (3, 44, 1), (13, 7, 1), (64, 63, 0), (5, 0, 1)])
def test_stuck_dq_forces_exactly_one_bit_lane(addr, bit, val):
    rng = np.random.default_rng(bit * 7 + addr)
    data = rng.integers(0, 256, 203, dtype=np.uint8)
    want = _stuck_reference(data, addr, bit, val)
    got = F.apply_stuck_dq(F.parse(f"stuck_dq:ch=1,bit={bit},val={val}"), 1, addr, data.copy())
    assert np.array_equal(got, want)
    changed = np.flatnonzero(got != data)
    assert all((addr + i) % 8 == bit // 8 for i in changed)
    # another channel and ECC-lane bits leave data alone
    assert np.array_equal(F.apply_stuck_dq(F.parse(f"stuck_dq:ch=1,bit={bit},val={val}"), 0, addr, data.copy()), data)
    assert np.array_equal(F.apply_stuck_dq(F.parse("stuck_dq:ch=1,bit=70,val=1"), 1, addr, data.copy()), data)


def test_address_alias_segments_and_classes_agree_with_per_byte_mapping():
    fs = F.parse("addr_alias:ch=0,bit=6;addr_alias:ch=0,bit=9")
    addr, n = 1000, 1500
    per_byte = np.array([(a & ~((1 << 6) | (1 << 9))) for a in range(addr, addr + n)])
    assert F.alias_mask(fs, 0) == 0x240 and F.alias_mask(fs, 1) == 0
    assert sorted(F.alias_class(0x240)) == [0, 0x40, 0x200, 0x240] and F.alias_class(0) == [0]
    rebuilt = np.empty(n, np.int64)
    pieces = F.alias_segments(fs, 0, addr, n)
    for pos, cell, length in pieces:
        rebuilt[pos:pos + length] = cell + np.arange(length)
    assert np.array_equal(rebuilt, per_byte)
    assert sum(p[2] for p in pieces) == n
    assert F.alias_segments(fs, 1, addr, n) == [(0, addr, n)]
    assert F.alias_address(fs, 0, 0x2C0) == 0x080


from hypothesis import given, settings, strategies as st  # noqa: E402


def _fault_strategy():
    def one(kind):
        spec = F.KINDS[kind]
        keys = {k: (st.integers(int(v.lo), int(v.hi)) if v.typ is int
                    else st.floats(v.lo, v.hi, allow_nan=False).map(lambda x: round(x, 3)))
                for k, v in spec.keys.items()}
        return st.fixed_dictionaries(keys).map(lambda p: F.Fault(kind, p))
    return st.sampled_from(sorted(F.KINDS)).flatmap(one)


@settings(max_examples=200, deadline=None)
@given(st.lists(_fault_strategy(), max_size=6, unique_by=str))
def test_any_fault_set_round_trips_through_its_spec(faults):
    fs = F.FaultSet(faults)
    again = F.parse(str(fs))
    assert again == fs and str(again) == str(fs)
    assert [f.params for f in again] == [dict(f.params) for f in faults]
