"""Requests wait in arrival order in front of the model; each caller can see its place and an estimate.

One worker thread runs the jobs first come, first served (the model runs one pass at a time anyway,
so a second worker would only interleave, not speed up). Identical requests share one ticket.
A long prompt is refused while the queue is long, so one learner's 8,000-token prompt cannot make
the whole room wait.

    queue = RunQueue()
    ticket = queue.submit("key", work, cost=500)   # cost: prompt tokens + a weight per new token
    ticket.position()  -> 2  (two jobs ahead; 0 = running now)
    ticket.wait(0.5); ticket.result()
"""
from __future__ import annotations

import contextvars
import statistics
import threading
import time
from collections import deque
from typing import Callable, Hashable

from .errors import InputError

DECODE_STEP_COST = 15  # one decode step costs about as much as 15 prompt tokens of prefill on a CPU
LONG_PROMPT_TOKENS = 1024  # prompts longer than this are refused while the queue is long
LONG_QUEUE = 4  # "long": this many jobs already waiting


def cost_of(prompt_tokens: int, new_tokens: int) -> int:
    """Work units of a request: 34 prompt tokens + 64 new tokens -> 34 + 64 * 15 = 994."""
    return prompt_tokens + DECODE_STEP_COST * new_tokens


class Ticket:
    def __init__(self, queue: "RunQueue", key: Hashable, work: Callable[[], object], cost: int):
        self.queue, self.key, self.work, self.cost = queue, key, work, cost
        self.context = contextvars.copy_context()  # the caller's pass counter follows its job
        self.submitted_at = time.monotonic()
        self._done = threading.Event()
        self._result = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def result(self):
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def position(self) -> int:
        """Jobs ahead of this one (0 = running now, or finished)."""
        return self.queue.position(self)

    def estimate_s(self) -> float:
        """Seconds until this job finishes, from the speed of the recent runs."""
        return self.queue.estimate_s(self)

    def _finish(self, result=None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()


class RunQueue:
    def __init__(self, seconds_per_unit: float = 0.005):
        self._waiting: deque[Ticket] = deque()
        self._background: deque[Ticket] = deque()  # served only when nobody is waiting
        self._running: Ticket | None = None
        self._by_key: dict[Hashable, Ticket] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._speeds: deque[float] = deque([seconds_per_unit], maxlen=20)  # seconds per work unit
        self._running_since = 0.0
        self.completed = 0
        threading.Thread(target=self._serve, name="run-queue", daemon=True).start()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting) + (self._running is not None)

    def submit(self, key: Hashable, work: Callable[[], object], cost: int, prompt_tokens: int = 0,
               background: bool = False) -> Ticket:
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
            ticket = Ticket(self, key, work, cost)
            self._by_key[key] = ticket
            (self._background if background else self._waiting).append(ticket)
            self._wake.notify()
            return ticket

    def position(self, ticket: Ticket) -> int:
        with self._lock:
            if ticket is self._running or ticket.done:
                return 0
            line = list(self._waiting) + list(self._background)
            return line.index(ticket) + (self._running is not None) if ticket in line else 0

    def estimate_s(self, ticket: Ticket) -> float:
        with self._lock:
            speed = statistics.median(self._speeds)
            ahead = [] if ticket is self._running else list(self._waiting) + list(self._background)
            ahead = ahead[:ahead.index(ticket) + 1] if ticket in ahead else []
            running_left = 0.0
            if self._running is not None:
                running_left = max(0.0, self._running.cost * speed - (time.monotonic() - self._running_since))
            return running_left + sum(t.cost for t in ahead) * speed

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._background:
                    self._wake.wait()
                ticket = self._running = (self._waiting or self._background).popleft()
                self._running_since = time.monotonic()
            try:
                ticket._finish(result=ticket.context.run(ticket.work))
            except BaseException as e:  # handed to the caller, who shows it
                ticket._finish(error=e)
            took = time.monotonic() - self._running_since
            with self._lock:
                if ticket.cost > 0 and ticket._error is None:
                    self._speeds.append(took / ticket.cost)
                self._running = None
                self._by_key.pop(ticket.key, None)
                self.completed += 1
