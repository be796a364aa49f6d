"""The HTTP side of otpu-serve: a Starlette app with OpenAI's endpoints, health, readiness and metrics.

`/v1/chat/completions` and `/v1/completions` (JSON, or server-sent events through sse-starlette
ending in `data: [DONE]`), `/v1/models`; `/health` (the process answers), `/ready` (a card is
serving the loaded model; 503 otherwise, so a proxy routes around it) and `/metrics`
(Prometheus text). With `--api-key` every `/v1` route wants `Authorization: Bearer KEY`.
Every error has OpenAI's body `{"error": {"message", "type", "param", "code"}}`. A client that
goes away (a stream closed, or a plain request dropped) cancels its sequence, whose KV pages
go back to the pool at the next token boundary.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from dataclasses import dataclass

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from otpu_core.llm.errors import ModelError

from . import api
from .metrics import CONTENT_TYPE, ServeMetrics
from .scheduler import Job, NoCard, QueueFull, Scheduler, TooLarge
from .textout import TextOut

DISCONNECT_POLL_S = 0.5


@dataclass
class ServeState:
    model: object                     # otpu_core.llm.models.Model
    sched: Scheduler
    metrics: ServeMetrics
    api_key: str | None
    limit: int                        # positions per sequence
    default_max_tokens: int
    created: int = 0

    @property
    def model_id(self) -> str: return self.model.name


def _error(e: api.ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class _Gone(Exception):
    pass


def build_app(state: ServeState) -> Starlette:
    tok = state.model.tokenizer
    stop_ids = state.model.stop_ids()

    def counted(endpoint: str, handler):
        async def run(request: HttpRequest):
            try:
                if endpoint.startswith("/v1"):
                    _auth(request)
                resp = await handler(request)
            except api.ApiError as e:
                resp = _error(e)
            state.metrics.requests.labels(endpoint, str(resp.status_code)).inc()
            return resp
        return run

    def _auth(request: HttpRequest) -> None:
        if state.api_key is None:
            return
        got = request.headers.get("authorization", "")
        scheme, _, key = got.partition(" ")
        if not got:
            raise api.ApiError(401, "no API key: send 'Authorization: Bearer KEY'", code="missing_api_key")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), state.api_key.encode()):
            raise api.ApiError(401, "incorrect API key provided", code="invalid_api_key")

    async def health(_):
        return JSONResponse({"status": "ok"})

    async def ready(_):
        cards = [{"device": w.card.device, "up": w.alive, **({"error": w.error} if w.error else {})}
                 for w in state.sched.workers]
        if state.sched.ready:
            return JSONResponse({"status": "ready", "model": state.model_id, "cards": cards})
        return JSONResponse({"status": "unavailable", "model": state.model_id, "cards": cards,
                             **api.ApiError(503, "no card is serving", "server_error", code="not_ready").body()},
                            status_code=503)

    async def metrics(_):
        return Response(state.metrics.text(), media_type=CONTENT_TYPE)

    def model_card() -> dict:
        return {"id": state.model_id, "object": "model", "created": state.created, "owned_by": "opentpu",
                "context_length": state.limit}

    async def models(_):
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def one_model(request: HttpRequest):
        _known(request.path_params["model"])
        return JSONResponse(model_card())

    def _known(name: str | None) -> None:
        if name is not None and name != state.model_id:
            raise api.ApiError(404, f"the model '{name}' does not exist; this server serves '{state.model_id}'",
                               param="model", code="model_not_found")

    async def _body(request: HttpRequest):
        raw = await request.body()
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise api.ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None

    def _prompt_ids(req: api.Request) -> list[int]:
        try:
            if req.kind == "completion":
                if isinstance(req.prompt, list):
                    bad = [t for t in req.prompt if not 0 <= t < state.model.config.vocab]
                    if bad:
                        raise api.bad("prompt", f"token id {bad[0]} is outside the vocabulary of "
                                                f"{state.model.config.vocab}")
                    return list(req.prompt)
                return tok.encode(req.prompt, add_special=True)
            if state.model.template is None:
                raise api.ApiError(400, f"the model '{state.model_id}' has no chat template: use /v1/completions",
                                   param="messages", code="no_chat_template")
            rendered = state.model.template.render(req.messages, add_generation_prompt=True, enable_thinking=False)
            return tok.encode(rendered)
        except ModelError as e:
            raise api.ApiError(400, str(e), param="messages") from None

    def _job(req: api.Request, ids: list[int]) -> Job:
        room = state.limit - len(ids)
        asked = req.max_tokens
        if room < 1 or (asked is not None and asked > room):
            want = len(ids) + (asked or 1)
            raise api.ApiError(400, f"this model's maximum context length is {state.limit} tokens; you requested "
                                    f"{want} tokens ({len(ids)} in the prompt, {asked or 1} to generate); shorten "
                                    "the prompt or lower max_tokens",
                               param="messages" if req.kind == "chat" else "prompt", code="context_length_exceeded")
        max_new = min(asked or state.default_max_tokens, room)
        job = Job(ids, req.sampling, max_new, stop_ids, req.logprobs, asyncio.get_running_loop(), asyncio.Queue())
        try:
            state.sched.submit(job)
        except QueueFull as e:
            raise api.ApiError(429, f"the server is busy: {e}; retry shortly", "rate_limit_error",
                               code="queue_full", headers={"Retry-After": "1"}) from None
        except NoCard as e:
            raise api.ApiError(503, f"no card is serving: {e}", "server_error", code="card_lost") from None
        except TooLarge as e:
            raise api.ApiError(400, str(e), param="max_tokens", code="context_length_exceeded") from None
        return job

    async def _events(job: Job, request: HttpRequest | None):
        """The job's events; with `request` (not streaming), a dropped client cancels the job."""
        while True:
            if request is None:
                ev = await job.events.get()
            else:
                try:
                    ev = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        raise _Gone() from None
                    continue
            yield ev
            if ev[0] in ("end", "error"):
                return

    def _lp_chat(out: TextOut, entries) -> dict:
        def one(t, lp):
            s = out.piece(t)
            return {"token": s, "logprob": lp, "bytes": list(s.encode())}
        return {"content": [{**one(t, lp), "top_logprobs": [one(i, v) for i, v in top]} for t, (lp, top) in entries],
                "refusal": None}

    def _lp_text(out: TextOut, entries, offset: int) -> dict:
        toks = [out.piece(t) for t, _ in entries]
        offs, o = [], offset
        for s in toks:
            offs.append(o)
            o += len(s)
        return {"tokens": toks, "token_logprobs": [lp for _, (lp, _) in entries],
                "top_logprobs": [{out.piece(i): v for i, v in top} for _, (_, top) in entries], "text_offset": offs}

    def _usage(job: Job, out: TextOut) -> dict:
        n = len(out.tokens)
        return {"prompt_tokens": len(job.prompt), "completion_tokens": n, "total_tokens": len(job.prompt) + n,
                "prompt_tokens_details": {"cached_tokens": job.reused}}

    async def complete(request: HttpRequest, kind: str):
        body = await _body(request)
        defaults = state.model.config.spec.sampling
        req = api.parse_chat(body, defaults) if kind == "chat" else api.parse_completion(body, defaults)
        _known(req.model)
        ids = _prompt_ids(req)
        job = _job(req, ids)
        out = TextOut(tok, req.stop, stop_ids)
        rid = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        head = {"id": rid, "object": "chat.completion" if kind == "chat" else "text_completion", "created": created,
                "model": state.model_id}
        if req.stream:
            return EventSourceResponse(_stream(job, out, req, head), sep="\n", ping=15)
        return await _whole(job, out, req, head, request)

    def _finish_reason(reason: str, out: TextOut) -> str:
        return "stop" if out.stopped or reason == "stop" else "length"

    async def _whole(job: Job, out: TextOut, req: api.Request, head: dict, request: HttpRequest):
        text, reason = "", "length"
        try:
            async for ev in _events(job, request):
                if ev[0] == "token":
                    text += out.push(ev[1], ev[2])
                    if out.stopped:
                        state.sched.cancel(job)
                        reason = "stop"
                        break
                elif ev[0] == "end":
                    reason = ev[1]
                else:
                    raise api.ApiError(ev[1], ev[2], "server_error", code="card_lost")
        except _Gone:
            state.sched.cancel(job)
            return Response(status_code=499)
        except BaseException:
            state.sched.cancel(job)
            raise
        text += out.flush()
        entries = out.take_logprobs()
        if req.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                      "logprobs": _lp_chat(out, entries) if req.logprobs is not None else None,
                      "finish_reason": _finish_reason(reason, out)}
        else:
            choice = {"index": 0, "text": text, "logprobs": _lp_text(out, entries, 0) if req.logprobs is not None
                      else None, "finish_reason": _finish_reason(reason, out)}
        return JSONResponse({**head, "choices": [choice], "usage": _usage(job, out)})

    async def _stream(job: Job, out: TextOut, req: api.Request, head: dict):
        chat = req.kind == "chat"
        obj = {**head, "object": "chat.completion.chunk"} if chat else head
        sent = 0

        def chunk(delta: str | None, finish: str | None = None, entries=(), role: bool = False) -> dict:
            nonlocal sent
            if chat:
                d = {"role": "assistant", "content": ""} if role else ({"content": delta} if delta is not None else {})
                c = {"index": 0, "delta": d, "logprobs": _lp_chat(out, entries) if entries else None,
                     "finish_reason": finish}
            else:
                c = {"index": 0, "text": delta or "", "logprobs": _lp_text(out, entries, sent) if entries else None,
                     "finish_reason": finish}
            sent += len(delta or "")
            return {"data": json.dumps({**obj, "choices": [c], **({"usage": None} if req.include_usage else {})})}

        done = False
        try:
            if chat:
                yield chunk(None, role=True)
            reason = "length"
            async for ev in _events(job, None):
                if ev[0] == "token":
                    piece = out.push(ev[1], ev[2])
                    if piece:
                        yield chunk(piece, entries=out.take_logprobs())
                    if out.stopped:
                        state.sched.cancel(job)
                        break
                elif ev[0] == "end":
                    reason = ev[1]
                else:
                    err = api.ApiError(ev[1], ev[2], "server_error", code="card_lost")
                    yield {"data": json.dumps(err.body())}
                    yield {"data": "[DONE]"}
                    done = True
                    return
            tail = out.flush()
            if tail or out.pending:
                yield chunk(tail, entries=out.take_logprobs())
            yield chunk(None, _finish_reason(reason, out))
            if req.include_usage:
                yield {"data": json.dumps({**obj, "choices": [], "usage": _usage(job, out)})}
            yield {"data": "[DONE]"}
            done = True
        finally:
            if not done:                   # the client went away mid-stream
                state.sched.cancel(job)

    async def chat(request):
        return await complete(request, "chat")

    async def completion(request):
        return await complete(request, "completion")

    async def http_error(request, exc: HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _error(api.ApiError(exc.status_code, msg, code=code))

    routes = [Route("/health", counted("/health", health)), Route("/ready", counted("/ready", ready)),
              Route("/metrics", counted("/metrics", metrics)),
              Route("/v1/models", counted("/v1/models", models)),
              Route("/v1/models/{model:path}", counted("/v1/models", one_model)),
              Route("/v1/chat/completions", counted("/v1/chat/completions", chat), methods=["POST"]),
              Route("/v1/completions", counted("/v1/completions", completion), methods=["POST"])]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})
