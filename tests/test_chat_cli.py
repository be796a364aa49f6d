"""otpu-chat on the simulated card (sim-small) and on the references: -p with its stats line, --json,
--logits, --check, --raw, the engines, models and convert, the REPL and its commands, Ctrl-C,
multi-turn reuse of the KV cache, the status file otpu-smi reads, the TUI, and exit codes."""
import io
import json
import os
import signal

import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.cli import run_app
from otpu_core.llm.models import open_model
from otpu_chat import cli as chat_cli
from otpu_chat.repl import Interrupt
from otpu_chat.session import Options, Session

CARD = ["--dev", "sim:chat"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(llmtiny.write(tmp_path_factory.mktemp("m"), llmtiny.config("qwen3", D=32), "gguf")[0])


@pytest.fixture(autouse=True)
def _sim_small(monkeypatch):
    monkeypatch.setenv("OTPU_TARGET", "sim-small")          # the card (and the quantised golden) of the tiny model


def chat(*args):
    return run_app(chat_cli.app, "otpu-chat", list(args))


def test_prompt_streams_then_one_stats_line(model, capsys):
    assert chat("-p", "What is a list?", "--model", model, "-n", "6", "--temperature", "0", *CARD) == 0
    cap = capsys.readouterr()
    line = cap.err.strip().splitlines()[-1]
    assert line.startswith("[prompt ") and "TTFT" in line and "6 tok" in line
    assert "tok/s decode" in line and "Mcyc/tok at 133.33 MHz" in line and "DRAM" in line and "MXU" in line
    assert "stopped at --max-tokens" in line or "ctx " in line
    assert cap.out.endswith("\n")


def test_json_logits_and_check(model, capsys, tmp_path):
    f = tmp_path / "logits.npy"
    assert chat("-p", "Tell me about tuples", "--model", model, "-n", "5", "--temperature", "0", "--json",
                "--logits", str(f), "--check", *CARD) == 0
    doc = json.loads(capsys.readouterr().out)
    tok = open_model(model).tokenizer
    m = open_model(model)
    rendered = m.template.render([{"role": "user", "content": "Tell me about tuples"}])
    assert doc["prompt_ids"] == tok.encode(rendered)
    assert len(doc["ids"]) == len(doc["times_s"]) == doc["stats"]["tokens"] <= 5
    assert doc["text"] == tok.decode([t for t in doc["ids"] if t not in m.stop_ids()])
    assert doc["stats"]["card"]["decode_tok_s"] > 0 and set(doc["stats"]["card"]["util"]) >= {"MXU", "VPU"}
    arr = np.load(f)
    assert arr.dtype == np.float32 and arr.shape == (len(doc["ids"]), m.config.vocab)
    assert list(np.argmax(arr, axis=1)) == doc["ids"]              # greedy: each token is its row's argmax
    chk = doc["check"]
    assert chk["first_difference"] is None and chk["min_cosine"] > 0.9995 and chk["steps"] == len(doc["ids"])


def test_raw_and_the_reference_engines(model, capsys):
    tok = open_model(model).tokenizer
    for engine in ("quant", "fp32"):
        assert chat("-p", "The quick brown fox", "--raw", "--model", model, "-n", "4", "--temperature", "0",
                    "--engine", engine, "--json") == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["prompt_ids"] == tok.encode("The quick brown fox", add_special=True)
        assert doc["engine"] == engine and "card" not in doc["stats"] and len(doc["ids"]) == 4


def test_models_and_convert(model, capsys):
    assert chat("convert", model, "--format", "fp4", "--target", "sim-small") == 0
    first = capsys.readouterr().out
    assert chat("convert", model, "--format", "fp4", "--target", "sim-small", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert "converted in" in first and doc["cached"] is True and doc["bytes"] > 0
    assert chat("models", "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    row = next(r for r in rows if r["path"] == model)
    assert row["kind"] == "cached" and "fp4" in {f["format"] for f in row["formats"]}


@pytest.mark.parametrize("args,msg", [(["--format", "int3"], "--format int3"), (["--json"], "need -p"),
                                      (["-p", "x", "--engine", "gpu"], "--engine gpu"),
                                      (["-p", "x", "--top-p", "0"], "--top-p 0.0"),
                                      (["-p", "x", "--model", "/nonexistent.gguf"], "no such file")])
def test_bad_options_exit_2(model, capsys, args, msg):
    base = {"--model": model, "--engine": "quant"}
    full = list(args) + [x for k, v in base.items() if k not in args for x in (k, v)]
    assert chat(*full) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_repl_commands_and_multi_turn_reuse(model, capsys, monkeypatch):
    lines = "Hello\n/stats\n/system Be brief.\nWhat is a dict?\nAnd a set?\n/reset\n/bogus\n/quit\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert chat("--model", model, "-n", "3", "--temperature", "0", "--engine", "quant") == 0
    err = capsys.readouterr().err
    assert "turns 1, prompt tokens" in err and "system prompt set; new conversation" in err
    assert "new conversation" in err and "unknown command /bogus" in err
    assert sum(line.startswith("[prompt ") for line in err.splitlines()) == 3        # one stats line per answer


def test_each_turn_feeds_only_what_the_template_appended(model):
    s = Session.open(Options(model=model, engine="quant", max_tokens=3, temperature=0.0))
    a = s.ask("What is a list?")
    b = s.ask("And a tuple?")
    assert b.turn.prompt_tokens < len(b.prompt_ids) - len(a.prompt_ids)     # the old turn stayed in the cache
    assert b.prompt_ids[:len(a.prompt_ids)] == a.prompt_ids
    s.set_system("Answer in French.")                                      # history rewritten: start over
    c = s.ask("Hi")
    assert c.turn.prompt_tokens == len(c.prompt_ids)


def test_a_template_that_rewrites_history_restarts_the_sequence(model):
    """A template may rewrite earlier turns (Qwen3's drops past reasoning); here one that keeps only
    the newest message: the second turn does not extend what was fed, so it is fed whole."""
    from otpu_core.llm.chat_template import ChatTemplate
    s = Session.open(Options(model=model, engine="quant", max_tokens=2, temperature=0.0))
    s.model._template = ChatTemplate("{% for m in messages[-1:] %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                                     "{% endfor %}<|im_start|>assistant\n")
    s.ask("What is a list?")
    b = s.ask("And a tuple?")
    assert b.turn.prompt_tokens == len(b.prompt_ids) and "list" not in s.fed_text


def test_ctrl_c_stops_the_answer_not_the_session(model):
    s = Session.open(Options(model=model, engine="quant", max_tokens=40, temperature=0.0))
    with Interrupt() as stop:
        ex = s.ask("Count to forty", lambda t: os.kill(os.getpid(), signal.SIGINT), stop)
    assert ex.turn.end == "stopped" and len(ex.turn.tokens) < 40
    assert s.ask("Again").turn.tokens                                      # still usable


def test_card_session_keeps_the_status_file_for_smi(model):
    from otpu_core.card.runstate import read_status, run_dir
    s = Session.open(Options(model=model, dev="sim:smi", max_tokens=3, temperature=0.0))
    try:
        ex = s.ask("Hi")
        st = read_status(run_dir() / f"{s.board.t.devname}.json")
        assert st["model"] == s.model.name and st["tokens"] == len(ex.turn.tokens)
        assert st["dram"]["total"] > st["dram"]["free"]
    finally:
        s.close()


def test_tui_conversation(model):
    import asyncio

    from otpu_chat.tui import ChatApp

    async def run():
        s = Session.open(Options(model=model, engine="quant", max_tokens=3, temperature=0.0))
        app = ChatApp(s)
        async with app.run_test() as pilot:
            await pilot.click("#input")
            await pilot.press(*"Hello", "enter")
            for _ in range(200):
                await pilot.pause(0.05)
                if not app.busy and app.last_stats is not None:
                    break
            status = str(app.query_one("#status").render())
            log = app.query_one("#log")
            texts = [str(w.render()) for w in log.children]
            await pilot.press(*"/stats", "enter")
            await pilot.pause(0.1)
            notes = [str(w.render()) for w in log.children]
        return status, texts, notes, app.last_stats
    status, texts, notes, stats = asyncio.run(run())
    assert stats["tokens"] == 3 and "ctx " in status and "quant" in status
    assert any(t.startswith("> Hello") for t in texts)
    assert any("turns 1" in n for n in notes)
