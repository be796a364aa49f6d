"""Board: opening by --dev, identification and the CFG_HASH check, locks, runs, bad input, two processes."""
import contextlib
import json
import re
import io
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from otpu_core import cli
from otpu_core import target as target_mod
from otpu_core.board import Board, BoardBackend, ConfigMismatch, IsaBackend, prepare
from otpu_core.card import regs
from otpu_core.errors import DeviceBusy, DeviceError, UsageError

COPY = """ld dram=0 tmem=0 n=16
st dram=r8+0 tmem=0 n=16
halt
"""
LONG = """loop count={n} body=@end
ld dram=0 tmem=0 n=64
end:
halt
"""


def otpu(*args: str) -> tuple[int, str]:
    """Run `otpu ARGS` in this process, exit codes as the `otpu` command gives them; returns (code, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.run_app(cli.build_app(), "otpu", list(args))
    return code, out.getvalue()


@pytest.fixture
def board():
    b = Board.open("sim", "sim-small")
    yield b
    b.close()


def test_identify_and_config_check(board):
    info = board.info
    cfg = target_mod.load("sim-small").config()
    assert (info.d, info.mcols, info.lanes, info.regmap) == (cfg.D, cfg.MCOLS, cfg.LANES, 3)
    assert info.cfg_hash == target_mod.load("sim-small").arch_hash()
    assert info.calibrated == (True, True) and info.link["width"] == 8
    board.close()
    with pytest.raises(ConfigMismatch) as e:
        Board.open("sim", "ypcb-00338")
    text = e.value.message
    assert f"0x{info.cfg_hash:08x}" in text and f"0x{target_mod.load('ypcb-00338').arch_hash():08x}" in text
    assert "sim-small" in text
    Board.open("sim", "ypcb-00338", check=False).close()      # --no-check


def test_logical_write_read_with_unaligned_edges(board):
    rng = np.random.default_rng(2)
    payload = rng.integers(0, 256, 10_001, dtype=np.uint8)
    board.write(4097, payload)
    assert np.array_equal(board.read(4097, payload.size), payload)
    # The card's own view (the logical memmap) agrees byte for byte.
    assert np.array_equal(board.t.card.dram.mem[4097:4097 + payload.size], payload)
    with pytest.raises(UsageError, match="outside"):
        board.write(board.dram_bytes - 8, payload[:64])


def test_large_transfers_are_pipelined_and_exact():
    b = Board.open("sim:big")                                  # ypcb-00338, 4 GiB sparse
    try:
        payload = np.random.default_rng(3).integers(0, 256, (40 << 20) + 256, dtype=np.uint8)
        b.write(1 << 30, payload)
        assert np.array_equal(b.read(1 << 30, payload.size), payload)
        assert np.array_equal(b.t.card.dram.mem[(1 << 30):(1 << 30) + 4096], payload[:4096])
    finally:
        b.close()


def test_run_counters_and_args(board):
    data = np.arange(64, dtype=np.uint8)
    board.write(0, data)
    board.load_program(0x80000, prepare(COPY).image)
    board.set_args([4096])
    stats = board.run(timeout=30)
    assert stats.instructions == 3 and stats.cycles > 0 and stats.b_reads == 1 and stats.b_writes == 1
    assert np.array_equal(board.read(4096, 64), data)
    snap = board.snapshot()
    assert snap["INSTR"] >= 3 and snap["RUNNING"] >= stats.cycles and snap["UPTIME"] > snap["RUNNING"]


def test_backends_agree():
    data = np.arange(64, dtype=np.uint8)
    results = []
    for be in (IsaBackend("sim-small"), BoardBackend(Board.open("sim", "sim-small"))):
        be.write(0, data)
        stats = be.run(COPY, args=[8192])
        results.append((stats.cycles, stats.instructions, be.read(8192, 64).tobytes()))
        be.close()
    assert results[0] == results[1] and results[0][2] == data.tobytes()


def test_trace_records_come_back_in_order(board):
    board.load_program(0x80000, prepare(COPY).image)
    board.set_args([4096])
    stats = board.run(timeout=30, trace="first")
    recs = stats.trace["records"]
    assert stats.trace["count"] == recs.size > 0 and stats.trace["drop"] == 0
    assert (int(recs[-1]) >> 60) in (8, 11)                    # the run ends with the H record group


def test_illegal_program_is_a_usage_error_and_the_card_stays_usable(board):
    garbage = np.full(32, 0xFF, np.uint8)
    board.load_program(0x80000, garbage)
    with pytest.raises(UsageError, match="illegal instruction"):
        board.run(timeout=30)
    board.load_program(0x80000, prepare(COPY).image)
    board.set_args([4096])
    assert board.run(timeout=30).instructions == 3


def test_hung_sequencer_times_out_and_the_card_stays_usable():
    b = Board.open("sim:hung", "sim-small", faults="hang")
    try:
        b.load_program(0x80000, prepare(COPY).image)
        b.start()
        time.sleep(0.1)
        b.set_reg("SNAP", 1)
        first = b.reg("RUNNING")
        with pytest.raises(DeviceError, match="did not halt"):
            b.wait(timeout=0.3)
        b.set_reg("SNAP", 1)
        assert b.reg("RUNNING") > first                      # it kept running past its HALT
        assert not b.status() & regs.ST_RUN
        b.write(0, np.ones(128, np.uint8))
        assert b.read(0, 128).sum() == 128
    finally:
        b.close()


def test_second_user_is_told_who_holds_the_card():
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from otpu_core.board import Board
        b = Board.open("sim", "sim-small")
        print("held", flush=True)
        time.sleep(30)
        """)], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DeviceBusy) as e:
            Board.open("sim", "sim-small")
        assert f"held by PID {holder.pid}" in e.value.message and "python" in e.value.message
        code, out = otpu("card", "reg", "SCRATCH", "1", "--dev", "sim", "--target", "sim-small")
        assert code == 3 and f"PID {holder.pid}" in out
        code, out = otpu("card", "info", "--dev", "sim", "--target", "sim-small", "--json")   # monitors need no lock
        assert code == 0 and '"cfg_hash"' in out
    finally:
        holder.kill()
        holder.wait()
    Board.open("sim", "sim-small").close()


def test_a_refused_open_releases_the_lock():
    Board.open("sim", "sim-small").close()
    for target in ("no-such-target", "ypcb-00338"):           # unknown; a CFG_HASH that is not the card's
        with pytest.raises(UsageError):
            Board.open("sim", target)
        Board.open("sim", "sim-small").close()        # not "busy": the failed open closed its transport


def test_cli_bad_input_exit_codes(tmp_path):
    code, out = otpu("card", "info", "--dev", "nonsense")
    assert code == 2 and "unknown device 'nonsense'" in out
    code, out = otpu("card", "info", "--dev", str(tmp_path / "xdma3"))
    assert code == 2                                                   # not a device path at all
    code, out = otpu("card", "info", "--dev", "/dev/xdma7")
    assert code == 3 and "no device node /dev/xdma7_user" in out
    code, out = otpu("card", "info", "--dev", "sim", "--target", "sim-small")
    assert code == 0
    code, out = otpu("card", "info", "--dev", "sim", "--target", "ypcb-00338")
    assert code == 2 and "CFG_HASH" in out and "--no-check" in out
    code, out = otpu("card", "info", "--dev", "sim", "--fault", "melt")
    assert code == 2 and "unknown fault kind 'melt'" in out
    code, out = otpu("card", "reg", "ID", "5", "--dev", "sim")
    assert code == 2 and "read-only" in out


def test_sim_reset_reflashes_the_card():
    code, out = otpu("sim", "reset", "--target", "sim-small")
    assert code == 0 and "sim-small" in out
    b = Board.open("sim", "sim-small")
    b.write(0, np.full(128, 3, np.uint8))
    b.close()
    code, out = otpu("sim", "reset", "--target", "ypcb-00338")
    assert code == 0
    b = Board.open("sim", "ypcb-00338")
    assert not b.read(0, 128).any()
    b.close()


def test_two_processes_counters_move_and_no_write_is_lost():
    """A runs a long program and writes its region during the run; B watches counters and writes its own."""
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys
        import numpy as np
        from otpu_core.board import Board, prepare
        b = Board.open("sim", "sim-small")
        b.load_program(0x80000, prepare(sys.argv[1]).image)
        b.start()
        print("started", flush=True)
        for k in range(64):
            b.write(0x200000 + k * 8192, np.full(8192, k + 1, np.uint8))
        stats = b.wait(timeout=120)
        print("cycles", stats.cycles, flush=True)
        b.close()
        """), LONG.format(n=250000)], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert runner.stdout.readline().strip() == "started"
        watcher = Board.open("sim", "sim-small", lock=False)
        seen = []
        for _ in range(4):
            seen.append(watcher.snapshot()["RUNNING"])
            watcher.write(0x400000 + len(seen) * 65536, np.full(65536, 100 + len(seen), np.uint8))
            time.sleep(0.25)
        deadline = time.monotonic() + 60          # a loaded machine slows the runner, it never stops it
        while sum(b > a for a, b in zip(seen, seen[1:])) < 3 and time.monotonic() < deadline:
            time.sleep(0.25)
            seen.append(watcher.snapshot()["RUNNING"])
        assert all(b >= a for a, b in zip(seen, seen[1:])) and sum(b > a for a, b in zip(seen, seen[1:])) >= 3, seen
        line = runner.stdout.readline().split()
        assert runner.wait(timeout=120) == 0 and line[0] == "cycles" and int(line[1]) > 0
        for k in range(64):
            assert (watcher.read(0x200000 + k * 8192, 8192) == k + 1).all(), k
        for i in range(1, 5):
            assert (watcher.read(0x400000 + i * 65536, 65536) == 100 + i).all(), i
        assert watcher.t.card.dma_stats()["lapped"] == 0 and watcher.t.card.dma_stats()["slip"] == 0
        watcher.close()
    finally:
        runner.kill()


WAITW = """waitw addr=0x1000 dst=32 ref=1 cmp=eq interval=100 timeout={timeout}
ld dram=0x2000 tmem=0 n=16
st dram=0x3000 tmem=0 n=16
halt
"""


def test_waitw_mailbox_takes_the_data_the_host_writes_during_the_run(board):
    board.write(0x1000, np.zeros(64, np.uint8))                      # flag: not yet
    board.write(0x2000, np.full(64, 0xEE, np.uint8))                 # old data
    board.load_program(0x80000, prepare(WAITW.format(timeout=0)).image)
    board.start()
    time.sleep(0.2)
    assert not board.status() & regs.ST_HALTED                       # still waiting for the host
    new = np.arange(64, dtype=np.uint8)
    board.write(0x2000, new)                                         # data first, then the flag
    board.write(0x1000, np.array([1, 0, 0, 0], np.uint8))
    stats = board.wait(timeout=30)
    assert stats.instructions == 4
    assert np.array_equal(board.read(0x3000, 64), new)


def test_waitw_timeout_sets_wait_to_and_the_card_stays_usable(board):
    board.write(0x1000, np.zeros(64, np.uint8))
    board.load_program(0x80000, prepare(WAITW.format(timeout=200_000)).image)   # 1.5 ms at 133 MHz
    board.start()
    with pytest.raises(DeviceError, match="WAITW timed out"):
        board.wait(timeout=30)
    assert board.status() & (regs.ST_WAIT_TO | regs.ST_ERROR | regs.ST_HALTED) == regs.ST_WAIT_TO | regs.ST_ERROR | regs.ST_HALTED
    board.load_program(0x80000, prepare(COPY).image)
    board.set_args([4096])
    assert board.run(timeout=30).instructions == 3                   # the next run's CLEAR resets the error bits
    assert not board.status() & (regs.ST_WAIT_TO | regs.ST_ERROR)


def test_a_small_write_touches_only_the_beats_that_hold_its_bytes(board):
    calls = []
    real = board.t.card.h2c
    board.t.card.h2c = lambda axi, buf: calls.append((axi, len(buf))) or real(axi, buf)
    board.write(0x1040 + 8, np.arange(4, dtype=np.uint8))         # inside beat 1 of chunk 0x20
    board.t.card.h2c = real
    ch, off = regs.beat_channel(0x1040, board.chash)
    assert calls == [(regs.axi_address(ch, off), 64)]             # one whole beat, the other beat untouched
    rng = np.random.default_rng(4)
    for addr, n in ((0x1040 + 8, 4), (100, 200), (120, 10), (5, 1), (4096 - 3, 300), (0, 256)):
        payload = rng.integers(0, 256, n, dtype=np.uint8)
        before = board.read(addr - 64 if addr >= 64 else 0, n + 192)
        board.write(addr, payload)
        after = board.read(addr - 64 if addr >= 64 else 0, n + 192)
        k = addr - (addr - 64 if addr >= 64 else 0)
        expect = before.copy()
        expect[k:k + n] = payload
        assert np.array_equal(after, expect), (addr, n)


def test_card_commands_list_regs_and_reg():
    code, out = otpu("card", "reg", "SCRATCH", "0x1234", "--dev", "sim", "--target", "sim-small")
    assert code == 0 and "SCRATCH = 0x00001234" in out
    code, out = otpu("card", "regs", "--dev", "sim", "--target", "sim-small", "--json")
    values = json.loads(out)
    assert values["SCRATCH"] == 0x1234 and values["ID"] == regs.ID_OTPU and values["UPTIME"] > 0
    code, out = otpu("card", "list", "--json")
    assert code == 0 and {"dev": "sim", "kind": "sim"}.items() <= json.loads(out)[0].items()
    code, out = otpu("card", "info", "--dev", "sim", "--target", "sim-small")
    assert code == 0 and "D=32 MCOLS=4 LANES=8" in out and "5.0 GT/s PCIe x8" in out


def test_isa_backend_adopts_the_callers_dram_without_copying():
    cfg = target_mod.load("sim-small").config()
    dram = np.zeros(cfg.DRAM_BYTES, np.uint8)
    be = IsaBackend("sim-small", dram=dram)
    dram[:64] = np.arange(64, dtype=np.uint8)              # written behind the backend's back
    be.machine.slice.dram.note_write(0, 64)
    be.run(COPY, args=[4096])
    assert np.array_equal(dram[4096:4160], np.arange(64, dtype=np.uint8))   # the result is in the caller's array


def test_board_backend_keeps_a_resident_program_and_checks_features(board):
    be = BoardBackend(board)
    prog = be.prepare(COPY)
    loads = []
    real = board.load_program
    board.load_program = lambda addr, image: loads.append(addr) or real(addr, image)
    be.run(prog, args=[4096])
    be.run(prog, args=[8192])
    assert len(loads) == 1                                   # started again: no reload
    be.attach(target_mod.load("sim-small").config())         # sim-small has PAIR, DSTEP, STREAM
    plain = Board.open("sim:plain", "ypcb-00338")
    try:
        with pytest.raises(ConfigMismatch, match="PAIR"):
            BoardBackend(plain).attach(target_mod.load("ypcb-00338").config().replace(PAIR=True))
    finally:
        plain.close()


def test_card_run_command(tmp_path):
    good = tmp_path / "copy.s"
    good.write_text(COPY)
    code, out = otpu("card", "run", str(good), "--dev", "sim", "--target", "sim-small", "--arg", "0=4096", "--json")
    assert code == 0 and json.loads(out)["instructions"] == 3
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\xff" * 32)
    code, out = otpu("card", "run", str(bad), "--dev", "sim", "--target", "sim-small")
    assert code == 2 and "unknown opcode" in out and "Traceback" not in out
    oob = tmp_path / "oob.s"
    oob.write_text("ld dram=0x7fffff0 tmem=0 n=64\nhalt\n")
    code, out = otpu("card", "run", str(oob), "--dev", "sim", "--target", "sim-small")
    assert code == 2 and "illegal instruction" in out and "pc 0" in out
    code, out = otpu("card", "run", str(good), "--dev", "sim", "--target", "sim-small", "--arg", "9=1")
    assert code == 2 and "argument number must be 0..7" in out


def test_injected_faults_are_shown_and_named_in_failure_hints(tmp_path):
    prog = tmp_path / "halt.s"
    prog.write_text("halt\n")
    sim = ("--dev", "sim:h2", "--target", "sim-small")
    code, out = otpu("card", "run", str(prog), *sim, "--fault", "hang", "--timeout", "0.3")
    assert code == 3 and "did not halt" in out
    code, out = otpu("card", "info", *sim, "--json")            # no --fault: the card keeps its faults
    assert code == 0 and json.loads(out)["faults"] == ["hang"]
    code, out = otpu("card", "info", *sim)
    assert re.search(r"injected faults\s*│\s*sim:h2 has injected faults: hang", out)
    code, out = otpu("card", "run", str(prog), *sim, "--timeout", "0.3")
    assert code == 3 and "sim:h2 has injected faults: hang" in out and "otpu sim reset --dev sim:h2" in out
    code, out = otpu("sim", "reset", *sim)
    assert code == 0
    code, out = otpu("card", "run", str(prog), *sim, "--json")
    assert code == 0 and json.loads(out)["instructions"] == 1
    code, out = otpu("card", "info", *sim, "--json")
    assert json.loads(out)["faults"] == []


def test_fault_option_replaces_the_cards_faults_and_empty_clears_them():
    with Board.open("sim:f", "sim-small", faults="hot:c=95;hang") as b:
        assert b.info.faults == ("hot:c=95", "hang")
    with Board.open("sim:f", "sim-small", faults="vpu_lane:lane=1,bit=2") as b:
        assert b.info.faults == ("vpu_lane:lane=1,bit=2",)
        assert "vpu_lane:lane=1,bit=2" in b._with_faults("base hint") and b._with_faults("base hint").startswith("base hint. ")
    with Board.open("sim:f", "sim-small", faults="") as b:
        assert b.info.faults == () and b._with_faults("base hint") == "base hint" and b._with_faults(None) is None


def test_a_healthy_card_times_out_without_a_fault_note():
    with Board.open("sim:ok", "sim-small") as b:
        b.load_program(0x80000, prepare(LONG.format(n=10_000_000)).image)
        b.start()
        with pytest.raises(DeviceError) as e:
            b.wait(timeout=0.2)
        assert "injected" not in e.value.hint


def test_card_reg_json_and_the_short_target_option():
    code, out = otpu("card", "reg", "scratch", "0x55", "--dev", "sim", "-t", "sim-small", "--json")
    assert code == 0 and json.loads(out) == {"name": "SCRATCH", "offset": 0x38, "value": 0x55, "written": 0x55}
    code, out = otpu("card", "reg", "UPTIME", "--dev", "sim", "-t", "sim-small", "--json")
    got = json.loads(out)
    assert code == 0 and got["offset"] == 0x100 and got["value"] > 0 and "written" not in got
    code, out = otpu("card", "reg", "NOPE", "--dev", "sim", "-t", "sim-small", "--json")
    assert code == 2 and "no register named 'NOPE'" in out
    code, out = otpu("card", "info", "--dev", "sim", "-t", "ypcb-00338")       # the card is sim-small: refused
    assert code == 2 and "CFG_HASH" in out
    for command in ("info", "regs", "reg", "run"):
        code, out = otpu("card", command, "--help")
        assert code == 0 and "-t, --target" in out, command
