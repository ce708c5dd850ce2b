"""Counting forward passes: everyone's total lives on the model; a caller (a browser session, a test)
can also count the passes run on its behalf. Plain Python, no torch.

    with counting_passes(PassCounter()) as mine:
        lm.forward(...)      # mine.n == 1
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class PassCounter:
    """Forward passes run on behalf of one caller (a browser session, a test)."""

    n: int = 0


_pass_counter: contextvars.ContextVar[PassCounter | None] = contextvars.ContextVar("tpe_pass_counter", default=None)


@contextmanager
def counting_passes(counter: PassCounter):
    """Inside the block, every forward pass this thread runs is also added to `counter`."""
    token = _pass_counter.set(counter)
    try:
        yield counter
    finally:
        _pass_counter.reset(token)


def note_pass() -> None:
    """Add one pass to the counter of the block this thread is in (if any)."""
    counter = _pass_counter.get()
    if counter is not None:
        counter.n += 1
