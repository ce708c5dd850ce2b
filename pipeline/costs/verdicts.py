"""Every speed verdict kept, dated: a later measurement is added beside an earlier one, never put in its place.

On a shared machine the same two models measured minutes apart can give "4.0x faster" and then "1.9x faster",
both from interleaved runs with ranges that do not overlap. Either alone is one moment of the machine's load;
together they are the spread. `summary` says what all of them agree on:

    h = add(add((), c1, at=t1), c2, at=t2)    # both kept, oldest first; the same (at) added twice is kept once
    summary(h, "SmolLM2", "Gemma")           # 'SmolLM2 was faster in each of 2 measurements: 1.9x to 4.0x'
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from pipeline.core.timing import Comparison


@dataclass(frozen=True)
class Dated:
    at: float  # time.time() when it was measured
    comparison: Comparison  # a = the first side, b = the second; seconds

    def when(self) -> str:
        """'14:03', or '2026-12-02 14:03' on another day."""
        at = time.localtime(self.at)
        day = "" if time.strftime("%Y-%m-%d", at) == time.strftime("%Y-%m-%d") else time.strftime("%Y-%m-%d ", at)
        return day + time.strftime("%H:%M", at)


History = tuple[Dated, ...]


def add(history: History, comparison: Comparison, at: float) -> History:
    """The history with this measurement added (oldest first); a measurement already there (same `at`) once."""
    if any(d.at == at for d in history):
        return history
    return tuple(sorted((*history, Dated(at, comparison)), key=lambda d: d.at))


def _winner(c: Comparison) -> str | None:
    """'a' or 'b' when that side was clearly faster (ranges apart, not marked noise), else None."""
    if not c.separated or c.noise:
        return None
    return "a" if c.a_median < c.b_median else "b"


def _speedup(c: Comparison) -> float:
    return max(c.ratio, 1 / c.ratio) if c.ratio else float("inf")


def summary(history: History, a: str = "A", b: str = "B") -> str:
    """What every kept measurement agrees on, in one sentence (none: an empty string)."""
    if not history:
        return ""
    if len(history) == 1:
        d = history[0]
        return f"{d.comparison.verdict(a, b)}; measured once, at {d.when()}"
    winners = [_winner(d.comparison) for d in history]
    n, when = len(history), ", ".join(d.when() for d in history)
    if set(winners) == {None}:
        return f"no clear difference in any of {n} measurements ({when})"
    if {"a", "b"} <= set(winners):
        return f"the {n} measurements disagree ({when}): no verdict; the machine's load decided at least one of them"
    side = a if "a" in winners else b
    speedups = sorted(_speedup(d.comparison) for d, w in zip(history, winners) if w)
    spread = f"{speedups[0]:.1f}×" if len(speedups) == 1 else f"{speedups[0]:.1f}× to {speedups[-1]:.1f}×"
    if None in winners:
        return (f"not settled: {side} was clearly faster in {len(speedups)} of {n} measurements ({spread}), with no "
                f"clear difference in the others ({when})")
    return f"{side} was faster in each of {n} measurements ({when}): {spread}, as the machine's load changed"
