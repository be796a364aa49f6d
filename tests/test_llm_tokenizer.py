"""Tokenizers (tokenizer.json, and rebuilt from a GGUF vocabulary and merges) and chat templates
rendered as transformers' apply_chat_template does (the expected strings are written out here)."""
import pytest

import llmtiny
from otpu_core.llm import checkpoint
from otpu_core.llm.chat_template import ChatTemplate
from otpu_core.llm.errors import ModelError
from otpu_core.llm.tokenizer import PRE_TOKENIZERS, from_gguf, load

TEXTS = ["Hello world, the quick brown fox!", "def f(x):\n    return x + 1  # comment\n",
         "<|im_start|>user\nWhat is a list?<|im_end|>\n<|im_start|>assistant\n", "naïve café 東京 \t\n\n  spaces",
         "It's 2024; don't panic... 12345 + 67.89"]


def test_gguf_vocabulary_tokenizes_like_its_tokenizer_json(tmp_path):
    cfg = llmtiny.config()
    g, _ = llmtiny.write(tmp_path, cfg, "gguf")
    h, _ = llmtiny.write(tmp_path, cfg, "hf")
    a = load(checkpoint.open_checkpoint(g).tokenizer, "gguf")
    b = load(checkpoint.open_checkpoint(h).tokenizer, "hf")
    assert a.vocab_size == b.vocab_size == cfg.vocab
    for text in TEXTS:
        ids = b.encode(text)
        assert a.encode(text) == ids, text
        assert a.decode(ids, skip_special=False) == text
    im_start = b.token_id("<|im_start|>")
    assert a.encode("<|im_start|>")[0] == im_start and len(a.encode("<|im_start|>user")) >= 2   # one special token


def test_stream_holds_back_partial_characters(tmp_path):
    h, _ = llmtiny.write(tmp_path, llmtiny.config(), "hf")
    tok = load(checkpoint.open_checkpoint(h).tokenizer, "hf")
    text = "naïve café 東京 ok"
    s = tok.stream()
    pieces = [s.push(i) for i in tok.encode(text)]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)


def test_unsupported_vocabularies_are_refused_by_name():
    with pytest.raises(ModelError, match="tokenizer.ggml.model 'llama' is not supported"):
        from_gguf({"model": "llama", "tokens": ["a"]}, "x.gguf")
    with pytest.raises(ModelError, match="tokenizer.ggml.pre 'weird' is not supported") as e:
        from_gguf({"model": "gpt2", "pre": "weird", "tokens": ["a"], "merges": []}, "x.gguf")
    assert "qwen2" in e.value.hint and set(PRE_TOKENIZERS) >= {"gpt-2", "llama-bpe", "qwen2"}


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = """{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""
BLOCKS = """{% for m in messages %}
  {% if m.role == 'system' %}
    [SYS]{{ m.content }}
  {% else %}
    {{ m.role }}: {{ m.content }}
  {% endif %}
{% endfor %}
"""
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi  "},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What is 2+2?"}]


def test_chatml():
    t = ChatTemplate(CHATML)
    assert t.render(MESSAGES[1:2]) == "<|im_start|>user\nHi  <|im_end|>\n<|im_start|>assistant\n"
    assert t.render(MESSAGES[1:3], add_generation_prompt=False) == \
        "<|im_start|>user\nHi  <|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"


def test_llama3_style_template_with_whitespace_control_and_special_tokens():
    t = ChatTemplate(LLAMA3, {"bos_token": "<|begin_of_text|>"})
    assert t.render(MESSAGES) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_trim_and_lstrip_blocks_like_transformers():
    # trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before it
    out = ChatTemplate(BLOCKS).render(MESSAGES[:2], add_generation_prompt=False)
    assert out == "    [SYS]Be brief.\n    user: Hi  \n"


def test_globals_and_filters():
    t = ChatTemplate("{{ messages[0] | tojson }}|{{ {'a': 'é', 'b': [1, 2]} | tojson(indent=1) }}|"
                     "{{ strftime_now('%Y') | length }}{% generation %}!{% endgeneration %}")
    out = t.render([{"role": "user", "content": "ü"}])
    assert out == '{"role": "user", "content": "ü"}|{\n "a": "é",\n "b": [\n  1,\n  2\n ]\n}|4!'
    guard = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('first message must be the user') }}"
                         "{% endif %}ok", where="m/tokenizer_config.json")
    assert guard.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ModelError, match="m/tokenizer_config.json: the chat template refused the conversation: "
                                         "first message must be the user"):
        guard.render([{"role": "assistant", "content": "x"}])
    with pytest.raises(ModelError, match="chat template syntax error at line 1"):
        ChatTemplate("{% for x in %}")


def test_template_comes_from_tokenizer_config_and_gguf(tmp_path):
    cfg = llmtiny.config()
    for kind in ("hf", "gguf"):
        p, _ = llmtiny.write(tmp_path, cfg, kind)
        ck = checkpoint.open_checkpoint(p)
        assert ChatTemplate(ck.chat_template, ck.special).render(MESSAGES[1:2]) == \
            "<|im_start|>user\nHi  <|im_end|>\n<|im_start|>assistant\n"
