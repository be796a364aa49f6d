"""otpu-chat kld: the KL divergence against closed forms and a second formula, the per-format
summary, the shipped model measured (int8 closer to the fp32 golden than the 4-bit formats), and
bad input refused with exit 2."""
import json

import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program and conversion cache per module)
from otpu_core.cli import run_app
from otpu_core.llm.models import open_model
from otpu_core.llm.reference import Golden, SourceWeights, next_token_nll
from otpu_chat import cli as chat_cli
from otpu_chat import kld


def chat(*args):
    return run_app(chat_cli.app, "otpu-chat", list(args))


def test_kl_divergence_matches_a_closed_form_and_a_second_formula():
    # p = (1/2, 1/2), q = (9/10, 1/10): KL = 1/2 ln(5/9) + 1/2 ln 5
    p, q = np.log([[0.5, 0.5]]) + 3.0, np.log([[0.9, 0.1]]) - 7.0      # shifts must not matter
    assert kld.kl_divergence(p, q)[0] == pytest.approx(0.5 * np.log(5 / 9) + 0.5 * np.log(5), rel=1e-12)
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(16, 50)) * 4, rng.normal(size=(16, 50)) * 4
    pa = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    pb = np.exp(b) / np.exp(b).sum(1, keepdims=True)
    cross_minus_entropy = -(pa * np.log(pb)).sum(1) + (pa * np.log(pa)).sum(1)
    got = kld.kl_divergence(a, b)
    assert np.max(np.abs(got - cross_minus_entropy)) < 1e-12
    assert np.all(kld.kl_divergence(a, a) == 0)


def test_the_summary_counts_agreement_and_perplexity_per_position():
    base = np.array([[5.0, 0, 0], [0, 5.0, 0], [0, 0, 5.0], [5.0, 0, 0]])
    other = np.array([[5.0, 0, 0], [5.0, 0, 0], [0, 0, 5.0], [0, 0, 5.0]])    # top-1 differs at 1 and 3
    tokens = [9, 0, 1, 2, 0]
    r = kld.compare(base, other, tokens, "x").summary()
    assert r["positions"] == 4 and r["top1_agreement"] == 0.5
    lq = kld.log_softmax(other)
    assert r["ppl"] == pytest.approx(np.exp(-np.mean([lq[0, 0], lq[1, 1], lq[2, 2], lq[3, 0]])), rel=1e-12)
    assert r["max_kld"] > r["median_kld"] > 0 and r["mean_kld_stderr"] > 0


def test_the_shipped_model_int8_is_closest_to_the_fp32_golden(capsys):
    assert chat("kld", "--format", "int8,fp4", "--format", "fp4x6", "-n", "24", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    by = {r["format"]: r for r in doc["formats"]}
    assert list(by) == ["int8", "fp4", "fp4x6"] and doc["positions"] == 24
    for r in by.values():
        assert 0 < r["mean_kld"] <= r["max_kld"] and 0 < r["top1_agreement"] <= 1
    assert by["int8"]["mean_kld"] < by["fp4"]["mean_kld"] / 3
    assert by["int8"]["mean_kld"] < by["fp4x6"]["mean_kld"] / 3
    assert by["int8"]["top1_agreement"] >= 0.9
    assert by["int8"]["layer_bits_per_weight"] == 8.25 and by["fp4x6"]["layer_bits_per_weight"] == 4.25
    # the fp32 perplexity by the reference's own next-token NLL, an independent path
    m = open_model(None)
    ids = m.tokenizer.encode(kld.DEFAULT_TEXT, add_special=True)[:25]
    nll, n = next_token_nll(Golden(m.config, SourceWeights(m.ckpt), positions=25), ids)
    assert by["int8"]["ppl_fp32"] == pytest.approx(np.exp(nll / n), rel=1e-9)


def test_the_table_names_every_format(capsys, tmp_path):
    model = str(llmtiny.write(tmp_path, llmtiny.config("qwen3", D=32), "gguf")[0])
    assert chat("kld", "--model", model, "--format", "int8", "-n", "8", "--target", "sim-small") == 0
    out = capsys.readouterr().out
    assert "KL divergence from the fp32 golden over 8 positions" in out and "int8" in out and "same top-1" in out


@pytest.mark.parametrize("args, message", [
    (["--format", "int3"], "--format int3: unknown card format"),
    (["--text", "/nonexistent/t.txt"], "--text /nonexistent/t.txt: no such file"),
    (["--text", "EMPTY"], "the file is empty"),
    (["--text", "BINARY"], "not UTF-8 text"),
])
def test_bad_input_is_refused_with_exit_2(args, message, capsys, tmp_path):
    (tmp_path / "e.txt").write_text("  \n")
    (tmp_path / "b.txt").write_bytes(b"ok \xff\xfe")
    args = [{"EMPTY": str(tmp_path / "e.txt"), "BINARY": str(tmp_path / "b.txt")}.get(a, a) for a in args]
    assert chat("kld", *args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
