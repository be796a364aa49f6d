"""Coordinates from the harvesting mask, and the guard that refuses anything that is not a live tile."""
import pytest
from hypothesis import given, settings, strategies as st

from otpu_core.errors import UsageError
from otpu_core.tt import consts as K
from otpu_core.tt.coords import TileMap, parse_xy, tensix_translation
from otpu_core.tt.noc import check_address


def mask_without(*noc0_xs):
    return 0x3FFF & ~sum(1 << K.PHYS_COL_X.index(x) for x in noc0_xs)


def test_reference_example_soft_harvested_p150a():
    # NOC0 columns 7 and 10 off: translated 1..6 -> 1..6, 7 -> 11, 10..14 -> 12..16, 15 -> 10, 16 -> 7.
    table, dead = tensix_translation(mask_without(7, 10))
    assert [table[x] for x in (1, 2, 3, 4, 5, 6)] == [1, 2, 3, 4, 5, 6]
    assert table[7] == 11 and [table[x] for x in (10, 11, 12, 13, 14)] == [12, 13, 14, 15, 16]
    assert table[15] == 10 and table[16] == 7 and sorted(dead) == [15, 16]


@pytest.mark.parametrize("dead", [(7, 10), (1, 16), (2, 13), (5, 12)])
def test_live_translated_tensix_are_always_the_same_120(dead):
    tiles = TileMap(mask_without(*dead))
    assert len(tiles.tensix) == 120
    assert tiles.tensix_columns == [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14]
    assert sorted(tiles.harvested_noc0_x) == sorted(dead)
    # each live translated tile maps to a distinct live NOC0 column
    assert sorted({t.noc0[0] for t in tiles.tensix}) == sorted(set(K.PHYS_COL_X) - set(dead))


def test_from_telemetry_uses_the_tags():
    values = {K.TAGS["ENABLED_TENSIX_COL"]: mask_without(7, 10), K.TAGS["ENABLED_GDDR"]: 0xFF, K.TAGS["NOC_TRANSLATION"]: 1}
    tiles = TileMap.from_telemetry(values)
    assert tiles.tile("tensix", 7, 2).noc0 == (11, 2)
    assert tiles.dram(5, 1).x == 18 and tiles.dram(5, 1).y == 16 and tiles.dram(5, 1).index == 5
    with pytest.raises(UsageError):
        TileMap.from_telemetry({})


def test_guard_names_x_y_and_why():
    tiles = TileMap(mask_without(7, 10))
    with pytest.raises(UsageError) as e:
        tiles.tile("tensix", 15, 3)
    assert "x=15, y=3" in e.value.message and "harvested" in e.value.message
    with pytest.raises(UsageError) as e:
        tiles.tile("tensix", 8, 3)
    assert "x=8, y=3" in e.value.message and "not a Tensix" in e.value.message
    with pytest.raises(UsageError):
        tiles.tile("tensix", 1, 12)
    with pytest.raises(UsageError):
        tiles.tile("arc", 8, 1)
    with pytest.raises(UsageError):
        tiles.tile("dram", 17, 24)
    assert tiles.tile("arc", 8, 0) is tiles.arc


def test_address_guard():
    tiles = TileMap(mask_without(7, 10))
    t = tiles.tile("tensix", 1, 2)
    check_address(t, 0, K.L1_BYTES)
    check_address(t, K.SOFT_RESET_0, 4)
    with pytest.raises(UsageError, match="private memory"):
        check_address(t, 0xFFB00000, 4)
    with pytest.raises(UsageError, match="private memory"):
        check_address(t, 0xFFB14000, 4)
    with pytest.raises(UsageError):
        check_address(t, K.L1_BYTES - 4, 8)          # runs past L1
    with pytest.raises(UsageError, match="32-bit"):
        check_address(t, K.SOFT_RESET_0, 8)
    with pytest.raises(UsageError):
        check_address(tiles.arc, 0x20000000, 4)
    # tt-metal tt_metal/soc_descriptors/blackhole_140_arch.yaml: dram_bank_size 4278190080 (tt-metal #9144)
    check_address(tiles.dram(0), 4278190080 - 64, 64)
    with pytest.raises(UsageError, match="top 16 MiB"):
        check_address(tiles.dram(0), 4278190080 - 4, 8)
    with pytest.raises(UsageError):
        check_address(tiles.dram(0), (4 << 30) - 64, 64)


def test_parse_xy():
    assert parse_xy("3,4") == (3, 4) and parse_xy("0x3,4") == (3, 4)
    with pytest.raises(UsageError):
        parse_xy("3")


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 13), min_size=0, max_size=4))
def test_translation_is_a_bijection_keeping_noc0_order(harvested_phys):
    mask = 0x3FFF & ~sum(1 << i for i in harvested_phys)
    table, dead = tensix_translation(mask)
    assert sorted(table) == sorted(K.TRANSLATED_TENSIX_X) and sorted(table.values()) == sorted(K.PHYS_COL_X)
    live = [x for x in K.TRANSLATED_TENSIX_X if x not in dead]
    assert live == list(K.TRANSLATED_TENSIX_X[:14 - len(harvested_phys)])
    assert [table[x] for x in live] == sorted(table[x] for x in live)      # ascending NOC0 x
    assert sorted(table[x] for x in dead) == sorted(K.PHYS_COL_X[i] for i in harvested_phys)


def test_every_tile_answers_with_its_own_translated_node_id():
    from otpu_core.tt.card import Card
    with Card("tt:sim:ids") as card:
        for t in card.tiles.tensix:
            node = card.noc.read32(t, K.NIU0_BASE + K.NOC_ID_TRANSLATED)
            raw = card.noc.read32(t, K.NIU0_BASE + K.NOC_NODE_ID)
            assert (node & 0x3F, node >> 6) == (t.x, t.y) and (raw & 0x3F, raw >> 6) == t.noc0
