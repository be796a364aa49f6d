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


# ---- the firmware's order (tt-zephyr-platforms lib/tenstorrent/bh_arc/noc_init.c) --------------

KTENSIX_ETH_NOC0_X = [1, 16, 2, 15, 3, 14, 4, 13, 5, 12, 6, 11, 7, 10]      # kTensixEthNoc0X
KGDDR_Y = [[0, 1, 11], [2, 10, 3], [9, 4, 8], [5, 7, 6]]                     # kGddrY


def firmware_tables(bad_tensix_cols: int, bad_gddr: int | None):
    """ComputeNocTranslation's x/y tables, transcribed loop by loop (bit popping as the C does)."""
    tx, ty = list(range(32)), list(range(32))
    good = (0b11111110 | 0b11111110000000000) & ~sum(1 << KTENSIX_ETH_NOC0_X[i] for i in range(14) if bad_tensix_cols >> i & 1)
    for noc_x in list(range(1, 8)) + list(range(10, 17)):
        if good:
            lsb = good & -good
            good &= ~lsb
            tx[noc_x] = lsb.bit_length() - 1
    bad = bad_tensix_cols
    for noc_x in range(16, 9, -1):
        if bad:
            lsb = bad & -bad
            bad &= ~lsb
            tx[noc_x] = KTENSIX_ETH_NOC0_X[lsb.bit_length() - 1]
    no_bad = bad_gddr is None
    tx[17], tx[18] = (0, 9) if no_bad or bad_gddr >= 4 else (9, 0)
    order = [0, 1, 2, 3]
    if not no_bad:
        row = bad_gddr % 4
        order = order[:row] + order[row + 1:] + [row]
    for g in range(4):
        ty[12 + 3 * g:15 + 3 * g] = KGDDR_Y[order[g]]
    return tx, ty


@pytest.mark.parametrize("bad", [(0, 1), (12, 13), (1, 2), (3, 13), (0, 13), (6,), (5, 6, 7)])
def test_harvested_columns_take_translated_x_lowest_physical_index_first(bad):
    mask = 0x3FFF & ~sum(1 << i for i in bad)
    tx, _ = firmware_tables(sum(1 << i for i in bad), None)
    table, dead = tensix_translation(mask)
    assert table == {x: tx[x] for x in K.TRANSLATED_TENSIX_X}
    assert tx[16] == K.PHYS_COL_X[min(bad)]             # translated 16 is the lowest harvested index
    tiles = TileMap(mask)
    assert tiles.harvested_x == sorted(dead) and tiles.harvested_noc0_x == [tx[x] for x in tiles.harvested_x]


@pytest.mark.parametrize("bad_gddr", [None, 0, 1, 3, 4, 5, 7])
def test_dram_tiles_move_as_the_firmware_moves_a_harvested_bank(bad_gddr):
    tx, ty = firmware_tables(0b11 << 12, bad_gddr)
    gddr = 0xFF if bad_gddr is None else 0xFF & ~(1 << bad_gddr)
    tiles = TileMap(0x3FF, gddr)
    for bank in range(8):
        for port in range(3):
            if bank == bad_gddr:
                with pytest.raises(UsageError, match="harvested"):
                    tiles.dram(bank, port)
                continue
            t = tiles.dram(bank, port)
            # the firmware's tables take the tile's translated coordinates back to the bank's NOC0 tile
            assert (tx[t.x], ty[t.y]) == t.noc0 == ((0, 9)[bank // 4], KGDDR_Y[bank % 4][port])


def test_p100a_example_by_hand():
    # bank 1 (west) harvested: the west column moves to translated x 18, and row 1 (banks 1 and 5)
    # to the end: bank 0 y 12, bank 2 y 15, bank 3 y 18, east bank 5 at (17, 21) (tt-umd agrees)
    tiles = TileMap(0x3FF, 0xFD)
    assert [(tiles.dram(b).x, tiles.dram(b).y) for b in (0, 2, 3, 4, 5, 6, 7)] == \
        [(18, 12), (18, 15), (18, 18), (17, 12), (17, 21), (17, 15), (17, 18)]


def test_the_simulated_chip_programs_the_same_tables():
    from otpu_core.tt.simchip import translation_tables
    for bad in [(0, 1), (2, 9), (4,)]:
        cols = sum(1 << i for i in bad)
        for bad_gddr in (None, 2, 6):
            gddr = 0xFF if bad_gddr is None else 0xFF & ~(1 << bad_gddr)
            assert translation_tables(0x3FFF & ~cols, gddr, 2) == tuple(
                t[:19] + [2] + t[20:] if i == 0 else t[:24] + [0] + t[25:]
                for i, t in enumerate(firmware_tables(cols, bad_gddr)))
