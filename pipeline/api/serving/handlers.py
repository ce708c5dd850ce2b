"""The API's endpoints as request handlers: access checked, the body read and parsed, the requests queued on the
server's own run queue, and the answer sent whole or streamed, each answered request kept in the traffic log.

What they ask of the server (its models, its queue, the link that opens a run on the pages) is `runs`, a
QueueRuns (views/server/api_runs.py); server.py routes the paths here."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ...costs.named_time import plain_tpot, plain_ttft, tpot, ttft
from ...core.errors import InputError
from ...stages.decode_record import EventKind
from ...stages.request import ChatRequest
from .. import anthropic_messages, openai_chat, replay
from ..access import ClientSlots, check_access
from ..call import ApiCall, ModelInfo
from ..errors import ApiError, from_input_error
from ..fields import MAX_BODY_BYTES, parse_body
from ..logprobs import content_logprobs
from ..traffic import TRAFFIC
from .streams import SCHEMA_NAMES, EventStream, items, opened, sse_data

log = logging.getLogger("tpe.api")
RUN_HEADER = "x-tpe-run"


class QueueRuns(Protocol):
    """The server as the handlers use it (views/server/api_runs.py answers)."""

    def catalogue(self) -> dict[str, ModelInfo]: ...
    def max_prompt_tokens(self) -> int: ...
    def bind_address(self) -> str | None: ...
    def run_link(self, base: str, request: ChatRequest, model: ModelInfo, schema: str | None = None) -> str: ...
    def submit_trace(self, request: ChatRequest): ...
    def submit_constrained(self, request: ChatRequest, model: ModelInfo, schema: str): ...
    def submit_stream(self, request: ChatRequest, push): ...
    def end_stream(self, push) -> None: ...
    def stream_prompt_tokens(self, request: ChatRequest, push) -> int: ...
    def tokenizer(self, model: ModelInfo): ...
    def block_size(self) -> int: ...


async def read_body(request: Request) -> dict:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is {int(declared):,} bytes; at most {MAX_BODY_BYTES:,} are accepted.")
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"the body is over {MAX_BODY_BYTES:,} bytes, the most accepted.")
        chunks.append(part)
    return parse_body(b"".join(chunks))


def error_response(e: ApiError, anthropic: bool) -> JSONResponse:
    return JSONResponse(e.anthropic_body() if anthropic else e.openai_body(), e.status, headers=e.headers())


def client_of(request: Request, key: str) -> str:
    return f"key:{key}" if key else f"address:{request.client.host if request.client else '?'}"


def trace_times(trace) -> tuple[float, float | None]:
    t = tpot(trace)
    return ttft(trace).seconds, None if t is None else t.seconds


def answer_times(answer) -> tuple[float | None, float | None]:
    t = plain_tpot(answer)
    return (None if answer.ttft_s is None else plain_ttft(answer).seconds), None if t is None else t.seconds


async def finished(ticket) -> object:
    try:
        return await asyncio.wrap_future(ticket)
    except InputError as e:
        raise from_input_error(e, SCHEMA_NAMES) from None


def models_body(models: list[ModelInfo], anthropic: bool, max_prompt_tokens: int) -> dict:
    if anthropic:
        data = [{"type": "model", "id": m.label, "display_name": m.label, "created_at": "2024-01-01T00:00:00Z",
                 "context_length": m.context_window} for m in models]
        return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
    return {"object": "list", "data": [{"id": m.label, "object": "model", "created": 0, "owned_by": "local",
                                        "context_length": m.context_window,
                                        "max_prompt_tokens": min(m.context_window, max_prompt_tokens),
                                        "weights": m.weights} for m in models]}


class ApiHandlers:
    """POST /v1/chat/completions, POST /v1/messages, GET /v1/models[/{model}], and a 404 for any other /v1 path."""

    def __init__(self, runs: QueueRuns, slots: ClientSlots | None = None):
        self.runs, self.slots = runs, slots or ClientSlots()

    def headers_checked(self, request: Request) -> str:
        return check_access(self.runs.bind_address(), {k.lower(): v for k, v in request.headers.items()})

    async def answer(self, request: Request, anthropic: bool) -> Response:
        held, client = 0, ""
        seen = {"at": time.time(), "api": "anthropic" if anthropic else "openai",
                "client": request.headers.get("user-agent", "")}
        try:
            client = client_of(request, self.headers_checked(request))
            body = await read_body(request)
            seen["body"] = body
            parse = (anthropic_messages if anthropic else openai_chat).parse
            call = await run_in_threadpool(parse, body, self.runs.catalogue())
            base = str(request.base_url).rstrip("/")
            links = [await run_in_threadpool(self.runs.run_link, base, r, call.model, call.schema)
                     for r in call.requests]
            self.slots.take(client, len(call.requests))
            held = len(call.requests)
            if call.stream and not whole_first(call):
                response = await (self.stream_anthropic if anthropic else self.stream_openai)(call, links, client,
                                                                                               seen)
                held = 0  # the stream gives them back when it ends
                return response
            return await (self.whole_anthropic if anthropic else self.whole_openai)(call, links, seen)
        except ApiError as e:
            return error_response(e, anthropic)
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception:  # never a traceback to the client
            log.exception("an API request failed")
            return error_response(ApiError(500, "the server failed on this request (its log says why)."), anthropic)
        finally:
            if held:
                self.slots.give_back(client, held)

    def record_traffic(self, seen: dict, call: ApiCall, link: str, prompt_tokens: int, cached: int,
                       new_tokens: int, times: tuple[float | None, float | None], text: str, streamed: bool) -> None:
        """The answered request in the server's traffic log (the Traffic page); seen: when it came, by which
        route, from which client, with which body."""
        TRAFFIC.add(**seen, model=call.model.label, prompt_tokens=prompt_tokens, cached_tokens=cached,
                    new_tokens=new_tokens, ttft_s=times[0], tpot_s=times[1], answer=text, run_link=link,
                    streamed=streamed, block_size=self.runs.block_size())

    async def whole_openai(self, call: ApiCall, links: list[str], seen: dict) -> Response:
        if call.schema is not None:
            tickets = [await run_in_threadpool(self.runs.submit_constrained, r, call.model, call.schema)
                       for r in call.requests]
        else:
            tickets = [await run_in_threadpool(self.runs.submit_trace, r) for r in call.requests]
        traces = [await finished(t) for t in tickets]
        choices = []
        tokenizer = await run_in_threadpool(self.runs.tokenizer, call.model) if call.logprobs else None
        for i, (trace, link) in enumerate(zip(traces, links)):
            logprobs = None
            if call.logprobs:
                steps = len(trace.generated_token_ids) - (trace.finish_reason == "eos")
                logprobs = content_logprobs(tokenizer, trace.step_logits, trace.generated_token_ids,
                                            call.top_logprobs, steps)
            choices.append({**openai_chat.choice(i, trace.text, trace.finish_reason, logprobs), "tpe_run": link})
        first, completion = traces[0], sum(t.usage.completion_tokens for t in traces)
        usage = openai_chat.usage(first.usage.prompt_tokens, completion, first.reused_positions)
        self.record_traffic(seen, call, links[0], first.usage.prompt_tokens, first.reused_positions, completion,
                            trace_times(first), first.text, streamed=call.stream)
        if call.stream:
            return replayed_openai(call, links, traces, choices, usage)
        body = openai_chat.completion(f"chatcmpl-{first.request.id}", call.model.label, choices, usage, links[0])
        return JSONResponse(body, headers={RUN_HEADER: links[0]})

    async def whole_anthropic(self, call: ApiCall, links: list[str], seen: dict) -> Response:
        trace = await finished(await run_in_threadpool(self.runs.submit_trace, call.requests[0]))
        stop = await run_in_threadpool(self.stop_sequence, call, trace.generated_token_ids, trace.text,
                                       trace.finish_reason)
        usage = anthropic_messages.usage(trace.usage.prompt_tokens, trace.usage.completion_tokens,
                                         trace.reused_positions, call.cache_marks)
        body = anthropic_messages.message(f"msg_{trace.request.id}", call.model.label, trace.text,
                                          trace.finish_reason, stop, usage, links[0])
        self.record_traffic(seen, call, links[0], trace.usage.prompt_tokens, trace.reused_positions,
                            trace.usage.completion_tokens, trace_times(trace), trace.text, streamed=False)
        return JSONResponse(body, headers={RUN_HEADER: links[0]})

    def stop_sequence(self, call: ApiCall, ids: list[int], text: str, finish_reason: str) -> str | None:
        if finish_reason != "stop":
            return None
        full = self.runs.tokenizer(call.model).decode(ids, skip_special_tokens=True)
        return anthropic_messages.stop_sequence_found(full, text, call.requests[0].options.stop)

    def event_stream(self, body, streams, client: str, places: int, link: str) -> EventStream:
        return EventStream(body, streams, lambda: self.slots.give_back(client, places), {RUN_HEADER: link})

    async def stream_openai(self, call: ApiCall, links: list[str], client: str, seen: dict) -> Response:
        streams, first = await opened(call, self.runs.submit_stream, self.runs.end_stream)
        call_id, created, model = f"chatcmpl-{int(time.time() * 1000):x}", int(time.time()), call.model.label
        n, usage_kept = len(call.requests), call.include_usage

        def chunk(**kw) -> str:
            return sse_data(openai_chat.chunk(call_id, model, created, links[0], include_usage=usage_kept, **kw))

        async def body():
            try:
                for i in range(n):
                    yield chunk(index=i, delta={"role": "assistant", "content": ""})
                answers = {}
                async for index, x in items(streams, first, n):
                    if getattr(x, "kind", None) == EventKind.TEXT_DELTA:
                        yield chunk(index=index, delta={"content": x.delta})
                    elif getattr(x, "kind", None) == EventKind.COMPLETED:
                        yield chunk(index=index, finish_reason=x.finish_reason)
                    elif not hasattr(x, "kind"):
                        answers[index] = x
                a, generated = answers[0], sum(len(v.generated) for v in answers.values())
                self.record_traffic(seen, call, links[0], len(a.prompt_ids), a.reused_positions, generated,
                                    answer_times(a), a.text, streamed=True)
                if call.include_usage:
                    usage = openai_chat.usage(len(a.prompt_ids), generated, a.reused_positions)
                    yield sse_data(openai_chat.chunk(call_id, model, created, links[0], usage_body=usage,
                                                     include_usage=True))
                yield "data: [DONE]\n\n"
            except ApiError as e:
                yield sse_data(e.openai_body())
            finally:
                response.close()
        response = self.event_stream(body(), streams, client, n, links[0])
        return response

    async def stream_anthropic(self, call: ApiCall, links: list[str], client: str, seen: dict) -> Response:
        streams, first = await opened(call, self.runs.submit_stream, self.runs.end_stream)
        request, model = call.requests[0], call.model.label
        prompt = await run_in_threadpool(self.runs.stream_prompt_tokens, request, streams.pushes[0])
        call_id, sse = f"msg_{int(time.time() * 1000):x}", anthropic_messages.sse

        async def body():
            try:
                start = anthropic_messages.message(call_id, model, None, None, None,
                                                   anthropic_messages.usage(prompt, 1, 0, 0), links[0])
                yield sse("message_start", {"type": "message_start", "message": start})
                yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                  "content_block": {"type": "text", "text": ""}})
                yield sse("ping", {"type": "ping"})
                async for _, x in items(streams, first, 1):
                    if getattr(x, "kind", None) == EventKind.TEXT_DELTA:
                        yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                          "delta": {"type": "text_delta", "text": x.delta}})
                    elif not hasattr(x, "kind"):
                        stop = await run_in_threadpool(self.stop_sequence, call, x.generated, x.text,
                                                       x.finish_reason)
                        usage = anthropic_messages.usage(len(x.prompt_ids), len(x.generated),
                                                         x.reused_positions, call.cache_marks)
                        self.record_traffic(seen, call, links[0], len(x.prompt_ids), x.reused_positions,
                                            len(x.generated), answer_times(x), x.text, streamed=True)
                        yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
                        yield sse("message_delta", {"type": "message_delta", "usage": usage, "delta": {
                            "stop_reason": anthropic_messages.STOP_REASONS.get(x.finish_reason),
                            "stop_sequence": stop}})
                        yield sse("message_stop", {"type": "message_stop"})
            except ApiError as e:
                yield sse("error", e.anthropic_body())
            finally:
                response.close()
        response = self.event_stream(body(), streams, client, 1, links[0])
        return response

    def models_body(self, anthropic: bool) -> dict:
        offered = list({m.key: m for m in self.runs.catalogue().values()}.values())
        return models_body(offered, anthropic, self.runs.max_prompt_tokens())

    async def models(self, request: Request) -> Response:
        anthropic = "anthropic-version" in request.headers
        try:
            self.headers_checked(request)
            body = await run_in_threadpool(self.models_body, anthropic)
        except ApiError as e:
            return error_response(e, anthropic)
        name = request.path_params.get("model")
        if name is None:
            return JSONResponse(body)
        found = [m for m in body["data"] if m["id"] == name or m["id"].lower() == name.lower()]
        if not found:
            return error_response(ApiError(404, f"{name[:80]!r} is not a model this server offers.", "model"),
                                  anthropic)
        return JSONResponse(found[0])

    @staticmethod
    async def unknown(request: Request) -> Response:
        anthropic = "anthropic-version" in request.headers
        return error_response(ApiError(404, f"{request.method} {request.url.path} is not an endpoint of this server "
                                            "(POST /v1/chat/completions, POST /v1/messages, GET /v1/models)."),
                              anthropic)


def whole_first(call: ApiCall) -> bool:
    """A streamed call whose answers are made whole first, then sent as a stream (pipeline.api.replay): logprobs come
    from the captured run, a response_format answer from the grammar's decode."""
    return call.logprobs or call.schema is not None


def replayed_openai(call: ApiCall, links: list[str], traces: list, choices: list[dict], usage: dict) -> Response:
    """The finished runs as chat.completion.chunk events, in the pieces their own streams made, each with the
    logprobs of the tokens that made it."""
    call_id, created, model = f"chatcmpl-{traces[0].request.id}", int(time.time()), call.model.label

    def chunk(**kw) -> str:
        return sse_data(openai_chat.chunk(call_id, model, created, links[0], include_usage=call.include_usage, **kw))

    def body():
        for i, (trace, made) in enumerate(zip(traces, choices)):
            yield chunk(index=i, delta={"role": "assistant", "content": ""})
            logprobs = made["logprobs"]["content"] if made["logprobs"] else None
            for text, entries in replay.pieces(trace.decode.events, logprobs):
                yield chunk(index=i, delta={"content": text}, logprobs=entries)
            yield chunk(index=i, finish_reason=trace.finish_reason)
        if call.include_usage:
            yield sse_data(openai_chat.chunk(call_id, model, created, links[0], usage_body=usage, include_usage=True))
        yield "data: [DONE]\n\n"
    return StreamingResponse(body(), media_type="text/event-stream", headers={RUN_HEADER: links[0]})
