"""The OpenAI wire format: request bodies checked into a `Request`, errors in OpenAI's shape.

`parse_chat` and `parse_completion` read `/v1/chat/completions` and `/v1/completions` bodies:
`model`, `messages` / `prompt`, `stream` (and `stream_options.include_usage`), `max_tokens`
(or `max_completion_tokens`), `temperature`, `top_p`, `top_k` (as llama-server and vLLM take
it), `stop`, `seed`, `logprobs` (+ `top_logprobs` for chat), `n` (1 only). Absent sampling
fields take the model family's defaults, as otpu-chat does. A bad field is an `ApiError` 400
naming the field, its value and what is allowed (OpenAI's `param`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from otpu_core.llm.sampling import KMAX, Sampling

MAX_STOPS = 4
MAX_TOP_LOGPROBS = 20


class ApiError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"'{param}': {message}", param=param, code="invalid_value")


@dataclass
class Request:
    kind: str                                  # "chat" or "completion"
    model: str | None
    messages: list[dict] = field(default_factory=list)
    prompt: str | list[int] = ""
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    stop: list[str] = field(default_factory=list)
    logprobs: int | None = None


def _number(body: dict, name: str, kind, low=None, high=None, low_open=False):
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int):
        raise bad(name, f"{v!r} is not {'a number' if kind is float else 'an integer'}")
    if low is not None and (v <= low if low_open else v < low):
        raise bad(name, f"{v} must be {'>' if low_open else '>='} {low}")
    if high is not None and v > high:
        raise bad(name, f"{v} must be <= {high}")
    return kind(v)


def _common(body, kind: str, defaults: Sampling) -> Request:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad("model", f"{model!r} is not a string")
    _number(body, "n", int, 1, 1)             # one choice per request
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", f"{stream!r} is not true or false")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad("stream_options", "must be an object")
    max_tokens = _number(body, "max_tokens", int, 1)
    if max_tokens is None:
        max_tokens = _number(body, "max_completion_tokens", int, 1)
    temp = _number(body, "temperature", float, 0, 2)
    top_p = _number(body, "top_p", float, 0, 1, low_open=True)
    top_k = _number(body, "top_k", int, 0, KMAX)
    seed = _number(body, "seed", int)
    stop = body.get("stop")
    if stop is None:
        stops = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= MAX_STOPS:
        stops = list(stop)
    else:
        raise bad("stop", f"{stop!r}: must be a string or a list of at most {MAX_STOPS} strings")
    if any(not s for s in stops):
        raise bad("stop", "an empty stop string never matches")
    s = Sampling(defaults.temperature if temp is None else temp, defaults.top_k if top_k is None else top_k,
                 defaults.top_p if top_p is None else top_p, defaults.repeat_penalty,
                 0 if seed is None else seed % 2**63)
    return Request(kind, model, stream=stream, include_usage=bool(opts.get("include_usage")), max_tokens=max_tokens,
                   sampling=s, stop=stops)


def _content(m: dict, i: int) -> str:
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        parts = []
        for j, p in enumerate(c):
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise bad(f"messages[{i}].content[{j}]", "only text parts ({'type': 'text', 'text': ...}) are "
                                                         "supported")
            parts.append(p["text"])
        return "".join(parts)
    raise bad(f"messages[{i}].content", f"{c!r} is not a string or a list of text parts")


def parse_chat(body, defaults: Sampling) -> Request:
    req = _common(body, "chat", defaults)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise bad(f"messages[{i}].role", f"{(m or {}).get('role') if isinstance(m, dict) else m!r}: must be "
                                             "system, developer, user, assistant or tool")
        role = "system" if m["role"] == "developer" else m["role"]
        req.messages.append({"role": role, "content": _content(m, i)})
    lp = body.get("logprobs")
    if lp is not None and not isinstance(lp, bool):
        raise bad("logprobs", f"{lp!r} is not true or false")
    top = _number(body, "top_logprobs", int, 0, MAX_TOP_LOGPROBS)
    if top is not None and not lp:
        raise bad("top_logprobs", "needs logprobs: true")
    req.logprobs = (top or 0) if lp else None
    return req


def parse_completion(body, defaults: Sampling) -> Request:
    req = _common(body, "completion", defaults)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        req.prompt = list(p)
    elif isinstance(p, str) and p:
        req.prompt = p
    else:
        raise bad("prompt", "must be a non-empty string (one prompt) or a list of token ids")
    req.logprobs = _number(body, "logprobs", int, 0, 5)
    return req
