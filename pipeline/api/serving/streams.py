"""A streamed call's answers on the queue's plain path as server-sent events: their events (and their tickets'
ends) gathered in one asyncio queue, and a response that, however it ends, ends its answers and gives the
client's places back once."""
from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import Future

from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from ...core.errors import InputError
from ..call import ApiCall
from ..errors import ApiError, from_input_error

log = logging.getLogger("tpe.api")
SCHEMA_NAMES = {"json_schema": "response_format.json_schema.schema"}  # the field an InputError about a schema names


class Streams:
    """The call's answers on the plain path, their events (and their tickets' ends) in one asyncio queue.
    submit(request, push) queues one answer (a ticket); end(push) ends an answer whose client left."""

    def __init__(self, call: ApiCall, submit, end):
        self.loop, self.events = asyncio.get_running_loop(), asyncio.Queue()
        self.submit, self.end = submit, end
        self.gone = False
        self.pushes = [self._push(i) for i in range(len(call.requests))]
        self.tickets = []

    def _push(self, index: int):
        def push(event) -> None:  # in the queue's thread
            if self.gone:
                self.end(push)
            self.loop.call_soon_threadsafe(self.events.put_nowait, (index, event))
        return push

    async def start(self, call: ApiCall) -> tuple[int, object]:
        """Queue every answer; returns the first thing that happened (an event, or a ticket that failed)."""
        for index, (request, push) in enumerate(zip(call.requests, self.pushes)):
            ticket = await run_in_threadpool(self.submit, request, push)
            ticket.add_done_callback(lambda f, i=index: self.loop.call_soon_threadsafe(self.events.put_nowait, (i, f)))
            self.tickets.append(ticket)
        return await self.events.get()

    def leave(self) -> None:
        self.gone = True
        for push in self.pushes:
            self.end(push)


class EventStream(StreamingResponse):
    """Server-sent events that, however the response ends (finished, its client gone, never started because the
    client left before the first byte), end their answers and give the client's places back (release()), once."""

    def __init__(self, body, streams: Streams, release, headers: dict):
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self.streams, self.release = streams, release

    def close(self) -> None:
        if not self.streams.gone:
            self.streams.leave()
            self.release()

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.close()


def ticket_error(error: BaseException) -> ApiError:
    if isinstance(error, InputError):
        return from_input_error(error, SCHEMA_NAMES)
    log.error("an API run failed", exc_info=error)
    return ApiError(500, "the run failed on the server (its log says why).")


async def opened(call: ApiCall, submit, end) -> tuple[Streams, tuple[int, object]]:
    """The streams started, and their first item: an error before any event is an ordinary error response (the
    caller gives the client's places back)."""
    streams = Streams(call, submit, end)
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
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
