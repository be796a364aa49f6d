"""otpu-lens's model-token workload: decode tokens of the shipped model and of any model otpu-chat accepts.

A profile's cycles, instruction count and unit busy cycles equal the counters of the same programs
run on a golden machine of its own (no trace, the steps' writes applied in order); its source lines
are the `ol` lines of the model's programs and kernels; the tokens it decodes are the argmax of the
logits the models layer's `Engine` computes for the same prompt; on the simulated card (slow) the
same tokens take the timing model's cycles; bad options are refused by name."""
import json

import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.board import IsaBackend
from otpu_core.cli import run_app
from otpu_core.isasim import Machine
from otpu_core.llm import checkpoint, convert, engine, layout
from otpu_core.llm.models import open_model
from otpu_core.target import load as load_target
from otpu_core.timing import FREE_COUNTERS
from otpu_lens import cli, model_token, recorder, workloads

BUSY = {"DMA": "DMA_BUSY", "MXU": "MXU_BUSY", "QUANT": "QNT_BUSY", "VPU": "VPU_BUSY", "COLL": "COLL_BUSY"}


def lens(*args) -> int:
    return run_app(cli.app, "otpu-lens", list(args))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return llmtiny.write(tmp_path_factory.mktemp("models"), llmtiny.config("qwen3", D=32), "gguf")[0]


def _replay(target, options: dict) -> tuple[list[dict], Machine]:
    """The workload's steps on a golden machine without trace: each traced step's counters, and the machine."""
    m = Machine(target)
    ctx = workloads.Context(target, options, read=lambda a, n: m.read_dram(a, n, 0))
    out = []
    for step in workloads.get("model-token").build(ctx):
        for addr, data in step.writes:
            m.write_dram(addr, data)
        before = m.counters(0)
        m.load(step.program.instrs, step.args)
        m.run()
        if step.traced:                  # busy counters run free across runs: this run's difference
            after = m.counters(0)
            out.append({k: after[k] - before[k] if k in FREE_COUNTERS else after[k] for k in after})
    return out, m


def test_a_shipped_model_token_profile_equals_the_simulators_counters():
    t = load_target(None)
    options = {"prompt": "What is a tuple?", "tokens": 1}
    p, = recorder.record(workloads.get("model-token"), workloads.Context(t, dict(options)), recorder.SimEngine(t),
                         lambda *a: None)
    (c,), _ = _replay(t, options)
    assert p["cycles"] == c["CYCLES"] and p["instructions"] == c["ICOUNT"] > 100
    assert {u: p["slices"][0]["busy"][u] for u in BUSY} == {u: c[k] for u, k in BUSY.items()}
    assert p["traced"] == p["instrs"]["data"]["pc"].size > 100
    n_prompt = len(open_model(None).prompt_ids(options["prompt"]))
    assert p["name"].startswith(f"qwen3-pydoc token at pos {n_prompt - 1}")
    files = {s["file"] for s in p["sources"]}
    assert "otpu_core/llm/programs.py" in files and {"otpu_core/kernels/attention.py",
                                                     "otpu_core/kernels/mlp.py"} <= files
    # the MMs' time goes to the model's weights: the source table's busiest line is an ol line of a kernel
    top = max(p["source_table"], key=lambda r: r["busy"])
    assert p["sources"][top["src"]]["file"].startswith("otpu_core/")


def test_any_chat_model_decodes_the_engines_argmax_tokens(tiny, tmp_path, capsys):
    t = load_target("sim-small")
    prompt = "a list and a tuple"
    out = tmp_path / "tiny.otpuprof"
    assert lens("record", "-o", str(out), "--engine", "sim", "-t", "sim-small", "--model", str(tiny),
                "--prompt", prompt, "--tokens", "3", "--json") == 0
    profiles = json.loads(capsys.readouterr().out)["profiles"]
    assert [p["workload"] for p in profiles] == ["model-token"] * 3
    # the models layer's own engine, fed the same prompt, picks the tokens from its logits
    model = open_model(str(tiny))
    ids = model.prompt_ids(prompt)
    conv = convert.convert(checkpoint.open_checkpoint(tiny), "int8", t)
    opts = layout.sequence_options(model.config, t.config(), "int8", model_token.CONTEXT, conv.f_chunk)
    eng = engine.Engine(conv, model.config, IsaBackend(t, timing=False), t, opts)
    seq = eng.new_sequence()
    eng.submit(seq, ids)
    for k in range(3):
        assert profiles[k]["name"].startswith(f"tiny-qwen3 token at pos {len(ids) - 1 + k}")
        eng.submit(seq, [int(np.argmax(eng.logits(seq)))])
    replayed, m = _replay(t, {"model": str(tiny), "prompt": prompt, "tokens": 3})
    assert [p["cycles"] for p in profiles] == [c["CYCLES"] for c in replayed]
    # the tokens the workload fed (the prompt, then its first two picks) are the engine's
    n = len(ids) + 2
    fed = m.read_dram(eng.plan.io(0)["ids"].base.const, 4 * n, 0).view(np.float32)
    assert [int(x) for x in fed] == seq.tokens[:n]


def test_model_options_are_refused_by_name(tiny, capsys):
    assert lens("record", "-o", "/dev/null", "--engine", "sim", "-t", "sim-small", "--model", "no-such-model") == 2
    assert "no-such-model" in capsys.readouterr().err
    assert lens("record", "-o", "/dev/null", "--engine", "sim", "-t", "sim-small", "--model", str(tiny),
                "--tokens", "5000") == 2
    err = capsys.readouterr().err
    assert "--tokens 5000" in err and "positions" in err
    assert lens("record", "-o", "/dev/null", "-w", "model-token", "--pos", "3") == 2
    assert "--pos" in capsys.readouterr().err


@pytest.mark.slow
def test_a_model_token_on_the_simulated_card_matches_the_timing_model(tiny, tmp_path, capsys):
    runs = {}
    for engine in ("sim", "card"):
        out = tmp_path / f"{engine}.otpuprof"
        dev = ("--dev", "sim:lens-model") if engine == "card" else ()
        assert lens("record", "-o", str(out), "--engine", engine, *dev, "-t", "sim-small", "--model", str(tiny),
                    "--prompt", "one two three", "--tokens", "2", "--json") == 0
        runs[engine] = json.loads(capsys.readouterr().out)["profiles"]
    assert [p["kind"] for p in runs["card"]] == ["hw", "hw"]
    assert [(p["cycles"], p["instructions"], p["traced"]) for p in runs["card"]] == \
        [(p["cycles"], p["instructions"], p["traced"]) for p in runs["sim"]]
    assert [p["name"].split(" (")[0] for p in runs["card"]] == [p["name"].split(" (")[0] for p in runs["sim"]]
