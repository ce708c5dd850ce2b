"""Counting forward passes: everyone's total lives on the model; a caller (a browser session, a test)
can also count the passes run on its behalf. Plain Python, no torch.

    with counting_passes(PassCounter()) as mine:
        lm.forward(...)      # mine.n == 1

A batched pass runs several callers' requests at once (the queue's decode step, a batched prefill): the
code that runs it names whose requests are in it (`passes_for`), and the pass counts once for each of those
callers, as `shared` for a caller when another caller's request was in it too. So a session's count is the
passes its requests took part in; added up over sessions, a shared pass counts once per session in it.

    with passes_for([mine, theirs, mine]):   # one pass over three rows: two of mine, one of theirs
        lm.forward(...)      # mine.n == 1, mine.shared == 1; theirs.n == 1, theirs.shared == 1
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Sequence


@dataclass
class PassCounter:
    """Forward passes run on behalf of one caller (a browser session, a test)."""

    n: int = 0  # passes its requests took part in, alone or batched with others
    shared: int = 0  # of those, batched passes that also ran another caller's request


# Whose requests the passes run here are for: one entry per request (its caller's counter, or None).
_served: contextvars.ContextVar[tuple[PassCounter | None, ...]] = contextvars.ContextVar("tpe_passes_for",
                                                                                        default=())


@contextmanager
def counting_passes(counter: PassCounter):
    """Inside the block, every forward pass this thread runs is also added to `counter`."""
    with passes_for([counter]):
        yield counter


@contextmanager
def passes_for(counters: Sequence[PassCounter | None]):
    """Inside the block, each pass this thread runs is one pass over these requests together (one entry per
    request: its caller's counter, or None for a caller that counts nothing)."""
    token = _served.set(tuple(counters))
    try:
        yield
    finally:
        _served.reset(token)


def current_counter() -> PassCounter | None:
    """The counter of the caller whose block this thread is in (None outside any; the first of a batch's)."""
    served = _served.get()
    return served[0] if served else None


def counter_in(context: contextvars.Context) -> PassCounter | None:
    """The counter of the caller whose context this is (a queued job's, captured when it was submitted)."""
    served = context.get(_served, ())
    return served[0] if served else None


def note_pass() -> None:
    """One pass ran: one for each caller whose request was in it; shared for a caller when another's was too."""
    served = _served.get()
    for counter in {id(c): c for c in served if c is not None}.values():
        counter.n += 1
        if any(other is not counter for other in served):
            counter.shared += 1
