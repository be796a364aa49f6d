"""A table kept on the host (kernels/mailbox.host_row, llm/offload.RowServer): the card computes a
row index, asks for the row through the mailbox, and uses what the host wrote, twice in one
program; the rows are the table's bits; the bytes are counted; a bad index is refused by name."""
import numpy as np
import pytest

from otpu_core import ol
from otpu_core.board import IsaBackend
from otpu_core.kernels import argmax
from otpu_core.kernels.mailbox import Mailbox, host_row, request
from otpu_core.llm.offload import OffloadError, RowServer, run_serving
from otpu_core.ol import CompileError
from otpu_core.ol.runtime import Image

T = "sim-small"
ROWS, WIDTH = 50, 48


def test_rows_the_card_picks_arrive_from_the_host_table():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    logits = rng.standard_normal(ROWS).astype(np.float32)
    logits[12] = 9.0                                   # the card's pick: row 12, then row 19
    img = Image(T)
    lt, o1, o2 = img.tensor(logits), img.tensor(shape=(WIDTH,)), img.tensor(shape=(WIDTH,))
    mb, landing = Mailbox(img.alloc(192)), img.tensor(shape=(WIDTH,))

    def kernel(l, o1, o2, landing):
        best = argmax(l)                               # (value, index): the index is the card's choice
        ol.store(o1, host_row(mb, landing, best[1:2]))
        ol.store(o2, host_row(mb, landing, best[1:2] + 7.0) * 2.0)
    prog = ol.compile_kernel(kernel, T, l=lt, o1=o1, o2=o2, landing=landing)
    be = IsaBackend(T, timing=False)
    be.write(0, img.dram[:img.cursor])
    server = RowServer(be, mb, landing.base.const, table)
    server.reset()
    run_serving(be, be.prepare(prog.instrs, prog.waits), prog.arg_words(), server)
    got1 = be.read(o1.base.const, 4 * WIDTH).view(np.float32)
    got2 = be.read(o2.base.const, 4 * WIDTH).view(np.float32)
    assert np.array_equal(got1.view(np.uint32), table[12].view(np.uint32))
    assert np.array_equal(got2.view(np.uint32), (table[19] * np.float32(2)).view(np.uint32))
    assert server.stats.requests == 2 and server.stats.bytes == 2 * 4 * WIDTH


def test_an_index_outside_the_table_is_refused_by_name():
    be = IsaBackend(T, timing=False)
    mb = Mailbox(4096)
    server = RowServer(be, mb, 8192, np.zeros((ROWS, 4), np.float32))
    server.reset()
    be.write(mb.row, np.array([50.0], np.float32))
    be.write(mb.seq, np.array([1.0], np.float32))
    with pytest.raises(OffloadError, match="table row 50; there are 50"):
        server.poll()


def test_a_request_must_be_one_to_sixteen_words():
    img = Image(T)
    with pytest.raises(CompileError, match="1..16 words"):
        ol.compile_kernel(lambda: request(Mailbox(img.alloc(192)), ol.zeros((17,))), T)
    with pytest.raises(ValueError, match="not 64-byte aligned"):
        Mailbox(4100)
