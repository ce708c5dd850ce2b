"""A place in the run queue: a Ticket (a Future with its position and an estimate) for a request or a job
run whole, a LongTicket for a job run a chunk at a time; and what a step engine must do."""
from __future__ import annotations

import contextvars
from concurrent.futures import Future, wait
from typing import Callable, Hashable, Protocol

from pipeline.core.long_jobs import Progress, Steps


class Line(Protocol):
    """What a ticket asks of the queue that holds it (pipeline.server.run_queue.RunQueue)."""

    def clock(self) -> float: ...

    def position(self, ticket: "Ticket") -> int: ...

    def estimate_s(self, ticket: "Ticket") -> float | None: ...

    def withdraw(self, ticket: "LongTicket", asker: Hashable) -> bool: ...


class StepEngine(Protocol):
    """What the queue steps for a kind of job decoded together (pipeline.server.trace_engine has the real ones).
    An engine may also offer start_together(payloads, contexts) -> [handle or the error that refused it]: the
    requests admitted in one gap between steps, prefilled together (TraceEngine: one batched pass); the queue
    uses it for two or more, with each payload's caller's context (whose pass counter its passes count for).
    An engine may name what ran a started request, served_by(handle) -> {prefill_path, decode_path, device}
    (paths as pipeline.costs.named_time names them): the schedule's TTFT and TPOT are named by them.
    An engine may say what its requests hold together, held_bytes(payloads, prompt_tokens) -> KV bytes (a static
    batch pads them to its bucket): admission then counts that (held_if_admitted), else the sum of reserve's bytes.
    `start` runs in its caller's context, `step` in the first member's: an engine that runs several callers'
    requests in one pass names them (pipeline.model.passes.passes_for)."""

    def price(self, payload) -> tuple[int, int]:
        """(cost, prompt tokens) of a request: its place in the estimates, and whether a long queue refuses it."""

    def reserve(self, payload) -> tuple[int, int]:
        """(prompt tokens, KV bytes the request reaches at its longest): what admission counts."""

    def start(self, payload) -> Hashable:
        """Run the request's prefill; a handle for it (raises InputError etc. for a request refused)."""

    def step(self) -> list[tuple[Hashable, object]]:
        """One decode step of every started request; (handle, result) of those that ended in it (a result
        may be a concurrent.futures.Future of it, made elsewhere, or an Unfinished one)."""


def held_if_admitted(engines: dict, running: list, head, head_reserved: tuple[int, int]) -> int:
    """The KV bytes the batch would hold with `head` (a Ticket; reserve's (prompt tokens, KV bytes) for it)
    admitted beside `running` (the Tickets in the batch or admitted in this gap, each with its own `reserved`): per
    engine its held_bytes of its requests where it has one, else their reserved bytes."""
    by_engine: dict[str, list[tuple[object, tuple[int, int]]]] = {}
    for ticket, reserved in [*((t, t.reserved) for t in running), (head, head_reserved)]:
        by_engine.setdefault(ticket.batch[0], []).append((ticket.batch[1], reserved))
    total = 0
    for name, members in by_engine.items():
        held = getattr(engines[name], "held_bytes", None)
        total += (held([payload for payload, _ in members], [prompt for _, (prompt, _) in members]) if held
                  else sum(kv for _, (_, kv) in members))
    return total


class Unfinished:
    """A step engine's result for a request that left the batch, made once the queue has measured how it was
    served: complete(served) -> the result, or a concurrent.futures.Future of it. served: what the queue's
    schedule measured, {ttft_s, tpot_s, total_s, prefill_path, decode_path, device} (pipeline.server.schedule),
    or None where its record was already dropped. The TraceEngine records it on the request's Trace."""

    def __init__(self, complete: Callable[[dict | None], object]):
        self.complete = complete


def as_future(result, served: dict | None) -> Future:
    """A step engine's result for a request that left the batch (a value, an error, a Future or an Unfinished one,
    completed here with `served`) as a Future of its result."""
    try:
        result = result.complete(served) if isinstance(result, Unfinished) else result
    except Exception as e:  # its caller hears it (an interrupt is not a ticket's error)
        result = e
    if isinstance(result, Future):
        return result
    done = Future()
    done.set_exception(result) if isinstance(result, BaseException) else done.set_result(result)
    return done


class Ticket(Future):
    """A job's place in the line and, once run, its result: a `concurrent.futures.Future` (result(timeout),
    exception(), done(), add_done_callback) that also tells its position and an estimate.

    A ticket cannot be cancelled: identical requests share one ticket, so one caller leaving must not take
    the answer away from the others (cancel() returns False, as for a running job)."""

    def __init__(self, queue: Line, key: Hashable, work: Callable[[], object], cost: int,
                 batch: tuple[str, object] | None = None):
        super().__init__()
        self.queue, self.key, self.work, self.cost = queue, key, work, cost
        self.batch = batch  # (kind, payload): a kind with a step engine is decoded in the running batch
        self.context = contextvars.copy_context()  # the caller's pass counter follows its job
        self.submitted_at = queue.clock()
        self.started_at: float | None = None  # when it started running (admitted, run, or its first chunk)
        self.reserved = (0, 0)  # (prompt tokens, KV bytes) while in the batch
        self.rid: int | None = None  # its anonymous number in the schedule record, once admitted

    def cancel(self) -> bool:
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it is done within `timeout` seconds (concurrent.futures.wait for this one ticket)."""
        return bool(wait([self], timeout).done)

    def position(self) -> int:
        """Jobs ahead of this one (0 = running now, or finished)."""
        return self.queue.position(self)

    def estimate_s(self) -> float:
        """Seconds until this job finishes, from the speed of the recent runs."""
        return self.queue.estimate_s(self)

    def _finish(self, result=None, error: BaseException | None = None) -> None:
        self.set_exception(error) if error is not None else self.set_result(result)


class LongTicket(Ticket):
    """A long job's ticket: its progress (the last Progress its steps yielded; None before its first chunk) and
    the people who asked for it (askers: any hashable, e.g. a session's id). It stops only when all of them have
    withdrawn; identical asks share it, so one person leaving never takes the result from the others."""

    def __init__(self, queue: Line, key: Hashable, steps: Callable[[], Steps]):
        super().__init__(queue, key, work=lambda: None, cost=0)
        self.make_steps = steps
        self.steps: Steps | None = None  # the generator, made at its first chunk
        self.progress: Progress | None = None
        self.askers: set[Hashable] = set()
        self.stopping = False  # nobody wants it any more: it stops at the worker's next gap
        self.chunks = 0  # chunks run so far
        self.chunk_seconds = 0.0  # the model's time they took
        self.started_chunk_at = 0.0  # when its latest chunk started

    def withdraw(self, asker: Hashable) -> bool:
        """`asker` no longer wants the result; True if nobody is left, so the job stops between two chunks (its
        waiters then hear concurrent.futures.CancelledError)."""
        return self.queue.withdraw(self, asker)

    def estimate_s(self) -> float | None:
        """Seconds until it is done: its chunks left at its own seconds per chunk, times the long jobs taking turns
        with it; None before its first chunk has said how many there are."""
        return self.queue.estimate_s(self)
