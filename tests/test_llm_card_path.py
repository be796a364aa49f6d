"""The card path against the golden simulator, on the chat target (ypcb-00338, D=128): the same
compiled programs through the Board on a simulated card and on IsaBackend give the same greedy
tokens for 32 steps over 8 chat prompts, every logit equal as a 32-bit word, and (token by token
for one prompt) the same DRAM image: weights, KV cache, ids, state. Tiny random Qwen3 (GGUF) and
Llama (safetensors) models."""
import numpy as np
import pytest

import llmtiny
from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures: one program cache per module)
from otpu_core.board import Board, BoardBackend, IsaBackend
from otpu_core.llm import checkpoint, convert, engine, layout
from otpu_core.llm.chat_template import ChatTemplate
from otpu_core.llm.sampling import Sampling
from otpu_core.target import load as load_target

T = "ypcb-00338"
PROMPTS = ["What is the capital of France? Answer in one sentence.", "Why is the sky blue? Two sentences.",
           "Write a Python function that checks whether a number is prime.", "Define photosynthesis briefly.",
           "List the first five prime numbers.", "Say good morning in French and in Spanish.",
           "What is the capital of Japan, and what is it famous for?", "Describe the water cycle in one paragraph."]
STEPS = 32


def _model(tmp_path, family, kind):
    cfg = llmtiny.config(family, D=128, d=256, heads=2, kv_heads=1, ffn=512)
    return checkpoint.open_checkpoint(llmtiny.write(tmp_path, cfg, kind)[0])


def _engines(ck):
    t = load_target(T)
    conv = convert.convert(ck, "int8", t)
    opts = layout.ImageOptions(fmt="int8", pages=1, page=256, ctx=256, ring=True)
    board = Board.open("sim:path", T)
    card = engine.Engine(conv, ck.config, BoardBackend(board), t, opts, core_hz=board.info.core_khz * 1000)
    gold = engine.Engine(conv, ck.config, IsaBackend(t, timing=False), t, opts)
    return card, gold, board


def _image(eng) -> np.ndarray:
    return eng.backend.read(layout.BASE, eng.plan.end - layout.BASE)


@pytest.mark.slow
@pytest.mark.parametrize("family,kind,prompts", [("qwen3", "gguf", 8), ("llama", "hf", 2)])
def test_card_path_equals_the_golden_simulator(tmp_path, family, kind, prompts):
    ck = _model(tmp_path, family, kind)
    template = ChatTemplate(ck.chat_template)
    tok = llmtiny.tokenizer()
    card, gold, board = _engines(ck)
    greedy = Sampling(temperature=0)
    try:
        for n, text in enumerate(PROMPTS[:prompts]):
            ids = tok.encode(template.render([{"role": "user", "content": text}]), add_special_tokens=False).ids
            turns = []
            for eng in (card, gold):
                seq = eng.new_sequence()
                eng.submit(seq, ids)
                turns.append(eng.generate(seq, greedy, STEPS, want_logits=True))
                eng.release(seq)
            a, b = turns
            assert a.tokens == b.tokens and len(a.tokens) == STEPS, f"prompt {n}"
            for i, (x, y) in enumerate(zip(a.logits, b.logits)):
                assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"prompt {n}, token {i}"
            assert a.decode.cycles > 0 and a.decode.runs == 1            # the card ran the whole reply at once
        # token by token, the two DRAM images stay equal
        ids = tok.encode(template.render([{"role": "user", "content": PROMPTS[0]}]), add_special_tokens=False).ids
        seqs = []
        for eng in (card, gold):
            seqs.append(eng.new_sequence())
            eng.submit(seqs[-1], ids)
        for i in range(STEPS):
            toks = [eng.generate(s, greedy, 1).tokens for eng, s in zip((card, gold), seqs)]
            assert toks[0] == toks[1], f"token {i}"
            assert np.array_equal(_image(card), _image(gold)), f"DRAM image after token {i}"
    finally:
        board.close()
