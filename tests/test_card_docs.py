"""docs/card.md carries the register table generated from card/regs.py, unchanged."""
from pathlib import Path

from otpu_core.card import regs

DOC = Path(__file__).resolve().parent.parent / "docs" / "card.md"


def test_register_table_in_the_docs_matches_the_code():
    text = DOC.read_text()
    embedded = text.split("<!-- regs:begin -->\n", 1)[1].split("<!-- regs:end -->", 1)[0]
    assert embedded == regs.markdown_table()


def test_every_register_is_documented_in_the_table():
    table = regs.markdown_table()
    for r in regs.REGS:
        assert f"| {r.name} |" in table and r.desc in table
