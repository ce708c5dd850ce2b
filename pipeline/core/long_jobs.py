"""Long work as a sequence of short chunks: a generator that yields its progress between two chunks and
returns its result, so the model's queue can run it a chunk at a time, between people's questions, and stop it
between two chunks (pipeline.server.run_queue.RunQueue.submit_long).

    def steps(n):                           # each yield ends one chunk
        for i in range(n):
            ...                             # one chunk: one patched layer, one sweep point, one model's run
            yield Progress(i + 1, n, f"layer {i} patched")
        return result
    run_to_end(steps(8))                    # the result, run whole (the command line, the tests)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generator, TypeVar

R = TypeVar("R")
Steps = Generator["Progress", None, R]  # what a long job is: progress between chunks, then its result


@dataclass(frozen=True)
class Progress:
    done: int  # chunks finished
    total: int  # chunks in all
    note: str = ""  # what the last chunk did, in words ("layer 3 of 30 patched")
    # Where chunks cost unequal amounts (a plain run, then patched passes 12 times as long): (work done, work in all)
    # in a unit of the job's own, which the bar follows, and the job's own forecast of the seconds its chunks left
    # will take, from its chunks' measured times (pipeline.attribution.prefix.forecast); the queue reads it.
    work: tuple[float, float] | None = None
    left_s: float | None = None

    @property
    def fraction(self) -> float:
        if self.work is not None and self.work[1] > 0:
            return min(1.0, self.work[0] / self.work[1])
        return min(1.0, self.done / self.total) if self.total > 0 else 0.0


@dataclass(frozen=True)
class Finished:
    """A long job's result as kept for everyone who asks the same: when it was made and how long it took."""

    value: object
    made_at: float  # seconds since the epoch (time.time())
    took_s: float  # from its first chunk to its last, other work between its chunks included


def run_to_end(steps: Steps[R]) -> R:
    """Run every chunk of `steps` now, in this thread; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value
