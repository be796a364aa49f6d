"""TMEM and ACT RAM allocators, and the on-disk program cache (keys, reuse, two processes)."""
import multiprocessing as mp
import os

import numpy as np
import pytest

from otpu_core import ol
from otpu_core.kernels import matmul
from otpu_core.ol import cache
from otpu_core.ol.errors import CompileError
from otpu_core.ol.memory import ActAllocator, TmemAllocator
from otpu_core.ol.runtime import Image

T = "sim-small"


def test_tmem_next_fit_spreads_consecutive_buffers_over_banks():
    a = TmemAllocator(1024, 8)
    starts = [a.alloc(16) for _ in range(6)]             # 16 words end in the bank they start in
    assert len({s % 8 for s in starts}) == 6
    assert starts == sorted(starts)                       # the cursor only moves forward


def test_tmem_next_fit_then_best_fit_then_exhausted():
    a = TmemAllocator(100, 4)
    x = [a.alloc(10) for _ in range(9)]                   # 0, 10, 20, ... (10 % 4 != 0: no skips)
    a.free(x[1])                                          # gap of 10 at 10
    a.free(x[4]); a.free(x[5])                            # gap of 20 at 40
    assert a.alloc(5) == 90                               # next fit: after the cursor first
    assert a.alloc(5) == 95
    assert a.alloc(8) == 10                               # nothing after the cursor: best fit, the smaller gap
    with pytest.raises(CompileError, match="TMEM exhausted: needed 30 words, largest free 20"):
        a.alloc(30)


def test_act_round_robin_reuses_freed_blocks_last():
    a = ActAllocator(8)
    first = a.alloc(2, 1)
    second = a.alloc(2, 2)
    a.free(first, 2, 1)
    assert a.alloc(2, 3) == 4                             # not the just-freed 0..1
    assert a.alloc(2, 4) == 6
    assert a.alloc(2, 5) == 0                             # wraps around to the freed blocks
    with pytest.raises(CompileError, match="needed 2 contiguous blocks, largest free 0"):
        a.alloc(2, 6)


def test_stationaries_die_and_free_their_blocks():
    def k(x):
        for _ in range(40):                               # 40 x 2 blocks > 16 blocks: only works if freed
            ol.quantize(ol.load(x))
    img = Image(T)
    prog = ol.compile_kernel(k, T, x=img.tensor(np.ones((2, 64), np.float32)))
    assert len({i["ab"] for i in prog.instrs if i.op.name == "QACT"}) == 8


def test_storage_allocated_outside_a_loop_survives_its_iterations():
    from otpu_core.ol import builder as B
    from otpu_core.target import load
    b = B.Builder(load(T).config())
    B.push(b)
    try:
        t = ol.empty((8,))
        start = t.buf.start
        b.begin_loop(3)
        del t                                             # dies inside the loop body...
        assert start in b.tmem.ends                       # ...but the next iteration still reads it
        b.end_loop()
        assert start not in b.tmem.ends
    finally:
        B.pop()


def _args():
    img = Image(T)
    rng = np.random.default_rng(0)
    return dict(x=img.tensor(rng.standard_normal((2, 64)).astype(np.float32)),
                w=img.weight(rng.standard_normal((20, 64)).astype(np.float32)), y=img.tensor(shape=(2, 20)))


def test_cache_hit_and_keys(tmp_path):
    args = _args()
    cold = cache.cached_compile(matmul, T, directory=tmp_path, **args)
    warm = cache.cached_compile(matmul, T, directory=tmp_path, **args)
    assert not cold.stats.cached and warm.stats.cached
    assert [i.words for i in warm.instrs] == [i.words for i in cold.instrs] and warm.waits == cold.waits
    k0 = cache.program_key(matmul, T, True, args)
    assert cache.program_key(matmul, T, False, args) != k0
    assert cache.program_key(matmul, "nangate45-small", True, args) != k0
    assert cache.program_key(matmul, T, True, dict(args, n_chunk=8)) != k0
    assert len(list(tmp_path.glob("*.prog"))) == 1


def _compile_in_child(directory, queue):
    prog = cache.cached_compile(matmul, T, directory=directory, **_args())
    queue.put((prog.stats.cached, [i.words for i in prog.instrs]))


def test_cache_two_processes_at_once(tmp_path):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_compile_in_child, args=(str(tmp_path), q)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(r[0] for r in results) == [False, True]      # one compiled, the other read it
    assert results[0][1] == results[1][1]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_cache_key_follows_the_kernel_source(tmp_path):
    import importlib.util

    def load(text):
        f = tmp_path / "user_kernel.py"
        f.write_text(text)
        cache._file_digest.cache_clear()
        spec = importlib.util.spec_from_file_location("user_kernel", f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.k
    src = "from otpu_core import ol\n\ndef k(x, y):\n    ol.store(y, ol.load(x) * {})\n"
    args = dict(x=ol.Tensor(128, (8,)), y=ol.Tensor(256, (8,)))
    d = tmp_path / "cache"
    p1 = cache.cached_compile(load(src.format("2.0")), T, directory=d, **args)
    p2 = cache.cached_compile(load(src.format("3.0")), T, directory=d, **args)
    assert not p2.stats.cached and p1.instrs[1]["imm"] != p2.instrs[1]["imm"]
    assert cache.cached_compile(load(src.format("3.0")), T, directory=d, **args).stats.cached


def test_two_threads_compile_at_once():
    from concurrent.futures import ThreadPoolExecutor
    args = _args()
    with ThreadPoolExecutor(2) as pool:
        progs = list(pool.map(lambda _: ol.compile_kernel(matmul, T, **args), range(4)))
    assert all([i.words for i in p.instrs] == [i.words for i in progs[0].instrs] for p in progs)
