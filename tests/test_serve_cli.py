"""otpu-serve's command line: help, version, and a clear message with the right exit code for each bad option."""
from __future__ import annotations

import socket

from otpu_core.cli import run_app
from otpu_serve import cli


def run(args, capsys) -> tuple[int, str]:
    rc = run_app(cli.app, "otpu-serve", args)
    cap = capsys.readouterr()
    return rc, cap.out + cap.err


def test_help_and_version(capsys):
    rc, out = run(["--help"], capsys)
    assert rc == 0 and "--api-key" in out and "--max-batch" in out and "/v1/chat/completions" in out
    rc, out = run(["--version"], capsys)
    assert rc == 0 and out.startswith("otpu-serve ")


def test_bad_options_exit_2_without_a_traceback(capsys):
    for args, words in ((["--dev", "bogus"], "unknown device 'bogus'"),
                        (["--model", "no-such-model"], "--model no-such-model"),
                        (["--max-batch", "0"], "--max-batch 0"), (["--port", "70000"], "--port 70000"),
                        (["--format", "int3"], "--format int3"), (["--dev", "sim:a", "--dev", "sim:a"], "named twice"),
                        (["--queue", "-1"], "--queue -1")):
        rc, out = run(args + ["--port", "0"] if "--port" not in args else args, capsys)
        assert rc == 2 and words in out and "Traceback" not in out, (args, out)


def test_a_port_in_use_is_named(capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        rc, out = run(["--dev", "sim:cli", "--port", str(port)], capsys)
        assert rc == 2 and f"127.0.0.1:{port} is already in use" in out
    finally:
        s.close()


def test_a_busy_card_exits_3(capsys):
    from otpu_core.board import Board
    b = Board.open("sim:held")
    try:
        rc, out = run(["--dev", "sim:held", "--port", "0"], capsys)
        assert rc == 3 and "is busy" in out, out
    finally:
        b.close()
