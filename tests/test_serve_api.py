"""otpu-serve through the official `openai` client: both endpoints streamed and not, logprobs, usage,
every error status, a client that disconnects, and greedy answers equal to otpu-chat's whatever the
batch holds. One server on the simulated card with the shipped model serves the module."""
from __future__ import annotations

import threading

import httpx
import numpy as np
import openai
import pytest

from llmtiny import _shared, shared_cache  # noqa: F401  (fixtures)
from servetest import client, idle, metric, running

KEY = "test-key"
PROMPTS = ["What does the assert statement do?", "How do I open a file?"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_cache):  # noqa: F811
    with running(tmp_path_factory.mktemp("serve"), devs=("sim:api",), max_batch=4, api_key=KEY) as s:
        yield s


@pytest.fixture
def oa(server):
    return client(server, KEY)


def chat_reference(prompts, n: int) -> list[str]:
    """otpu-chat's greedy answers (its own session and card generate loop) for each prompt."""
    from otpu_chat.session import Options, Session
    out = []
    sess = Session.open(Options(dev="sim:chatref", temperature=0, max_tokens=n))
    try:
        for p in prompts:
            sess.reset()
            out.append(sess.ask(p).text)
    finally:
        sess.close()
    return out


def test_chat_streamed_and_not_with_usage_and_logprobs(oa):
    msgs = [{"role": "user", "content": PROMPTS[0]}]
    r = oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, temperature=0, max_tokens=4, logprobs=True,
                                   top_logprobs=3)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and r.usage.completion_tokens == 4
    assert r.usage.prompt_tokens > 5 and r.usage.total_tokens == r.usage.prompt_tokens + 4
    lps = ch.logprobs.content
    assert len(lps) == 4 and "".join(t.token for t in lps) == ch.message.content
    for t in lps:       # greedy: the chosen token is the most likely; the top list is sorted and a distribution
        tops = [x.logprob for x in t.top_logprobs]
        assert t.logprob == pytest.approx(tops[0]) and tops == sorted(tops, reverse=True)
        assert t.logprob <= 0 and sum(np.exp(tops)) <= 1 + 1e-9
    chunks = list(oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, temperature=0, max_tokens=4,
                                             stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ch.message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 4 and not chunks[-1].choices


def test_completions_streamed_and_not_and_models(oa, server):
    assert [m.id for m in oa.models.list().data] == ["qwen3-pydoc"]
    r = oa.completions.create(model="qwen3-pydoc", prompt="def add(a, b):", temperature=0, max_tokens=5, logprobs=2)
    c = r.choices[0]
    assert r.usage.completion_tokens == 5 and len(c.logprobs.tokens) == 5
    assert "".join(c.logprobs.tokens) == c.text and c.logprobs.text_offset[0] == 0
    streamed = "".join(x.choices[0].text for x in oa.completions.create(
        model="qwen3-pydoc", prompt="def add(a, b):", temperature=0, max_tokens=5, stream=True))
    assert streamed == c.text
    # a stop string cuts the answer before it (and frees the sequence early)
    cut = c.text[2:5]
    s = oa.completions.create(model="qwen3-pydoc", prompt="def add(a, b):", temperature=0, max_tokens=5, stop=[cut])
    assert s.choices[0].text == c.text[:c.text.index(cut)] and s.choices[0].finish_reason == "stop"
    raw = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert raw["data"][0]["context_length"] == 512


def test_greedy_answers_equal_otpu_chat_whatever_the_batch(oa, server):
    """Two greedy prompts at once, with a sampled request in the same batch, each answer as otpu-chat gives it."""
    n = 4
    want = chat_reference(PROMPTS, n)
    got: dict[int, str] = {}
    steps0 = metric(server, "otpu_serve_batch_size_count")
    rows0 = metric(server, "otpu_serve_batch_size_sum")

    def ask(i):
        if i < len(PROMPTS):
            r = oa.chat.completions.create(model="qwen3-pydoc", messages=[{"role": "user", "content": PROMPTS[i]}],
                                           temperature=0, max_tokens=n)
        else:
            r = oa.chat.completions.create(model="qwen3-pydoc", messages=[{"role": "user", "content": "Hi"}],
                                           temperature=1.0, seed=7, max_tokens=n, extra_body={"top_k": 40})
        got[i] = r.choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(2)] == want
    steps = metric(server, "otpu_serve_batch_size_count") - steps0
    rows = metric(server, "otpu_serve_batch_size_sum") - rows0
    assert rows == 3 * n and steps < rows, f"{rows} rows in {steps} step programs: nothing was batched"


def test_errors_in_openai_shape(oa, server):
    url = server.url + "/v1/chat/completions"
    hdr = {"Authorization": f"Bearer {KEY}"}
    r = httpx.post(url, content=b"{not json", headers=hdr)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model="qwen3-pydoc", messages=[{"role": "user", "content": "x"}], temperature=5)
    assert e.value.status_code == 400 and "temperature" in e.value.message and e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError, match="messages"):
        oa.chat.completions.create(model="qwen3-pydoc", messages=[])
    with pytest.raises(openai.AuthenticationError) as e:
        client(server, "wrong").models.list()
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    r = httpx.get(server.url + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    with pytest.raises(openai.NotFoundError) as e:
        oa.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        oa.completions.create(model="qwen3-pydoc", prompt="word " * 600, max_tokens=1)
    assert e.value.code == "context_length_exceeded" and "512" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        oa.completions.create(model="qwen3-pydoc", prompt="hi", max_tokens=600)
    assert e.value.code == "context_length_exceeded"
    r = httpx.get(server.url + "/v1/nothing", headers=hdr)
    assert r.status_code == 404 and "error" in r.json()
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}      # open without a key, like /metrics
    assert metric(server, "otpu_serve_requests_total", endpoint="/v1/chat/completions", code="401") == 0
    assert metric(server, "otpu_serve_requests_total", endpoint="/v1/models", code="401") >= 2


def test_a_client_that_disconnects_frees_its_pages_at_once(oa, server):
    gen0 = metric(server, "otpu_serve_generation_tokens_total")
    stream = oa.chat.completions.create(model="qwen3-pydoc", messages=[{"role": "user", "content": PROMPTS[1]}],
                                        max_tokens=300, stream=True)
    got = 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got >= 2:
            break
    assert metric(server, "otpu_serve_kv_pages", card="sim:api", state="used") >= 1
    stream.close()
    for _ in range(200):
        if metric(server, "otpu_serve_requests_running", card="sim:api") == 0:
            break
        threading.Event().wait(0.05)
    assert metric(server, "otpu_serve_requests_running", card="sim:api") == 0
    assert metric(server, "otpu_serve_kv_pages", card="sim:api", state="used") == 0
    assert metric(server, "otpu_serve_generation_tokens_total") - gen0 < 30      # cancelled, not run to 300


def test_queue_full_is_429_and_a_lost_card_is_503(tmp_path, shared_cache):  # noqa: F811
    from otpu_core.card import faults
    with running(tmp_path, devs=("sim:q",), max_batch=1, queue=1) as s:
        oa = client(s)
        msgs = [{"role": "user", "content": "Hi"}]
        first = oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, max_tokens=200, stream=True)
        next(iter(first))
        second = oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, max_tokens=200, stream=True)
        with pytest.raises(openai.RateLimitError) as e:
            oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, max_tokens=1)
        assert e.value.status_code == 429 and e.value.response.headers["retry-after"] == "1"
        assert metric(s, "otpu_serve_queue_waiting") == 1
        second.close()
        first.close()
        idle(s)                                  # else a request still queued makes the next one a 429
        s.cards[0].board.t.card.faults = faults.parse("link_down")        # the PCIe link drops
        with pytest.raises(openai.InternalServerError) as e:
            oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, max_tokens=3)
        assert e.value.status_code == 503
        r = httpx.get(s.url + "/ready")
        assert r.status_code == 503 and r.json()["cards"][0]["up"] is False
        with pytest.raises(openai.InternalServerError) as e:          # and afterwards, at once
            oa.chat.completions.create(model="qwen3-pydoc", messages=msgs, max_tokens=3)
        assert e.value.code == "card_lost"


def test_two_cards_behind_one_scheduler(tmp_path, shared_cache):  # noqa: F811
    with running(tmp_path, devs=("sim:two0", "sim:two1"), max_batch=1) as s:
        oa = client(s)
        ready = httpx.get(s.url + "/ready").json()
        assert [c["device"] for c in ready["cards"]] == ["sim:two0", "sim:two1"]
        got = {}

        def ask(i):
            got[i] = oa.completions.create(model="qwen3-pydoc", prompt=PROMPTS[0], temperature=0, max_tokens=2)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got[0].choices[0].text == got[1].choices[0].text        # the same answer from either card
        for card in ("sim:two0", "sim:two1"):                          # one slot each: both cards served
            assert metric(s, "otpu_serve_card_requests_total", card=card) == 1
