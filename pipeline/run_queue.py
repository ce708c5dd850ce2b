"""Requests wait in arrival order in front of the model; each caller can see its place and an estimate.

One worker thread runs the jobs first come, first served (the model runs one pass at a time anyway,
so a second worker would only interleave, not speed up). Identical requests share one ticket.
A long prompt is refused while the queue is long, so one learner's 8,000-token prompt cannot make
the whole room wait.

    queue = RunQueue()
    ticket = queue.submit("key", work, cost=500)   # cost: prompt tokens + a weight per new token
    ticket.position()  -> 2  (two jobs ahead; 0 = running now)
    ticket.wait(0.5); ticket.result()          # a concurrent.futures.Future: done(), exception(), ...
"""
from __future__ import annotations

import contextvars
import logging
import statistics
import threading
import time
from collections import deque
from concurrent.futures import Future, wait
from typing import Callable, Hashable

from .checks import integer
from .errors import InputError

log = logging.getLogger(__name__)

DECODE_STEP_COST = 15  # one decode step costs about as much as 15 prompt tokens of prefill on a CPU
LONG_PROMPT_TOKENS = 1024  # prompts longer than this are refused while the queue is long
LONG_QUEUE = 4  # "long": this many jobs already waiting


def cost_of(prompt_tokens: int, new_tokens: int) -> int:
    """Work units of a request: 34 prompt tokens + 64 new tokens -> 34 + 64 * 15 = 994."""
    prompt_tokens = integer("prompt_tokens", prompt_tokens, 0, 10**9)
    return prompt_tokens + DECODE_STEP_COST * integer("new_tokens", new_tokens, 0, 10**9)


MAX_BATCH = 32  # jobs of one kind run together at most: a room of 30 arriving at once is one batch


class Ticket(Future):
    """A job's place in the line and, once run, its result: a `concurrent.futures.Future` (result(timeout),
    exception(), done(), add_done_callback) that also tells its position and an estimate.

    A ticket cannot be cancelled: identical requests share one ticket, so one caller leaving must not take
    the answer away from the others (cancel() returns False, as for a running job)."""

    def __init__(self, queue: "RunQueue", key: Hashable, work: Callable[[], object], cost: int,
                 batch: tuple[str, object] | None = None):
        super().__init__()
        self.queue, self.key, self.work, self.cost = queue, key, work, cost
        self.batch = batch  # (kind, payload): waiting jobs of the same kind may run together
        self.context = contextvars.copy_context()  # the caller's pass counter follows its job
        self.submitted_at = time.monotonic()

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


class RunQueue:
    def __init__(self, seconds_per_unit: float = 0.005, batch_runners: dict | None = None):
        """batch_runners: {kind: run(payloads) -> [result or exception per payload]} for jobs that can
        run together (several chat requests decoded in one batch)."""
        self.batch_runners = batch_runners or {}
        self._waiting: deque[Ticket] = deque()
        self._background: deque[Ticket] = deque()  # served only when nobody is waiting
        self._running: Ticket | None = None
        self._by_key: dict[Hashable, Ticket] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._speeds: deque[float] = deque([seconds_per_unit], maxlen=20)  # seconds per work unit
        self._running_since = 0.0
        self._group: list[Ticket] = []  # the jobs running now (several when batched)
        self.completed = 0
        threading.Thread(target=self._serve, name="run-queue", daemon=True).start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting) + (self._running is not None)

    def submit(self, key: Hashable, work: Callable[[], object], cost: int, prompt_tokens: int = 0,
               background: bool = False, batch: tuple[str, object] | None = None) -> Ticket:
        """Queue `work` (or join the identical queued job). background=True: preparation that runs only
        while nobody is waiting; a person asking for the same key brings it forward."""
        with self._lock:
            if key in self._by_key:
                ticket = self._by_key[key]  # the same request is already queued or running
                if not background and ticket in self._background:
                    self._background.remove(ticket)
                    self._waiting.append(ticket)
                return ticket
            waiting = len(self._waiting) + (self._running is not None)
            if prompt_tokens > LONG_PROMPT_TOKENS and waiting >= LONG_QUEUE:
                raise InputError("messages", f"{waiting} requests are waiting for the model; while the queue is this "
                                             f"long, prompts over {LONG_PROMPT_TOKENS:,} tokens are refused so that "
                                             f"everyone gets a turn. Try again in a minute, or shorten it "
                                             f"({prompt_tokens:,} tokens now).")
            ticket = Ticket(self, key, work, cost, batch)
            self._by_key[key] = ticket
            (self._background if background else self._waiting).append(ticket)
            self._wake.notify()
            return ticket

    def position(self, ticket: Ticket) -> int:
        with self._lock:
            if ticket is self._running or ticket in self._group or ticket.done():
                return 0
            line = list(self._waiting) + list(self._background)
            return line.index(ticket) + (self._running is not None) if ticket in line else 0

    def estimate_s(self, ticket: Ticket) -> float:
        with self._lock:
            speed = statistics.median(self._speeds)
            ahead = [] if ticket in self._group else list(self._waiting) + list(self._background)
            ahead = ahead[:ahead.index(ticket) + 1] if ticket in ahead else []
            running_left = 0.0
            if self._running is not None:
                group_cost = sum(t.cost for t in self._group) or self._running.cost
                running_left = max(0.0, group_cost * speed - (time.monotonic() - self._running_since))
            return running_left + sum(t.cost for t in ahead) * speed

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._background:
                    self._wake.wait()
                ticket = self._running = (self._waiting or self._background).popleft()
                group = [ticket] + self._take_batch_mates(ticket)
                for t in group:
                    t.set_running_or_notify_cancel()  # running() is True from here (never cancelled: see Ticket)
                self._running_since = time.monotonic()
            if len(group) == 1:
                try:
                    ticket._finish(result=ticket.context.run(ticket.work))
                except BaseException as e:  # handed to the caller, who shows it
                    ticket._finish(error=e)
            else:
                self._run_group(group)
            took = time.monotonic() - self._running_since
            log.info("ran %d job(s) of kind %s in %.1f s; %d waiting", len(group),
                     ticket.batch[0] if ticket.batch else "-", took, len(self._waiting))
            with self._lock:
                cost = sum(t.cost for t in group)
                if cost > 0 and ticket.exception() is None:
                    self._speeds.append(took / cost)
                self._running = None
                self._group = []
                for t in group:
                    self._by_key.pop(t.key, None)
                self.completed += len(group)

    def _take_batch_mates(self, head: Ticket) -> list[Ticket]:
        """Waiting jobs of the head's kind (in arrival order) that join its run. Lock held."""
        if head.batch is None or head.batch[0] not in self.batch_runners:
            self._group = [head]
            return []
        mates = [t for t in self._waiting if t.batch and t.batch[0] == head.batch[0]][:MAX_BATCH - 1]
        for t in mates:
            self._waiting.remove(t)
        self._group = [head] + mates
        return mates

    def _run_group(self, group: list[Ticket]) -> None:
        run = self.batch_runners[group[0].batch[0]]
        try:
            results = group[0].context.run(run, [t.batch[1] for t in group])
        except BaseException as e:
            results = [e] * len(group)
        for t, r in zip(group, results):
            t._finish(error=r) if isinstance(r, BaseException) else t._finish(result=r)
