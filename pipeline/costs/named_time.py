"""A time named by what it measured: the quantity (TTFT, TPOT, a prefill pass, a decode step) and the path
it ran on. The same request's TPOT is about 175 ms on the captured run (recording hooks on every layer) and
about 40 ms on the plain serving path: two different measurements, never one figure. Every page that shows
TTFT or TPOT takes it (or its label) from here, and a ratio is only formed between times of the same path
(Generation's interleaved comparison of the two paths is the one place both are measured side by side).

    t = captured_tpot(trace)          # NamedTime('TPOT', 'captured', 0.175)
    t.name                            # 'TPOT, captured run (recording hooks on)'
    time_label("TPOT", PLAIN)              # 'TPOT (plain path)'
"""
from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.errors import InputError

CAPTURED, PLAIN, BATCHED = "captured", "plain", "batched"
PATH_NAMES = {
    CAPTURED: "captured run (recording hooks on)",  # pipeline.run.trace: every layer's tensors kept, eager attention
    PLAIN: "plain serving path",  # pipeline.faster.fast_path: no captures, one cache for the whole answer
    BATCHED: "batched decode",  # pipeline.costs.batched: B requests in one pass
}
PATH_SHORT = {CAPTURED: "captured run", PLAIN: "plain path", BATCHED: "batched"}


def time_label(quantity: str, path: str) -> str:
    """Short enough for a metric's label or a table's column: 'TPOT (captured run)'."""
    return f"{quantity} ({PATH_SHORT[path]})"


@dataclass(frozen=True)
class NamedTime:
    quantity: str  # 'TTFT', 'TPOT', 'prefill pass', 'decode step'
    path: str  # CAPTURED, PLAIN or BATCHED
    seconds: float
    low: float | None = None  # the range over repeats, when measured more than once
    high: float | None = None

    def __post_init__(self):
        if self.path not in PATH_NAMES:
            raise InputError("path", f"{self.path!r} is not a measured path: one of {', '.join(PATH_NAMES)}.")

    @property
    def name(self) -> str:
        """'TPOT, captured run (recording hooks on)'"""
        return f"{self.quantity}, {PATH_NAMES[self.path]}"

    @property
    def label(self) -> str:
        return time_label(self.quantity, self.path)

    @property
    def shown(self) -> str:
        """'175 ms' under a second, '1.24 s' from there on."""
        return f"{self.seconds * 1e3:,.0f} ms" if self.seconds < 1 else f"{self.seconds:,.2f} s"


def captured_ttft(trace) -> NamedTime:
    return NamedTime("TTFT", CAPTURED, trace.timings.ttft_s)


def captured_tpot(trace) -> NamedTime | None:
    """The captured run's mean time per token after the first (None: a one-token answer)."""
    t = trace.timings.tpot_s
    return None if t is None else NamedTime("TPOT", CAPTURED, t)


def captured_prefill(trace) -> NamedTime:
    return NamedTime("prefill pass", CAPTURED, trace.timings.prefill_s)


def plain_ttft(answer) -> NamedTime:
    """An answer of pipeline.faster.fast_path (the plain serving path)."""
    return NamedTime("TTFT", PLAIN, answer.ttft_s)


def plain_tpot(answer) -> NamedTime | None:
    t = answer.tpot_s
    return None if t is None else NamedTime("TPOT", PLAIN, t)


def of_runs(quantity: str, path: str, runs: list[float] | tuple[float, ...]) -> NamedTime:
    """The median of repeated runs of one path, with their range."""
    import statistics

    if not runs:
        raise InputError("timing", "give at least one measured time.")
    return NamedTime(quantity, path, statistics.median(runs), min(runs), max(runs))
