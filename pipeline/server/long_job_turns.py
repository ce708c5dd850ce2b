"""Long jobs taking turns with people's questions in the run queue (pipeline.server.run_queue.RunQueue.submit_long).

A long job (activation patching, comparing models, the batching sweep) is a generator of short chunks
(pipeline.core.long_jobs). It never holds a question: a chunk runs only in a gap where nobody was admitted or run,
and while a batch decodes, only once the batch has had (1 - LONG_JOB_SHARE) / LONG_JOB_SHARE times the last chunk's
time since the last chunk (long jobs get about a quarter of the model's time in a busy room, so they are never
starved, and a question arriving during a chunk waits for that one chunk at most). Several long jobs take turns, a
chunk each. The people who asked for one can withdraw; once nobody is left it stops between two chunks.

The queue owns one LongJobTurns and calls it under the queue's lock (`lock`), except `run_chunk` and `stop`, which
its worker calls outside it.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import CancelledError
from typing import Callable, Hashable

from pipeline.core.long_jobs import Progress
from pipeline.server.schedule import Schedule
from pipeline.server.tickets import LongTicket

log = logging.getLogger(__name__)

# While a batch decodes, long jobs get about this share of the model's time: after a chunk of c seconds the batch
# steps for 3c before the next one. Chat requests' time per token grows by a third at most; a long job still moves.
LONG_JOB_SHARE = 0.25


class LongJobTurns:
    """The long jobs queued or running (`line`, the next to run a chunk first) and the one whose chunk runs now."""

    def __init__(self, lock: threading.Lock, clock: Callable[[], float], schedule: Schedule,
                 done: Callable[[LongTicket], None], share: float = LONG_JOB_SHARE):
        """lock: the queue's; done(ticket): the queue forgets a job that ended (called with the lock held)."""
        self.line: deque[LongTicket] = deque()
        self.running: LongTicket | None = None  # the long job whose chunk runs now
        self._lock, self._clock, self._schedule, self._done = lock, clock, schedule, done
        self._share = share
        self._last_chunk_s = 0.0  # the last chunk's seconds ...
        self._batch_s_since_chunk = 0.0  # ... and the batch's decode-step seconds since it

    def ask(self, ticket: LongTicket, asker: Hashable) -> None:
        """Lock held: `asker` wants `ticket` (one who had withdrawn while it was still stopping brings it back)."""
        ticket.askers.add(asker)
        ticket.stopping = False

    def withdraw(self, ticket: LongTicket, asker: Hashable) -> bool:
        """Lock held: `asker` no longer wants `ticket`; True if nobody is left: it stops at the worker's next gap."""
        ticket.askers.discard(asker)
        if ticket.askers or ticket.done() or ticket not in self.line:
            return False
        ticket.stopping = True
        return True

    def take_stopped(self) -> list[LongTicket]:
        """Lock held: the long jobs nobody wants any more, out of the line (the worker then `stop`s each)."""
        stopped = [t for t in self.line if t.stopping]
        for ticket in stopped:
            self.line.remove(ticket)
        return stopped

    def due(self, batch_running: bool, people_waiting: bool) -> bool:
        """Lock held, in a gap where nobody was admitted or run: whether a long job's chunk runs now. With a batch
        decoding, once the batch has had its share of the time since the last chunk; else when nobody waits."""
        if not self.line:
            return False
        if batch_running:
            return self._batch_s_since_chunk * self._share >= self._last_chunk_s * (1 - self._share)
        return not people_waiting

    def take_turn(self) -> LongTicket:
        """Lock held: the long job whose chunk runs now; the next one takes the next turn."""
        chunk = self.running = self.line[0]
        self.line.rotate(-1)
        return chunk

    def batch_stepped(self, seconds: float) -> None:
        """Lock held: the running batch took one decode step of `seconds`."""
        self._batch_s_since_chunk += seconds

    def left_s(self, ticket: LongTicket) -> float | None:
        """Lock held: its own forecast (Progress.left_s) or its chunks left at its seconds per chunk, times the jobs
        taking turns; None before its first chunk has said how many there are."""
        if ticket.progress is None or not ticket.chunks:
            return None
        p = ticket.progress  # chunks of unequal cost: the job's forecast from its chunks' measured times
        left = p.left_s if p.left_s is not None else (p.total - p.done) * ticket.chunk_seconds / ticket.chunks
        return max(0.0, left) * max(1, len(self.line))

    def running_left_s(self) -> float:
        """Lock held: what is left of the chunk running now, taken as about as long as its job's others (0: none)."""
        if self.running is None:
            return 0.0
        return max(0.0, self.running.chunk_seconds / max(1, self.running.chunks)
                   - (self._clock() - self.running.started_chunk_at))

    def run_chunk(self, ticket: LongTicket) -> None:
        """One chunk of a long job, in its caller's context: its progress, or its end (result or error)."""
        t = ticket.started_chunk_at = self._clock()
        if ticket.started_at is None:
            ticket.started_at = t
            ticket.set_running_or_notify_cancel()
        ended, result, error = False, None, None
        try:
            if ticket.steps is None:
                ticket.steps = ticket.context.run(ticket.make_steps)
            progress = ticket.context.run(next, ticket.steps)
        except StopIteration as end:
            ended, result = True, end.value
        except BaseException as e:  # handed to the caller, who shows it
            ended, error = True, e
        took = self._clock() - t
        with self._lock:
            self._schedule.chunk_ran(ticket, t, took)
            ticket.chunks += 1
            ticket.chunk_seconds += took
            self._last_chunk_s, self._batch_s_since_chunk = took, 0.0
            self.running = None
            if not ended and isinstance(progress, Progress):
                ticket.progress = progress
        if not ended:
            return
        ticket._finish(result=result, error=error)
        log.info("a long job ended after %d chunks, %.1f s of the model's time", ticket.chunks, ticket.chunk_seconds)
        with self._lock:
            self.line.remove(ticket)
            self._done(ticket)

    @staticmethod
    def stop(ticket: LongTicket) -> None:
        """Close a withdrawn long job's generator (its `finally` runs, in its caller's context) between chunks."""
        try:
            if ticket.steps is not None:
                ticket.context.run(ticket.steps.close)
        except BaseException:  # its clean-up failed: it stops all the same
            log.exception("closing the long job %r failed", ticket.key)
        done = ticket.progress.done if ticket.progress else 0
        log.info("stopped a long job after %d chunks (%d done): nobody wants it any more", ticket.chunks, done)
        ticket._finish(error=CancelledError(f"stopped after {ticket.chunks} chunks: nobody wants it any more"))
