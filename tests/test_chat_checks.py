"""The model stage of otpu-selftest and the model section of otpu-diag (contributed by otpu-chat
through the otpu_checks hook): a tiny model on the simulated card against the golden simulator,
bit for bit; what a difference reports; diag without --model has no model section."""
import json

import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.checks import Status
from otpu_core.cli import run_app
from otpu_chat import check as chat_check
from otpu_chat.plugin import MODEL_ROW
from otpu_diag import cli as diag_cli
from otpu_selftest import cli as selftest_cli

DEV = ["--dev", "sim:mc", "--target", "sim-small"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(llmtiny.write(tmp_path_factory.mktemp("m"), llmtiny.config("qwen3", D=32), "gguf")[0])


@pytest.mark.slow
def test_selftest_model_stage(model, capsys):
    assert run_app(selftest_cli.app, "otpu-selftest", [*DEV, "--model", model, "--tokens", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    stage = doc["stages"][-1]
    assert stage["stage"] == "model" and stage["status"] == "PASS"
    row = stage["rows"][0]
    assert row["name"] == MODEL_ROW and "3 greedy tokens on the card equal the golden simulator's" in row["message"]
    assert len(row["data"]["tokens"]) == 3 and row["data"]["tokens"] == row["data"]["golden_tokens"]


def test_diag_model_section(model, capsys, tmp_path):
    out = tmp_path / "d.json"
    assert run_app(diag_cli.app, "otpu-diag", [*DEV, "--only", "model", "--model", model, "--tokens", "2",
                                                "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    model_rows = [r for r in rows if r["section"] == "model"]
    assert [r["status"] for r in model_rows] == ["PASS"]
    capsys.readouterr()
    assert run_app(diag_cli.app, "otpu-diag", [*DEV, "--only", "model", "--json", str(out)]) == 0
    assert not [r for r in json.loads(out.read_text())["rows"] if r["section"] == "model"]


def _turn(tokens, logits):
    from otpu_core.llm.engine import Turn
    return Turn(3, list(tokens), logits=[np.asarray(x, np.float32) for x in logits])


def test_a_difference_is_named():
    lg = np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32)
    kv = np.arange(100, dtype=np.uint8)
    ok = chat_check.compare("m int8", _turn([1, 2, 3], lg), kv, _turn([1, 2, 3], lg), kv.copy())
    assert ok.status == Status.PASS
    res = chat_check.compare("m int8", _turn([1, 5, 3], lg), kv, _turn([1, 2, 3], lg), kv)
    assert res.status == Status.FAIL and "token 1 is 5 on the card, 2 on the golden simulator" in res.message
    bad = lg.copy()
    bad[1].view(np.uint32)[17] ^= 1
    res = chat_check.compare("m int8", _turn([1, 2, 3], bad), kv, _turn([1, 2, 3], lg), kv)
    assert "the tokens agree but 1 logits of token 1 differ from the golden simulator's (first at vocabulary " \
           "index 17)" in res.message
    kv2 = kv.copy()
    kv2[5] ^= 4
    res = chat_check.compare("m int8", _turn([1, 2, 3], lg), kv2, _turn([1, 2, 3], lg), kv)
    assert "1 bytes of layer 0's KV cache differ" in res.message and res.hint
