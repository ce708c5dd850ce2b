"""Comparing two timings honestly on a shared, busy machine.

Both sides are measured interleaved (A, B, A, B, ...) so load hits them alike, repeated, and
reported as medians with their range. When the ranges overlap, the difference is within the noise
and no ratio is claimed.

    compare_runs([0.10, 0.12, 0.11], [0.50, 0.55, 0.52]) -> ratio 0.21, verdict "A is 4.7× faster"
    compare_runs([0.10, 0.30], [0.20, 0.25])            -> verdict "no clear difference ..."

Only compare where the work differs: two runs doing the same work have no speed verdict to give.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable

from pipeline.core.checks import number
from pipeline.core.errors import InputError


@dataclass(frozen=True)
class Comparison:
    a_median: float
    b_median: float
    a_range: tuple[float, float]
    b_range: tuple[float, float]
    separated: bool  # the two ranges do not overlap
    repeats: int
    noise: bool = False  # A does less work than B, yet measured clearly slower even when measured again

    @property
    def contradicts_work(self) -> bool:
        """A (the side doing less work) came out clearly slower: the load, not the work, decided."""
        return self.separated and self.a_median > self.b_median

    @property
    def ratio(self) -> float:
        """a / b, medians (1 when both are 0, inf when only b is)."""
        if not self.b_median:
            return 1.0 if not self.a_median else float("inf")
        return self.a_median / self.b_median

    def speed(self) -> str:
        """A's time against B's in words, the ratio always at least 1: '1.8× faster' (a ratio of 0.55), '1.3× slower',
        'as fast'; a table cell beside a name (not a verdict: overlapping ranges are the caller's to say)."""
        if self.ratio == 1:
            return "as fast"
        if math.isinf(self.ratio) or not self.ratio:
            return "slower" if self.ratio else "faster"
        return f"{1 / self.ratio:.1f}× faster" if self.ratio < 1 else f"{self.ratio:.1f}× slower"

    def verdict(self, a: str = "A", b: str = "B") -> str:
        if self.noise:
            return (f"noise: {a} does less work, yet measured slower ({_ms(self.a_range)} vs {_ms(self.b_range)}) "
                    f"twice over; the machine was busy, so these times say nothing about the two")
        if not self.separated:
            return (f"no clear difference: over {self.repeats} interleaved runs the spread "
                    f"({_ms(self.a_range)} vs {_ms(self.b_range)}) is larger than the gap")
        faster, slower, r = (a, b, 1 / self.ratio if self.ratio else math.inf) if self.ratio < 1 else (b, a, self.ratio)
        if math.isinf(r):  # one side took no measurable time
            return f"{faster} is faster: {slower} took longer in every one of {self.repeats} interleaved runs"
        return f"{faster} is {r:.1f}× faster (medians of {self.repeats} interleaved runs, ranges do not overlap)"


def _ms(r: tuple[float, float]) -> str:
    return f"{r[0] * 1e3:,.0f}–{r[1] * 1e3:,.0f} ms"


def compare_runs(a: list[float], b: list[float]) -> Comparison:
    for field, runs in (("a", a), ("b", b)):
        if not isinstance(runs, (list, tuple)) or not runs:
            raise InputError(field, "give at least one measured time.")
        for t in runs:
            number(field, t, lo=0, hi=1e9)  # seconds: a billion is past any real timing (and keeps sums finite)
    ra, rb = (min(a), max(a)), (min(b), max(b))
    return Comparison(statistics.median(a), statistics.median(b), ra, rb,
                      separated=ra[1] < rb[0] or rb[1] < ra[0], repeats=min(len(a), len(b)))


def interleave(run_a: Callable[[], float], run_b: Callable[[], float], repeats: int = 3) -> Comparison:
    """Call A then B, `repeats` times; each returns the seconds it measured (or is timed here if None)."""
    a, b = [], []
    for _ in range(repeats):
        for run, out in ((run_a, a), (run_b, b)):
            t0 = time.perf_counter()
            took = run()
            out.append(took if took is not None else time.perf_counter() - t0)
    return compare_runs(a, b)


def interleave_less_work(run_a: Callable[[], float], run_b: Callable[[], float], repeats: int = 3) -> Comparison:
    """interleave() where A does strictly less work than B (a cache hit vs cold). A result with A clearly
    slower contradicts the work done: it is measured once more with twice the repeats, and if it still
    contradicts, it is marked noise (no ratio, no winner)."""
    first = interleave(run_a, run_b, repeats)
    if not first.contradicts_work:
        return first
    again = interleave(run_a, run_b, 2 * repeats)
    return replace(again, noise=True) if again.contradicts_work else again
