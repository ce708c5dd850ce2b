"""The app's server: the pages (app.py) and the OpenAI- and Anthropic-compatible API (/v1/...) on one port, in one
process, so an API request shares the model, the run queue and the store of runs with the pages.

Started by `./run.sh` (`streamlit run server.py`); `streamlit run app.py` serves the pages alone. The API's plain
logic (parsing, checks, the bodies each SDK reads) is pipeline/api/; this module only moves bytes and waits on the
queue. docs/api.md lists every field.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from concurrent.futures import Future

from pipeline.server.process import give_freed_arrays_back, quiet_library_noise, wait_passively

wait_passively()  # before torch loads (an API request may load it before any page does)
quiet_library_noise()
give_freed_arrays_back()

import streamlit as st  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402
from starlette.requests import ClientDisconnect, Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from pipeline.api import anthropic_messages, openai_chat, replay  # noqa: E402
from pipeline.api.access import ClientSlots, check_access  # noqa: E402
from pipeline.api.call import ApiCall, ModelInfo  # noqa: E402
from pipeline.api.errors import ApiError, from_input_error  # noqa: E402
from pipeline.api.fields import MAX_BODY_BYTES, parse_body  # noqa: E402
from pipeline.api.logprobs import content_logprobs  # noqa: E402
from pipeline.api.traffic import TRAFFIC  # noqa: E402
from pipeline.costs.named_time import plain_tpot, plain_ttft, tpot, ttft  # noqa: E402
from pipeline.core.errors import InputError  # noqa: E402
from pipeline.stages.decode_record import EventKind, FinishReason  # noqa: E402
from pipeline.stages.logit_bias import logit_bias_text  # noqa: E402
from pipeline.stages.request import ChatRequest  # noqa: E402

log = logging.getLogger("tpe.api")
# st.cache_resource (the model handles, the queue, the stores) read from the API's threads, which run no page: fine
logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)
RUN_HEADER = "x-tpe-run"
SCHEMA_NAMES = {"json_schema": "response_format.json_schema.schema"}
slots = ClientSlots()


# ---- what the server offers -------------------------------------------------------------------------
_catalogue: dict[str, ModelInfo] = {}
_catalogue_lock = threading.Lock()  # requests arrive on several threads: none may read a half-made catalogue


def catalogue() -> dict[str, ModelInfo]:
    """The picker's models by key and name (lower-cased too), each with its window, read from its files once."""
    with _catalogue_lock:
        if not _catalogue:
            from pipeline.model.registry import resolve
            from views.request.session import model_label
            from views.server.state import default_weights, get_model, offered_models

            made: dict[str, ModelInfo] = {}
            for key in offered_models()[0]:
                spec = resolve(key)
                dims = get_model(key).config_dims
                info = ModelInfo(key, model_label(spec), dims.V, dims.context_window, default_weights())
                for name in (key, info.label, key.lower(), info.label.lower()):
                    made.setdefault(name, info)
            _catalogue.update(made)
    return _catalogue


def models_body(anthropic: bool) -> dict:
    from views.server.state import APP_MAX_PROMPT_TOKENS

    models = list({m.key: m for m in catalogue().values()}.values())
    if anthropic:
        data = [{"type": "model", "id": m.label, "display_name": m.label, "created_at": "2024-01-01T00:00:00Z",
                 "context_length": m.context_window} for m in models]
        return {"data": data, "has_more": False, "first_id": data[0]["id"], "last_id": data[-1]["id"]}
    return {"object": "list", "data": [{"id": m.label, "object": "model", "created": 0, "owned_by": "local",
                                        "context_length": m.context_window,
                                        "max_prompt_tokens": min(m.context_window, APP_MAX_PROMPT_TOKENS),
                                        "weights": m.weights} for m in models]}


def run_link(base: str, request: ChatRequest, model: ModelInfo, schema: str | None = None) -> str:
    """The link that opens this request on the app's pages (a short link: views/links/url_state.py reads it); a request
    decoded under a schema opens on Constrained output with the schema filled in."""
    from pipeline.server.room import room_store
    from views.links.controls import link_name
    from views.links.url_state import REQUEST

    history = "\n".join(f"{r}: {c}" for r, c in request.messages if r != "system" and (r, c) != request.messages[-1])
    o = request.options
    values = {"req_model": model.key, "req_prompt_format": request.prompt_format, "req_weights": request.weights,
              "req_question": request.messages[-1][1], "req_system": request.system or "", "req_history": history,
              "req_stop": "|".join(o.stop), "req_logit_bias": logit_bias_text(o.logit_bias),
              **{f"req_{name}": getattr(o, name) for name in (
                  "max_new_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "repetition_penalty",
                  "presence_penalty", "frequency_penalty")}}
    query = {name: p.show(values[p.key]) for name, p in REQUEST.items()}
    page = "journey"
    if schema is not None:
        page, query = "constrained", {**query, link_name("co_kind"): "json_schema",
                                      link_name("co_spec_json_schema"): schema}
    code = room_store().put_link(query)
    return f"{base}/{page}?link={code}" if code else f"{base}/{page}"


# ---- running the requests ---------------------------------------------------------------------------
def submit_trace(request: ChatRequest):
    """The request as a page runs it (views.server.waiting.run_through_queue): captured, stored where every page
    finds it."""
    from pipeline.run.trace import run_trace
    from views.server.state import APP_MAX_PROMPT_TOKENS, get_model, run_queue, run_store
    from views.request.session import request_key

    key, lm = request_key(request), get_model(request.model, request.weights)
    work = lambda: run_store().get_or_run(key, lambda: run_trace(request, lm, APP_MAX_PROMPT_TOKENS))  # noqa: E731
    return _submitted(lambda: run_queue().submit(key, work, batch=("trace", (key, request, time.perf_counter()))))


def submit_constrained(request: ChatRequest, model: ModelInfo, schema: str):
    """The request decoded under a JSON schema, as Constrained output runs it and where that page finds it."""
    from pipeline.run.trace import run_constrained_trace
    from pipeline.server.run_queue import cost_of
    from views.server.state import APP_MAX_PROMPT_TOKENS, get_model, result_store, run_queue, using_model
    from views.request.session import request_key

    key = (model.key, model.weights, "constrained", request_key(request), "json_schema", schema)

    def work():
        with using_model(model.key, model.weights):
            return result_store().get_or_run(key, lambda: run_constrained_trace(
                request, get_model(), "json_schema", schema, APP_MAX_PROMPT_TOKENS))
    return _submitted(lambda: run_queue().submit(key, work, cost_of(100, request.options.max_new_tokens)))


def submit_stream(request: ChatRequest, push):
    """The request on the plain path (the live answer's), its events pushed as they are made."""
    from views.server.state import run_queue

    return _submitted(lambda: run_queue().submit(("api", id(push)), lambda: None, batch=("api", (request, push))))


QUEUE_LONG_RETRY_S = 30  # a long prompt refused while the queue is long: when to try again


def _submitted(submit):
    from pipeline.server.run_queue import LONG_QUEUE
    from views.server.state import run_queue

    try:
        return submit()
    except InputError as e:
        if len(run_queue()) >= LONG_QUEUE:  # the queue refuses a long prompt while it is long: come back later
            raise ApiError(429, e.message, "messages", retry_after_s=QUEUE_LONG_RETRY_S) from None
        raise from_input_error(e) from None


def end_stream(push) -> None:
    """A client left: its answer ends at the batch's next step (its slot and K/V freed), or at its first token if it
    is still waiting in line."""
    from views.server.state import run_queue

    for _, row, _ in list(run_queue().engines["api"].started.values()):
        if row.answer.on_event is push:
            row.answer.end(FinishReason.LENGTH)


async def finished(ticket) -> object:
    try:
        return await asyncio.wrap_future(ticket)
    except InputError as e:
        raise from_input_error(e, SCHEMA_NAMES) from None


def ticket_error(error: BaseException) -> ApiError:
    if isinstance(error, InputError):
        return from_input_error(error, SCHEMA_NAMES)
    log.error("an API run failed", exc_info=error)
    return ApiError(500, "the run failed on the server (its log says why).")


# ---- the endpoints ----------------------------------------------------------------------------------
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


def bind_address() -> str | None:
    from streamlit import config

    return config.get_option("server.address")


def record_traffic(seen: dict, call: ApiCall, link: str, prompt_tokens: int, cached: int, new_tokens: int,
                   times: tuple[float | None, float | None], text: str, streamed: bool) -> None:
    """The answered request in the server's traffic log (the Traffic page); seen: when it came, by which route,
    from which client, with which body."""
    from pipeline.prompt_cache.engine import PrefixCacheConfig

    TRAFFIC.add(**seen, model=call.model.label, prompt_tokens=prompt_tokens, cached_tokens=cached,
                new_tokens=new_tokens, ttft_s=times[0], tpot_s=times[1], answer=text, run_link=link,
                streamed=streamed, block_size=PrefixCacheConfig.block_size)


def trace_times(trace) -> tuple[float, float | None]:
    t = tpot(trace)
    return ttft(trace).seconds, None if t is None else t.seconds


def answer_times(answer) -> tuple[float | None, float | None]:
    t = plain_tpot(answer)
    return (None if answer.ttft_s is None else plain_ttft(answer).seconds), None if t is None else t.seconds


async def answer(request: Request, anthropic: bool) -> Response:
    held, client = 0, ""
    seen = {"at": time.time(), "api": "anthropic" if anthropic else "openai",
            "client": request.headers.get("user-agent", "")}
    try:
        key = check_access(bind_address(), {k.lower(): v for k, v in request.headers.items()})
        client = client_of(request, key)
        body = await read_body(request)
        seen["body"] = body
        call = await run_in_threadpool((anthropic_messages if anthropic else openai_chat).parse, body, catalogue())
        base = str(request.base_url).rstrip("/")
        links = [await run_in_threadpool(run_link, base, r, call.model, call.schema) for r in call.requests]
        slots.take(client, len(call.requests))
        held = len(call.requests)
        if call.stream and not whole_first(call):
            response = await (stream_anthropic if anthropic else stream_openai)(call, links, client, seen)
            held = 0  # the stream gives them back when it ends
            return response
        return await (whole_anthropic if anthropic else whole_openai)(call, links, seen)
    except ApiError as e:
        return error_response(e, anthropic)
    except ClientDisconnect:
        return Response(status_code=499)
    except Exception:  # never a traceback to the client
        log.exception("an API request failed")
        return error_response(ApiError(500, "the server failed on this request (its log says why)."), anthropic)
    finally:
        if held:
            slots.give_back(client, held)


async def whole_openai(call: ApiCall, links: list[str], seen: dict) -> Response:
    if call.schema is not None:
        tickets = [await run_in_threadpool(submit_constrained, r, call.model, call.schema) for r in call.requests]
    else:
        tickets = [await run_in_threadpool(submit_trace, r) for r in call.requests]
    traces = [await finished(t) for t in tickets]
    choices = []
    tokenizer = await run_in_threadpool(lambda: _tokenizer(call.model)) if call.logprobs else None
    for i, (trace, link) in enumerate(zip(traces, links)):
        logprobs = None
        if call.logprobs:
            steps = len(trace.generated_token_ids) - (trace.finish_reason == "eos")
            logprobs = content_logprobs(tokenizer, trace.step_logits, trace.generated_token_ids, call.top_logprobs,
                                        steps)
        choices.append({**openai_chat.choice(i, trace.text, trace.finish_reason, logprobs), "tpe_run": link})
    first, completion = traces[0], sum(t.usage.completion_tokens for t in traces)
    usage = openai_chat.usage(first.usage.prompt_tokens, completion, first.reused_positions)
    record_traffic(seen, call, links[0], first.usage.prompt_tokens, first.reused_positions, completion,
                   trace_times(first), first.text, streamed=call.stream)
    if call.stream:
        return replayed_openai(call, links, traces, choices, usage)
    body = openai_chat.completion(f"chatcmpl-{first.request.id}", call.model.label, choices, usage, links[0])
    return JSONResponse(body, headers={RUN_HEADER: links[0]})


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


async def whole_anthropic(call: ApiCall, links: list[str], seen: dict) -> Response:
    trace = await finished(await run_in_threadpool(submit_trace, call.requests[0]))
    stop = await run_in_threadpool(_stop_sequence, call, trace.generated_token_ids, trace.text, trace.finish_reason)
    usage = anthropic_messages.usage(trace.usage.prompt_tokens, trace.usage.completion_tokens,
                                     trace.reused_positions, call.cache_marks)
    body = anthropic_messages.message(f"msg_{trace.request.id}", call.model.label, trace.text, trace.finish_reason,
                                      stop, usage, links[0])
    record_traffic(seen, call, links[0], trace.usage.prompt_tokens, trace.reused_positions,
                   trace.usage.completion_tokens, trace_times(trace), trace.text, streamed=False)
    return JSONResponse(body, headers={RUN_HEADER: links[0]})


def _tokenizer(model: ModelInfo):
    from views.server.state import get_model

    return get_model(model.key, model.weights).tokenizer


def _stop_sequence(call: ApiCall, ids: list[int], text: str, finish_reason: str) -> str | None:
    if finish_reason != "stop":
        return None
    full = _tokenizer(call.model).decode(ids, skip_special_tokens=True)
    return anthropic_messages.stop_sequence_found(full, text, call.requests[0].options.stop)


class Streams:
    """The call's answers on the plain path, their events (and their tickets' ends) in one asyncio queue."""

    def __init__(self, call: ApiCall):
        self.loop, self.events = asyncio.get_running_loop(), asyncio.Queue()
        self.gone = False
        self.pushes = [self._push(i) for i in range(len(call.requests))]
        self.tickets = []

    def _push(self, index: int):
        def push(event) -> None:  # in the queue's thread
            if self.gone:
                end_stream(push)
            self.loop.call_soon_threadsafe(self.events.put_nowait, (index, event))
        return push

    async def start(self, call: ApiCall) -> tuple[int, object]:
        """Queue every answer; returns the first thing that happened (an event, or a ticket that failed)."""
        for index, (request, push) in enumerate(zip(call.requests, self.pushes)):
            ticket = await run_in_threadpool(submit_stream, request, push)
            ticket.add_done_callback(lambda f, i=index: self.loop.call_soon_threadsafe(self.events.put_nowait, (i, f)))
            self.tickets.append(ticket)
        return await self.events.get()

    def leave(self) -> None:
        self.gone = True
        for push in self.pushes:
            end_stream(push)


class EventStream(StreamingResponse):
    """Server-sent events that, however the response ends (finished, its client gone, never started because the
    client left before the first byte), end their answers and give the client's places back, once."""

    def __init__(self, body, streams: Streams, client: str, places: int, headers: dict):
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self.streams, self.client, self.places = streams, client, places

    def close(self) -> None:
        if not self.streams.gone:
            self.streams.leave()
            slots.give_back(self.client, self.places)

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.close()


async def opened(call: ApiCall) -> tuple[Streams, tuple[int, object]]:
    """The streams started, and their first item: an error before any event is an ordinary error response (the
    caller gives the client's places back)."""
    streams = Streams(call)
    try:
        first = await streams.start(call)
    except BaseException:
        streams.leave()
        raise
    if isinstance(first[1], Future) and first[1].exception() is not None:
        streams.leave()
        raise ticket_error(first[1].exception())
    return streams, first


async def items(streams: Streams, first, n: int):
    """(index, event or finished Answer) until every answer has ended; an answer that failed raises ApiError."""
    pending, item = set(range(n)), first
    while True:
        index, x = item
        if isinstance(x, Future):
            if x.exception() is not None:
                raise ticket_error(x.exception())
            pending.discard(index)
            yield index, x.result()
        else:
            yield index, x
        if not pending:
            return
        item = await streams.events.get()


def sse_data(data: dict) -> str:
    import json

    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def stream_openai(call: ApiCall, links: list[str], client: str, seen: dict) -> Response:
    streams, first = await opened(call)
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
            record_traffic(seen, call, links[0], len(a.prompt_ids), a.reused_positions, generated, answer_times(a),
                           a.text, streamed=True)
            if call.include_usage:
                usage = openai_chat.usage(len(a.prompt_ids), generated, a.reused_positions)
                yield sse_data(openai_chat.chunk(call_id, model, created, links[0], usage_body=usage,
                                                 include_usage=True))
            yield "data: [DONE]\n\n"
        except ApiError as e:
            yield sse_data(e.openai_body())
        finally:
            response.close()
    response = EventStream(body(), streams, client, n, {RUN_HEADER: links[0]})
    return response


async def stream_anthropic(call: ApiCall, links: list[str], client: str, seen: dict) -> Response:
    from views.server.state import run_queue

    streams, first = await opened(call)
    request, model = call.requests[0], call.model.label
    prompt = await run_in_threadpool(run_queue().engines["api"].prompt_tokens, (request, streams.pushes[0]))
    call_id = f"msg_{int(time.time() * 1000):x}"
    sse = anthropic_messages.sse

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
                    stop = await run_in_threadpool(_stop_sequence, call, x.generated, x.text, x.finish_reason)
                    usage = anthropic_messages.usage(len(x.prompt_ids), len(x.generated),
                                                     x.reused_positions, call.cache_marks)
                    record_traffic(seen, call, links[0], len(x.prompt_ids), x.reused_positions,
                                   len(x.generated), answer_times(x), x.text, streamed=True)
                    yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
                    yield sse("message_delta", {"type": "message_delta", "usage": usage, "delta": {
                        "stop_reason": anthropic_messages.STOP_REASONS.get(x.finish_reason), "stop_sequence": stop}})
                    yield sse("message_stop", {"type": "message_stop"})
        except ApiError as e:
            yield sse("error", e.anthropic_body())
        finally:
            response.close()
    response = EventStream(body(), streams, client, 1, {RUN_HEADER: links[0]})
    return response


async def chat_completions(request: Request) -> Response:
    return await answer(request, anthropic=False)


async def messages(request: Request) -> Response:
    return await answer(request, anthropic=True)


async def models(request: Request) -> Response:
    anthropic = "anthropic-version" in request.headers
    try:
        check_access(bind_address(), {k.lower(): v for k, v in request.headers.items()})
        body = await run_in_threadpool(models_body, anthropic)
    except ApiError as e:
        return error_response(e, anthropic)
    name = request.path_params.get("model")
    if name is None:
        return JSONResponse(body)
    found = [m for m in body["data"] if m["id"] == name or m["id"].lower() == name.lower()]
    if not found:
        return error_response(ApiError(404, f"{name[:80]!r} is not a model this server offers.", "model"), anthropic)
    return JSONResponse(found[0])


async def unknown(request: Request) -> Response:
    anthropic = "anthropic-version" in request.headers
    return error_response(ApiError(404, f"{request.method} {request.url.path} is not an endpoint of this server "
                                        "(POST /v1/chat/completions, POST /v1/messages, GET /v1/models)."), anthropic)


ROUTES = [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
          Route("/v1/messages", messages, methods=["POST"]),
          Route("/v1/models", models, methods=["GET"]),
          Route("/v1/models/{model:path}", models, methods=["GET"]),
          Route("/v1/{rest:path}", unknown, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]

@contextlib.asynccontextmanager
async def lifespan(_app):
    """At start: a lesson's runs queued (`./run.sh app --lesson FILE`, views/server/lesson_runs.py), in a thread: the
    model's files are read first, and the server answers meanwhile."""
    from views.server.lesson_runs import LESSON_ENV, lesson_runs

    if os.environ.get(LESSON_ENV, "").strip():
        threading.Thread(target=lesson_runs, name="lesson-start", daemon=True).start()
    yield


app = st.App("app.py", routes=ROUTES, lifespan=lifespan)
